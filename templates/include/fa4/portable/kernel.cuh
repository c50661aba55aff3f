// The portable FlashAttention forward kernel: mma.sync.m16n8k16 + ldmatrix + cp.async,
// online softmax in registers. Runs on sm80 and every later arch.
//
// One thread block computes kBlockM query rows of one (batch, head); each warp owns
// kRowsPerWarp of those rows and walks the visible key blocks from the last to the first
// (the blocks that need masking come first, the rest run mask-free):
//
//   load      Q once; K and V tiles through a ring of kStages shared-memory slots (cp.async)
//   QK GEMM   S = Q K^T                         (registers, f32); soft-capped if asked
//   mask      only on blocks that straddle a mask edge or the end of the keys
//   softmax   running max and sum; P = exp2(S * scale_log2 - max * scale_log2)
//   PV GEMM   O = O * rescale + P V             (P packed to 16 bit straight from S)
//   epilogue  O / rowsum (sink logits join the rowsum) through shared memory to
//             global; LSE per row
#pragma once

#include "fa4/common/mask.cuh"
#include "fa4/common/params.cuh"
#include "fa4/common/ptx.cuh"
#include "fa4/common/softmax.cuh"
#include "fa4/portable/traits.cuh"

namespace fa4 {
namespace portable {

// ---- load / store of row-major tiles, 16 bytes per thread per step ----------------------

// Copies a kRows x kCols row-major global tile into padded shared memory, 16 bytes per
// cp.async. Which chunks a thread copies never changes, so its offsets are computed once
// per kernel and a tile load is an add per step: this keeps address arithmetic out of
// the registers the accumulators need. Rows >= valid_rows are zero-filled without
// touching global memory.
template <int kRows, int kCols, int kPitch, int kThreads>
struct TileCopy {
    static constexpr int kChunksPerRow = kCols / 8;
    static constexpr int kChunks = kRows * kChunksPerRow;
    static constexpr int kSteps = CeilDiv<kChunks, kThreads>::value;
    // Each step covers whole rows when the thread count is a multiple of the row's chunks.
    static constexpr bool kWholeRows = kThreads % kChunksPerRow == 0;
    static constexpr int kRowsPerStep = kWholeRows ? kThreads / kChunksPerRow : 0;

    int tid;
    int row;  // first row this thread copies
    int col;  // its column, elements

    __device__ __forceinline__ explicit TileCopy(int tid_) : tid(tid_) {
        row = tid / kChunksPerRow;
        col = (tid % kChunksPerRow) * 8;
    }

    __device__ __forceinline__ void load(u32 smem_tile, const u16* gmem_tile, i64 row_stride,
                                         int valid_rows) const {
        if constexpr (kWholeRows) {
            const u32 smem_thread = smem_tile + u32(row * kPitch + col) * 2;
#pragma unroll
            for (int step = 0; step < kSteps; ++step) {
                const int r = row + step * kRowsPerStep;
                if (kRows % kRowsPerStep == 0 || r < kRows) {
                    const bool valid = r < valid_rows;
                    const u16* src = gmem_tile + (valid ? r * row_stride + col : 0);
                    cp_async_16(smem_thread + step * kRowsPerStep * kPitch * 2, src, valid);
                }
            }
        } else {
#pragma unroll
            for (int step = 0; step < kSteps; ++step) {
                const int chunk = step * kThreads + tid;
                if (kChunks % kThreads == 0 || chunk < kChunks) {
                    const int r = chunk / kChunksPerRow;
                    const int c = (chunk % kChunksPerRow) * 8;
                    const bool valid = r < valid_rows;
                    const u16* src = gmem_tile + (valid ? r * row_stride + c : 0);
                    cp_async_16(smem_tile + u32(r * kPitch + c) * 2, src, valid);
                }
            }
        }
    }
};

// Rows [0, valid_rows) of a padded shared-memory tile out to global memory.
template <int kRows, int kCols, int kPitch, int kThreads>
__device__ __forceinline__ void store_tile(u16* gmem, i64 row_stride, const u16* smem,
                                           int valid_rows, int tid) {
    constexpr int kChunksPerRow = kCols / 8;
    constexpr int kChunks = kRows * kChunksPerRow;
#pragma unroll
    for (int step = 0; step < CeilDiv<kChunks, kThreads>::value; ++step) {
        const int chunk = step * kThreads + tid;
        if (kChunks % kThreads == 0 || chunk < kChunks) {
            const int row = chunk / kChunksPerRow;
            const int col = (chunk % kChunksPerRow) * 8;
            if (row < valid_rows) {
                *reinterpret_cast<Vec16*>(gmem + row * row_stride + col) =
                    *reinterpret_cast<const Vec16*>(smem + row * kPitch + col);
            }
        }
    }
}

// ---- the kernel body ---------------------------------------------------------------------

template <class Config>
__device__ __forceinline__ void forward(const FwdParams& params) {
    using T = Traits<Config>;
    constexpr bool kBf16 = T::kIsBf16;
    constexpr int kMTiles = T::kMTiles;
    constexpr int kNTiles = T::kNTiles;
    constexpr int kOTiles = T::kOTiles;
    constexpr int kStages = T::kStages;

    extern __shared__ __align__(128) unsigned char smem_raw[];
    u16* const q_smem = reinterpret_cast<u16*>(smem_raw);
    u16* const o_smem = q_smem;  // Q is dead once the last QK GEMM is done
    u16* const k_smem = q_smem + T::kSmemQO;
    u16* const v_smem = k_smem + kStages * T::kSmemK;

    // Causal blocks further down the sequence see more keys: launch those first (the
    // longest-processing-time order), so the short blocks fill the tail of the grid.
    const int m_block = T::kMask == MaskKind::Causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    const int head = blockIdx.y;
    const int batch = blockIdx.z;
    const int kv_head = head / (params.heads_q / params.heads_kv);
    const int tid = threadIdx.x;
    const int warp = tid / 32;
    const int lane = tid % 32;
    const int quad_row = lane / 4;  // g: fragment row within an 8-row half
    const int quad_col = lane % 4;  // t: fragment column pair

    const int row_begin = m_block * T::kBlockM;  // first query row of this block
    const int warp_row = warp * T::kRowsPerWarp;  // first row of this warp within the block

    const Mask<T::kMask> mask{params.seqlen_q, params.seqlen_k, params.window_left, params.window_right};
    // Key blocks n_end-1 down to n_begin are visited, in that order.
    const int n_end = mask.n_block_end(row_begin, row_begin + T::kBlockM, T::kBlockN);
    const int n_begin = mask.n_block_begin(row_begin, T::kBlockN);
    const int n_tiles = imax(0, n_end - n_begin);
    // With soft-capping the scores are scaled before the softmax sees them.
    const float score_scale_log2 = T::kSoftcap ? kLog2e : params.scale_log2;

    const u16* const q_gmem = static_cast<const u16*>(params.q) + batch * params.q_batch_stride +
                              head * params.q_head_stride + row_begin * params.q_row_stride;
    const u16* const k_gmem = static_cast<const u16*>(params.k) + batch * params.k_batch_stride +
                              kv_head * params.k_head_stride;
    const u16* const v_gmem = static_cast<const u16*>(params.v) + batch * params.v_batch_stride +
                              kv_head * params.v_head_stride;

    const TileCopy<T::kBlockN, T::kHeadDim, T::kPitchQK, T::kThreads> k_copy(tid);
    const TileCopy<T::kBlockN, T::kHeadDimV, T::kPitchV, T::kThreads> v_copy(tid);
    const u32 k_smem_addr = smem_u32(k_smem);
    const u32 v_smem_addr = smem_u32(v_smem);
    auto load_k = [&](int tile) {
        const int n_block = n_end - 1 - tile;
        k_copy.load(k_smem_addr + (tile % kStages) * T::kSmemK * 2,
                    k_gmem + i64(n_block) * T::kBlockN * params.k_row_stride, params.k_row_stride,
                    params.seqlen_k - n_block * T::kBlockN);
    };
    auto load_v = [&](int tile) {
        const int n_block = n_end - 1 - tile;
        v_copy.load(v_smem_addr + (tile % kStages) * T::kSmemV * 2,
                    v_gmem + i64(n_block) * T::kBlockN * params.v_row_stride, params.v_row_stride,
                    params.seqlen_k - n_block * T::kBlockN);
    };

    // Lane offsets (in elements) of the row each lane hands to ldmatrix.
    //   Q (A operand, x4 = rows 0-7|8-15 x cols 0-7|8-15):  row lane%16, col (lane/16)*8
    //   K (B operand, x4 = two n-tiles x two k-halves):     row (lane/16)*8 + lane%8, col (lane/8)%2*8
    //   V (B operand via .trans, x4 = two k-halves x two n-tiles): row (lane/8)%2*8 + lane%8, col (lane/16)*8
    const int q_lane = (warp_row + lane % 16) * T::kPitchQK + (lane / 16) * 8;
    const int k_lane = ((lane / 16) * 8 + lane % 8) * T::kPitchQK + ((lane / 8) % 2) * 8;
    const int v_lane = (((lane / 8) % 2) * 8 + lane % 8) * T::kPitchV + (lane / 16) * 8;

    // ---- load: Q, then the first K/V tiles --------------------------------------------
    // Every stage commits its cp.async groups even when it has nothing to load, so the
    // wait counts below are the same constants on every iteration.
    TileCopy<T::kBlockM, T::kHeadDim, T::kPitchQK, T::kThreads>(tid).load(
        smem_u32(q_smem), q_gmem, params.q_row_stride, params.seqlen_q - row_begin);
    cp_async_commit();
    // kStages == 1 is FlashAttention-2's schedule: one K and one V buffer, K(t+1) loads
    // under softmax and PV of tile t, V(t+1) under QK of tile t+1. kStages >= 2 is a ring
    // that keeps kStages-1 whole tiles in flight ahead of the one being computed.
    constexpr int kPrologueTiles = kStages == 1 ? 1 : kStages - 1;
#pragma unroll
    for (int tile = 0; tile < kPrologueTiles; ++tile) {
        if (tile < n_tiles) load_k(tile);
        cp_async_commit();
        if (tile < n_tiles) load_v(tile);
        cp_async_commit();
    }
    constexpr int kWaitK = kStages == 1 ? 1 : 2 * kStages - 3;
    constexpr int kWaitV = kStages == 1 ? 1 : 2 * kStages - 2;

    float o_acc[kMTiles][kOTiles][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int ot = 0; ot < kOTiles; ++ot)
#pragma unroll
            for (int e = 0; e < 4; ++e) o_acc[mt][ot][e] = 0.f;

    OnlineSoftmax<kMTiles, kNTiles> softmax;
    softmax.init();
    u32 q_frag[T::kQInRegs ? kMTiles : 1][T::kQInRegs ? T::kQkSteps : 1][4];

    for (int tile = 0; tile < n_tiles; ++tile) {
        const int n_block = n_end - 1 - tile;
        const u16* const k_tile = k_smem + (tile % kStages) * T::kSmemK;
        const u16* const v_tile = v_smem + (tile % kStages) * T::kSmemV;

        cp_async_wait<kWaitK>();  // K(tile) (and Q) have landed for this thread ...
        __syncthreads();          // ... and for every thread; tile-1 is fully consumed
        if constexpr (kStages >= 2) {
            // The slot of tile-1 is free: refill it with the tile kStages-1 ahead.
            if (tile + kStages - 1 < n_tiles) {
                load_k(tile + kStages - 1);
                load_v(tile + kStages - 1);
            }
            cp_async_commit();
            cp_async_commit();
        }
        if constexpr (T::kQInRegs) {
            if (tile == 0) {
#pragma unroll
                for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
                    for (int ks = 0; ks < T::kQkSteps; ++ks)
                        ldmatrix_x4(q_frag[mt][ks],
                                    smem_u32(q_smem + q_lane + mt * 16 * T::kPitchQK + ks * 16));
            }
        }

        // ---- QK GEMM: S = Q K^T ----------------------------------------------------------
        float s[kMTiles][kNTiles][4];
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
            for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.f;
#pragma unroll
        for (int ks = 0; ks < T::kQkSteps; ++ks) {
            u32 a[kMTiles][4];
#pragma unroll
            for (int mt = 0; mt < kMTiles; ++mt) {
                if constexpr (T::kQInRegs) {
#pragma unroll
                    for (int i = 0; i < 4; ++i) a[mt][i] = q_frag[mt][ks][i];
                } else {
                    ldmatrix_x4(a[mt], smem_u32(q_smem + q_lane + mt * 16 * T::kPitchQK + ks * 16));
                }
            }
#pragma unroll
            for (int np = 0; np < kNTiles / 2; ++np) {
                u32 b[4];
                ldmatrix_x4(b, smem_u32(k_tile + k_lane + np * 16 * T::kPitchQK + ks * 16));
#pragma unroll
                for (int mt = 0; mt < kMTiles; ++mt) {
                    mma_16816<kBf16>(s[mt][2 * np], a[mt], b[0], b[1]);
                    mma_16816<kBf16>(s[mt][2 * np + 1], a[mt], b[2], b[3]);
                }
            }
        }
        if constexpr (kStages == 1) {
            __syncthreads();  // every warp is done with the K buffer
            if (tile + 1 < n_tiles) load_k(tile + 1);
            cp_async_commit();
        }

        // ---- soft-capping: S = cap * tanh(S * scale / cap) --------------------------------
        if constexpr (T::kSoftcap) {
            const float to_unit = params.softmax_scale / params.softcap;
#pragma unroll
            for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
                for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e) s[mt][nt][e] = params.softcap * tanh_approx(s[mt][nt][e] * to_unit);
        }

        // ---- mask: only blocks that cross a mask edge or the end of the keys -------------
        const int col_begin = n_block * T::kBlockN;
        if (mask.block_needs_mask(row_begin, row_begin + T::kBlockM - 1, col_begin, col_begin + T::kBlockN)) {
#pragma unroll
            for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int row = row_begin + warp_row + mt * 16 + h * 8 + quad_row;
                    const int first = mask.col_begin(row);
                    const int end = mask.col_end(row);
#pragma unroll
                    for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
                        for (int e = 0; e < 2; ++e) {
                            const int col = col_begin + nt * 8 + quad_col * 2 + e;
                            if (col < first || col >= end) s[mt][nt][2 * h + e] = neg_inf();
                        }
                }
        }

        // ---- online softmax; rescale what O holds so far -------------------------------
        float o_scale[2 * kMTiles];
        softmax.update(s, score_scale_log2, o_scale);
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
            for (int ot = 0; ot < kOTiles; ++ot)
#pragma unroll
                for (int e = 0; e < 4; ++e) o_acc[mt][ot][e] *= o_scale[mt * 2 + e / 2];

        cp_async_wait<kWaitV>();  // V(tile) has landed for this thread ...
        __syncthreads();          // ... and for every thread

        // ---- PV GEMM: O += P V, P packed from the S fragments in registers ---------------
#pragma unroll
        for (int ks = 0; ks < T::kPvSteps; ++ks) {
            u32 a[kMTiles][4];
#pragma unroll
            for (int mt = 0; mt < kMTiles; ++mt) {
                a[mt][0] = pack2<kBf16>(s[mt][2 * ks][0], s[mt][2 * ks][1]);
                a[mt][1] = pack2<kBf16>(s[mt][2 * ks][2], s[mt][2 * ks][3]);
                a[mt][2] = pack2<kBf16>(s[mt][2 * ks + 1][0], s[mt][2 * ks + 1][1]);
                a[mt][3] = pack2<kBf16>(s[mt][2 * ks + 1][2], s[mt][2 * ks + 1][3]);
            }
#pragma unroll
            for (int dp = 0; dp < kOTiles / 2; ++dp) {
                u32 b[4];
                ldmatrix_x4_trans(b, smem_u32(v_tile + v_lane + ks * 16 * T::kPitchV + dp * 16));
#pragma unroll
                for (int mt = 0; mt < kMTiles; ++mt) {
                    mma_16816<kBf16>(o_acc[mt][2 * dp], a[mt], b[0], b[1]);
                    mma_16816<kBf16>(o_acc[mt][2 * dp + 1], a[mt], b[2], b[3]);
                }
            }
        }
        if constexpr (kStages == 1) {
            __syncthreads();  // every warp is done with the V buffer
            if (tile + 1 < n_tiles) load_v(tile + 1);
            cp_async_commit();
        }
    }

    // ---- epilogue: O / rowsum -> shared -> global (16-byte stores); LSE per row -----------
    cp_async_wait<0>();
    __syncthreads();  // all warps are past their last read of Q: its space takes O
    float o_norm[2 * kMTiles];
    float lse[2 * kMTiles];
    const float sink_log2 = T::kSinks ? params.sinks[head] * kLog2e : neg_inf();
    softmax.finalize(score_scale_log2, sink_log2, o_norm, lse);
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = warp_row + mt * 16 + h * 8 + quad_row;
            const float norm = o_norm[mt * 2 + h];
#pragma unroll
            for (int ot = 0; ot < kOTiles; ++ot) {
                const int col = ot * 8 + quad_col * 2;
                *reinterpret_cast<u32*>(o_smem + row * T::kPitchV + col) = pack2<kBf16>(
                    o_acc[mt][ot][2 * h] * norm, o_acc[mt][ot][2 * h + 1] * norm);
            }
        }
    if (quad_col == 0) {
        float* const lse_gmem =
            params.lse + (i64(batch) * params.heads_q + head) * i64(params.seqlen_q);
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = row_begin + warp_row + mt * 16 + h * 8 + quad_row;
                if (row < params.seqlen_q) lse_gmem[row] = lse[mt * 2 + h];
            }
    }
    __syncthreads();
    u16* const o_gmem = static_cast<u16*>(params.o) + batch * params.o_batch_stride +
                        head * params.o_head_stride + row_begin * params.o_row_stride;
    store_tile<T::kBlockM, T::kHeadDimV, T::kPitchV, T::kThreads>(
        o_gmem, params.o_row_stride, o_smem, params.seqlen_q - row_begin, tid);
}

}  // namespace portable
}  // namespace fa4
