// The staggered key loop (kStagger: soft-capped tiles of two m-tiles a warp): each
// m-tile's softmax beside the other's GEMM.
//
// A warp multiplies, soft-caps, masks and exponentiates its m-tiles one after the other,
// so that the MUFU's tanh/exp2 of the first and the tensor cores' QK GEMM of the second
// (then the first's PV GEMM and the second's softmax) are independent work in one basic
// block: V is waited for with K at the top, and a block that needs masking takes its own
// copy of the body, so no branch splits it. The K and V fragments are read once per
// m-tile. It is a loop of its own: the plain loop (mainloop.cuh) keeps its machine code,
// and with it every tuning record of the kernels that do not stagger.
#pragma once

#include "fa4/common/mask.cuh"
#include "fa4/common/params.cuh"
#include "fa4/common/tile_copy.cuh"
#include "fa4/portable/gemm.cuh"
#include "fa4/portable/pipeline.cuh"
#include "fa4/portable/schedule.cuh"
#include "fa4/portable/scores.cuh"
#include "fa4/portable/softmax.cuh"
#include "fa4/portable/traits.cuh"

namespace fa4 {
namespace portable {

// O, the softmax and Q's fragments are forward()'s, lent by reference (see mainloop.cuh).
// The block's scores and fragments are the body's own: it is its own function (a lambda)
// in every kernel, so they were never forward()'s.
template <class T, class SoftmaxT>
__device__ __forceinline__ void staggered_loop(const FwdParams& params, const BlockTile<T>& block,
                                               const KeyBlocks& keys, KvLoader<T>& kv,
                                               const LdmatrixLanes<T>& lanes, const BlockScalars* block_scalars,
                                               OAccum<T>& o_acc, SoftmaxT& softmax, QFrags<T>& q_frag,
                                               bool cap_offset, float cap_log2, float score_scale_log2) {
    constexpr int kMTiles = T::kMTiles;
    constexpr bool kCapFolded = T::kSoftcap && T::kExp2EmuEvery > 0;
    const int kGroup = T::kPackGqa ? block.group : 1;
    const int row_begin = block.row_begin;
    const int warp_row = block.warp_row;
    const int quad_row = block.quad_row;
    const int quad_col = block.quad_col;
    const int n_tiles = keys.n_tiles;
    for (int tile = 0; tile < n_tiles; ++tile) {
        const int n_block = keys.n_block(tile);
        const u32 q_base = fresh<T>(lanes.q);
        const u32 k_base = kv.k_smem_addr + (tile % T::kStages) * T::kSmemK * 2 + fresh<T>(lanes.k);
        const u32 v_base = kv.v_smem_addr + (tile % T::kStages) * T::kSmemV * 2 + fresh<T>(lanes.v);
        kv.wait_kv(tile, n_tiles);
        if constexpr (T::kQInRegs) {
            if (tile == 0) load_q_frags<T>(q_frag, lanes.q);
        }
        // key_block_mask()'s test, written out: the body's lambda reaching the mask through
        // its struct moves the staggered kernels' PTX (16 of 58 compared).
        const int col_begin = n_block * T::kBlockN;
        const BlockScalars scalars = *block_scalars;
        const Mask<T::kMask> mask{scalars.seqlen_q, scalars.seqlen_k, params.window_left, params.window_right};
        const bool needs_mask = T::kMask == MaskKind::None
                                    ? tile == 0
                                    : mask.block_needs_mask(scalars.query_first, scalars.query_last, col_begin,
                                                            col_begin + T::kBlockN);
        // One key block. `masked` and `fixed` (kCapOffset's fixed offset) are literals at
        // every call: each inlined copy is one basic block.
        const auto body = [&](const bool masked, const bool fixed) {
            Scores<T> s;
#pragma unroll
            for (int mt = 0; mt < kMTiles; ++mt) {
                qk_gemm_m_tile<T>(s, mt, q_frag, q_base, k_base);
                if constexpr (T::kSoftcap) softcap_m_tile<T>(s, mt, params, kCapFolded || fixed);
                // mask_m_tile()'s selects, written out: called here, they move the staggered
                // kernels' PTX (16 of 58 compared).
                if (masked) {
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const int row = (row_begin + warp_row + mt * 16 + h * 8 + quad_row) / kGroup;
                        const int first = mask.col_begin(row);
                        const int end = mask.col_end(row);
#pragma unroll
                        for (int nt = 0; nt < T::kNTiles; ++nt)
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
                    if (softmax.update_m_tile(s, mt, score_scale_log2, o_scale)) rescale_o_m_tile(o_acc, mt, o_scale);
                }
            }
            // PV GEMM, m-tile by m-tile.
#pragma unroll
            for (int mt = 0; mt < kMTiles; ++mt) pv_gemm_m_tile<T>(o_acc, s, mt, v_base);
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
}

}  // namespace portable
}  // namespace fa4
