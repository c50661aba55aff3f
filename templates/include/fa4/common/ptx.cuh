// Thin wrappers over the PTX instructions of the sm80+ (mma.sync) path.
//
// Fragment layouts of mma.m16n8k16 (g = lane / 4, t = lane % 4), which every caller
// relies on:
//   A 16x16 (4 x b32): a0 (row g,   k 2t..2t+1)  a1 (row g+8, k 2t..2t+1)
//                      a2 (row g,   k 2t+8..)    a3 (row g+8, k 2t+8..)
//   B 16x8  (2 x b32): b0 (k 2t..2t+1, col g)    b1 (k 2t+8.., col g)
//   C 16x8  (4 x f32): c0,c1 (row g, col 2t..2t+1)   c2,c3 (row g+8, col 2t..2t+1)
// so the C fragments of two neighbouring n-tiles, packed in pairs, are exactly the A
// fragment of the next MMA: P never leaves registers.
#pragma once

#include "fa4/common/types.cuh"

namespace fa4 {

__device__ __forceinline__ u32 smem_u32(const void* p) {
    return static_cast<u32>(__cvta_generic_to_shared(p));
}

// ---- cp.async: global -> shared, 16 bytes, bypassing L1 -------------------------------
// With `valid == false` nothing is read and the 16 bytes are zero-filled, so rows past
// the end of a sequence load as zeros without a branch.
__device__ __forceinline__ void cp_async_16(u32 smem_dst, const void* gmem_src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_dst),
                 "l"(gmem_src), "r"(valid ? 16 : 0));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

// Wait until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// ---- ldmatrix: four 8x8 b16 matrices, one row address per lane ------------------------
__device__ __forceinline__ void ldmatrix_x4(u32 (&r)[4], u32 smem_addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr));
}

// Transposed: lane receives column g, rows 2t..2t+1 of each matrix (a B fragment from a
// row-major [k][n] tile such as V).
__device__ __forceinline__ void ldmatrix_x4_trans(u32 (&r)[4], u32 smem_addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr));
}

// ---- mma.sync m16n8k16, f32 accumulate: D += A * B -------------------------------------
template <bool kIsBf16>
__device__ __forceinline__ void mma_16816(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    if constexpr (kIsBf16) {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
            "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
            "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
}

// ---- conversions -------------------------------------------------------------------------
// Two f32 -> one b32 holding two 16-bit values, `lo` in the low half (the lower column).
template <bool kIsBf16>
__device__ __forceinline__ u32 pack2(float lo, float hi) {
    u32 r;
    if constexpr (kIsBf16) {
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    } else {
        asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    }
    return r;
}

// ---- special functions -------------------------------------------------------------------
// 2^x on the MUFU unit. ex2.approx(-inf) = +0, which the masked softmax relies on.
__device__ __forceinline__ float exp2_approx(float x) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(x));
    return r;
}

// tanh on the MUFU unit (sm75+), for logit soft-capping.
__device__ __forceinline__ float tanh_approx(float x) {
    float r;
    asm("tanh.approx.f32 %0, %1;\n" : "=f"(r) : "f"(x));
    return r;
}

// ---- warp reductions over the four lanes that share a row of a C fragment ---------------
__device__ __forceinline__ float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
    return x;
}

__device__ __forceinline__ float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    x += __shfl_xor_sync(0xffffffffu, x, 2);
    return x;
}

}  // namespace fa4
