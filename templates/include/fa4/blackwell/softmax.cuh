// A softmax warpgroup: Q stage q's 128 rows, one per thread (TMEM lane t is row t), so a
// row's max and sum never leave its thread.
//
// Per key block: S_q from TMEM into registers; soft-capping and the mask; the running max
// (kept where it grew by at most 2^8 under kLazyRescale, FA4's conditional rescaling: P
// then stays below 256, and O is rescaled only when some row's max moved more); O's
// rescale factor to the correction warpgroup; P = exp2(S scale - max) back into TMEM as
// 16-bit pairs over the first half of S's columns; then P full for the MMA thread. After
// the last block, each row's sum and max go to the correction warpgroup's epilogue.
#pragma once

#include "fa4/blackwell/shared_storage.cuh"
#include "fa4/blackwell/tcgen05.cuh"
#include "fa4/blackwell/tile.cuh"
#include "fa4/common/exp2_poly.cuh"
#include "fa4/common/ptx.cuh"

namespace fa4 {
namespace blackwell {

__device__ __forceinline__ void st_shared_f32(u32 addr, float x) {
    asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(addr), "f"(x) : "memory");
}
__device__ __forceinline__ float ld_shared_f32(u32 addr) {
    float x;
    asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(x) : "r"(addr) : "memory");
    return x;
}

// Until this warp's TMEM loads into `r` have landed; the registers' uses stay after it.
template <int kChunks>
__device__ __forceinline__ void wait_loaded(u32 (&r)[kChunks][32]) {
    tmem_wait_ld();
#pragma unroll
    for (int c = 0; c < kChunks; ++c)
#pragma unroll
        for (int i = 0; i < 32; ++i) asm volatile("" : "+r"(r[c][i])::"memory");
}

// Above this growth of a row's max (in log2 units) its O is rescaled; FA4's threshold.
constexpr float kRescaleThresholdLog2 = 8.f;

template <class T>
struct RowSoftmax {
    static constexpr int kChunks = T::kBlockN / 32;  // 32-column TMEM loads per key block
    const SharedStorage<T>& smem;
    const FwdParams& params;
    u32 tmem;
    int stage;
    int t;  // the thread's row within the stage, and its TMEM lane

    __device__ void run(const BlockTile<T>& tile) const {
        using hopper::mbarrier_arrive;
        using hopper::mbarrier_wait;
        const int row = tile.row(stage, t);
        const int keys_begin = tile.mask.col_begin(row);
        const int keys_end = tile.mask.col_end(row);
        // Keys every row of the stage sees: [the last row's first, the first row's end)
        // (common/mask.cuh's bounds never decrease with the row).
        const int stage_keys_begin = tile.mask.col_begin(tile.row(stage, 127));
        const int stage_keys_end = tile.mask.col_end(tile.row(stage, 0));
        // Soft-capped scores are tanh(s scale / cap) in [-1, 1]; exp2 then scales by cap log2 e.
        const float score_log2 = T::kSoftcap ? params.softcap * kLog2e : params.scale_log2;
        const float to_unit = T::kSoftcap ? params.softmax_scale / params.softcap : 1.f;
        const u32 s_lanes = tmem_addr(tmem, 32 * (t / 32), T::kSColumn + stage * T::kBlockN);

        float row_max = neg_inf();  // in score units; -inf while the row has seen no key
        float row_sum = 0.f;
        for (int i = 0; i < tile.n_blocks(); ++i) {
            const int key0 = (tile.n_begin + i) * T::kBlockN;

            // ---- load S -----------------------------------------------------------------------
            mbarrier_wait(smem.s_full(stage), i & 1);
            fence_after_thread_sync();
            u32 raw[kChunks][32];
#pragma unroll
            for (int c = 0; c < kChunks; ++c) tmem_ld_32x32b<32>(s_lanes + 32 * c, raw[c]);
            wait_loaded(raw);
            float s[T::kBlockN];
#pragma unroll
            for (int j = 0; j < T::kBlockN; ++j) s[j] = __uint_as_float(raw[j / 32][j % 32]);

            // ---- soft-cap and mask ------------------------------------------------------------
            if constexpr (T::kSoftcap) {
#pragma unroll
                for (int j = 0; j < T::kBlockN; ++j) s[j] = tanh_approx(s[j] * to_unit);
            }
            // Whether any row of the stage needs the mask here: one answer for the whole
            // warpgroup, so a diagonal block's warps do not run both paths.
            if (key0 < stage_keys_begin || key0 + T::kBlockN > stage_keys_end) {
#pragma unroll
                for (int j = 0; j < T::kBlockN; ++j)
                    if (key0 + j < keys_begin || key0 + j >= keys_end) s[j] = neg_inf();
            }

            // ---- online softmax: the max, O's rescale ----------------------------------------
            float block_max = s[0];
#pragma unroll
            for (int j = 1; j < T::kBlockN; ++j) block_max = fmaxf(block_max, s[j]);
            const float new_max = fmaxf(row_max, block_max);
            const bool keep = T::kLazyRescale && row_max != neg_inf() &&
                              (new_max - row_max) * score_log2 <= kRescaleThresholdLog2;
            const float max_used = keep ? row_max : new_max;
            // A row that has seen only masked keys offsets by 0: exp2(-inf) = 0, not NaN.
            const float offset = max_used == neg_inf() ? 0.f : max_used * score_log2;
            const float rescale = keep ? 1.f : exp2_approx(row_max * score_log2 - offset);
            row_max = max_used;
            if (i > 0) {  // the first block writes O; nothing to rescale
                st_shared_f32(smem.rescale(stage, t), rescale);
                mbarrier_arrive(smem.stats_full(stage));
            }

            // ---- P = exp2(S scale - max), into TMEM over S ------------------------------------
            float sum = 0.f;
            u32 p[kChunks / 2 > 0 ? kChunks / 2 : 1][32];
#pragma unroll
            for (int j = 0; j < T::kBlockN; j += 2) {
                float e[2];
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const float x = fmaf(s[j + h], score_log2, -offset);
                    const bool emulate = T::kExp2EmuEvery > 0 && ((j + h) / 8) % T::kExp2EmuEvery == T::kExp2EmuEvery - 1;
                    e[h] = emulate ? exp2_emulated(x) : exp2_approx(x);
                    sum += e[h];
                }
                p[j / 64][(j / 2) % 32] = pack2<T::Element::kIsBf16>(e[0], e[1]);
            }
            static_assert(T::kBlockN % 64 == 0, "P is stored in 32-column chunks: key blocks of 64");
#pragma unroll
            for (int c = 0; c < kChunks / 2; ++c) tmem_st_32x32b<32>(s_lanes + 32 * c, p[c]);
            tmem_wait_st();
            fence_before_thread_sync();
            mbarrier_arrive(smem.p_full(stage));
            row_sum = row_sum * rescale + sum;
        }

        // ---- the row's statistics for the epilogue ---------------------------------------------
        st_shared_f32(smem.row_sum(stage, t), row_sum);
        st_shared_f32(smem.row_max(stage, t), row_max == neg_inf() ? neg_inf() : row_max * score_log2);
        mbarrier_arrive(smem.final_stats(stage));
    }
};

}  // namespace blackwell
}  // namespace fa4
