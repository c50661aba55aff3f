// Which keys a query may see. Written once here and used by every template: a template
// asks which key blocks to visit, whether a block needs per-element masking, and where a
// row's visible keys end; how it walks its own register fragments is its business.
#pragma once

#include "fa4/common/types.cuh"

namespace fa4 {

enum class MaskKind { None = 0, Causal = 1 };

template <MaskKind kMask>
struct Mask {
    int seqlen_q;
    int seqlen_k;

    // Query `row` sees keys [0, col_end(row)). Causal is aligned bottom-right
    // (FlashAttention's convention): key j is visible when j <= row + seqlen_k - seqlen_q,
    // so with a cached prefix the last query sees every key, and with seqlen_q > seqlen_k
    // the first seqlen_q - seqlen_k queries see none (their output is 0, LSE -inf).
    // Non-decreasing in `row`, which the block-level questions below rely on.
    __device__ __forceinline__ int col_end(int row) const {
        if constexpr (kMask == MaskKind::Causal) {
            return imin(seqlen_k, imax(0, row + 1 + seqlen_k - seqlen_q));
        } else {
            return seqlen_k;
        }
    }

    // Key blocks [0, n_block_end) hold every key that query rows [row_begin, row_end) see;
    // rows at or past seqlen_q are padding and see nothing.
    __device__ __forceinline__ int n_block_end(int row_begin, int row_end, int block_n) const {
        const int last_row = imin(row_end, seqlen_q) - 1;
        if (last_row < row_begin) return 0;
        return ceil_div(col_end(last_row), block_n);
    }

    // Whether any key in [col_begin, col_end_tile) is hidden from any row >= row_begin of
    // the block: then the block needs per-element masking, otherwise none at all.
    __device__ __forceinline__ bool block_needs_mask(int row_begin, int col_end_tile) const {
        return col_end_tile > col_end(row_begin);
    }
};

}  // namespace fa4
