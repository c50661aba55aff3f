// What happens to the scores S of a key block between the two GEMMs, before the
// softmax: soft-capping and masking, on the register fragments.
#pragma once

#include "fa4/common/mask.cuh"
#include "fa4/common/params.cuh"
#include "fa4/common/ptx.cuh"
#include "fa4/common/tile_copy.cuh"
#include "fa4/portable/gemm.cuh"
#include "fa4/portable/schedule.cuh"
#include "fa4/portable/traits.cuh"

namespace fa4 {
namespace portable {

// Soft-capping of m-tile mt: S = cap * tanh(S * scale / cap), or the tanh alone
// (`tanh_only`, a constant where inlined) where the cap's multiply is folded into the
// exponent.
template <class T>
__device__ __forceinline__ void softcap_m_tile(Scores<T>& s, int mt, const FwdParams& params, bool tanh_only) {
    const float to_unit = params.softmax_scale / params.softcap;
#pragma unroll
    for (int nt = 0; nt < T::kNTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
            s[mt][nt][e] = tanh_only ? tanh_approx(s[mt][nt][e] * to_unit)
                                     : params.softcap * tanh_approx(s[mt][nt][e] * to_unit);
}

// Every m-tile (the plain loop; kTanhOnly: kCapFolded).
template <class T, bool kTanhOnly>
__device__ __forceinline__ void softcap_scores(Scores<T>& s, const FwdParams& params) {
#pragma unroll
    for (int mt = 0; mt < T::kMTiles; ++mt) softcap_m_tile<T>(s, mt, params, kTanhOnly);
}

// kWarpSkip: whether any row of this warp sees a key of key block n_block. A warp whose
// rows see none (the diagonal block of a causal mask, both edges of a window) skips its
// GEMMs and softmax; its running max, sum and O stay what a fully masked block would
// leave. The branch is uniform per warp; without the switch it compiles away.
template <class T>
__device__ __forceinline__ bool warp_sees_block(const FwdParams& params, const BlockTile<T>& tile,
                                                const BlockScalars* block_scalars, int n_block) {
    const int kGroup = T::kPackGqa ? tile.group : 1;
    const BlockScalars scalars = *block_scalars;
    const Mask<T::kMask> mask{scalars.seqlen_q, scalars.seqlen_k, params.window_left, params.window_right};
    const int warp_first = (tile.row_begin + tile.warp_row) / kGroup;
    const int warp_last = (tile.row_begin + tile.warp_row + T::kRowsPerWarp - 1) / kGroup;
    return mask.block_visible(warp_first, warp_last, n_block * T::kBlockN, (n_block + 1) * T::kBlockN);
}

// The mask as one key block meets it: whether any key is hidden from any of the block's
// rows (then the block is masked element by element), and the mask to ask per row.
template <class T>
struct KeyBlockMask {
    int col_begin;  // first key of the block
    Mask<T::kMask> mask;
    bool needed;
};

// Without a mask only the first block visited (the last keys) can straddle the end of
// the keys. The block's scalars are read back from shared memory (schedule.cuh).
template <class T>
__device__ __forceinline__ KeyBlockMask<T> key_block_mask(const FwdParams& params,
                                                          const BlockScalars* block_scalars, int tile, int n_block) {
    const int col_begin = n_block * T::kBlockN;
    const BlockScalars scalars = *block_scalars;
    const Mask<T::kMask> mask{scalars.seqlen_q, scalars.seqlen_k, params.window_left, params.window_right};
    const bool needs_mask = T::kMask == MaskKind::None ? tile == 0
                                                       : mask.block_needs_mask(scalars.query_first, scalars.query_last,
                                                                               col_begin, col_begin + T::kBlockN);
    return KeyBlockMask<T>{col_begin, mask, needs_mask};
}

// -inf where the mask hides the key from the row, in m-tile mt (selects, no branch).
template <class T>
__device__ __forceinline__ void mask_m_tile(Scores<T>& s, int mt, const BlockTile<T>& tile,
                                            const Mask<T::kMask>& mask, int col_begin) {
    const int kGroup = T::kPackGqa ? tile.group : 1;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int row = (tile.row_begin + tile.warp_row + mt * 16 + h * 8 + tile.quad_row) / kGroup;
        const int first = mask.col_begin(row);
        const int end = mask.col_end(row);
#pragma unroll
        for (int nt = 0; nt < T::kNTiles; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int col = col_begin + nt * 8 + tile.quad_col * 2 + e;
                if (col < first || col >= end) s[mt][nt][2 * h + e] = neg_inf();
            }
    }
}

// The same over every m-tile: only blocks that cross a mask edge or the end of the keys.
template <class T>
__device__ __forceinline__ void mask_scores(Scores<T>& s, const BlockTile<T>& tile, const Mask<T::kMask>& mask,
                                            int col_begin) {
#pragma unroll
    for (int mt = 0; mt < T::kMTiles; ++mt) mask_m_tile<T>(s, mt, tile, mask, col_begin);
}

}  // namespace portable
}  // namespace fa4
