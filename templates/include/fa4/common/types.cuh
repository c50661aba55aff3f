// Basic types. Kernels compile under NVRTC with no CUDA or C++ standard headers, so
// this file spells out the few things they need.
#pragma once

namespace fa4 {

using u16 = unsigned short;
using u32 = unsigned int;
using i64 = long long;
using u64 = unsigned long long;

// Element types of Q/K/V/O. Only their bit width matters in memory; arithmetic goes
// through the PTX instructions chosen by `kIsBf16`.
struct bf16 {
    u16 bits;
    static constexpr bool kIsBf16 = true;
};
struct fp16 {
    u16 bits;
    static constexpr bool kIsBf16 = false;
};

// 16 bytes: the unit of every vectorised global and shared-memory copy.
struct alignas(16) Vec16 {
    u32 x, y, z, w;
};

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

template <int A, int B>
struct CeilDiv {
    static constexpr int value = (A + B - 1) / B;
};

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000u); }

__device__ __forceinline__ int ceil_div(int a, int b) { return (a + b - 1) / b; }
__device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }
__device__ __forceinline__ int imax(int a, int b) { return a > b ? a : b; }

}  // namespace fa4
