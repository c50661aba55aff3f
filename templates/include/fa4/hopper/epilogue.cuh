// The epilogue of a consumer of the warp-specialised Hopper kernel (kernel_ws.cuh): per
// work tile, O / rowsum (sink logits join the rowsum) through shared memory to global
// memory, and the LSE per row.
//
// O is staged in this consumer's own slot: its Q slot (its QK GEMMs, the only readers, are
// done), its slot of the V ring (kOInVRing: FP8's d256 over 128 keys) or, with kSeparateO,
// one of its own, which the last tile's O may still be leaving: its TMA store must have
// read it, every thread its rows. With kSharedO the two consumers
// take one slot in turn. Chunks whose Q came by TMA leave by one thread's TMA store, the
// others by the consumer's 16-byte stores. A piece of a split tile meets the other piece
// first (split.cuh): the second to finish writes the tile.
#pragma once

#include "fa4/common/params.cuh"
#include "fa4/common/tile_copy.cuh"
#include "fa4/hopper/fragments.cuh"
#include "fa4/hopper/pipeline.cuh"
#include "fa4/hopper/producer.cuh"
#include "fa4/hopper/schedule.cuh"
#include "fa4/hopper/shared_storage.cuh"
#include "fa4/hopper/split.cuh"
#include "fa4/hopper/tile_scheduler.cuh"
#include "fa4/hopper/tma.cuh"
#include "fa4/hopper/traits.cuh"
#include "fa4/hopper/wgmma.cuh"

namespace fa4 {
namespace hopper {

template <class T>
struct Epilogue {
    static constexpr bool kBf16 = T::kIsBf16;
    static constexpr int kOTiles = T::kOTiles;
    static constexpr int kConsumers = T::kWarpgroups;
    using LayoutO = WgmmaLayout<64, T::kHeadDimV>;  // one consumer's rows

    // References to the kernel's own variables, as the lambdas that read them capture
    // them (copies held here moved ptxas's code).
    const FwdParams& params;
    const SplitArgs& split;          // the split tail's arguments, read where used
    const SplitItems& split_items;   // the block's share of the split tail
    const SharedStorage<T>& smem;
    const QoRows<T>& qo;
    u16* const& o_stage;             // this consumer's O staging slot
    const int& consumer;
    const int& tid;                  // within the warpgroup
    const int& warp;                 // within the warpgroup
    const int& row_group;            // block rows per query row (pack-GQA)

    // Work tile `w` (round `round` of the block), this consumer's rows from wg_row_begin:
    // O from o_acc, normalised by `softmax`'s row sums (offset_in_log2: kCapOffset's max
    // in log2 units).
    template <class Softmax>
    __device__ __forceinline__ void store(float (&o_acc)[kOTiles * 4], Softmax& softmax, bool offset_in_log2,
                                          float score_scale_log2, const WorkTile& w, const FragmentRows& rows_at,
                                          int wg_row_begin, int round, const TmaMaps maps, float (&o_norm)[2],
                                          float (&lse)[2], float (&sink_log2)[2]) const {
        const FwdParams& params = this->params;
        const int& row_group = this->row_group;
        const SeqView& seq = w.seq;
        const int rows = w.rows;
        const int head = w.head;
        sink_logits<T::kSinks>(params, head, rows_at, sink_log2);
        softmax.template finalize<T::kSinks>(offset_in_log2 ? 1.f : score_scale_log2, sink_log2, o_norm, lse);
        if constexpr (T::kSharedO) {
            // The slot's u-th use (u = 2 x epilogues so far + consumer) waits for phase
            // u - 1, the other consumer's last free: parity 1 for consumer 0 (the first
            // use passes at once), 0 for consumer 1, every time.
            mbarrier_wait(smem.o_free, (consumer & 1) ^ 1);
        } else if constexpr (T::kSeparateO) {
            if (T::kTma && tid == 0) tma_store_wait_read();
            named_barrier_sync(1 + consumer, 128);
        }
        // A piece of a split tile leaves its O and LSE in the workspace; the second piece
        // to finish merges the first's and writes the tile's O and LSE (split.cuh). Its
        // slot comes from shared memory: carried through the key loop in registers, it
        // spilled at d256 and cost other tiles uniform-register moves there.
        bool writes_o = true;
        if constexpr (T::kSplitTail) writes_o = meet_split(o_acc, o_norm, lse, round);
        if (writes_o) {
            stage_o<kBf16, LayoutO>(o_stage, o_acc, o_norm, warp * T::kRowsPerWarp, rows_at);
            store_lse(params, seq.lse_offset, head, rows_at, rows, lse);
            const bool o_by_tma = qo.by_tma(rows - wg_row_begin);
            if (o_by_tma) fence_proxy_async();  // the staged O (generic proxy) before the TMA store reads it
            named_barrier_sync(1 + consumer, 128);
            if (o_by_tma) {
                if (tid == 0) {
                    tma_store_tile<T::kHeadDimV, 64>(smem_u32(o_stage), maps.o, qo.map_row(w) + wg_row_begin, head,
                                                     qo.map_batch(w));
                }
            } else {
                u16* const o_gmem = static_cast<u16*>(params.o) + seq.o_offset + head * params.o_head_stride;
                store_rows<64, LayoutO, 128>(
                    [&](int r) {
                        const int row = wg_row_begin + r;
                        return T::kPackGqa ? o_gmem + i64(row / row_group) * params.o_row_stride +
                                                 (row % row_group) * params.o_head_stride
                                           : o_gmem + i64(row) * params.o_row_stride;
                    },
                    o_stage, rows - wg_row_begin, tid);
            }
        }
        if constexpr (T::kSharedO) {
            // Free once every thread has read its rows (store_rows) and the TMA store its
            // chunk. (Both waits, whichever path ran: branching on o_by_tma here took
            // ptxas's uniform registers off the main loop's descriptors, 471 -> 514
            // instructions per iteration.)
            named_barrier_sync(1 + consumer, 128);
            if (tid == 0) {
                tma_store_wait_read();
                mbarrier_arrive(smem.o_free);
            }
        }
    }

    __device__ bool meet_split(float (&o_acc)[kOTiles * 4], float (&o_norm)[2], float (&lse)[2], const int& round) const {
        bool writes_o = true;
        if (split.tail > 0 && round >= split_items.whole_rounds()) {
            TailItem item;
            split_items.item(round - split_items.whole_rounds(), item);
            if (item.slot > 0) {
                const SplitWorkspace<kOTiles, kConsumers> ws{static_cast<char*>(split.workspace)};
                writes_o = split_meet<kOTiles>(o_acc, o_norm, lse, ws.entry(item.slot, item.piece, consumer),
                                               ws.entry(item.slot, 1 - item.piece, consumer),
                                               ws.counter(item.slot, consumer), smem_u32(o_stage), tid,
                                               1 + consumer);
            }
        }
        return writes_o;
    }

    // After the block's last tile: shared memory outlives the reads of the last TMA store
    // ... and, in a cluster, the other blocks' last arrivals on its barriers.
    __device__ __forceinline__ void finish() const {
        if (T::kTma && tid == 0) tma_store_wait_read();
        if constexpr (T::kClusterM > 1) cluster_sync();
    }
};

}  // namespace hopper
}  // namespace fa4
