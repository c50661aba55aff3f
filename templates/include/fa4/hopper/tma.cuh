// TMA (the tensor memory accelerator, sm_90): Q/K/V tiles loaded and O tiles stored by
// one thread's instruction, described by tensor maps that the host encodes per call.
#pragma once

#include "fa4/common/params.cuh"

namespace fa4 {
namespace hopper {

// The split tail of an unmasked persistent grid (schedule.cuh): the caller's workspace
// (split.cuh) and the tiles whose keys the blocks share (0: none), set by the launcher.
// Paged K/V: the rows of the K and V maps' boxes over the page pool, 0 where the launcher
// encoded none (the pages' size fits no box: every tile goes by copies).
struct SplitArgs {
    void* workspace;
    int tail;
    int page_box_rows;
};

// An encoded CUtensorMap (opaque to the kernel).
struct alignas(64) TensorMap {
    u64 opaque[16];
};

// The argument block of kernels that load by TMA: the common parameters, then one map
// each over Q, K, V and O as [batch, rows, heads, head_dim] (a packed varlen batch is one
// "batch" of all rows), 128-byte swizzle, boxes of 64 columns x 64 rows (Q, O) or kBlockN
// rows (K, V). Paged K/V: the K and V maps are [page, rows of a page, heads, head_dim]
// over the page pool, in boxes of page_box_rows rows (SplitArgs). Mirrored by
// `fa4_runtime::TmaFwdParams` (Rust).
struct TmaFwdParams {
    FwdParams fwd;
    SplitArgs split;  // in what was padding before the maps: their offsets stay
    TensorMap q_map;
    TensorMap k_map;
    TensorMap v_map;
    TensorMap o_map;
};
static_assert(sizeof(FwdParams) == 240 && sizeof(SplitArgs) == 16 && sizeof(TmaFwdParams) == 768, "TmaFwdParams must match the host's layout");

// FP8 kernels' descales: f32 factors per (sequence, KV head) that dequantise Q, K and V
// (FlashAttention-3's q/k/v_descale, (batch, heads_kv)); a null pointer stands for 1.
struct Descales {
    const float* q;
    const float* k;
    const float* v;
    i64 batch_stride;  // in floats
    i64 head_stride;

    __device__ __forceinline__ float at(const float* factors, int batch, int kv_head) const {
        return factors == nullptr ? 1.f : factors[batch * batch_stride + kv_head * head_stride];
    }
};

// The argument block of FP8 kernels: TMA's, then the descales. Mirrored by
// `fa4_runtime::Fp8TmaFwdParams` (Rust).
struct Fp8TmaFwdParams {
    TmaFwdParams tma;
    Descales descale;
};
static_assert(sizeof(Descales) == 40 && sizeof(Fp8TmaFwdParams) == 832, "Fp8TmaFwdParams must match the host's layout");

__device__ __forceinline__ void tma_prefetch(const TensorMap* map) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<u64>(map)) : "memory");
}

// Arrives on `bar` and adds `bytes` to the transfer it waits for in this phase.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(u32 bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

// One box of the map at coordinates (col, row, head, batch) into shared memory at `dst`
// (1024-byte aligned for the swizzle); its bytes complete the transfer `bar` waits for.
__device__ __forceinline__ void tma_load_4d(u32 dst, const TensorMap* map, u32 bar, int col, int row, int head,
                                            int batch) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
        "[%6];\n" ::"r"(dst),
        "l"(reinterpret_cast<u64>(map)), "r"(col), "r"(row), "r"(head), "r"(batch), "r"(bar)
        : "memory");
}

// A tile of kRows rows x kCols columns: boxes of 64 columns into consecutive column blocks
// of kRows x 128 bytes (WgmmaLayout's), all completing `bar`'s transfer. A last box past
// the map's columns (d96's second) is filled with zeros, and its bytes still count.
template <int kCols>
constexpr int column_boxes() {
    return (kCols + 63) / 64;
}
template <int kCols, int kRows>
__device__ __forceinline__ void tma_load_tile(u32 dst, const TensorMap* map, u32 bar, int row, int head, int batch) {
#pragma unroll
    for (int cb = 0; cb < column_boxes<kCols>(); ++cb) tma_load_4d(dst + cb * kRows * 128, map, bar, cb * 64, row, head, batch);
}

// The same tile into every block of a cluster of kCluster along m: this block (`rank`)
// loads boxes rank, rank + kCluster, .. and multicasts each into the same offset of every
// block's shared memory, completing the transfer of the barrier at `bar`'s offset there.
// Each block's barrier therefore expects the whole tile's bytes.
template <int kCols, int kRows, int kCluster>
__device__ __forceinline__ void tma_load_tile_multicast(u32 dst, const TensorMap* map, u32 bar, int row, int head,
                                                        int batch, u32 rank) {
    const u16 blocks = (1u << kCluster) - 1;
#pragma unroll
    for (int cb = 0; cb < column_boxes<kCols>(); ++cb) {
        if (cb % kCluster != int(rank)) continue;
        asm volatile(
            "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster "
            "[%0], [%1, {%2, %3, %4, %5}], [%6], %7;\n" ::"r"(dst + cb * kRows * 128),
            "l"(reinterpret_cast<u64>(map)), "r"(cb * 64), "r"(row), "r"(head), "r"(batch), "r"(bar), "h"(blocks)
            : "memory");
    }
}

// A K or V tile of the producer's ring: into this block, or with kCluster > 1 this block's
// share of it into every block of the cluster (`rank` this block's place in it).
template <int kCols, int kRows, int kCluster>
__device__ __forceinline__ void tma_load_ring_tile(u32 dst, const TensorMap* map, u32 bar, int row, int head,
                                                   int batch, u32 rank) {
    if constexpr (kCluster > 1) {
        tma_load_tile_multicast<kCols, kRows, kCluster>(dst, map, bar, row, head, batch, rank);
    } else {
        tma_load_tile<kCols, kRows>(dst, map, bar, row, head, batch);
    }
}

// Box `box` of a key tile of kRows rows read through pages: the box's `box_rows` rows of
// one page (`row` onwards) in every 64-column block, at its rows' place in the tile.
template <int kCols, int kRows>
__device__ __forceinline__ void tma_load_page_box(u32 dst, const TensorMap* map, u32 bar, int box, int box_rows, int row,
                                                  int head, int page) {
    const u32 at = dst + u32(box * box_rows) * 128;
#pragma unroll
    for (int cb = 0; cb < column_boxes<kCols>(); ++cb) tma_load_4d(at + cb * kRows * 128, map, bar, cb * 64, row, head, page);
}

// The reverse: a staged tile of kRows rows out to global memory, in one bulk group (the
// map clips a last box past its columns). The threads that wrote the tile fence it for
// the async proxy (fence_proxy_async) and meet before one of them issues this.
template <int kCols, int kRows>
__device__ __forceinline__ void tma_store_tile(u32 src, const TensorMap* map, int row, int head, int batch) {
#pragma unroll
    for (int cb = 0; cb < column_boxes<kCols>(); ++cb) {
        asm volatile(
            "cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%1, %2, %3, %4}], [%5];\n" ::"l"(
                reinterpret_cast<u64>(map)),
            "r"(cb * 64), "r"(row), "r"(head), "r"(batch), "r"(src + cb * kRows * 128)
            : "memory");
    }
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}

// Blocks the issuing thread until its bulk stores have read their shared memory (the
// slot may be written again; the global writes may still be under way).
__device__ __forceinline__ void tma_store_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}

}  // namespace hopper
}  // namespace fa4
