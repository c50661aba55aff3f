// The work of one thread block: kBlockM query rows of one head of one sequence, and the
// key blocks they see. Every role of the block works it out alike from the launch
// coordinates (grid: m-blocks x query heads x sequences), so no role waits for another
// to learn it.
#pragma once

#include "fa4/blackwell/traits.cuh"
#include "fa4/common/mask.cuh"
#include "fa4/common/seqlen.cuh"

namespace fa4 {
namespace blackwell {

template <class T>
struct BlockTile {
    SeqView seq;
    Mask<T::kMask> mask;
    int batch, head, kv_head;
    int m0;                // the block's first query row within its sequence
    int n_begin, n_end;    // key blocks [n_begin, n_end) hold every key a row sees
    int q_map_row, q_map_batch;  // TMA coordinates of the sequence's first Q row
    int k_map_row, k_map_batch;  // and of its first K/V row (a packed batch is one batch)

    __device__ __forceinline__ static BlockTile make(const FwdParams& p) {
        BlockTile t;
        t.batch = blockIdx.z;
        t.head = blockIdx.y;
        t.kv_head = t.head / (p.heads_q / p.heads_kv);
        t.m0 = blockIdx.x * T::kBlockM;
        t.seq = seq_view<false>(p, t.batch);
        t.mask = Mask<T::kMask>{t.seq.seqlen_q, t.seq.seqlen_k, p.window_left, p.window_right};
        t.n_begin = t.mask.n_block_begin(t.m0, T::kBlockN);
        t.n_end = t.mask.n_block_end(t.m0, t.m0 + T::kBlockM, T::kBlockN);
        const bool packed_q = p.cu_seqlens_q != nullptr;
        const bool packed_k = p.cu_seqlens_k != nullptr;
        t.q_map_row = packed_q ? p.cu_seqlens_q[t.batch] : 0;
        t.q_map_batch = packed_q ? 0 : t.batch;
        t.k_map_row = packed_k ? p.cu_seqlens_k[t.batch] : 0;
        t.k_map_batch = packed_k ? 0 : t.batch;
        return t;
    }

    // A block past its sequence's rows has nothing to do.
    __device__ __forceinline__ bool has_rows() const { return m0 < seq.seqlen_q; }
    // Key blocks to visit; 0 when no row of the block sees a key (O = 0, LSE = -inf).
    __device__ __forceinline__ int n_blocks() const { return n_end > n_begin ? n_end - n_begin : 0; }
    // The query row that thread `t` of Q stage `stage`'s warpgroups owns.
    __device__ __forceinline__ int row(int stage, int t) const { return m0 + 128 * stage + t; }
};

// Key block i of the walk (0 = the first visited) lives in ring slot i % kStages; its
// barriers are in their (i / kStages)-th phase.
template <class T>
struct RingPos {
    int slot;
    u32 parity;
    __device__ __forceinline__ explicit RingPos(int i) : slot(i % T::kStages), parity((i / T::kStages) & 1) {}
};

}  // namespace blackwell
}  // namespace fa4
