// The correction warpgroup: it keeps O in TMEM consistent with the softmax's running max,
// off the softmax's path, then writes the block's output (FA4's correction warps).
//
// For key block i > 0 of Q stage q, thread t (row t): once the softmax wrote row t's
// rescale factor (stats full) and PV_q(i-1) has finished (O ready), O_q's row is loaded,
// scaled and stored back, and O corrected lets the MMA thread issue PV_q(i). A warp whose
// 32 rows all kept their max (factor 1, the common case under kLazyRescale) skips the
// round trip. After the last block: O / sum (sinks join the sum) to global memory, one
// row per thread in 16-byte stores, and the row's log-sum-exp.
#pragma once

#include "fa4/blackwell/shared_storage.cuh"
#include "fa4/blackwell/softmax.cuh"
#include "fa4/blackwell/tcgen05.cuh"
#include "fa4/blackwell/tile.cuh"
#include "fa4/common/ptx.cuh"

namespace fa4 {
namespace blackwell {

template <class T>
struct Correction {
    static constexpr int kOChunks = T::kHeadDimV / 32;  // 32-column TMEM loads of O (that the output has)
    const SharedStorage<T>& smem;
    const FwdParams& params;
    u32 tmem;
    int t;  // the row within each Q stage, and the TMEM lane

    __device__ __forceinline__ u32 o_lanes(int stage) const {
        return tmem_addr(tmem, 32 * (t / 32), T::kOColumn + stage * T::kVPad);
    }

    // ---- rescale O_q's row by `factor` in TMEM ------------------------------------------------
    __device__ __forceinline__ void rescale_o(int stage, float factor) const {
#pragma unroll
        for (int c = 0; c < T::kVPad / 32; ++c) {
            u32 o[32];
            tmem_ld_32x32b<32>(o_lanes(stage) + 32 * c, o);
            tmem_wait_ld(o);
#pragma unroll
            for (int j = 0; j < 32; ++j) o[j] = __float_as_uint(__uint_as_float(o[j]) * factor);
            tmem_st_32x32b<32>(o_lanes(stage) + 32 * c, o);
        }
        tmem_wait_st();
    }

    __device__ void run(const BlockTile<T>& tile) const {
        using hopper::mbarrier_arrive;
        using hopper::mbarrier_wait;
        const int blocks = tile.n_blocks();

        // ---- main loop: O corrected for every block after the first -------------------------
        for (int i = 1; i < blocks; ++i) {
            for (int stage = 0; stage < T::kQStages; ++stage) {
                mbarrier_wait(smem.stats_full(stage), (i - 1) & 1);
                const float factor = ld_shared_f32(smem.rescale(stage, t));
                mbarrier_wait(smem.o_ready(stage), (i - 1) & 1);  // PV_q(i-1) is done
                fence_after_thread_sync();
                if (__any_sync(0xffffffffu, factor != 1.f)) rescale_o(stage, factor);
                fence_before_thread_sync();
                mbarrier_arrive(smem.o_corrected(stage));
            }
        }

        // ---- epilogue: O / sum and the LSE, stage by stage ---------------------------------
        for (int stage = 0; stage < T::kQStages; ++stage) {
            mbarrier_wait(smem.final_stats(stage), 0);
            const float sum = ld_shared_f32(smem.row_sum(stage, t));
            const float max_log2 = ld_shared_f32(smem.row_max(stage, t));
            if (blocks > 0) {
                mbarrier_wait(smem.o_ready(stage), (blocks - 1) & 1);  // the last PV_q is done
                fence_after_thread_sync();
            }
            float o_scale, lse;
            finalize(tile.head, sum, max_log2, o_scale, lse);
            store_row(tile, stage, blocks > 0, o_scale, lse);
        }
    }

    // The factor that normalises O and the row's LSE (natural log): as common/softmax.cuh's
    // finalize, for one row held whole by this thread. A sink's logit joins the sum only.
    __device__ __forceinline__ void finalize(int head, float sum, float max_log2, float& o_scale, float& lse) const {
        const float sink_log2 = T::kSinks ? params.sinks[head] * kLog2e : neg_inf();
        const bool seen = sum > 0.f;
        const float row_top = seen ? max_log2 : neg_inf();
        const float top = fmaxf(row_top, sink_log2);
        if (top == neg_inf()) {
            o_scale = 0.f;
            lse = neg_inf();
            return;
        }
        const float keys = seen ? exp2f(row_top - top) : 0.f;
        const float total = keys * sum + exp2f(sink_log2 - top);
        o_scale = keys / total;
        lse = (top + log2f(total)) * kLn2;
    }

    // Row t of Q stage q: O (0 when no key was visited) to global memory, and its LSE.
    __device__ __forceinline__ void store_row(const BlockTile<T>& tile, int stage, bool has_o, float o_scale,
                                              float lse) const {
        const int row = tile.row(stage, t);
        const bool in_seq = row < tile.seq.seqlen_q;
        u16* const o_row = static_cast<u16*>(params.o) + tile.seq.o_offset + tile.head * params.o_head_stride +
                           i64(row) * params.o_row_stride;
#pragma unroll
        for (int c = 0; c < kOChunks; ++c) {
            u32 o[32];
            if (has_o) {
                tmem_ld_32x32b<32>(o_lanes(stage) + 32 * c, o);  // whole warps: every lane loads
                tmem_wait_ld(o);
            } else {
#pragma unroll
                for (int j = 0; j < 32; ++j) o[j] = 0u;
            }
            if (!in_seq) continue;
            u32 packed[16];
#pragma unroll
            for (int j = 0; j < 16; ++j)
                packed[j] = pack2<T::Element::kIsBf16>(__uint_as_float(o[2 * j]) * o_scale,
                                                       __uint_as_float(o[2 * j + 1]) * o_scale);
            Vec16* const dst = reinterpret_cast<Vec16*>(o_row + 32 * c);
#pragma unroll
            for (int v = 0; v < 4; ++v)
                dst[v] = Vec16{packed[4 * v], packed[4 * v + 1], packed[4 * v + 2], packed[4 * v + 3]};
        }
        if (in_seq) params.lse[tile.seq.lse_offset + tile.head * params.lse_head_stride + row] = lse;
    }
};

}  // namespace blackwell
}  // namespace fa4
