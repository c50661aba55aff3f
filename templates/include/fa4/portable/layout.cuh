// Where a tile's elements live in shared memory, and where each lane points ldmatrix.
//
// Padded: rows kCols + 8 elements apart. The pitch is then an odd number of 16-byte
// chunks, so the 8 row addresses of one ldmatrix fall in 8 different bank groups.
// Swizzled (rows of a multiple of 128 bytes): rows kCols apart, chunk c of row r stored at
// chunk c ^ (r % 8). Conflict-free as well, and every row starts on a 128-byte line, which
// cp.async then fills whole: padded rows straddle lines, which cost 50% extra L2 sectors
// and 21% extra shared-memory wavefronts in the d128 kernel (ncu); swizzled, d64 ran 6
// to 8% faster.
#pragma once

#include "fa4/common/tile_copy.cuh"
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

    // Byte offset of chunk `chunk` further right, `rows` rows further down (a multiple
    // of 8), of the position whose byte offset is `base` (a byte offset from
    // lane_base(), or any offset(row, col) * 2). Called with loop indices that unrolling
    // makes constant: the padded form is then an immediate offset, the swizzled one an
    // XOR with a constant plus an immediate.
    __device__ __forceinline__ static u32 chunk_at(u32 base, int rows, int chunk) {
        const u32 row_bytes = u32(rows) * kPitch * 2;
        if constexpr (kSwizzle) {
            return (base ^ u32((chunk & 7) * 16)) + row_bytes + u32(chunk >> 3) * 128;
        } else {
            return base + row_bytes + u32(chunk) * 16;
        }
    }

    // The lane's chunk in chunk pair `pair` (columns pair*16 ..) of the 16-row group
    // starting at `row0` (a multiple of 8), from `base` = lane_base(...).
    __device__ __forceinline__ static u32 at(u32 base, int row0, int pair) { return chunk_at(base, row0, 2 * pair); }

    // Whether row_step() can walk down a column in steps of kRows rows: any step in the
    // padded form; in the swizzled one, steps that keep row % 8 (multiples of 8) or
    // flip its bit 2 (4 rows; adding 4 to row % 8 never carries past bit 2).
    template <int kRows>
    static constexpr bool kWalks = !kSwizzle || kRows % 8 == 0 || kRows == 4;

    // Byte offset of the chunk `step` * kRows rows below the one at byte offset `first`.
    template <int kRows>
    __device__ __forceinline__ static u32 row_step(u32 first, int step) {
        static_assert(kWalks<kRows>, "a step the swizzle cannot take as a constant");
        const u32 row_bytes = u32(step * kRows) * kPitch * 2;
        if constexpr (kSwizzle && kRows % 8 != 0) {
            return (first ^ u32((step & 1) * 64)) + row_bytes;
        } else {
            return first + row_bytes;
        }
    }
};

// The block's shared memory (Traits T): Q, then kStages K slots, then kStages V slots.
// The epilogue stages O where Q was: Q is dead once the last QK GEMM is done. The
// per-block scalars sit in the padding of the first K row, which no copy writes; swizzled
// rows have none, and the scalars follow the tiles.
template <class T>
struct SmemTiles {
    u16* q;
    u16* o;
    u16* k;
    u16* v;
    BlockScalars* scalars;

    static_assert(sizeof(BlockScalars) == 16 && (T::kSwizzle || T::kPad == 8), "the scalars take 16 bytes");

    __device__ __forceinline__ explicit SmemTiles(unsigned char* raw) {
        q = reinterpret_cast<u16*>(raw);
        o = q;
        k = q + T::kSmemQO;
        v = k + T::kStages * T::kSmemK;
        scalars = reinterpret_cast<BlockScalars*>(T::kSwizzle ? raw + T::kSmemTilesBytes
                                                              : reinterpret_cast<unsigned char*>(k + T::kHeadDim));
    }
};

}  // namespace portable
}  // namespace fa4
