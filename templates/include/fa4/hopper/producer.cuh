// The producer warpgroup of the warp-specialised Hopper kernel (kernel_ws.cuh): it gives
// most of its registers back (setmaxnreg) and, per work tile, loads each consumer's Q
// into its slot and the K and V tiles into the ring of kStages slots.
//
// Whole tiles of a strided K/V go by TMA, one thread issuing (with kClusterM > 1 each
// block of the cluster loads a share of every tile's 64-column boxes and multicasts it
// into all of them). Whole tiles of a paged K/V go by TMA too where the launcher encoded
// maps over the page pool: a box per page of the tile (or one of a page that holds whole
// tiles), the first warp's lane b looking up and issuing box b. The first tile when it runs
// past the keys (its tail zero-filled), and every paged tile where the pages fit no box,
// go by cp.async, the whole warpgroup copying and the slot's barrier held open until the
// copies land. Q goes by TMA where QoRows says so, else by cp.async.
//
// Each slot has a "full" mbarrier (its bytes landed: the producer's one arrival plus the
// transfer or the tracked copies) and an "empty" one (every consumer warp, of every block
// of the cluster, is done reading it). `it` counts key tiles over the block's work tiles
// (ring slot and phase), `q_round` the work tiles (Q's phase).
//
// FP8: a V tile lands in the V ring (its "loaded" barrier), and the whole warpgroup
// transposes it into the Vt ring (transpose.cuh), whose slot's "full V" it then arrives
// on; "empty V" frees the Vt slot. Tile j - 1 is transposed while tile j's loads are in
// flight, and a work tile's last one before the next work tile's Q (whose slot the
// consumers may free only after their last PV GEMM).
#pragma once

#include "fa4/common/params.cuh"
#include "fa4/common/seqlen.cuh"
#include "fa4/hopper/load.cuh"
#include "fa4/hopper/pipeline.cuh"
#include "fa4/hopper/shared_storage.cuh"
#include "fa4/hopper/tile_scheduler.cuh"
#include "fa4/hopper/tma.cuh"
#include "fa4/hopper/traits.cuh"
#include "fa4/hopper/transpose.cuh"

namespace fa4 {
namespace hopper {

// The producer's warps meet at this named barrier (kernel_ws.cuh lists the others).
constexpr int kProducerBarrier = 7;

// The tensor maps of the TMA kernels (TmaFwdParams: Q, K, V and O), else null.
struct TmaMaps {
    const TensorMap* q;
    const TensorMap* k;
    const TensorMap* v;
    const TensorMap* o;
};

template <class T>
struct Producer {
    static constexpr int kStages = T::kStages;
    static constexpr int kConsumers = T::kWarpgroups;
    static constexpr int kCluster = T::kClusterM;
    static constexpr int kQBuffers = T::kQBuffers;
    using LayoutQ = WgmmaLayout<64, T::kQkCols>;  // one consumer's rows

    // What the loads' helpers read: references to the kernel's own variables, as lambdas
    // capture them. (Copies held here, or lambdas that capture the producer itself instead
    // of a local reference, moved ptxas's code; the maps and the cluster rank, which no
    // helper reads, go by value into the loads.)
    const FwdParams& params;
    const SharedStorage<T>& smem;
    const QoRows<T>& qo;
    const int& tid;        // within the warpgroup
    const int& row_group;  // block rows per query row (pack-GQA)

    // Every work tile of the block: `first_work` is a grid of one block per tile's;
    // `cluster_rank_m` this block's place in its cluster (0 without one); `page_box_rows`
    // the rows of the maps' boxes over pages (SplitArgs), 0 for none.
    template <class Scheduler>
    __device__ __forceinline__ void run(const Scheduler& sched, const WorkTile& first_work, const TmaMaps maps,
                                        int cluster_rank_m, int page_box_rows) const {
        if constexpr (T::kProducerRegs > 0) registers_release<T::kProducerRegs>();
        if constexpr (T::kTma) {
            if (tid == 0) {
                tma_prefetch(maps.q);
                tma_prefetch(maps.k);
                tma_prefetch(maps.v);
                tma_prefetch(maps.o);
            }
        }
        int it = 0;
        int q_round = 0;
        for (int round = 0; round < sched.rounds; ++round) {
            const WorkTile w = T::kPersistent ? sched.work_at(round) : first_work;
            if (!w.has_rows() && kCluster == 1) continue;
            // The other threads wait here for the first warp to finish the last work
            // tile's issues: a barrier is never waited on two phases ahead.
            if constexpr ((T::kTma || T::kTmaPages) && T::kPersistent) named_barrier_sync(kProducerBarrier, 128);
            // TMA coordinates of the sequence: a packed batch is one batch of all rows.
            const bool packed_k = params.cu_seqlens_k != nullptr;
            load_q(w, q_round, maps);
            ++q_round;
            load_kv(w, it, packed_k, maps, cluster_rank_m, page_box_rows);
            it += w.n_tiles;
        }
        cp_async_wait<0>();
    }

    // After the whole warpgroup's cp.async into a slot: the slot's one arrival.
    __device__ void copies_issued(u32 bar) const {
        cp_async_mbarrier_track(bar);
        named_barrier_sync(kProducerBarrier, 128);  // every copy is tracked ...
        if (tid == 0) mbarrier_arrive(bar);         // ... before the one arrival
    }

    // ---- Q: each consumer's 64 rows, once its last tile's reads are done ----------------
    __device__ __forceinline__ void load_q(const WorkTile& w, int q_round, const TmaMaps maps) const {
        const FwdParams& params = this->params;
        const int& row_group = this->row_group;
        const u16* const q_gmem = static_cast<const u16*>(params.q) + w.seq.q_offset + w.head * params.q_head_stride;
        const int qb = q_round % kQBuffers;
        for (int c = 0; c < kConsumers; ++c) {
            const int row_begin = w.row_begin + 64 * c;
            const int valid = w.rows - row_begin;
            mbarrier_wait(smem.empty_q(c, qb), ((q_round / kQBuffers) & 1) ^ 1);
            if (qo.by_tma(valid)) {
                if (tid == 0) {
                    mbarrier_arrive_expect_tx(smem.full_q(c, qb), T::kHeadDimPad * 64 * 2);
                    tma_load_tile<T::kQkCols, 64>(smem.q_slot(c, qb), maps.q, smem.full_q(c, qb),
                                                   qo.map_row(w) + row_begin, w.head, qo.map_batch(w));
                }
            } else {
                producer_copy<64, LayoutQ, 128>(smem.q_slot(c, qb), [&](int r) {
                    const int row = row_begin + r;
                    return T::kPackGqa ? q_gmem + i64(row / row_group) * params.q_row_stride +
                                             (row % row_group) * params.q_head_stride
                                       : q_gmem + i64(row) * params.q_row_stride;
                }, q_gmem, valid, tid);
                copies_issued(smem.full_q(c, qb));
            }
        }
    }

    // ---- K and V: the tile's key blocks, last first ---------------------------------------
    __device__ __forceinline__ void load_kv(const WorkTile& w, const int& it, bool packed_k, const TmaMaps maps,
                                           int cluster_rank_m, int page_box_rows) const {
        const u16* const k_gmem = static_cast<const u16*>(params.k) + w.seq.k_offset + w.kv_head * params.k_head_stride;
        const u16* const v_gmem = static_cast<const u16*>(params.v) + w.seq.v_offset + w.kv_head * params.v_head_stride;
        const PageTable pages{params.page_table + i64(w.batch) * params.page_table_batch_stride, params.page_size};
        auto copy_tile = [&](int tile) {
            const int slot = (it + tile) % kStages;
            const u32 free_parity = (((it + tile) / kStages) & 1) ^ 1;
            const int key_begin = (w.n_end - 1 - tile) * T::kBlockN;
            // The first tile is the last key block: rows past the keys load as zeros.
            const int valid = tile == 0 ? w.seq.seqlen_k - key_begin : T::kBlockN;
            if constexpr (T::kPaged) {
                // (the previous tile's copies were issued: every thread met after them)
                producer_find_pages<T::kBlockN, 128>(smem.page_rows(), pages, key_begin, valid, tid);
                named_barrier_sync(kProducerBarrier, 128);
            }
            mbarrier_wait(smem.empty_k(slot), free_parity);
            producer_load_kv<T::kPaged, T::kBlockN, typename T::LayoutK, 128>(
                smem.k_tile(slot), k_gmem, params.k_row_stride, params.k_batch_stride, smem.page_rows(), key_begin,
                valid, tid);
            copies_issued(smem.full_k(slot));
            mbarrier_wait(smem.empty_v(slot), free_parity);
            producer_load_kv<T::kPaged, T::kBlockN, typename T::LayoutV, 128>(
                smem.v_tile(slot), v_gmem, params.v_row_stride, params.v_batch_stride, smem.page_rows(), key_begin,
                valid, tid);
            copies_issued(T::kIsFp8 ? smem.loaded_v(slot) : smem.full_v(slot));
        };
        // Whole tiles from pages: the first warp's issues (load_tile_from_pages).
        auto tile_from_pages = [&](int tile) {
            if (tid < 32) load_tile_from_pages(w, it, tile, pages, page_box_rows, maps, tid);
        };
        if constexpr (T::kIsFp8) {
            load_kv_fp8(w, it, packed_k, maps, page_box_rows, copy_tile, tile_from_pages);
            return;
        }
        if constexpr (T::kTma) {
            const int first = w.first_by_copy ? 1 : 0;
            if (w.first_by_copy) copy_tile(0);
            if (tid == 0) {
                const int row0 = packed_k ? params.cu_seqlens_k[w.batch] : 0;
                const int batch_coord = packed_k ? 0 : w.batch;
                for (int tile = first; tile < w.n_tiles; ++tile) {
                    const int slot = (it + tile) % kStages;
                    const u32 free_parity = (((it + tile) / kStages) & 1) ^ 1;
                    const int row = row0 + (w.n_end - 1 - tile) * T::kBlockN;
                    // In a cluster the slot is free once every block's consumers are done
                    // with it, and each block's share lands in all of them.
                    mbarrier_wait(smem.empty_k(slot), free_parity);
                    mbarrier_arrive_expect_tx(smem.full_k(slot), T::kSmemK * 2);
                    tma_load_ring_tile<T::kQkCols, T::kBlockN, kCluster>(smem.k_tile(slot), maps.k, smem.full_k(slot),
                                                                          row, w.kv_head, batch_coord, cluster_rank_m);
                    mbarrier_wait(smem.empty_v(slot), free_parity);
                    mbarrier_arrive_expect_tx(smem.full_v(slot), T::kSmemV * 2);
                    tma_load_ring_tile<T::kVCols, T::kBlockN, kCluster>(smem.v_tile(slot), maps.v, smem.full_v(slot),
                                                                           row, w.kv_head, batch_coord, cluster_rank_m);
                }
            }
        } else if constexpr (T::kTmaPages) {
            if (page_box_rows == 0) {
                for (int tile = 0; tile < w.n_tiles; ++tile) copy_tile(tile);
                return;
            }
            if (w.first_by_copy) copy_tile(0);
            for (int tile = w.first_by_copy ? 1 : 0; tile < w.n_tiles; ++tile) tile_from_pages(tile);
        } else {
            for (int tile = 0; tile < w.n_tiles; ++tile) copy_tile(tile);
        }
    }

    // ---- K and V from pages by TMA: the work tile's key tile `tile` (the block's it + tile),
    // whole and inside the sequence, by the first warp: lane b looks up the page of box b
    // (of the tile's kBlockN / box_rows) once and issues its boxes of every 64-column block.
    // A box is one page (pages shorter than a tile) or the tile's rows of one (pages of
    // whole tiles), so it never crosses a page. FP8: V lands in the V ring (its "loaded"
    // barrier), whose slot the warpgroup's last transpose of it freed.
    __device__ __forceinline__ void load_tile_from_pages(const WorkTile& w, int it, int tile, const PageTable& pages,
                                                        int box_rows, const TmaMaps maps, int lane) const {
        const int slot = (it + tile) % kStages;
        const u32 free_parity = (((it + tile) / kStages) & 1) ^ 1;
        const int key_begin = (w.n_end - 1 - tile) * T::kBlockN;
        const bool issues = lane < T::kBlockN / box_rows;
        const PageTable::Row at = issues ? pages.locate(key_begin + lane * box_rows) : PageTable::Row{0, 0};
        mbarrier_wait(smem.empty_k(slot), free_parity);
        if (lane == 0) mbarrier_arrive_expect_tx(smem.full_k(slot), T::kSmemK * 2);
        __syncwarp();
        if (issues) {
            tma_load_page_box<T::kQkCols, T::kBlockN>(smem.k_tile(slot), maps.k, smem.full_k(slot), lane, box_rows,
                                                      at.row, w.kv_head, at.page);
        }
        const u32 v_full = T::kIsFp8 ? smem.loaded_v(slot) : smem.full_v(slot);
        if constexpr (!T::kIsFp8) mbarrier_wait(smem.empty_v(slot), free_parity);
        if (lane == 0) mbarrier_arrive_expect_tx(v_full, T::kSmemV * 2);
        __syncwarp();
        if (issues) {
            tma_load_page_box<T::kVCols, T::kBlockN>(smem.v_tile(slot), maps.v, v_full, lane, box_rows, at.row,
                                                     w.kv_head, at.page);
        }
    }

    // ---- FP8: K and V by TMA (the first tile by copies where it runs past the keys; every
    // tile from a paged cache whose pages fit no box), V transposed by the whole warpgroup --
    template <class CopyTile, class TileFromPages>
    __device__ __forceinline__ void load_kv_fp8(const WorkTile& w, const int& it, bool packed_k, const TmaMaps maps,
                                               int page_box_rows, const CopyTile& copy_tile,
                                               const TileFromPages& tile_from_pages) const {
        const int first = w.first_by_copy ? 1 : 0;
        if (w.first_by_copy) copy_tile(0);
        const int row0 = packed_k ? params.cu_seqlens_k[w.batch] : 0;
        const int batch_coord = packed_k ? 0 : w.batch;
        for (int tile = first; tile < w.n_tiles; ++tile) {
            if constexpr (T::kTmaPages) {
                if (page_box_rows == 0) {
                    copy_tile(tile);
                } else {
                    tile_from_pages(tile);
                }
            } else if (tid == 0) {
                const int slot = (it + tile) % kStages;
                const u32 free_parity = (((it + tile) / kStages) & 1) ^ 1;
                const int row = row0 + (w.n_end - 1 - tile) * T::kBlockN;
                mbarrier_wait(smem.empty_k(slot), free_parity);
                mbarrier_arrive_expect_tx(smem.full_k(slot), T::kSmemK * 2);
                tma_load_tile<T::kQkCols, T::kBlockN>(smem.k_tile(slot), maps.k, smem.full_k(slot), row, w.kv_head,
                                                      batch_coord);
                // The V slot's last tile was transposed (the warpgroup met after it).
                mbarrier_arrive_expect_tx(smem.loaded_v(slot), T::kSmemV * 2);
                tma_load_tile<T::kVCols, T::kBlockN>(smem.v_tile(slot), maps.v, smem.loaded_v(slot), row, w.kv_head,
                                                     batch_coord);
            }
            if (tile > 0) transpose(it + tile - 1);
        }
        if (w.n_tiles > 0) transpose(it + w.n_tiles - 1);
    }

    // Key tile `k` of the block (ring slot and phase): its V from the V ring into the Vt
    // ring once both are ready, then the one arrival on its "full V".
    __device__ void transpose(int k) const {
        const int slot = k % kStages;
        const u32 parity = (k / kStages) & 1;
        mbarrier_wait(smem.loaded_v(slot), parity);
        mbarrier_wait(smem.empty_v(slot), parity ^ 1);
        transpose_v<T, 128>(smem.v_tile(slot), smem.vt_tile(slot), tid);
        fence_proxy_async();  // the warpgroup's stores (generic proxy) before wgmma's reads
        named_barrier_sync(kProducerBarrier, 128);
        if (tid == 0) mbarrier_arrive(smem.full_v(slot));
    }
};

}  // namespace hopper
}  // namespace fa4
