// The order in which a grid works its tiles: one tile is one block's rows (m-block) of
// one (head, sequence) pair. Both Hopper kernels take their tile from here.
//
// Unmasked and local tiles cost about the same: m-blocks fastest, so the blocks running
// together share a few pairs' K/V in L2. Causal tiles do not: the m-block that sees the
// most keys costs m_blocks times the lightest. The hardware hands out blocks in launch
// order, so a launch order with the heaviest tiles first is a longest-first list
// schedule and ends with light tiles that fill the tail. Ordering the whole grid that way
// spreads the blocks running together over every pair; so the pairs go in sections of a
// few whose K/V fits in L2 (sized on the host: gpu/launch.rs), and within a section the
// heaviest m-blocks of all its pairs come first.
#pragma once

#include "fa4/common/mask.cuh"
#include "fa4/common/params.cuh"
#include "fa4/common/types.cuh"

namespace fa4 {
namespace hopper {

// Where a tile sits: batch, head (KV head when GQA is packed), m-block.
struct TileCoords {
    int batch, head_idx, m_block;
};

// The coordinates of a split tail's tile also carry its key blocks [key_begin, key_end)
// (-1: every key block the mask leaves); kernels without a split tail keep TileCoords,
// whose three registers are all they can spare at d256 (CoordsOf).
struct TailCoords : TileCoords {
    int key_begin, key_end;
};
template <bool kSplitTail>
struct CoordsOf {
    using type = TileCoords;
};
template <>
struct CoordsOf<true> {
    using type = TailCoords;
};

// A work item of a split tail: its tile's key blocks [key_begin, key_end) and, for a
// piece of a split tile, its place in the workspace (slot > 0; piece 0 before the split,
// 1 after; slot 0 for a whole tile).
struct TailItem {
    int key_begin, key_end, slot, piece;
};

// Tile `t` (in launch order) of a causal persistent grid of `pairs` x `m_blocks` tiles
// worked in sections of `section_pairs` pairs: within a section all its pairs' heaviest m-block,
// then their next heaviest, and so on.
__device__ __forceinline__ TileCoords causal_tile(int t, int m_blocks, int pairs, int section_pairs, int heads) {
    const int first_pair = t / (section_pairs * m_blocks) * section_pairs;
    const int n_pairs = imin(section_pairs, pairs - first_pair);
    const int local = t - first_pair * m_blocks;
    const int pair = first_pair + local % n_pairs;
    return TileCoords{pair / heads, pair % heads, m_blocks - 1 - local / n_pairs};
}

// The tile of this block in a grid of one block per tile. Unmasked and local:
// (m-blocks, heads, batch). Causal: launch_grid's (section pairs x m-blocks, sections),
// the section's pairs fastest, its heaviest m-block first; the spare blocks of a last
// section with fewer pairs get the m-block past the last, which has no rows. The host
// sizes the sections, so a block finds its tile in three 32-bit divisions: worked out
// here from the shape (a 64-bit and six 32-bit divisions at every block's start), the
// same sections ran 6% slower at d64, 512 tokens.
template <class T>
__device__ __forceinline__ TileCoords grid_tile(const FwdParams& params) {
    if constexpr (T::kMask == MaskKind::Causal) {
        const int heads = T::kPackGqa ? params.heads_kv : params.heads_q;
        const int rows = T::kPackGqa ? params.seqlen_q * (params.heads_q / params.heads_kv) : params.seqlen_q;
        const int m_blocks = ceil_div(rows, T::kBlockM);
        const int section_pairs = gridDim.x / m_blocks;
        const int first_pair = blockIdx.y * section_pairs;
        const int n_pairs = imin(section_pairs, heads * params.batch - first_pair);
        const int local = blockIdx.x;
        if (local >= n_pairs * m_blocks) return TileCoords{0, 0, m_blocks};  // no rows there
        const int pair = first_pair + local % n_pairs;
        return TileCoords{pair / heads, pair % heads, m_blocks - 1 - local / n_pairs};
    } else {
        return TileCoords{int(blockIdx.z), int(blockIdx.y), int(blockIdx.x)};
    }
}

// The split tail of an unmasked persistent grid. Its tiles all cost the same, so a grid
// of G blocks over T tiles (T > G, T % G = r > 0) leaves G - r blocks idle in its last
// round: 3% of the SM time at the FA3 grid's 2048 tiles over 132 SMs. The host hands
// over the last G + r tiles (split_tail) as U = (G + r) x N (tile, key block) units, and
// block b works units [b U / G, (b + 1) U / G): every block the same share of keys. A
// share is longer than a tile (U / G > N), so a split point falls inside a tile at most
// once: a tile is whole or two pieces, split at block b's first unit; the pieces leave
// their O (normalised) and LSE in the workspace's slot b, and the second to finish merges
// them (kernel_ws.cuh). The first T - G - r tiles go round by round as before.
struct SplitTail {
    int first_tile;  // the tail's first tile (a whole number of rounds)
    int key_blocks;  // N, every tile's key blocks
    i64 units;       // U
    int grid;        // G

    __device__ __forceinline__ int whole_rounds() const { return first_tile / grid; }
    __device__ __forceinline__ i64 unit_begin(int block) const { return units * block / grid; }
    // The work items of `block` in the tail: the tiles its units touch.
    __device__ __forceinline__ int items(int block) const {
        return int((unit_begin(block + 1) - 1) / key_blocks - unit_begin(block) / key_blocks) + 1;
    }
    // Item `k` of `block`: its tile (in launch order), key blocks and slot.
    __device__ __forceinline__ int item(int block, int k, TailItem& it) const {
        const i64 u0 = unit_begin(block), u1 = unit_begin(block + 1);
        const i64 tile = u0 / key_blocks + k;
        const i64 tile_begin = tile * key_blocks;
        it.key_begin = int((u0 > tile_begin ? u0 : tile_begin) - tile_begin);
        it.key_end = int((u1 < tile_begin + key_blocks ? u1 : tile_begin + key_blocks) - tile_begin);
        it.slot = it.key_begin > 0 ? block : it.key_end < key_blocks ? block + 1 : 0;
        it.piece = it.key_begin > 0 ? 1 : 0;
        return first_tile + int(tile);
    }
};

// A block's share of the split tail in shared memory (kSplitTailBytes at `base`), which
// thread 0 writes before the block's first barrier: its whole rounds, its item count (at
// most 3: a share is under two tiles long), then per item the tail tile, its key blocks
// and its slot and piece. Read back where needed, none of it stays in registers through
// the key loop.
struct SplitItems {
    u32 base;

    __device__ __forceinline__ int word(int i) const {
        int v;
        asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(base + 4 * i) : "memory");
        return v;
    }
    __device__ __forceinline__ void set(int i, int v) const {
        asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(base + 4 * i), "r"(v) : "memory");
    }
    __device__ __forceinline__ void write(const SplitTail& tail, int block) const {
        set(0, tail.whole_rounds());
        const int n = tail.items(block);
        set(1, n);
        for (int k = 0; k < n; ++k) {
            TailItem it;
            set(2 + 4 * k, tail.item(block, k, it));
            set(3 + 4 * k, it.key_begin);
            set(4 + 4 * k, it.key_end);
            set(5 + 4 * k, it.slot * 2 + it.piece);
        }
    }
    __device__ __forceinline__ int whole_rounds() const { return word(0); }
    __device__ __forceinline__ int count() const { return word(1); }
    // Item k: fills `it`, returns its tile (in launch order).
    __device__ __forceinline__ int item(int k, TailItem& it) const {
        it.key_begin = word(3 + 4 * k);
        it.key_end = word(4 + 4 * k);
        const int slot = word(5 + 4 * k);
        it.slot = slot >> 1;
        it.piece = slot & 1;
        return word(2 + 4 * k);
    }
};

}  // namespace hopper
}  // namespace fa4
