// FP8 (e4m3) on Hopper: the element type and the PTX its kernels add (sm_90a).
#pragma once

#include "fa4/common/types.cuh"

namespace fa4 {

// FP8 (e4m3) Q, K and V; P goes to the PV GEMM in e4m3 too, O comes out in bf16.
struct e4m3 {
    unsigned char bits;
    static constexpr bool kIsBf16 = true;  // O's type
};

// Whether an element type is FP8 (the 16-bit ones are not).
template <class Element>
struct IsFp8 {
    static constexpr bool value = false;
};
template <>
struct IsFp8<e4m3> {
    static constexpr bool value = true;
};

// Four f32 -> one b32 of four e4m3 bytes (round to nearest even, saturating at 448), `b0`
// in the low byte. Each cvt packs two: its first operand into the high half.
__device__ __forceinline__ u32 pack4_e4m3(float b0, float b1, float b2, float b3) {
    u32 r;
    asm("{\n.reg .b16 lo, hi;\n"
        "cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n"
        "cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n"
        "mov.b32 %0, {lo, hi};\n}\n"
        : "=r"(r)
        : "f"(b0), "f"(b1), "f"(b2), "f"(b3));
    return r;
}

// Bytes of {b, a} picked by the four selector nibbles of `sel` (PTX prmt): byte i of the
// result is byte (sel >> 4i) & 7 of the pair, a's bytes 0 to 3 and b's 4 to 7.
template <u32 kSel>
__device__ __forceinline__ u32 byte_perm(u32 a, u32 b) {
    u32 r;
    asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(r) : "r"(a), "r"(b), "n"(kSel));
    return r;
}

// Four 8x8 matrices of 16-bit values to shared memory (stmatrix, sm_90): lane l holds row
// l / 4, columns 2 (l % 4) and the next, of matrix i in r[i]; lanes 8i .. 8i + 7 give the
// addresses of matrix i's rows.
__device__ __forceinline__ void stmatrix_x4(u32 smem_addr, const u32 (&r)[4]) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(smem_addr), "r"(r[0]),
                 "r"(r[1]), "r"(r[2]), "r"(r[3])
                 : "memory");
}

}  // namespace fa4
