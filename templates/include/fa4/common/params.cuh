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
    // contiguous; LSE is [batch, heads_q, seqlen_q], contiguous.
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
};

static_assert(sizeof(FwdParams) == 184, "FwdParams must match fa4_spec::FwdParams");

}  // namespace fa4
