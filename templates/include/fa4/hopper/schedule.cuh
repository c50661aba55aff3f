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

}  // namespace hopper
}  // namespace fa4
