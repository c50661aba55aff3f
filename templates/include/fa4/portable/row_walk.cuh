// Tile copies that walk down the rows of a portable layout. A thread's 16-byte chunk
// keeps its column from one step to the next, kRowsPerStep rows further down, so a step
// costs one 64-bit pointer add, and its shared-memory offset is a constant away from the
// first step's (SmemLayout::row_step). The common TileCopy forms each step's addresses
// anew, with a row check: 8 to 16 instructions per 16-byte copy, 20 M of the 59.7 M
// instructions d256's 64x64 kernel issued at causal 512 (ncu; 39.2 M with the walk).
#pragma once

#include "fa4/common/tile_copy.cuh"
#include "fa4/common/types.cuh"
#include "fa4/portable/layout.cuh"

namespace fa4 {
namespace portable {

// kForm: how the common copy that stands in for rows split unevenly forms its addresses.
template <int kRows, class Layout, int kThreads, StepAddress kForm = StepAddress::kMad64>
struct RowWalkCopy : TileCopy<kRows, Layout, kThreads, kForm> {
    using Base = TileCopy<kRows, Layout, kThreads, kForm>;
    static constexpr int kRowsPerStep = Base::kRowsPerStep;
    static constexpr int kSteps = Base::kSteps;
    // Rows that threads split unevenly (d96, d192 on 4 warps) take the common copy.
    static constexpr bool kWalks = Base::kWholeRows && Layout::template kWalks<kRowsPerStep>;

    __device__ __forceinline__ explicit RowWalkCopy(int tid_) : Base(tid_) {}

    // Rows >= valid_rows are zero-filled. A whole tile (valid_rows the constant kRows)
    // checks no row: a thread's first row is below kRowsPerStep.
    __device__ __forceinline__ void load(u32 smem_tile, const u16* gmem_tile, i64 row_stride, int valid_rows) const {
        if constexpr (!kWalks) {
            Base::load(smem_tile, gmem_tile, row_stride, valid_rows);
        } else {
            // A row past valid_rows is copied with source size 0: cp.async reads none of
            // its bytes, so its address may point past the end of the tensor.
            // kOpaque32: the thread's row is hidden from the optimiser, so that its
            // offsets are formed anew each tile instead of held across the main loop.
            const int row = kForm == StepAddress::kOpaque32 ? int(opaque(u32(this->row))) : this->row;
            const u16* src = gmem_tile + row * row_stride + this->col;
            const i64 step_stride = i64(kRowsPerStep) * row_stride;
            const u32 first = u32(Layout::offset(row, this->col)) * 2;
#pragma unroll
            for (int step = 0; step < kSteps; ++step) {
                const int r = row + step * kRowsPerStep;
                if (kRows % kRowsPerStep == 0 || r < kRows) {
                    const bool valid = valid_rows >= kRows || r < valid_rows;
                    cp_async_16(smem_tile + Layout::template row_step<kRowsPerStep>(first, step), src, valid);
                }
                src += step_stride;
            }
        }
    }

    // Rows [0, valid_rows) of a shared-memory tile out to global memory, row_stride apart.
    __device__ __forceinline__ void store(u16* gmem_tile, i64 row_stride, const u16* smem_tile, int valid_rows) const {
        if constexpr (!kWalks) {
            store_tile<kRows, Layout, kThreads>(gmem_tile, row_stride, smem_tile, valid_rows, this->tid);
        } else {
            u16* dst = gmem_tile + this->row * row_stride + this->col;
            const i64 step_stride = i64(kRowsPerStep) * row_stride;
            const u32 first = u32(Layout::offset(this->row, this->col)) * 2;
            const unsigned char* const smem_bytes = reinterpret_cast<const unsigned char*>(smem_tile);
#pragma unroll
            for (int step = 0; step < kSteps; ++step) {
                const int r = this->row + step * kRowsPerStep;
                if ((kRows % kRowsPerStep == 0 || r < kRows) && r < valid_rows) {
                    *reinterpret_cast<Vec16*>(dst) = *reinterpret_cast<const Vec16*>(
                        smem_bytes + Layout::template row_step<kRowsPerStep>(first, step));
                }
                dst += step_stride;
            }
        }
    }
};

}  // namespace portable
}  // namespace fa4
