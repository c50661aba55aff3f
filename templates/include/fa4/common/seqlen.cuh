// Where one sequence of a batch lives. Dense batches ([batch, seqlen, heads, d] with
// batch strides), varlen batches (packed [total, heads, d] with cu_seqlens, FlashAttention's
// varlen layout), a cap on the keys used (seqused_k) and paged K/V all reduce to the same
// few numbers per sequence, read once per thread block. Every template starts here.
#pragma once

#include "fa4/common/params.cuh"

namespace fa4 {

struct SeqView {
    int seqlen_q;    // queries of this sequence
    int seqlen_k;    // keys they attend to
    i64 q_offset;    // element offsets of the sequence's first row in Q, O, K and V
    i64 o_offset;
    i64 k_offset;    // 0 for paged K/V: pages carry their own addresses
    i64 v_offset;
    i64 lse_offset;  // element offset of its first row in LSE, head 0
};

// Lengths come from the device arrays when given; they are clamped so that no read can
// leave the tensors a caller described on the host: at most `seqlen_q` (max_seqlen_q,
// the grid's reach) queries, never more keys than a packed sequence holds or than a
// page-table row can address.
template <bool kPaged>
__device__ __forceinline__ SeqView seq_view(const FwdParams& p, int b) {
    SeqView s;
    if (p.cu_seqlens_q != nullptr) {
        const int start = p.cu_seqlens_q[b];
        s.seqlen_q = imin(p.cu_seqlens_q[b + 1] - start, p.seqlen_q);
        s.q_offset = i64(start) * p.q_row_stride;
        s.o_offset = i64(start) * p.o_row_stride;
        s.lse_offset = start;
    } else {
        s.seqlen_q = p.seqlen_q;
        s.q_offset = b * p.q_batch_stride;
        s.o_offset = b * p.o_batch_stride;
        s.lse_offset = b * p.lse_batch_stride;
    }
    int keys;
    if constexpr (kPaged) {
        keys = p.page_table_batch_stride * p.page_size;
        s.k_offset = 0;
        s.v_offset = 0;
    } else if (p.cu_seqlens_k != nullptr) {
        const int start = p.cu_seqlens_k[b];
        keys = p.cu_seqlens_k[b + 1] - start;
        s.k_offset = i64(start) * p.k_row_stride;
        s.v_offset = i64(start) * p.v_row_stride;
    } else {
        keys = p.seqlen_k;
        s.k_offset = b * p.k_batch_stride;
        s.v_offset = b * p.v_batch_stride;
    }
    if (p.seqused_k != nullptr) {
        keys = imin(keys, p.seqused_k[b]);
    } else if constexpr (kPaged) {
        keys = imin(keys, p.seqlen_k);
    }
    s.seqlen_q = imax(0, s.seqlen_q);
    s.seqlen_k = imax(0, keys);
    return s;
}

// K/V rows through a page table: key j of a sequence is row j % page_size of page
// pages[j / page_size], pages being the sequence's row of the table.
struct PageTable {
    const int* pages;
    int page_size;

    // The page that holds `key` and its row there.
    struct Row {
        int page, row;
    };
    __device__ __forceinline__ Row locate(int key) const { return {pages[key / page_size], key % page_size}; }

    __device__ __forceinline__ i64 row_offset(int key, i64 page_stride, i64 row_stride) const {
        const Row at = locate(key);
        return i64(at.page) * page_stride + i64(at.row) * row_stride;
    }
};

}  // namespace fa4
