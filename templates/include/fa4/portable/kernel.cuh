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
//             (kExp2EmuEvery: a share of the exp2s on the FMA pipes)
//   PV GEMM   O = O * rescale + P V             (P packed to 16 bit straight from S;
//             kLazy: a warp whose rows' max held skips the rescale)
//   epilogue  O / rowsum (sink logits join the rowsum) through shared memory to
//             global; LSE per row
//
// kStagger (soft-capped tiles of two m-tiles a warp) runs the same steps m-tile by
// m-tile in one branch-free body, so that ptxas interleaves one m-tile's softcap and
// softmax with the other's GEMMs. It is its own loop: the plain loop below keeps its
// machine code, and with it every tuning record of the kernels that do not stagger.
// kCapOffset (either loop) drops the row max: soft-capped scores are bounded, so one
// fixed offset serves every row (softmax.cuh).
#pragma once

#include "fa4/common/mask.cuh"
#include "fa4/common/params.cuh"
#include "fa4/common/ptx.cuh"
#include "fa4/common/seqlen.cuh"
#include "fa4/common/tile_copy.cuh"
#include "fa4/portable/epilogue.cuh"
#include "fa4/portable/gemm.cuh"
#include "fa4/portable/scores.cuh"
#include "fa4/portable/layout.cuh"
#include "fa4/portable/pipeline.cuh"
#include "fa4/portable/row_walk.cuh"
#include "fa4/portable/schedule.cuh"
#include "fa4/portable/softmax.cuh"
#include "fa4/portable/traits.cuh"

namespace fa4 {
namespace portable {

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
    const SmemTiles<T> smem(smem_raw);
    u16* const q_smem = smem.q;
    u16* const o_smem = smem.o;
    u16* const k_smem = smem.k;
    u16* const v_smem = smem.v;
    BlockScalars* const block_scalars = smem.scalars;

    BlockTile<T> blk;
    if (!blk.locate_rows(params)) return;
    blk.locate_thread();
    const int batch = blk.batch;
    const SeqView seq = blk.seq;
    const int kGroup = T::kPackGqa ? blk.group : 1;
    const int rows = blk.rows;
    const int row_begin = blk.row_begin;
    const int kv_head = blk.kv_head;
    const int head = blk.head;
    const int tid = blk.tid;
    const int lane = blk.lane;
    const int quad_row = blk.quad_row;
    const int quad_col = blk.quad_col;
    const int warp_row = blk.warp_row;

    const KeyBlocks keys = key_blocks<T>(params, blk, block_scalars);
    const int n_end = keys.n_end;
    const int n_tiles = keys.n_tiles;
    // Soft-capped scores reach the softmax as cap * tanh(S * scale / cap), or, where the
    // MUFU is relieved (kCapFolded), as the tanh alone, the cap's multiply folded into
    // the exponent's FMA. (Folded everywhere, d128's best soft-capped tile spills.)
    constexpr bool kCapFolded = T::kSoftcap && T::kExp2EmuEvery > 0;
    const float score_scale_log2 =
        T::kSoftcap ? (kCapFolded ? params.softcap * kLog2e : kLog2e) : params.scale_log2;

    const u16* const q_gmem = static_cast<const u16*>(params.q) + seq.q_offset + head * params.q_head_stride;
    const u16* const k_gmem = static_cast<const u16*>(params.k) + seq.k_offset + kv_head * params.k_head_stride;
    const u16* const v_gmem = static_cast<const u16*>(params.v) + seq.v_offset + kv_head * params.v_head_stride;
    const PageTable page_table{params.page_table + i64(batch) * params.page_table_batch_stride, params.page_size};
    typename KvLoader<T>::KCopy::PagedRows paged_rows;
    KvLoader<T> kv(params, k_gmem, v_gmem, page_table, blk, smem, n_end, paged_rows);
    const u32 k_smem_addr = kv.k_smem_addr;
    const u32 v_smem_addr = kv.v_smem_addr;

    using LayoutQK = typename T::LayoutQK;
    using LayoutV = typename T::LayoutV;
    const LdmatrixLanes<T> lanes(q_smem, blk);
    const u32 q_lane = lanes.q;

    // ---- load: Q, then the first K/V tiles --------------------------------------------
    // Every stage commits its cp.async groups even when it has nothing to load, so the
    // wait counts below are the same constants on every iteration.
    load_q<T>(params, blk, q_gmem, q_smem);
    cp_async_commit();
    kv.load_first_tiles(n_tiles);

    float o_acc[kMTiles][kOTiles][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int ot = 0; ot < kOTiles; ++ot)
#pragma unroll
            for (int e = 0; e < 4; ++e) o_acc[mt][ot][e] = 0.f;

    Softmax<kMTiles, kNTiles, T::kLazy, T::kExp2EmuEvery> softmax;
    softmax.init();
    u32 q_frag[T::kQInRegs ? kMTiles : 1][T::kQInRegs ? T::kQkSteps : 1][4];
    // kCapOffset: the exponent's offset fixed by the cap (softmax.cuh), where it fits.
    const float cap_log2 = params.softcap * kLog2e;
    bool cap_offset = false;
    if constexpr (T::kCapOffset) {
        cap_offset = softmax.cap_offset_fits(cap_log2);
        if (cap_offset) softmax.init_cap_offset(cap_log2);
    }

    if constexpr (T::kStagger) {
        // ---- the staggered schedule: each m-tile's softmax beside the next one's GEMM ----
        // A warp of two m-tiles multiplies, soft-caps, masks and exponentiates them one
        // after the other, so that the MUFU's tanh/exp2 of the first and the tensor cores'
        // QK GEMM of the second (then the first's PV GEMM and the second's softmax) are
        // independent work in one basic block: V is waited for with K at the top, and a
        // block that needs masking takes its own copy of the body, so no branch splits it.
        // The K and V fragments are read once per m-tile.
        using Scores = float[kMTiles][kNTiles][4];
        for (int tile = 0; tile < n_tiles; ++tile) {
            const int n_block = n_end - 1 - tile;
            const u32 q_base = fresh<T>(lanes.q);
            const u32 k_base = k_smem_addr + (tile % kStages) * T::kSmemK * 2 + fresh<T>(lanes.k);
            const u32 v_base = v_smem_addr + (tile % kStages) * T::kSmemV * 2 + fresh<T>(lanes.v);
            kv.wait_kv(tile, n_tiles);
            if constexpr (T::kQInRegs) {
                if (tile == 0) load_q_frags<T>(q_frag, q_lane);
            }
            const int col_begin = n_block * T::kBlockN;
            const BlockScalars scalars = *block_scalars;
            const Mask<T::kMask> mask{scalars.seqlen_q, scalars.seqlen_k, params.window_left, params.window_right};
            const bool needs_mask = T::kMask == MaskKind::None
                                        ? tile == 0
                                        : mask.block_needs_mask(scalars.query_first, scalars.query_last, col_begin,
                                                                col_begin + T::kBlockN);
            // `masked` and `fixed` are literals at every call: each inlined copy is one
            // basic block.
            const auto body = [&](const bool masked, const bool fixed) {
                Scores s;
#pragma unroll
                for (int mt = 0; mt < kMTiles; ++mt) {
                    // QK GEMM of this m-tile.
#pragma unroll
                    for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
                        for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.f;
#pragma unroll
                    for (int ks = 0; ks < T::kQkSteps; ++ks) {
                        u32 a[4];
                        if constexpr (T::kQInRegs) {
#pragma unroll
                            for (int i = 0; i < 4; ++i) a[i] = q_frag[mt][ks][i];
                        } else {
                            ldmatrix_x4(a, LayoutQK::at(q_base, mt * 16, ks));
                        }
#pragma unroll
                        for (int np = 0; np < kNTiles / 2; ++np) {
                            u32 b[4];
                            ldmatrix_x4(b, LayoutQK::at(k_base, np * 16, ks));
                            mma_16816<kBf16>(s[mt][2 * np], a, b[0], b[1]);
                            mma_16816<kBf16>(s[mt][2 * np + 1], a, b[2], b[3]);
                        }
                    }
                    // Soft-capping.
                    if constexpr (T::kSoftcap) {
                        const float to_unit = params.softmax_scale / params.softcap;
#pragma unroll
                        for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
                            for (int e = 0; e < 4; ++e)
                                s[mt][nt][e] = kCapFolded || fixed
                                                   ? tanh_approx(s[mt][nt][e] * to_unit)
                                                   : params.softcap * tanh_approx(s[mt][nt][e] * to_unit);
                    }
                    // Mask (selects, no branch).
                    if (masked) {
#pragma unroll
                        for (int h = 0; h < 2; ++h) {
                            const int row = (row_begin + warp_row + mt * 16 + h * 8 + quad_row) / kGroup;
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
                    // Online softmax of this m-tile's rows; rescale its O. Under a fixed
                    // offset: the exponentials alone.
                    if (fixed) {
                        softmax.exp_cap_offset_m_tile(s, mt, cap_log2);
                    } else {
                        float o_scale[2];
                        if (softmax.update_m_tile(s, mt, score_scale_log2, o_scale)) {
#pragma unroll
                            for (int ot = 0; ot < kOTiles; ++ot)
#pragma unroll
                                for (int e = 0; e < 4; ++e) o_acc[mt][ot][e] *= o_scale[e / 2];
                        }
                    }
                }
                // PV GEMM, m-tile by m-tile.
#pragma unroll
                for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
                    for (int ks = 0; ks < T::kPvSteps; ++ks) {
                        u32 a[4];
                        a[0] = pack2<kBf16>(s[mt][2 * ks][0], s[mt][2 * ks][1]);
                        a[1] = pack2<kBf16>(s[mt][2 * ks][2], s[mt][2 * ks][3]);
                        a[2] = pack2<kBf16>(s[mt][2 * ks + 1][0], s[mt][2 * ks + 1][1]);
                        a[3] = pack2<kBf16>(s[mt][2 * ks + 1][2], s[mt][2 * ks + 1][3]);
#pragma unroll
                        for (int dp = 0; dp < kOTiles / 2; ++dp) {
                            u32 b[4];
                            ldmatrix_x4_trans(b, LayoutV::at(v_base, ks * 16, dp));
                            mma_16816<kBf16>(o_acc[mt][2 * dp], a, b[0], b[1]);
                            mma_16816<kBf16>(o_acc[mt][2 * dp + 1], a, b[2], b[3]);
                        }
                    }
            };
            if (cap_offset) {
                if (needs_mask) {
                    body(true, true);
                } else {
                    body(false, true);
                }
            } else if (needs_mask) {
                body(true, false);
            } else {
                body(false, false);
            }
        }
    } else {
        for (int tile = 0; tile < n_tiles; ++tile) {
            const int n_block = n_end - 1 - tile;
            const u32 q_base = fresh<T>(lanes.q);
            const u32 k_base = k_smem_addr + (tile % kStages) * T::kSmemK * 2 + fresh<T>(lanes.k);
            const u32 v_base = v_smem_addr + (tile % kStages) * T::kSmemV * 2 + fresh<T>(lanes.v);

            kv.wait_k(tile, n_tiles);
            if constexpr (T::kQInRegs) {
                if (tile == 0) load_q_frags<T>(q_frag, q_lane);
            }

            bool warp_visits = true;
            if constexpr (T::kWarpSkip && T::kMask != MaskKind::None) {
                warp_visits = warp_sees_block<T>(params, blk, block_scalars, n_block);
            }

            // ---- QK GEMM: S = Q K^T ----------------------------------------------------------
            float s[kMTiles][kNTiles][4];
            u32 a_qk[kMTiles][4];
            if (warp_visits) qk_gemm<T>(s, q_frag, q_base, k_base, a_qk);
            kv.after_qk(tile, n_tiles);

            if (warp_visits) {
                // ---- soft-capping: S = cap * tanh(S * scale / cap) ----------------------------
                if constexpr (T::kSoftcap) softcap_scores<T, kCapFolded>(s, params);

                const BlockMask<T> block = block_mask<T>(params, block_scalars, tile, n_block);
                if (block.needed) mask_scores<T>(s, blk, block.mask, block.col_begin);

                // ---- online softmax; rescale what O holds so far ---------------------------
                // (Under kCapOffset's fixed offset: the exponentials alone.)
                if (T::kCapOffset && cap_offset) {
                    softmax.exp_cap_offset(s, score_scale_log2);
                } else {
                    float o_scale[2 * kMTiles];
                    if (softmax.update(s, score_scale_log2, o_scale)) rescale_o(o_acc, o_scale);
                }
            }  // warp_visits

            kv.wait_v();

            // ---- PV GEMM: O += P V, P packed from the S fragments in registers ---------------
            u32 a_pv[kMTiles][4];
            if (warp_visits) pv_gemm<T>(o_acc, s, v_base, a_pv);
            kv.after_pv(tile, n_tiles);
        }
    }

    // ---- epilogue: O / rowsum -> shared -> global (16-byte stores); LSE per row -----------
    cp_async_wait<0>();
    __syncthreads();  // all warps are past their last read of Q: its space takes O
    // Where this block's rows go, read again rather than held in registers over the loop.
    const SeqView seq_out = seq_view<T::kPaged>(params, blockIdx.z);
    const int seq_rows = seq_out.seqlen_q * kGroup;
    float o_norm[2 * kMTiles];
    float lse[2 * kMTiles];
    float sink_log2[2 * kMTiles];
    sink_logits<T>(params, blk, sink_log2);
    // Under kCapOffset's fixed offset the max holds it in log2 units already.
    softmax.finalize(cap_offset ? 1.f : score_scale_log2, sink_log2, o_norm, lse);
    stage_o<T>(blk, o_acc, o_norm, o_smem);
    store_lse<T>(params, blk, seq_out, seq_rows, lse);
    __syncthreads();
    store_o<T>(params, blk, seq_out, seq_rows, o_smem);
}

}  // namespace portable
}  // namespace fa4
