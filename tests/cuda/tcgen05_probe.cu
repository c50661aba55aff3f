// Calls every wrapper of fa4/blackwell/tcgen05.cuh once, in the order an attention kernel
// would: allocate TMEM, S = Q K^T from shared memory, O += P V with P from TMEM (f16 kind,
// then the f8f6f4 kind), commit to an mbarrier, then each warp loads its lanes of S and
// stores P and O, and warp 0 frees the columns. It is compiled, never run: Q, K and V
// share one tile, and the numbers mean nothing. tests/blackwell.rs prepends the
// descriptors rendered by fa4_gen::render::tcgen05: kQkIdesc, kPvIdesc, kFp8Idesc,
// kKMajorDesc, kMnMajorDesc.
#include "fa4/blackwell/tcgen05.cuh"
#include "fa4/common/ptx.cuh"
#include "fa4/hopper/pipeline.cuh"

using namespace fa4;
using blackwell::MmaKind;

extern "C" __global__ void __launch_bounds__(128) tcgen05_probe(float* out, int first) {
    __shared__ alignas(1024) u16 tile[128 * 64];  // 128 rows of 128 bytes
    __shared__ alignas(8) u64 mma_done;
    __shared__ u32 tmem_base;
    const int warp = threadIdx.x / 32;
    const u32 bar = smem_u32(&mma_done);
    if (threadIdx.x == 0) hopper::mbarrier_init(bar, 1);
    if (warp == 0) {
        blackwell::tmem_alloc<512>(smem_u32(&tmem_base));
        blackwell::tmem_relinquish_alloc_permit();
    }
    blackwell::fence_before_thread_sync();
    __syncthreads();
    blackwell::fence_after_thread_sync();
    const u32 tmem = tmem_base;
    const u32 s = tmem;        // S, f32: columns 0-127
    const u32 p = tmem + 128;  // P, 128 bf16 keys two to a column: 128-191
    const u32 o = tmem + 256;  // O, f32: 256-383

    if (threadIdx.x == 0) {
        const u64 at = smem_u32(tile) >> 4;  // the descriptors' start-address field
        blackwell::mma_ss<MmaKind::F16>(s, kKMajorDesc + at, kKMajorDesc + at, kQkIdesc, first == 0);
        blackwell::mma_ts<MmaKind::F16>(o, p, kMnMajorDesc + at, kPvIdesc, true);
        blackwell::mma_ss<MmaKind::F8f6f4>(s, kKMajorDesc + at, kKMajorDesc + at, kFp8Idesc, false);
        blackwell::mma_ts<MmaKind::F8f6f4>(o, p, kKMajorDesc + at, kFp8Idesc, true);
        blackwell::mma_commit(bar);
    }
    hopper::mbarrier_wait(bar, 0);
    blackwell::fence_after_thread_sync();

    // Warp w reaches lanes 32 (w % 4) .. + 31: one row of S per thread.
    const u32 lanes = u32(32 * (warp % 4));
    u32 a[32], b[16], c[8];
    blackwell::tmem_ld_32x32b(blackwell::tmem_addr(s, lanes, 0), a);
    blackwell::tmem_ld_32x32b(blackwell::tmem_addr(s, lanes, 32), b);
    blackwell::tmem_ld_32x32b(blackwell::tmem_addr(s, lanes, 48), c);
    blackwell::tmem_wait_ld(a, b, c);
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < 32; ++i) sum += __uint_as_float(a[i]);
#pragma unroll
    for (int i = 0; i < 16; ++i) b[i] ^= a[i];
#pragma unroll
    for (int i = 0; i < 8; ++i) c[i] += b[i];
    blackwell::tmem_st_32x32b(blackwell::tmem_addr(p, lanes, 0), a);
    blackwell::tmem_st_32x32b(blackwell::tmem_addr(p, lanes, 32), b);
    blackwell::tmem_st_32x32b(blackwell::tmem_addr(o, lanes, 0), c);
    blackwell::tmem_wait_st();
    out[threadIdx.x] = sum;

    blackwell::fence_before_thread_sync();
    __syncthreads();
    if (warp == 0) {
        blackwell::fence_after_thread_sync();
        blackwell::tmem_dealloc<512>(tmem);
    }
}
