// Which keys a query may see. Written once here and used by every template: a template
// asks which key blocks to visit, whether a block needs per-element masking, and where a
// row's visible keys end; how it walks its own register fragments is its business.
#pragma once

#include "fa4/common/types.cuh"

namespace fa4 {

enum class MaskKind { None = 0, Causal = 1, Local = 2 };

// Query `row` sees the keys [col_begin(row), col_end(row)). Causal and local masks are
// aligned bottom-right (FlashAttention's convention): the diagonal of query `row` is key
// `row + seqlen_k - seqlen_q`, so with a cached prefix the last query sees every key, and
// with seqlen_q > seqlen_k the first queries may see none (their output is 0 and their
// LSE -inf). Both bounds are non-decreasing in `row`, which the block-level questions
// below rely on.
template <MaskKind kMask>
struct Mask {
    int seqlen_q;
    int seqlen_k;
    int window_left;   // Local only; -1 = unbounded
    int window_right;  // Local only; -1 = unbounded

    __device__ __forceinline__ int diagonal(int row) const { return row + seqlen_k - seqlen_q; }

    __device__ __forceinline__ int col_begin(int row) const {
        if constexpr (kMask == MaskKind::Local) {
            return window_left < 0 ? 0 : imin(seqlen_k, imax(0, diagonal(row) - window_left));
        } else {
            return 0;
        }
    }

    __device__ __forceinline__ int col_end(int row) const {
        if constexpr (kMask == MaskKind::Causal) {
            return imin(seqlen_k, imax(0, diagonal(row) + 1));
        } else if constexpr (kMask == MaskKind::Local) {
            return window_right < 0 ? seqlen_k : imin(seqlen_k, imax(0, diagonal(row) + window_right + 1));
        } else {
            return seqlen_k;
        }
    }

    // Key blocks [n_block_begin, n_block_end) hold every key that query rows
    // [row_begin, row_end) see; rows at or past seqlen_q are padding and see nothing.
    __device__ __forceinline__ int n_block_end(int row_begin, int row_end, int block_n) const {
        const int last_row = imin(row_end, seqlen_q) - 1;
        if (last_row < row_begin) return 0;
        return ceil_div(col_end(last_row), block_n);
    }

    __device__ __forceinline__ int n_block_begin(int row_begin, int block_n) const {
        return col_begin(row_begin) / block_n;
    }

    // Whether any key of [col_begin_tile, col_end_tile) is hidden from any row of
    // [row_begin, row_last]: then the block needs per-element masking, otherwise none.
    __device__ __forceinline__ bool block_needs_mask(int row_begin, int row_last, int col_begin_tile,
                                                     int col_end_tile) const {
        return col_end_tile > col_end(row_begin) || col_begin_tile < col_begin(row_last);
    }

    // Whether any row of [row_first, row_last] sees any key of [col_begin_tile,
    // col_end_tile). Rows at or past seqlen_q are padding and see nothing.
    __device__ __forceinline__ bool block_visible(int row_first, int row_last, int col_begin_tile,
                                                  int col_end_tile) const {
        return row_first < seqlen_q && col_begin_tile < col_end(imin(row_last, seqlen_q - 1)) &&
               col_end_tile > col_begin(row_first);
    }
};

}  // namespace fa4
