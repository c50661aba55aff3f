// Hopper's warpgroup MMA (wgmma.mma_async, sm_90a) and the shared-memory layout it reads.
//
// A warpgroup (4 warps, 128 threads) computes a 64 x N tile: warp w of the group owns
// rows 16w .. 16w+15, and within a warp the accumulator is laid out exactly like
// mma.m16n8k16's C fragments, one per 8 columns (ptx.cuh): d[4j + e] is row
// g + 8 * (e / 2), column 8j + 2t + e % 2 (g = lane / 4, t = lane % 4). So the masking
// and online softmax written for mma.sync fragments apply unchanged, and P packed from
// S is the A operand of the PV GEMM straight from registers (A fragments as mma.sync's).
//
// Operands in shared memory are described by 64-bit descriptors over tiles in the
// 128-byte-swizzle canonical layout (WgmmaLayout): columns in blocks of 64 16-bit
// elements, each block holding every row as one 128-byte line, 16-byte chunk c of row r
// at chunk c ^ (r % 8); blocks 1024-byte aligned. Q and K are read K-major (rows of the
// tile along M or N, head dim along K); V is read MN-major (keys along K, head dim along
// N) with the transpose bit, so no tile is ever transposed in memory.
#pragma once

#include "fa4/common/types.cuh"

namespace fa4 {
namespace hopper {

template <int kRows_, int kCols_>
struct WgmmaLayout {
    static constexpr int kRows = kRows_;
    static constexpr int kCols = kCols_;
    static constexpr int kPitch = kCols;  // TileCopy's interface; rows are not kPitch apart here
    static constexpr int kBlockBytes = kRows * 128;  // one 64-column block
    // kCols are the columns copied in and out; the tile spans whole 64-column blocks
    // (its last one padded where kCols is not a multiple of 64, traits.cuh).
    static_assert(kCols % 16 == 0, "whole 16-column k-steps");
    static_assert(kRows % 8 == 0, "swizzle atoms are 8 rows");

    // Element offset of (row, col); col is a multiple of 8 or lies within one chunk.
    __device__ __forceinline__ static int offset(int row, int col) {
        return (col >> 6) * kRows * 64 + row * 64 + ((((col & 63) >> 3) ^ (row & 7)) << 3) + (col & 7);
    }
};

// A shared-memory matrix descriptor: start address, leading- and stride-dimension byte
// offsets (16-byte units), 128-byte swizzle; for the tile at `tile`, `offset` bytes on (a
// multiple of 16). The offset is added to the low word after the rest is composed, so
// the k-steps through one tile share everything but that one add (as the address part
// was masked per step before, the compiler rebuilt each descriptor: about 6 uniform
// instructions per wgmma). Shared addresses stay below 256 KiB: the field never carries.
__device__ __forceinline__ u64 smem_desc(u32 tile, u32 offset, u32 leading_bytes, u32 stride_bytes) {
    const u32 lo = (((tile & 0x3FFFF) >> 4) | ((leading_bytes >> 4) << 16)) + (offset >> 4);
    const u32 hi = (stride_bytes >> 4) | (1u << 30);
    return (u64(hi) << 32) | lo;
}

// K-major operand (Q or K), k-step ks (16 elements of the head dim) of a tile at `tile`:
// 16 elements are 32 bytes into the 128-byte line, every 4 steps the next column block.
// Rows step 8 at a time by 1024 bytes (the stride); the leading offset is unused.
template <class Layout>
__device__ __forceinline__ u64 k_major_desc(u32 tile, int ks) {
    return smem_desc(tile, u32(ks >> 2) * Layout::kBlockBytes + u32(ks & 3) * 32, 16, 1024);
}

// MN-major operand (V): keys 16 ks .. 16 ks + 15 along K (8 rows per 1024 bytes), the
// head dim along N in column blocks kBlockBytes apart (the leading offset).
template <class Layout>
__device__ __forceinline__ u64 mn_major_desc(u32 tile, int ks) {
    return smem_desc(tile, u32(ks) * 16 * 128, Layout::kBlockBytes, 1024);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Writes by ordinary stores and cp.async (the generic proxy) become visible to wgmma's
// reads (the async proxy): each writer fences after its writes land, before the barrier.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Pins registers an in-flight wgmma reads or writes: code that reads the accumulators
// after wgmma_wait, or reuses the A operand's registers, is ordered after this point.
template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_regs(u32 (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

// wgmma.m64nNk16 (k32 for FP8) with f32 accumulators, for the N a kernel uses and its
// element type; the rendered entry point defines ss (A and B in shared memory) and rs (A
// in registers) per N. FP8's B is K-major in both GEMMs (wgmma transposes only 16-bit
// operands), and its A from registers holds, per 32-column step, columns 4t .. 4t + 3
// and 16 + 4t .. 16 + 4t + 3 of rows g and g + 8 (one byte each).
template <int N, class Element>
struct Wgmma;

}  // namespace hopper
}  // namespace fa4
