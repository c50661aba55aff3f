// K/V tile loads shared by both Hopper schedules: cp.async by a group of threads into
// wgmma's swizzled layout, from a strided sequence or through a page table.
#pragma once

#include "fa4/common/seqlen.cuh"
#include "fa4/common/tile_copy.cuh"

namespace fa4 {
namespace hopper {

// Keys key_begin .. key_begin + kBlockN of one K or V head into `slot`, rows past `valid`
// zero-filled. Paged K/V: pages of one key are looked up once per row (load_paged), pages
// shorter than a tile row by row, pages of whole tiles in one strided copy.
template <bool kPaged, int kBlockN, class Copy>
__device__ __forceinline__ void load_kv(const Copy& copy, u32 slot, const u16* gmem, i64 row_stride,
                                        i64 page_stride, const PageTable& pages, int key_begin, int valid) {
    if constexpr (kPaged) {
        if (pages.page_size == 1) {
            copy.load_paged(slot, gmem, copy.locate(pages, key_begin, valid), page_stride, valid);
            return;
        }
        if (pages.page_size % kBlockN != 0) {
            copy.load_rows(slot, gmem, [&](int r) {
                return gmem + pages.row_offset(key_begin + r, page_stride, row_stride);
            }, valid);
            return;
        }
    }
    load_kv_tile<kPaged, kBlockN>(copy, slot, gmem, row_stride, page_stride, pages, key_begin, valid);
}

// The same tile by the warp-specialised producer, which setmaxnreg leaves few registers:
// a loop of 16-byte copies (two chunks in flight per thread) that keeps no per-chunk
// address live across tiles. Row r of the tile starts at row_ptr(r), asked only for
// rows < valid; the rest are zero-filled.
template <int kRows, class Layout, int kThreads, class RowPtr>
__device__ __forceinline__ void producer_copy(u32 smem_tile, RowPtr row_ptr, const u16* any_row, int valid, int tid) {
    constexpr int kChunksPerRow = Layout::kCols / 8;
    constexpr int kChunks = kRows * kChunksPerRow;
#pragma unroll 2
    for (int chunk = tid; chunk < kChunks; chunk += kThreads) {
        const int r = chunk / kChunksPerRow;
        const int c = (chunk % kChunksPerRow) * 8;
        const bool ok = r < valid;
        cp_async_16(smem_tile + u32(Layout::offset(r, c)) * 2, ok ? row_ptr(r) + c : any_row, ok);
    }
}

// The page and the row within it of each of a tile's keys key_begin .. + kBlockN (below
// `valid`), as pairs of 32-bit words at `page_rows` in shared memory, for
// producer_load_kv's copies of K and V. Each key is looked up once a tile: a 16-byte copy
// that looked up its own row waited on that table load and division before it could
// issue, 8 to 32 of them a row. The caller meets the other threads before the copies
// read them, and after its last copies read the previous tile's.
template <int kBlockN, int kThreads>
__device__ __forceinline__ void producer_find_pages(u32 page_rows, const PageTable& pages, int key_begin, int valid,
                                                    int tid) {
    for (int r = tid; r < kBlockN; r += kThreads) {
        const PageTable::Row at = r < valid ? pages.locate(key_begin + r) : PageTable::Row{0, 0};
        asm volatile("st.shared.v2.u32 [%0], {%1, %2};\n" ::"r"(page_rows + 8 * r), "r"(at.page), "r"(at.row) : "memory");
    }
}

// Keys key_begin .. key_begin + kBlockN of one K or V head by the producer (paged: the
// pages producer_find_pages put at `page_rows`).
template <bool kPaged, int kBlockN, class Layout, int kThreads>
__device__ __forceinline__ void producer_load_kv(u32 slot, const u16* gmem, i64 row_stride, i64 page_stride,
                                                 u32 page_rows, int key_begin, int valid, int tid) {
    if constexpr (kPaged) {
        producer_copy<kBlockN, Layout, kThreads>(slot, [&](int r) {
            int page, row;
            asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(page), "=r"(row) : "r"(page_rows + 8 * r) : "memory");
            return gmem + i64(page) * page_stride + i64(row) * row_stride;
        }, gmem, valid, tid);
    } else {
        const u16* const tile = gmem + i64(key_begin) * row_stride;
        producer_copy<kBlockN, Layout, kThreads>(slot, [&](int r) { return tile + r * row_stride; }, gmem, valid,
                                                 tid);
    }
}

}  // namespace hopper
}  // namespace fa4
