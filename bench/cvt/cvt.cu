// Conversion throughput probe: does packing P to bf16 (cvt.rn.bf16x2.f32, SASS
// F2FP.BF16.F32.PACK_AB) share the MUFU's 16 lanes per clock, and what does a byte
// permute (PRMT, truncation) cost instead? Each thread runs 8 independent chains.
typedef unsigned int u32;
#define CHAINS 8
#define ITERS 512
__device__ __forceinline__ float as_f(u32 u) { return __uint_as_float(u); }
extern "C" __global__ void ex2_only(float* out, float seed) {
    float x[CHAINS];
    for (int c = 0; c < CHAINS; ++c) x[c] = -seed * (threadIdx.x + c);
    for (int i = 0; i < ITERS; ++i)
#pragma unroll
        for (int c = 0; c < CHAINS; ++c) asm volatile("ex2.approx.ftz.f32 %0, %0;" : "+f"(x[c]));
    float s = 0; for (int c = 0; c < CHAINS; ++c) s += x[c];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
extern "C" __global__ void cvt_only(float* out, float seed) {
    float x[CHAINS];
    for (int c = 0; c < CHAINS; ++c) x[c] = -seed * (threadIdx.x + c);
    for (int i = 0; i < ITERS; ++i)
#pragma unroll
        for (int c = 0; c < CHAINS; ++c) {
            u32 u;
            asm volatile("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(u) : "f"(x[c]), "f"(seed));
            x[c] = as_f(u);
        }
    float s = 0; for (int c = 0; c < CHAINS; ++c) s += x[c];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
extern "C" __global__ void ex2_cvt(float* out, float seed) {
    float x[CHAINS];
    for (int c = 0; c < CHAINS; ++c) x[c] = -seed * (threadIdx.x + c);
    for (int i = 0; i < ITERS; ++i)
#pragma unroll
        for (int c = 0; c < CHAINS; ++c) {
            u32 u;
            asm volatile("ex2.approx.ftz.f32 %0, %0;" : "+f"(x[c]));
            asm volatile("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(u) : "f"(x[c]), "f"(seed));
            x[c] = as_f(u);
        }
    float s = 0; for (int c = 0; c < CHAINS; ++c) s += x[c];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
extern "C" __global__ void prmt_only(float* out, float seed) {
    u32 x[CHAINS];
    for (int c = 0; c < CHAINS; ++c) x[c] = __float_as_uint(-seed * (threadIdx.x + c));
    const u32 y = __float_as_uint(seed);
    for (int i = 0; i < ITERS; ++i)
#pragma unroll
        for (int c = 0; c < CHAINS; ++c) asm volatile("prmt.b32 %0, %0, %1, 0x7632;" : "+r"(x[c]) : "r"(y));
    u32 s = 0; for (int c = 0; c < CHAINS; ++c) s ^= x[c];
    out[blockIdx.x * blockDim.x + threadIdx.x] = __uint_as_float(s);
}
extern "C" __global__ void ex2_prmt(float* out, float seed) {
    float x[CHAINS];
    for (int c = 0; c < CHAINS; ++c) x[c] = -seed * (threadIdx.x + c);
    const u32 y = __float_as_uint(seed);
    for (int i = 0; i < ITERS; ++i)
#pragma unroll
        for (int c = 0; c < CHAINS; ++c) {
            u32 u;
            asm volatile("ex2.approx.ftz.f32 %0, %0;" : "+f"(x[c]));
            asm volatile("prmt.b32 %0, %1, %2, 0x7632;" : "=r"(u) : "r"(__float_as_uint(x[c])), "r"(y));
            x[c] = as_f(u);
        }
    float s = 0; for (int c = 0; c < CHAINS; ++c) s += x[c];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
extern "C" __global__ void ffma_only(float* out, float seed) {
    float x[CHAINS];
    for (int c = 0; c < CHAINS; ++c) x[c] = -seed * (threadIdx.x + c);
    for (int i = 0; i < ITERS; ++i)
#pragma unroll
        for (int c = 0; c < CHAINS; ++c) asm volatile("fma.rn.f32 %0, %0, %1, %1;" : "+f"(x[c]) : "f"(seed));
    float s = 0; for (int c = 0; c < CHAINS; ++c) s += x[c];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
