// How fast can an H200's SMs pull bytes from L2 by bulk async copies (the producer's
// path for K/V), with and without multicast to a cluster of two? One thread per block
// keeps STAGES copies of CHUNK bytes in flight into shared memory; nothing reads them.
// On the GPU host: nvcc -O3 -std=c++17 -arch=sm_90a -o /tmp/l2bw bench/l2bw.cu && /tmp/l2bw
// (results and what they say: bench/NOTES.md, "What bounds the short cells").
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void arm(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void wait(uint32_t bar, uint32_t parity) {
    asm volatile("{\n.reg .pred p;\nW: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@!p bra W;\n}" ::"r"(bar), "r"(parity) : "memory");
}
__device__ __forceinline__ void copy(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}
__device__ __forceinline__ void copy_mc(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar, uint16_t mask) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1], %2, [%3], %4;"
                 ::"r"(dst), "l"(src), "r"(bytes), "r"(bar), "h"(mask) : "memory");
}
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.aligned;\nbarrier.cluster.wait.aligned;" ::: "memory");
}

template <int CHUNK, int STAGES, bool MCAST>
__device__ void body(const char* src, size_t region, int iters) {
    extern __shared__ __align__(1024) char buf[];
    __shared__ __align__(8) uint64_t full[STAGES];
    uint32_t rank = 0;
    if (MCAST) asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(&full[s])));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    if (MCAST) cluster_sync(); else __syncthreads();
    if (threadIdx.x == 0) {
        const int group = MCAST ? blockIdx.x / 2 : blockIdx.x;
        const size_t base = (size_t(group) * 7919 * CHUNK) % region;
        auto issue = [&](int s, int i) {
            const uint32_t bar = smem_u32(&full[s]);
            arm(bar, CHUNK);
            const char* at = src + (base + size_t(i) * CHUNK) % region;
            const uint32_t dst = smem_u32(buf + s * CHUNK);
            if (MCAST) {
                copy_mc(dst + rank * (CHUNK / 2), at + rank * (CHUNK / 2), CHUNK / 2, bar, 0x3);
            } else {
                copy(dst, at, CHUNK, bar);
            }
        };
        for (int i = 0; i < STAGES; ++i) issue(i, i);
        for (int i = STAGES; i < iters + STAGES; ++i) {
            const int s = i % STAGES;
            wait(smem_u32(&full[s]), ((i / STAGES) - 1) & 1);
            if (i < iters) issue(s, i);
        }
    }
    __syncwarp();
    if (MCAST) cluster_sync();
}

template <int CHUNK, int STAGES>
__global__ void __launch_bounds__(32) plain(const char* src, size_t region, int iters) { body<CHUNK, STAGES, false>(src, region, iters); }
template <int CHUNK, int STAGES>
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(32) mcast(const char* src, size_t region, int iters) { body<CHUNK, STAGES, true>(src, region, iters); }

template <class K>
void run(const char* name, K kernel, int blocks, int smem, const char* src, size_t region, int iters, int chunk) {
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
    for (int w = 0; w < 3; ++w) kernel<<<blocks, 32, smem>>>(src, region, iters);
    cudaEventRecord(a);
    const int reps = 10;
    for (int r = 0; r < reps; ++r) kernel<<<blocks, 32, smem>>>(src, region, iters);
    cudaEventRecord(b); cudaEventSynchronize(b);
    float ms; cudaEventElapsedTime(&ms, a, b);
    cudaError_t e = cudaGetLastError();
    const double bytes = double(blocks) * iters * chunk * reps;  // bytes landed in shared memory
    printf("%-34s blocks %4d region %9zu KiB: %.2f TB/s into smem%s\n", name, blocks, region >> 10, bytes / (ms * 1e-3) / 1e12,
           e == cudaSuccess ? "" : cudaGetErrorString(e));
}

int main() {
    int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    int l2; cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0);
    printf("SMs %d, L2 %d KiB\n", sms, l2 >> 10);
    char* src; size_t big = size_t(2) << 30; cudaMalloc(&src, big); cudaMemset(src, 1, big);
    const int it = 4000;
    for (size_t region : {size_t(256) << 10, size_t(16) << 20, size_t(2) << 30}) {
        const int iters = region > (size_t(1) << 30) ? 1000 : it;
        run("32K x4 per SM", plain<32768, 4>, sms, 4 * 32768, src, region, iters, 32768);
        run("16K x8 per SM", plain<16384, 8>, sms, 8 * 16384, src, region, iters, 16384);
        run("32K x4, 2 blocks per SM", plain<32768, 4>, 2 * sms, 4 * 32768, src, region, iters, 32768);
        run("32K x4 multicast to 2 (cluster)", mcast<32768, 4>, sms, 4 * 32768, src, region, iters, 32768);
        run("16K x8 multicast to 2 (cluster)", mcast<16384, 8>, sms, 8 * 16384, src, region, iters, 16384);
    }
    return 0;
}
