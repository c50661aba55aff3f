// Row-major tile copies between global and shared memory, 16 bytes per thread per step
// (cp.async in, vector stores out), and the per-block scalars a kernel keeps in shared
// memory. Shared by the portable kernel and the Hopper template's cp.async paths, so
// that an edit of the portable kernel's body leaves the Hopper kernels alone.
#pragma once

#include "fa4/common/params.cuh"
#include "fa4/common/ptx.cuh"
#include "fa4/common/seqlen.cuh"
#include "fa4/common/types.cuh"

namespace fa4 {

// How a TileCopy forms its steps' global addresses. A thread's chunks never change, so its
// offsets can be computed once per kernel; the forms trade instructions per step for
// registers held across the main loop.
enum class StepAddress {
    // A 64-bit multiply-add per step from the tile's start: nothing held across the loop,
    // but about 17 instructions per 16-byte copy with the row check.
    kMad64,
    // 32-bit step offsets added to one 64-bit address per thread: few instructions, but
    // ptxas hoists every step's offset out of the main loop (registers the largest
    // accumulator tiles do not have).
    kHoisted32,
    // kHoisted32's offsets, recomputed each tile from a value hidden from the optimiser:
    // about seven instructions per copy (counted in the SASS), two
    // registers held across the loop.
    kOpaque32,
};

// Hides a value from the optimiser so that what is derived from it is recomputed where
// it is used instead of hoisted out of the main loop into registers the accumulators need.
__device__ __forceinline__ u32 opaque(u32 x) {
    asm volatile("" : "+r"(x));
    return x;
}
__device__ __forceinline__ const u16* opaque(const u16* p) {
    asm volatile("" : "+l"(p));
    return p;
}

// Copies a kRows x kCols row-major global tile into shared memory (Layout), 16 bytes per
// cp.async, each step's address formed as kForm says. The host keeps row strides below
// 2^24 elements, so a tile's span fits the 32-bit forms. Rows >= valid_rows are
// zero-filled without touching global memory.
template <int kRows, class Layout, int kThreads, StepAddress kForm = StepAddress::kMad64>
struct TileCopy {
    static constexpr int kCols = Layout::kCols;
    static constexpr int kPitch = Layout::kPitch;
    static constexpr int kChunksPerRow = kCols / 8;
    static constexpr int kChunks = kRows * kChunksPerRow;
    static constexpr int kSteps = CeilDiv<kChunks, kThreads>::value;
    // Each step covers whole rows when the thread count is a multiple of the row's chunks.
    static constexpr bool kWholeRows = kThreads % kChunksPerRow == 0;
    static constexpr int kRowsPerStep = kWholeRows ? kThreads / kChunksPerRow : 0;

    int tid;
    int row;  // first row this thread copies
    int col;  // its column, elements

    __device__ __forceinline__ explicit TileCopy(int tid_) : tid(tid_) {
        row = tid / kChunksPerRow;
        col = (tid % kChunksPerRow) * 8;
    }

    __device__ __forceinline__ void load(u32 smem_tile, const u16* gmem_tile, i64 row_stride,
                                         int valid_rows) const {
        if constexpr (kWholeRows) {
            const u16* const gmem_thread = gmem_tile + row * row_stride + col;
            const u32 step_elems = u32(kRowsPerStep) * u32(row_stride);
#pragma unroll
            for (int step = 0; step < kSteps; ++step) {
                const int r = row + step * kRowsPerStep;
                if (kRows % kRowsPerStep == 0 || r < kRows) {
                    // kOpaque32 knows a whole tile (valid_rows == kRows where the caller
                    // passes the constant) needs no row check.
                    const bool valid =
                        (kForm == StepAddress::kOpaque32 && valid_rows >= kRows) || r < valid_rows;
                    const u16* src;
                    if constexpr (kForm == StepAddress::kHoisted32) {
                        src = valid ? gmem_thread + u32(step) * step_elems : gmem_tile;
                    } else if constexpr (kForm == StepAddress::kOpaque32) {
                        const u16* const thread_base = opaque(gmem_tile + row * row_stride + col);
                        src = valid ? thread_base + u64(step_elems) * u32(step) : gmem_tile;
                    } else {
                        src = gmem_tile + (valid ? r * row_stride + col : 0);
                    }
                    cp_async_16(smem_tile + u32(Layout::offset(r, col)) * 2, src, valid);
                }
            }
        } else {
#pragma unroll
            for (int step = 0; step < kSteps; ++step) {
                const int chunk = step * kThreads + tid;
                if (kChunks % kThreads == 0 || chunk < kChunks) {
                    const int r = chunk / kChunksPerRow;
                    const int c = (chunk % kChunksPerRow) * 8;
                    const bool valid = r < valid_rows;
                    const u16* src = gmem_tile + (valid ? r * row_stride + c : 0);
                    cp_async_16(smem_tile + u32(Layout::offset(r, c)) * 2, src, valid);
                }
            }
        }
    }

    // Pages of one key (SGLang's default): the page of each of this thread's rows, per
    // step, looked up once per tile without a division and used for both K and V.
    struct PagedRows {
        int page[kSteps];
    };

    __device__ __forceinline__ PagedRows locate(const PageTable& pages, int key_begin, int valid_rows) const {
        PagedRows p;
#pragma unroll
        for (int step = 0; step < kSteps; ++step) {
            const int r = (step * kThreads + tid) / kChunksPerRow;
            const bool valid = r < valid_rows && (kChunks % kThreads == 0 || step * kThreads + tid < kChunks);
            p.page[step] = valid ? pages.pages[key_begin + r] : 0;
        }
        return p;
    }

    __device__ __forceinline__ void load_paged(u32 smem_tile, const u16* gmem, const PagedRows& p, i64 page_stride,
                                               int valid_rows) const {
#pragma unroll
        for (int step = 0; step < kSteps; ++step) {
            const int chunk = step * kThreads + tid;
            if (kChunks % kThreads == 0 || chunk < kChunks) {
                const int r = chunk / kChunksPerRow;
                const int c = (chunk % kChunksPerRow) * 8;
                const bool valid = r < valid_rows;
                const u16* src = valid ? gmem + p.page[step] * page_stride + c : gmem;
                cp_async_16(smem_tile + u32(Layout::offset(r, c)) * 2, src, valid);
            }
        }
    }

    // The same copy for rows scattered in memory (pack-GQA's Q): `row_ptr(r)`
    // gives the start of row r and is only asked for rows < valid_rows; the rest are
    // zero-filled from `any_row`, which is never read.
    template <class RowPtr>
    __device__ __forceinline__ void load_rows(u32 smem_tile, const u16* any_row, RowPtr row_ptr,
                                              int valid_rows) const {
#pragma unroll
        for (int step = 0; step < kSteps; ++step) {
            const int chunk = step * kThreads + tid;
            if (kChunks % kThreads == 0 || chunk < kChunks) {
                const int r = chunk / kChunksPerRow;
                const int c = (chunk % kChunksPerRow) * 8;
                const bool valid = r < valid_rows;
                const u16* src = valid ? row_ptr(r) + c : any_row;
                cp_async_16(smem_tile + u32(Layout::offset(r, c)) * 2, src, valid);
            }
        }
    }
};

// One K or V tile (keys key_begin ..) into its ring slot: a strided copy from the
// sequence, or for paged K/V from the one page that holds the tile (pages of a multiple
// of kBlockN keys). Tiles spread over several pages take their rows one by one
// (TileCopy::load_rows, or load_paged for pages of one key).
template <bool kPaged, int kBlockN, class Copy>
__device__ __forceinline__ void load_kv_tile(const Copy& copy, u32 slot, const u16* gmem, i64 row_stride,
                                             i64 page_stride, const PageTable& pages, int key_begin,
                                             int valid_rows) {
    if constexpr (kPaged) {
        copy.load(slot, gmem + pages.row_offset(key_begin, page_stride, row_stride), row_stride, valid_rows);
    } else {
        copy.load(slot, gmem + i64(key_begin) * row_stride, row_stride, valid_rows);
    }
}

// Rows [0, valid_rows) of a shared-memory tile out to global memory, 16 bytes per
// thread per step; row r goes to row_ptr(r) (rows scattered in memory: pack-GQA's O).
template <int kRows, class Layout, int kThreads, class RowPtr>
__device__ __forceinline__ void store_rows(RowPtr row_ptr, const u16* smem, int valid_rows, int tid) {
    constexpr int kChunksPerRow = Layout::kCols / 8;
    constexpr int kChunks = kRows * kChunksPerRow;
#pragma unroll
    for (int step = 0; step < CeilDiv<kChunks, kThreads>::value; ++step) {
        const int chunk = step * kThreads + tid;
        if (kChunks % kThreads == 0 || chunk < kChunks) {
            const int row = chunk / kChunksPerRow;
            const int col = (chunk % kChunksPerRow) * 8;
            if (row < valid_rows) {
                *reinterpret_cast<Vec16*>(row_ptr(row) + col) =
                    *reinterpret_cast<const Vec16*>(smem + Layout::offset(row, col));
            }
        }
    }
}

// The same store into rows row_stride apart.
template <int kRows, class Layout, int kThreads>
__device__ __forceinline__ void store_tile(u16* gmem, i64 row_stride, const u16* smem, int valid_rows, int tid) {
    store_rows<kRows, Layout, kThreads>([&](int r) { return gmem + r * row_stride; }, smem, valid_rows, tid);
}

// Per-block values the main loop reads once per key block (see forward()).
struct BlockScalars {
    int seqlen_q;     // this sequence's queries and keys
    int seqlen_k;
    int query_first;  // the queries of the block's first and last rows
    int query_last;
};

}  // namespace fa4
