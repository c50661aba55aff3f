// Kernel argument block, mirrored field for field by `fa4_spec::FwdParams` (Rust).
// A kernel receives it by value as `const __grid_constant__ FwdParams`.
#pragma once

#include "fa4/common/types.cuh"

namespace fa4 {

struct FwdParams {
    // Device pointers: Q/K/V/O in the kernel's element type, LSE in f32.
    const void* q;
    const void* k;
    const void* v;
    void* o;
    float* lse;

    // Strides in elements. Tensors are [batch, seqlen, heads, head_dim], last dim
    // contiguous; LSE is [batch, heads_q, seqlen_q] (strides below). With cu_seqlens the
    // tensors are packed [total, heads, head_dim] and LSE [heads_q, total_q]; paged
    // kernels read K/V as [num_pages, page_size, heads_kv, head_dim]. fa4_spec::FwdParams
    // documents every rule.
    i64 q_batch_stride, q_row_stride, q_head_stride;
    i64 k_batch_stride, k_row_stride, k_head_stride;
    i64 v_batch_stride, v_row_stride, v_head_stride;
    i64 o_batch_stride, o_row_stride, o_head_stride;

    int batch;
    int seqlen_q;
    int seqlen_k;
    int heads_q;
    int heads_kv;      // heads_q is a multiple of it (GQA/MQA)
    float softmax_scale;
    float scale_log2;  // softmax_scale * log2(e)
    int window_left;   // local masks: keys before the diagonal a query sees (-1: all)
    int window_right;  // local masks: keys after the diagonal a query sees (-1: all)
    float softcap;     // softcap kernels: scores become softcap * tanh(score / softcap)
    const float* sinks;  // sink kernels: f32 [heads_q] logits joining the denominator

    const int* cu_seqlens_q;  // [batch + 1] or null (dense batch)
    const int* cu_seqlens_k;  // [batch + 1] or null (dense batch)
    const int* seqused_k;     // [batch] keys used per sequence, or null
    const int* page_table;    // paged kernels: page ids, page_table_batch_stride per sequence
    i64 lse_batch_stride, lse_head_stride;
    int page_table_batch_stride;
    int page_size;            // paged kernels: keys per page
};

static_assert(sizeof(FwdParams) == 240, "FwdParams must match fa4_spec::FwdParams");

}  // namespace fa4
