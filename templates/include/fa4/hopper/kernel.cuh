// The Hopper FlashAttention forward kernel, first stage: the portable kernel's schedule
// with both GEMMs on wgmma (sm_90a). Each warpgroup owns 64 query rows; the warps load
// K and V with cp.async into a ring of kStages slots in wgmma's swizzled layout, and
// every warpgroup reads them through shared-memory descriptors.
//
//   load      Q once; K and V tiles into the ring (cp.async, all threads)
//   QK GEMM   S = Q K^T            wgmma SS: Q and K from shared memory, S in registers
//   mask      only on blocks that straddle a mask edge or the end of the keys
//   softmax   running max and sum; P = exp2(S * scale_log2 - max * scale_log2)
//   PV GEMM   O = O * rescale + P V   wgmma RS: P from registers, V from shared memory
//   epilogue  O / rowsum (sink logits join the rowsum) through shared memory; LSE per row
//
// The warp-specialised schedule (kernel_ws.cuh) adds what this one lacks: TMA loads by a
// producer warpgroup with mbarriers instead of cp.async and block-wide barriers, register
// reallocation, pingpong between warpgroups and overlap of softmax with the GEMMs. This
// one stays for paged K/V, whose defaults it serves.
#pragma once

#include "fa4/common/mask.cuh"
#include "fa4/common/params.cuh"
#include "fa4/common/ptx.cuh"
#include "fa4/common/seqlen.cuh"
#include "fa4/common/softmax.cuh"
#include "fa4/common/tile_copy.cuh"
#include "fa4/hopper/fragments.cuh"
#include "fa4/hopper/schedule.cuh"
#include "fa4/hopper/traits.cuh"
#include "fa4/hopper/wgmma.cuh"
#include "fa4/hopper/load.cuh"

namespace fa4 {
namespace hopper {

template <class Config>
__device__ __forceinline__ void forward(const FwdParams& params) {
    using T = Traits<Config>;
    constexpr bool kBf16 = T::kIsBf16;
    constexpr int kNTiles = T::kNTiles;
    constexpr int kOTiles = T::kOTiles;
    constexpr int kStages = T::kStages;
    using Mma = Wgmma<T::kBlockN, typename T::Element>;
    using MmaO = Wgmma<T::kHeadDimVPad, typename T::Element>;

    extern __shared__ __align__(1024) unsigned char smem_raw[];
    u16* const q_smem = reinterpret_cast<u16*>(smem_raw);
    u16* const o_smem = q_smem;  // Q is dead once the last QK GEMM is done
    u16* const k_smem = q_smem + T::kSmemQO;
    u16* const v_smem = k_smem + kStages * T::kSmemK;
    BlockScalars* const block_scalars = reinterpret_cast<BlockScalars*>(smem_raw + T::kSmemTilesBytes);

    const TileCoords tile = grid_tile<T>(params);  // causal: the heaviest tiles first
    const int m_block = tile.m_block;
    const int batch = tile.batch;
    const SeqView seq = seq_view<T::kPaged>(params, batch);
    const int group = params.heads_q / params.heads_kv;
    const int kGroup = T::kPackGqa ? group : 1;
    const int rows = seq.seqlen_q * kGroup;
    const int row_begin = m_block * T::kBlockM;
    if (row_begin >= rows) return;
    const int kv_head = T::kPackGqa ? tile.head_idx : tile.head_idx / group;
    const int head = T::kPackGqa ? kv_head * group : tile.head_idx;
    const int tid = threadIdx.x;
    const int warp = tid / 32;
    const int lane = tid % 32;
    const int quad_row = lane / 4;
    const int quad_col = lane % 4;
    const int warp_row = warp * T::kRowsPerWarp;  // warpgroup warp / 4 owns rows 64 (warp / 4) ..
    const FragmentRows rows_at{row_begin + warp_row, kGroup, quad_row, quad_col};

    int n_end, n_tiles;
    {
        const int query_first = row_begin / kGroup;
        const int query_last = (imin(row_begin + T::kBlockM, rows) - 1) / kGroup;
        const Mask<T::kMask> mask{seq.seqlen_q, seq.seqlen_k, params.window_left, params.window_right};
        n_end = mask.n_block_end(query_first, query_last + 1, T::kBlockN);
        n_tiles = imax(0, n_end - mask.n_block_begin(query_first, T::kBlockN));
        if (tid == 0) *block_scalars = BlockScalars{seq.seqlen_q, seq.seqlen_k, query_first, query_last};
        __syncthreads();
    }
    const float score_scale_log2 = T::kSoftcap ? softcap_scale_log2(params) : params.scale_log2;

    const u16* const q_gmem = static_cast<const u16*>(params.q) + seq.q_offset + head * params.q_head_stride;
    const u16* const k_gmem = static_cast<const u16*>(params.k) + seq.k_offset + kv_head * params.k_head_stride;
    const u16* const v_gmem = static_cast<const u16*>(params.v) + seq.v_offset + kv_head * params.v_head_stride;
    const PageTable page_table{params.page_table + i64(batch) * params.page_table_batch_stride, params.page_size};

    constexpr StepAddress kStepForm = T::kCompactLoads ? StepAddress::kMad64 : StepAddress::kHoisted32;
    using KCopy = TileCopy<T::kBlockN, typename T::LayoutK, T::kThreads, kStepForm>;
    using VCopy = TileCopy<T::kBlockN, typename T::LayoutV, T::kThreads, kStepForm>;
    const KCopy k_copy(tid);
    const VCopy v_copy(tid);
    const u32 q_smem_addr = smem_u32(q_smem);
    const u32 k_smem_addr = smem_u32(k_smem);
    const u32 v_smem_addr = smem_u32(v_smem);
    // K/V tile loads (load.cuh); tile t holds key block n_end - 1 - t.
    auto load_k = [&](int tile, bool whole) {
        const int key_begin = (n_end - 1 - tile) * T::kBlockN;
        const int valid = whole && !T::kCompactLoads ? T::kBlockN : block_scalars->seqlen_k - key_begin;
        load_kv<T::kPaged, T::kBlockN>(k_copy, k_smem_addr + (tile % kStages) * T::kSmemK * 2, k_gmem,
                                       params.k_row_stride, params.k_batch_stride, page_table, key_begin, valid);
    };
    auto load_v = [&](int tile, bool whole) {
        const int key_begin = (n_end - 1 - tile) * T::kBlockN;
        const int valid = whole && !T::kCompactLoads ? T::kBlockN : block_scalars->seqlen_k - key_begin;
        load_kv<T::kPaged, T::kBlockN>(v_copy, v_smem_addr + (tile % kStages) * T::kSmemV * 2, v_gmem,
                                       params.v_row_stride, params.v_batch_stride, page_table, key_begin, valid);
    };

    // ---- load: Q, then the first K/V tiles --------------------------------------------
    {
        const TileCopy<T::kBlockM, typename T::LayoutQ, T::kThreads> q_copy(tid);
        if constexpr (T::kPackGqa) {
            q_copy.load_rows(q_smem_addr, q_gmem, [&](int r) {
                const int row = row_begin + r;
                return q_gmem + i64(row / kGroup) * params.q_row_stride + (row % kGroup) * params.q_head_stride;
            }, rows - row_begin);
        } else {
            q_copy.load(q_smem_addr, q_gmem + i64(row_begin) * params.q_row_stride, params.q_row_stride,
                        rows - row_begin);
        }
    }
    cp_async_commit();
    constexpr int kPrologueTiles = kStages == 1 ? 1 : kStages - 1;
#pragma unroll
    for (int tile = 0; tile < kPrologueTiles; ++tile) {
        if (tile < n_tiles) load_k(tile, tile > 0);
        cp_async_commit();
        if (tile < n_tiles) load_v(tile, tile > 0);
        cp_async_commit();
    }
    constexpr int kWaitK = kStages == 1 ? 1 : 2 * kStages - 3;
    constexpr int kWaitV = kStages == 1 ? 1 : 2 * kStages - 2;

    float o_acc[kOTiles * 4];
#pragma unroll
    for (int i = 0; i < kOTiles * 4; ++i) o_acc[i] = 0.f;
    RescalingSoftmax<kNTiles, false> softmax;
    softmax.init();
    // This warpgroup's 64 rows of Q.
    const u32 q_rows = q_smem_addr + u32(warp / 4) * 64 * 128;

    for (int tile = 0; tile < n_tiles; ++tile) {
        const int n_block = n_end - 1 - tile;
        const u32 k_tile = k_smem_addr + (tile % kStages) * T::kSmemK * 2;
        const u32 v_tile = v_smem_addr + (tile % kStages) * T::kSmemV * 2;

        cp_async_wait<kWaitK>();  // K(tile) (and Q) have landed for this thread ...
        fence_proxy_async();      // ... are visible to wgmma ...
        __syncthreads();          // ... for every thread; tile-1 is fully consumed
        if constexpr (kStages >= 2) {
            if (tile + kStages - 1 < n_tiles) {
                load_k(tile + kStages - 1, true);
                load_v(tile + kStages - 1, true);
            }
            cp_async_commit();
            cp_async_commit();
        }

        // ---- QK GEMM: S = Q K^T (wgmma, both operands in shared memory) -----------------
        float s[1][kNTiles][4];
        float(&s_flat)[kNTiles * 4] = reinterpret_cast<float(&)[kNTiles * 4]>(s[0]);
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < T::kQkSteps; ++ks) {
            Mma::ss(s_flat, k_major_desc<typename T::LayoutQ>(q_rows, ks), k_major_desc<typename T::LayoutK>(k_tile, ks),
                    ks > 0);
        }
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(s_flat);
        if constexpr (kStages == 1) {
            __syncthreads();  // every warpgroup is done with the K buffer
            if (tile + 1 < n_tiles) load_k(tile + 1, true);
            cp_async_commit();
        }

        // ---- soft-capping, mask where the block needs it, online softmax; rescale O -------
        float o_scale[2];
        {
            const int col_begin = n_block * T::kBlockN;
            const BlockScalars scalars = *block_scalars;
            const Mask<T::kMask> mask{scalars.seqlen_q, scalars.seqlen_k, params.window_left, params.window_right};
            const bool needs_mask = block_needs_mask<T::kBlockN>(mask, tile == 0, scalars.query_first,
                                                                 scalars.query_last, col_begin);
            block_scores<kNTiles, T::kSoftcap>(s, softmax, params, mask, needs_mask, rows_at, col_begin,
                                               score_scale_log2, o_scale);
        }
#pragma unroll
        for (int ot = 0; ot < kOTiles; ++ot)
#pragma unroll
            for (int e = 0; e < 4; ++e) o_acc[ot * 4 + e] *= o_scale[e / 2];

        cp_async_wait<kWaitV>();  // V(tile) has landed for this thread ...
        fence_proxy_async();
        __syncthreads();          // ... and for every thread

        // ---- PV GEMM: O += P V (wgmma, P from registers, V MN-major from shared memory) --
        u32 p[T::kPvSteps][4];
        pack_p<kBf16, kNTiles>(s, p);
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < T::kPvSteps; ++ks) {
            MmaO::rs(o_acc, p[ks], mn_major_desc<typename T::LayoutV>(v_tile, ks), 1);
        }
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(o_acc);
#pragma unroll
        for (int ks = 0; ks < T::kPvSteps; ++ks) fence_regs(p[ks]);
        if constexpr (kStages == 1) {
            __syncthreads();  // every warpgroup is done with the V buffer
            if (tile + 1 < n_tiles) load_v(tile + 1, true);
            cp_async_commit();
        }
    }

    // ---- epilogue: O / rowsum -> shared -> global (16-byte stores); LSE per row -----------
    cp_async_wait<0>();
    __syncthreads();  // every warpgroup is past its last read of Q: its space takes O
    const SeqView seq_out = seq_view<T::kPaged>(params, batch);
    const int seq_rows = seq_out.seqlen_q * kGroup;
    float o_norm[2];
    float lse[2];
    float sink_log2[2];
    sink_logits<T::kSinks>(params, head, rows_at, sink_log2);
    // OnlineSoftmax's exact normalisation: the MUFU approximations took this schedule's
    // d256 kernels from 229 to 249 registers.
    softmax.OnlineSoftmax<1, kNTiles>::finalize(score_scale_log2, sink_log2, o_norm, lse);
    stage_o<kBf16, typename T::LayoutO>(o_smem, o_acc, o_norm, warp_row, rows_at);
    store_lse(params, seq_out.lse_offset, head, rows_at, seq_rows, lse);
    __syncthreads();
    u16* const o_gmem = static_cast<u16*>(params.o) + seq_out.o_offset + head * params.o_head_stride;
    store_rows<T::kBlockM, typename T::LayoutO, T::kThreads>(
        [&](int r) {
            const int row = row_begin + r;
            return T::kPackGqa ? o_gmem + i64(row / kGroup) * params.o_row_stride + (row % kGroup) * params.o_head_stride
                               : o_gmem + i64(row) * params.o_row_stride;
        },
        o_smem, seq_rows - row_begin, tid);
}

}  // namespace hopper
}  // namespace fa4
