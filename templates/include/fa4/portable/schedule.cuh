// Which rows a thread block computes, where a thread sits in them, and which key blocks
// those rows see: the block's coordinates, read once at the start of the kernel.
#pragma once

#include "fa4/common/mask.cuh"
#include "fa4/common/params.cuh"
#include "fa4/common/seqlen.cuh"
#include "fa4/common/tile_copy.cuh"
#include "fa4/portable/traits.cuh"

namespace fa4 {
namespace portable {

// Causal blocks further down the sequence see more keys: launch those first (the
// longest-processing-time order), so the short blocks fill the tail of the grid.
// With the m-blocks fastest (x), a wave holds a few (head, sequence) pairs' heavy and
// light ends unevenly and leaves SMs idle at its end; so causal grids are (heads,
// m-blocks, batch), the m-blocks reversed in y: every head of a sequence takes its
// heaviest m-block first, then its next. Plain grid registers, which the compiler
// reads again where it needs them rather than hold them (a decode with selects or
// divisions made the 255-register tiles spill). Pack-GQA's blocks hold every head
// of a KV head: it keeps the m-blocks in x, as do unmasked and local grids, whose
// tiles cost about the same.
template <class T>
struct GridOrder {
    static constexpr bool kMBlocksInY = T::kMask == MaskKind::Causal && !T::kPackGqa;

    static __device__ __forceinline__ int m_block() {
        return kMBlocksInY                     ? gridDim.y - 1 - blockIdx.y
               : T::kMask == MaskKind::Causal ? gridDim.x - 1 - blockIdx.x
                                              : blockIdx.x;
    }
    // The query head, or with pack-GQA the KV head.
    static __device__ __forceinline__ unsigned head() { return kMBlocksInY ? blockIdx.x : blockIdx.y; }
};

// The block's rows: kBlockM query rows of one head or, with pack-GQA, kBlockM (query,
// head) pairs of the heads that share one KV head: row r is query r / kGroup of head
// head + r % kGroup. Rows of one query are adjacent, so they share the mask. Each part
// that needs it writes kGroup as `T::kPackGqa ? group : 1`: a constant expression
// without pack-GQA, so that its divisions are never emitted (a member function that
// returns it leaves them to the optimiser, whose order then moves other code).
// Each warp owns kRowsPerWarp of them; a thread holds two rows per 16-row m-tile (the
// MMA's C fragment, ptx.cuh), quad_row and quad_row + 8, and two columns per n-tile.
template <class T>
struct BlockTile {
    int batch;
    SeqView seq;
    int group;     // query heads per KV head
    int rows;      // the sequence's rows
    int row_begin; // first row of this block
    int kv_head;
    int head;      // first query head
    int tid;
    int lane;
    int quad_row;  // g: fragment row within an 8-row half
    int quad_col;  // t: fragment column pair
    int warp_row;  // first row of this warp within the block

    // The rows. A varlen sequence shorter than the longest one leaves its last blocks
    // none: they return (false) before anything else is read.
    __device__ __forceinline__ bool locate_rows(const FwdParams& params) {
        const int m_block = GridOrder<T>::m_block();
        batch = blockIdx.z;
        seq = seq_view<T::kPaged>(params, batch);
        group = params.heads_q / params.heads_kv;
        const int kGroup = T::kPackGqa ? group : 1;
        rows = seq.seqlen_q * kGroup;
        row_begin = m_block * T::kBlockM;
        return row_begin < rows;
    }

    // The heads: the query head (pack-GQA: the first of the group) and its KV head.
    __device__ __forceinline__ void locate_heads() {
        const unsigned grid_head = GridOrder<T>::head();  // the KV head with pack-GQA
        kv_head = T::kPackGqa ? grid_head : grid_head / group;
        head = T::kPackGqa ? kv_head * group : grid_head;
    }
};

// The key blocks the block's rows see, visited from the last (n_end - 1) down to the
// first: the blocks that need masking come first, the rest run mask-free.
struct KeyBlocks {
    int n_end;
    int n_tiles;

    __device__ __forceinline__ int n_block(int tile) const { return n_end - 1 - tile; }
};

// The scalars the main loop needs now and then live in shared memory: read back after
// each barrier, they hold no registers across the loop (the accumulators need them all).
template <class T>
__device__ __forceinline__ KeyBlocks key_blocks(const FwdParams& params, const BlockTile<T>& tile,
                                                BlockScalars* block_scalars) {
    KeyBlocks keys;
    const SeqView& seq = tile.seq;
    // The queries the block's rows belong to: the mask is asked about these.
    const int kGroup = T::kPackGqa ? tile.group : 1;
    const int query_first = tile.row_begin / kGroup;
    const int query_last = (imin(tile.row_begin + T::kBlockM, tile.rows) - 1) / kGroup;
    const Mask<T::kMask> mask{seq.seqlen_q, seq.seqlen_k, params.window_left, params.window_right};
    keys.n_end = mask.n_block_end(query_first, query_last + 1, T::kBlockN);
    keys.n_tiles = imax(0, keys.n_end - mask.n_block_begin(query_first, T::kBlockN));
    if (tile.tid == 0) *block_scalars = BlockScalars{seq.seqlen_q, seq.seqlen_k, query_first, query_last};
    __syncthreads();
    return keys;
}

}  // namespace portable
}  // namespace fa4
