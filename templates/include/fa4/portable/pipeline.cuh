// Global to shared memory: Q once, K and V tiles through a ring of kStages slots
// (cp.async), and the order in which the main loop waits for them.
#pragma once

#include "fa4/common/params.cuh"
#include "fa4/common/ptx.cuh"
#include "fa4/common/seqlen.cuh"
#include "fa4/common/tile_copy.cuh"
#include "fa4/portable/layout.cuh"
#include "fa4/portable/row_walk.cuh"
#include "fa4/portable/schedule.cuh"
#include "fa4/portable/traits.cuh"

namespace fa4 {
namespace portable {

// kStages == 1 is FlashAttention-2's schedule: one K and one V buffer, K(t+1) loads
// under softmax and PV of tile t, V(t+1) under QK of tile t+1. kStages >= 2 is a ring
// that keeps kStages-1 whole tiles in flight ahead of the one being computed. Every
// stage commits its cp.async groups (one for K, one for V) even when it has nothing to
// load, so the wait counts are the same constants on every iteration.
template <int kStages>
struct KvSchedule {
    static constexpr int kPrologueTiles = kStages == 1 ? 1 : kStages - 1;
    static constexpr int kWaitK = kStages == 1 ? 1 : 2 * kStages - 3;  // K(tile) (and Q) landed
    static constexpr int kWaitV = kStages == 1 ? 1 : 2 * kStages - 2;  // V(tile) landed
    static constexpr int kWaitKV = 2 * kStages - 4;                     // both (the staggered loop)
};

// Q's kBlockM rows into shared memory (zero past the sequence's end). With pack-GQA
// the rows are (query, head) pairs, scattered over the heads of the group.
template <class T>
__device__ __forceinline__ void load_q(const FwdParams& params, const BlockTile<T>& tile, const u16* q_gmem,
                                       u16* q_smem) {
    const int kGroup = T::kPackGqa ? tile.group : 1;
    const int row_begin = tile.row_begin;
    const RowWalkCopy<T::kBlockM, typename T::LayoutQK, T::kThreads> q_copy(tile.tid);
    if constexpr (T::kPackGqa) {
        q_copy.load_rows(smem_u32(q_smem), q_gmem, [&](int r) {
            const int row = row_begin + r;
            return q_gmem + i64(row / kGroup) * params.q_row_stride + (row % kGroup) * params.q_head_stride;
        }, tile.rows - row_begin);
    } else {
        q_copy.load(smem_u32(q_smem), q_gmem + i64(row_begin) * params.q_row_stride, params.q_row_stride,
                    tile.rows - row_begin);
    }
}

// One K or V tile per call into its ring slot. Tile t of the walk holds the keys of key
// block n_end - 1 - t. Only the first block visited (the highest keys) can run past the
// end of the keys: every later one is whole, so the main loop's loads (`whole` set) need
// no row count.
template <class T>
struct KvLoader {
    // Rows split unevenly over the threads take the common copy. The largest accumulator
    // tiles (Traits::kCompactLoads) cannot hold its hoisted step offsets: theirs are
    // recomputed per tile.
    static constexpr StepAddress kStepForm = T::kCompactLoads ? StepAddress::kOpaque32 : StepAddress::kHoisted32;
    using KCopy = RowWalkCopy<T::kBlockN, typename T::LayoutQK, T::kThreads, kStepForm>;
    using VCopy = RowWalkCopy<T::kBlockN, typename T::LayoutV, T::kThreads, kStepForm>;
    // Paged K/V with one key per page: load_k looks the tile's rows up and load_v
    // reuses them (V(t) is always loaded after K(t) and before K(t+1)). Other page
    // sizes that split a tile look each row up as they copy it.
    // 4-warp tiles with 4 rows or fewer per thread look up again for V: holding the
    // rows spills them (d64 128x64), and their lookups are few.
    static constexpr bool kSharedRows =
        KCopy::kChunksPerRow == VCopy::kChunksPerRow && (T::kWarps >= 8 || KCopy::kSteps > 4);

    // The block's K and V in global memory, the page table and the rows' pages are
    // forward()'s, lent by reference: copied in, or an array of the loader's own, they
    // change the paged gathers' PTX.
    const FwdParams& params;
    const u16* const& k_gmem;
    const u16* const& v_gmem;
    const PageTable& page_table;
    const KCopy k_copy;
    const VCopy v_copy;
    const u32 k_smem_addr;
    const u32 v_smem_addr;
    const int n_end;
    const BlockScalars* const block_scalars;
    typename KCopy::PagedRows& paged_rows;

    __device__ __forceinline__ KvLoader(const FwdParams& params_, const u16* const& k_gmem_, const u16* const& v_gmem_,
                                        const PageTable& page_table_, const BlockTile<T>& tile,
                                        const SmemTiles<T>& smem, int n_end_,
                                        typename KCopy::PagedRows& paged_rows_)
        : params(params_),
          k_gmem(k_gmem_),
          v_gmem(v_gmem_),
          page_table(page_table_),
          k_copy(tile.tid),
          v_copy(tile.tid),
          k_smem_addr(smem_u32(smem.k)),
          v_smem_addr(smem_u32(smem.v)),
          n_end(n_end_),
          block_scalars(smem.scalars),
          paged_rows(paged_rows_) {}

    // K(tile), rows past the keys zeroed unless `whole`. The paged row lambdas capture
    // the members through these local names, as they once captured forward()'s locals:
    // capturing `this` instead changes the paged gathers' PTX.
    __device__ __forceinline__ void load_k(int tile, bool whole) {
        const FwdParams& params = this->params;
        const u16* const& k_gmem = this->k_gmem;
        const PageTable& page_table = this->page_table;
        const int key_begin = (n_end - 1 - tile) * T::kBlockN;
        const int valid = whole ? T::kBlockN : block_scalars->seqlen_k - key_begin;
        const u32 slot = k_smem_addr + (tile % T::kStages) * T::kSmemK * 2;
        if constexpr (T::kPaged) {
            if (page_table.page_size == 1) {
                paged_rows = k_copy.locate(page_table, key_begin, valid);
                k_copy.load_paged(slot, k_gmem, paged_rows, params.k_batch_stride, valid);
                return;
            }
            if (page_table.page_size % T::kBlockN != 0) {
                k_copy.load_rows(slot, k_gmem, [&](int r) {
                    return k_gmem + page_table.row_offset(key_begin + r, params.k_batch_stride, params.k_row_stride);
                }, valid);
                return;
            }
        }
        load_kv_tile<T::kPaged, T::kBlockN>(k_copy, slot, k_gmem, params.k_row_stride, params.k_batch_stride,
                                            page_table, key_begin, valid);
    }

    // V(tile), likewise; pages of one key reuse the rows load_k looked up (kSharedRows).
    __device__ __forceinline__ void load_v(int tile, bool whole) {
        const FwdParams& params = this->params;
        const u16* const& v_gmem = this->v_gmem;
        const PageTable& page_table = this->page_table;
        const int key_begin = (n_end - 1 - tile) * T::kBlockN;
        const int valid = whole ? T::kBlockN : block_scalars->seqlen_k - key_begin;
        const u32 slot = v_smem_addr + (tile % T::kStages) * T::kSmemV * 2;
        if constexpr (T::kPaged) {
            if (page_table.page_size % T::kBlockN != 0 && page_table.page_size != 1) {
                v_copy.load_rows(slot, v_gmem, [&](int r) {
                    return v_gmem + page_table.row_offset(key_begin + r, params.v_batch_stride, params.v_row_stride);
                }, valid);
                return;
            }
            if (page_table.page_size == 1) {
                if constexpr (kSharedRows) {
                    v_copy.load_paged(slot, v_gmem, paged_rows, params.v_batch_stride, valid);
                } else {
                    v_copy.load_paged(slot, v_gmem, v_copy.locate(page_table, key_begin, valid), params.v_batch_stride,
                                      valid);
                }
                return;
            }
        }
        load_kv_tile<T::kPaged, T::kBlockN>(v_copy, slot, v_gmem, params.v_row_stride, params.v_batch_stride,
                                            page_table, key_begin, valid);
    }

    // ---- the main loop's side of the schedule (KvSchedule) ----
    // A ring's slot that tile-1 left (every thread is past it): the tile kStages-1 ahead.
    __device__ __forceinline__ void refill(int tile, int n_tiles) {
        if (tile + T::kStages - 1 < n_tiles) {
            load_k(tile + T::kStages - 1, true);
            load_v(tile + T::kStages - 1, true);
        }
        cp_async_commit();
        cp_async_commit();
    }
    // K(tile) (and Q) have landed for every thread, and tile-1 is fully consumed.
    __device__ __forceinline__ void wait_k(int tile, int n_tiles) {
        cp_async_wait<KvSchedule<T::kStages>::kWaitK>();  // for this thread ...
        __syncthreads();                                   // ... and for every thread
        if constexpr (T::kStages >= 2) refill(tile, n_tiles);
    }
    // One stage: every warp is done with the K buffer; K(tile+1) loads under this
    // tile's softmax and PV GEMM.
    __device__ __forceinline__ void after_qk(int tile, int n_tiles) {
        if constexpr (T::kStages == 1) {
            __syncthreads();
            if (tile + 1 < n_tiles) load_k(tile + 1, true);
            cp_async_commit();
        }
    }
    // V(tile) has landed for every thread.
    __device__ __forceinline__ void wait_v() {
        cp_async_wait<KvSchedule<T::kStages>::kWaitV>();
        __syncthreads();
    }
    // One stage: every warp is done with the V buffer; V(tile+1) loads under the next
    // tile's QK GEMM.
    __device__ __forceinline__ void after_pv(int tile, int n_tiles) {
        if constexpr (T::kStages == 1) {
            __syncthreads();
            if (tile + 1 < n_tiles) load_v(tile + 1, true);
            cp_async_commit();
        }
    }
    // The staggered loop waits for K(tile) and V(tile) together.
    __device__ __forceinline__ void wait_kv(int tile, int n_tiles) {
        cp_async_wait<KvSchedule<T::kStages>::kWaitKV>();
        __syncthreads();
        refill(tile, n_tiles);
    }

    // The tiles in flight before the main loop starts (KvSchedule).
    __device__ __forceinline__ void load_first_tiles(int n_tiles) {
#pragma unroll
        for (int tile = 0; tile < KvSchedule<T::kStages>::kPrologueTiles; ++tile) {
            if (tile < n_tiles) load_k(tile, tile > 0);
            cp_async_commit();
            if (tile < n_tiles) load_v(tile, tile > 0);
            cp_async_commit();
        }
    }
};

}  // namespace portable
}  // namespace fa4
