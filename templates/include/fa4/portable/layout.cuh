// Where a tile's elements live in shared memory, and where each lane points ldmatrix.
//
// Padded: rows kCols + 8 elements apart. The pitch is then an odd number of 16-byte
// chunks, so the 8 row addresses of one ldmatrix fall in 8 different bank groups.
// Swizzled (rows of a multiple of 128 bytes): rows kCols apart, chunk c of row r stored at
// chunk c ^ (r % 8). Conflict-free as well, and every row starts on a 128-byte line, which
// cp.async then fills whole: padded rows straddle lines, which cost 50% extra L2 sectors
// and 21% extra shared-memory wavefronts in the d128 kernel (bench/NOTES.md).
#pragma once

#include "fa4/common/types.cuh"

namespace fa4 {
namespace portable {

template <int kCols_, bool kSwizzle_>
struct SmemLayout {
    static constexpr int kCols = kCols_;
    static constexpr bool kSwizzle = kSwizzle_;
    static constexpr int kPitch = kSwizzle ? kCols : kCols + 8;  // elements
    static_assert(!kSwizzle || kCols % 64 == 0, "swizzled rows are whole 128-byte lines");
    static_assert(kSwizzle || (kPitch / 8) % 2 == 1, "padded rows are an odd number of chunks");

    // Element offset of (row, col); col is a multiple of 8 or lies within one chunk.
    __device__ __forceinline__ static int offset(int row, int col) {
        if constexpr (kSwizzle) {
            return row * kPitch + ((((col >> 3) ^ (row & 7)) << 3) | (col & 7));
        } else {
            return row * kPitch + col;
        }
    }

    // A lane's ldmatrix address within a tile, for a lane that reads row `lane_row` and
    // 16-byte chunk `lane_chunk` (0 or 1) of each chunk pair. The swizzled form folds the
    // chunk's XOR into the base: the XOR then only touches bits 4-6 of the offset.
    __device__ __forceinline__ static u32 lane_base(int lane_row, int lane_chunk) {
        if constexpr (kSwizzle) {
            return u32(lane_row * kPitch * 2) | u32((lane_chunk ^ (lane_row & 7)) * 16);
        } else {
            return u32((lane_row * kPitch + lane_chunk * 8) * 2);
        }
    }

    // Byte offset of the lane's chunk in chunk pair `pair` (columns pair*16 ..) of the
    // 16-row group starting at `row0` (a multiple of 8), from `base` = lane_base(...).
    // Called with loop indices that unrolling makes constant: the padded form is then an
    // immediate offset, the swizzled one an XOR with a constant plus an immediate.
    __device__ __forceinline__ static u32 at(u32 base, int row0, int pair) {
        const u32 row_bytes = u32(row0) * kPitch * 2;
        if constexpr (kSwizzle) {
            return (base ^ u32((pair & 3) * 32)) + row_bytes + u32(pair >> 2) * 128;
        } else {
            return base + row_bytes + u32(pair) * 32;
        }
    }
};

}  // namespace portable
}  // namespace fa4
