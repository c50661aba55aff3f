// MUFU throughput probe: f32 vs packed f16x2/bf16x2 forms of tanh and ex2.
typedef unsigned int u32;
#define CHAINS 8
#define ITERS 512
extern "C" __global__ void tanh_f32(float* out, float seed) {
    float x[CHAINS];
    for (int c = 0; c < CHAINS; ++c) x[c] = seed * (threadIdx.x + c);
    for (int i = 0; i < ITERS; ++i)
#pragma unroll
        for (int c = 0; c < CHAINS; ++c) asm volatile("tanh.approx.f32 %0, %0;" : "+f"(x[c]));
    float s = 0; for (int c = 0; c < CHAINS; ++c) s += x[c];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
extern "C" __global__ void tanh_f16x2(float* out, float seed) {
    u32 x[CHAINS];
    for (int c = 0; c < CHAINS; ++c) { float f = seed * (threadIdx.x + c); asm("cvt.rn.f16x2.f32 %0, %1, %1;" : "=r"(x[c]) : "f"(f)); }
    for (int i = 0; i < ITERS; ++i)
#pragma unroll
        for (int c = 0; c < CHAINS; ++c) asm volatile("tanh.approx.f16x2 %0, %0;" : "+r"(x[c]));
    u32 s = 0; for (int c = 0; c < CHAINS; ++c) s ^= x[c];
    out[blockIdx.x * blockDim.x + threadIdx.x] = __int_as_float(s);
}
extern "C" __global__ void tanh_bf16x2(float* out, float seed) {
    u32 x[CHAINS];
    for (int c = 0; c < CHAINS; ++c) { float f = seed * (threadIdx.x + c); asm("cvt.rn.bf16x2.f32 %0, %1, %1;" : "=r"(x[c]) : "f"(f)); }
    for (int i = 0; i < ITERS; ++i)
#pragma unroll
        for (int c = 0; c < CHAINS; ++c) asm volatile("tanh.approx.bf16x2 %0, %0;" : "+r"(x[c]));
    u32 s = 0; for (int c = 0; c < CHAINS; ++c) s ^= x[c];
    out[blockIdx.x * blockDim.x + threadIdx.x] = __int_as_float(s);
}
extern "C" __global__ void ex2_f32(float* out, float seed) {
    float x[CHAINS];
    for (int c = 0; c < CHAINS; ++c) x[c] = -seed * (threadIdx.x + c);
    for (int i = 0; i < ITERS; ++i)
#pragma unroll
        for (int c = 0; c < CHAINS; ++c) asm volatile("ex2.approx.ftz.f32 %0, %0;" : "+f"(x[c]));
    float s = 0; for (int c = 0; c < CHAINS; ++c) s += x[c];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
extern "C" __global__ void ex2_f16x2(float* out, float seed) {
    u32 x[CHAINS];
    for (int c = 0; c < CHAINS; ++c) { float f = -seed * (threadIdx.x + c); asm("cvt.rn.f16x2.f32 %0, %1, %1;" : "=r"(x[c]) : "f"(f)); }
    for (int i = 0; i < ITERS; ++i)
#pragma unroll
        for (int c = 0; c < CHAINS; ++c) asm volatile("ex2.approx.f16x2 %0, %0;" : "+r"(x[c]));
    u32 s = 0; for (int c = 0; c < CHAINS; ++c) s ^= x[c];
    out[blockIdx.x * blockDim.x + threadIdx.x] = __int_as_float(s);
}
extern "C" __global__ void ex2_bf16x2(float* out, float seed) {
    u32 x[CHAINS];
    for (int c = 0; c < CHAINS; ++c) { float f = -seed * (threadIdx.x + c); asm("cvt.rn.bf16x2.f32 %0, %1, %1;" : "=r"(x[c]) : "f"(f)); }
    for (int i = 0; i < ITERS; ++i)
#pragma unroll
        for (int c = 0; c < CHAINS; ++c) asm volatile("ex2.approx.ftz.bf16x2 %0, %0;" : "+r"(x[c]));
    u32 s = 0; for (int c = 0; c < CHAINS; ++c) s ^= x[c];
    out[blockIdx.x * blockDim.x + threadIdx.x] = __int_as_float(s);
}
// Accuracy: tanh f16x2 and f32 approx over a range, written out for the host.
extern "C" __global__ void tanh_acc(const float* in, float* out32, float* out16, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = in[i], y; u32 h;
    asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
    out32[i] = y;
    asm("cvt.rn.f16x2.f32 %0, %1, %1;" : "=r"(h) : "f"(x));
    asm("tanh.approx.f16x2 %0, %0;" : "+r"(h));
    float lo; asm("{.reg .f16 a, b; mov.b32 {a, b}, %1; cvt.f32.f16 %0, a;}" : "=f"(lo) : "r"(h));
    out16[i] = lo;
}
