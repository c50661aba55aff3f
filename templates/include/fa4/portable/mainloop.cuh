// The key loop: the blocks of keys a thread block sees, from the last (the ones that
// need masking) to the first. Per key block:
//
//   wait      K(tile) in its ring slot (with a ring: refill the slot tile-1 left)
//   QK GEMM   S = Q K^T                         (registers, f32)
//   softcap   S = cap * tanh(S * scale / cap)   (soft-capped kernels)
//   mask      only on blocks that straddle a mask edge or the end of the keys
//   softmax   running max and sum; P = exp2(S * scale_log2 - max * scale_log2), and O
//             rescaled where a row's max moved (kLazy: only past 2^8, warp by warp)
//   wait      V(tile)
//   PV GEMM   O += P V                          (P packed to 16 bits straight from S)
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

// A key block's fragments: S (then P), the GEMMs' A operands, the softmax's factors for
// O. forward() declares them, not the loop: where an array lives decides the order of
// the loop's phi nodes and so the PTX names of the accumulators' registers, which
// ptxas's allocation follows (a part that declared its own moved the 128x64 4-warp tiles'
// machine code).
template <class T>
struct KeyBlockFragments {
    Scores<T>& s;
    u32 (&a_qk)[T::kMTiles][4];
    float (&o_scale)[2 * T::kMTiles];
    u32 (&a_pv)[T::kMTiles][4];
};

// kCapOffset: `cap_offset` says whether the fixed offset applies (the cap fits);
// score_scale_log2 is the scores' factor in the exponent.
template <class T, class SoftmaxT>
__device__ __forceinline__ void key_loop(const FwdParams& params, const BlockTile<T>& block, const KeyBlocks& keys,
                                         KvLoader<T>& kv, const LdmatrixLanes<T>& lanes,
                                         const BlockScalars* block_scalars, OAccum<T>& o_acc, SoftmaxT& softmax,
                                         QFrags<T>& q_frag, bool cap_offset, float score_scale_log2,
                                         const KeyBlockFragments<T>& frags) {
    constexpr bool kCapFolded = T::kSoftcap && T::kExp2EmuEvery > 0;
    Scores<T>& s = frags.s;
    const int n_tiles = keys.n_tiles;
    for (int tile = 0; tile < n_tiles; ++tile) {
        const int n_block = keys.n_block(tile);
        const u32 q_base = fresh<T>(lanes.q);
        const u32 k_base = kv.k_smem_addr + (tile % T::kStages) * T::kSmemK * 2 + fresh<T>(lanes.k);
        const u32 v_base = kv.v_smem_addr + (tile % T::kStages) * T::kSmemV * 2 + fresh<T>(lanes.v);

        kv.wait_k(tile, n_tiles);
        if constexpr (T::kQInRegs) {
            if (tile == 0) load_q_frags<T>(q_frag, lanes.q);
        }
        // A switch's branch stays here, not in the part: decided inside, it is unknown
        // until inlining, and the optimiser's order then moves unrelated code.
        bool warp_visits = true;
        if constexpr (T::kWarpSkip && T::kMask != MaskKind::None) {
            warp_visits = warp_sees_block<T>(params, block, block_scalars, n_block);
        }

        if (warp_visits) qk_gemm<T>(s, q_frag, q_base, k_base, frags.a_qk);
        kv.after_qk(tile, n_tiles);

        if (warp_visits) {
            if constexpr (T::kSoftcap) softcap_scores<T, kCapFolded>(s, params);
            const KeyBlockMask<T> edge = key_block_mask<T>(params, block_scalars, tile, n_block);
            if (edge.needed) mask_scores<T>(s, block, edge.mask, edge.col_begin);
            // Under kCapOffset's fixed offset: the exponentials alone.
            if (T::kCapOffset && cap_offset) {
                softmax.exp_cap_offset(s, score_scale_log2);
            } else if (softmax.update(s, score_scale_log2, frags.o_scale)) {
                rescale_o(o_acc, frags.o_scale);
            }
        }

        kv.wait_v();
        if (warp_visits) pv_gemm<T>(o_acc, s, v_base, frags.a_pv);
        kv.after_pv(tile, n_tiles);
    }
}

}  // namespace portable
}  // namespace fa4
