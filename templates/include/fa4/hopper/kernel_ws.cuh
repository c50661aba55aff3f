// The Hopper FlashAttention forward kernel, warp-specialised (sm_90a), composed of parts:
//
//   SharedStorage   shared_storage.cuh  the byte layout: Q/O slots, the K/V ring, barriers
//   Scheduler       tile_scheduler.cuh  which work tiles a block takes: one per block, or
//                                       persistent rounds (snake, causal sections, split tail)
//   Producer        producer.cuh        warpgroup 0: Q and the K/V ring by TMA (multicast in
//                                       a cluster) or cp.async, guarded by mbarriers
//   Turns           turns.cuh           the consumers' pingpong: at the GEMMs, the MUFU or none
//   Mainloop        mainloop.cuh        a consumer's key blocks: QK GEMM, scores, PV GEMM, in
//                                       the plain or overlapped schedule
//   Epilogue        epilogue.cuh        O / rowsum and the LSE out, split-tail meet, O slots
//
// Warpgroup 0 is the producer; warpgroups 1 .. kWarpgroups are consumers of 64 query rows
// each, which never wait on one another except for their turns:
//
//   load      Q: each consumer's 64 rows in its slot, by the producer
//   QK GEMM   S = Q K^T            wgmma SS from the K slot
//   mask      only on blocks that straddle a mask edge or the end of the keys
//   softmax   running max and sum; P = exp2(S * scale_log2 - max * scale_log2)
//   PV GEMM   O = O * rescale + P V   wgmma RS: P from registers, V from the V slot
//   epilogue  O / rowsum (sink logits join the rowsum) through shared memory, out by TMA
//             where Q came by TMA; LSE per row
//
// Persistent (kPersistent): about one block per SM walks the work tiles; the producer
// runs ahead into the next tile's Q and K/V while the consumers finish this one. The next
// Q goes into a second Q slot where shared memory holds one (kQBuffers), else into this
// one's as soon as the last QK GEMM (or, with O staged in the Q slot, O's store) is done.
// Lazy rescaling (kLazyRescale): O is rescaled only when some row's scores outgrow the
// max it is scaled to by a factor over 2^8 (fragments.cuh); without it, every key block.
//
// How the parts are written: ptxas turned out to follow the source's shape, so each part
// keeps the one the single function had, which its machine code was tuned on (the PTX of
// every served kernel is the same but for register numbers; the SASS is identical).
// Inline code became __forceinline__ functions; the former lambdas plain __device__
// functions (NVVM inlines them after simplifying each, as it did the lambdas), holding
// references to the kernel's variables as the lambdas captured them; lambdas inside a
// part capture local references, never the part; conditions stay spelled out where they
// branch. A copy of a variable, a lambda reading one through `this`, a `valid()` call in
// a loop condition, or an aggregate declared inside an always-inlined part each moved
// code. Keep to this when editing a part, and check the code hashes.
#pragma once

#include "fa4/common/mask.cuh"
#include "fa4/common/params.cuh"
#include "fa4/common/ptx.cuh"
#include "fa4/common/seqlen.cuh"
#include "fa4/common/softmax.cuh"
#include "fa4/hopper/epilogue.cuh"
#include "fa4/hopper/fragments.cuh"
#include "fa4/hopper/mainloop.cuh"
#include "fa4/hopper/pipeline.cuh"
#include "fa4/hopper/producer.cuh"
#include "fa4/hopper/shared_storage.cuh"
#include "fa4/hopper/tile_scheduler.cuh"
#include "fa4/hopper/tma.cuh"
#include "fa4/hopper/traits.cuh"
#include "fa4/hopper/turns.cuh"

namespace fa4 {
namespace hopper {

// The parts of the kernel for a config (traits.cuh's T). Another mainloop (FP8, tcgen05)
// comes in as another Parts with the same scheduler, producer and epilogue.
template <class T>
struct WsParts {
    using Scheduler = SchedulerOf<T>;
    using Producer = hopper::Producer<T>;
    using Turns = TurnsOf<T>;
    template <class BlockTurn>
    using Mainloop = hopper::Mainloop<T, Turns, BlockTurn, Scheduler>;
    using Epilogue = hopper::Epilogue<T>;
};

// ---- the consumers ----------------------------------------------------------------------
// A consumer's loop over the block's work tiles: per tile, its Q slot, the mainloop over
// the key blocks and the epilogue. `first_work` is the block's tile where the grid has
// one block per tile.
template <class T, class Parts, class Scheduler>
__device__ __forceinline__ void consume(const FwdParams& params, const TmaMaps maps, const SplitArgs& split,
                                        const SharedStorage<T>& smem, const SplitItems& split_items,
                                        const QoRows<T>& qo, const Scheduler& sched, const WorkTile& first_work,
                                        const int& kGroup, const int& warpgroup, const int& tid,
                                        const Descales* descale) {
    constexpr int kNTiles = T::kNTiles;
    constexpr int kOTiles = T::kOTiles;
    constexpr int kStages = T::kStages;
    constexpr int kCluster = T::kClusterM;
    constexpr int kQBuffers = T::kQBuffers;
    constexpr bool kSharedO = T::kSharedO;
    constexpr int kQSlotBytes = T::kSmemQSlot * 2;
    constexpr int kOSlotBytes = T::kSmemOSlot * 2;
    using Coords = typename Scheduler::Coords;
    using Turns = typename Parts::Turns;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    if constexpr (T::kConsumerRegs > 0) registers_claim<T::kConsumerRegs>();
    const int consumer = warpgroup - 1;
    const int warp = tid / 32;
    const int lane = tid % 32;
    const int quad_row = lane / 4;
    const int quad_col = lane % 4;
    // Its O staging slot: a slot of its own, the shared one, its slot of the V ring
    // (kOInVRing), or its Q slot (its QK GEMMs, the only readers, are done by then).
    // (The sum grouped as each family's kernels were checked and timed with it: regrouping
    // moves ptxas's epilogue schedule, and the tuning records name machine code.)
    u16* const o_stage =
        T::kIsFp8 ? reinterpret_cast<u16*>(smem_raw) +
                        (T::kOInVRing ? (smem.v - smem.q) / 2 + consumer * T::kSmemV
                                      : (smem.o - smem.q) / 2 +
                                            (kSharedO ? 0 : consumer * (T::kSeparateO ? kOSlotBytes : kQSlotBytes) / 2))
                  : reinterpret_cast<u16*>(smem_raw) + (smem.o - smem.q) / 2 +
                        (kSharedO ? 0 : consumer * (T::kSeparateO ? kOSlotBytes : kQSlotBytes) / 2);
    const float score_scale_log2 = T::kSoftcap ? softcap_scale_log2(params) : params.scale_log2;

    const Turns turns{consumer, smem.turn_word};
    const auto block_turn = turns.block();
    turns.start();
    const SlotRelease<kCluster> release{lane};  // a warp's arrival on a slot's empty barrier
    const typename Parts::Epilogue epilogue{params, split, split_items, smem, qo, o_stage, consumer, tid, warp, kGroup};

    int it = 0;       // key tiles consumed over the block's work tiles (ring slot and phase)
    int q_round = 0;  // work tiles (Q's phase)
    // A persistent grid's next tile: worked out under the last PV GEMM (mainloop.cuh).
    Coords next_at = T::kPersistent ? sched.coords(0) : Coords{};
    for (int round = 0; round < sched.rounds; ++round) {
        const WorkTile w = T::kPersistent ? sched.work(next_at) : first_work;
        if (!w.has_rows()) {
            if constexpr (kCluster > 1) {
                // Past the sequence's rows in a cluster that has some: the tiles land here
                // too (the others' producers multicast them); free each once it is in.
                for (int tile = 0; tile < w.n_tiles; ++tile) {
                    const int slot = (it + tile) % kStages;
                    const u32 parity = ((it + tile) / kStages) & 1;
                    mbarrier_wait(smem.full_k(slot), parity);
                    release.kv(smem.empty_k(slot));
                    mbarrier_wait(smem.full_v(slot), parity);
                    release.kv(smem.empty_v(slot));
                }
                it += w.n_tiles;
            }
            if constexpr (T::kPersistent) next_at = sched.coords(round + 1);
            continue;
        }
        const SeqView& seq = w.seq;
        const int rows = w.rows;
        const int head = w.head;
        const int n_end = w.n_end;
        const int n_tiles = w.n_tiles;
        const Mask<T::kMask> mask{seq.seqlen_q, seq.seqlen_k, params.window_left, params.window_right};
        const int wg_row_begin = w.row_begin + consumer * 64;  // this consumer's first row
        const FragmentRows rows_at{wg_row_begin + warp * T::kRowsPerWarp, kGroup, quad_row, quad_col};
        // The keys this consumer's rows see end here (its last row sees the most).
        const int wg_col_end = mask.col_end((imin(wg_row_begin + 64, rows) - 1) / kGroup);

        // FP8: the tile's sequence and KV head dequantise Q and K by factors that fold into
        // the softmax scale (and V's into O, below). Soft-capped, they scale the scores
        // before the tanh instead (the tile's own copy of the arguments carries them in
        // its softmax_scale), and the exp2 keeps the cap's scale.
        float fp8_scale_log2 = 0.f;
        FwdParams fp8_capped;  // (FP8 soft-capped kernels only)
        if constexpr (T::kIsFp8 && T::kSoftcap) {
            fp8_capped = params;
            fp8_capped.softmax_scale *= descale->at(descale->q, w.batch, w.kv_head) *
                                        descale->at(descale->k, w.batch, w.kv_head);
            fp8_scale_log2 = score_scale_log2;
        } else if constexpr (T::kIsFp8) {
            fp8_scale_log2 = score_scale_log2 * descale->at(descale->q, w.batch, w.kv_head) *
                             descale->at(descale->k, w.batch, w.kv_head);
        }
        const float& tile_scale_log2 = T::kIsFp8 ? fp8_scale_log2 : score_scale_log2;
        const FwdParams& loop_params = T::kIsFp8 && T::kSoftcap ? fp8_capped : params;

        // ---- load: this consumer's Q rows, by the producer --------------------------------
        const int qb = q_round % kQBuffers;
        const u32 q_tile = smem.q_slot(consumer, qb);
        mbarrier_wait(smem.full_q(consumer, qb), (q_round / kQBuffers) & 1);
        if (!qo.by_tma(rows - wg_row_begin)) fence_proxy_async();  // cp.async's writes before wgmma's reads

        float o_acc[kOTiles * 4];
#pragma unroll
        for (int i = 0; i < kOTiles * 4; ++i) o_acc[i] = 0.f;
        RescalingSoftmax<kNTiles, T::kLazyRescale, T::kExp2EmuEvery, T::kPShiftLog2> softmax;
        softmax.init();
        float s[1][kNTiles][4];
        float(&s_flat)[kNTiles * 4] = reinterpret_cast<float(&)[kNTiles * 4]>(s[0]);
        u32 p[T::kPvSteps][4];
        // The half block's QK accumulators (below), copied into S's first half once in:
        // accumulating into S itself made ptxas serialise the wgmmas of d256's 80-key tiles
        // (C7511), where registers are tightest.
        float s_half[kNTiles * 2];

        // The first block's width (mainloop.cuh's FirstBlock*): at most half of it visible
        // to this consumer, or none of it (there is no narrow block without a mask).
        const bool half_first =
            T::kHalfFirst && n_tiles > 0 && wg_col_end - (n_end - 1) * T::kBlockN <= T::kBlockN / 2;
        const bool hidden_first = T::kHiddenFirst && n_tiles > 0 && wg_col_end <= (n_end - 1) * T::kBlockN;

        // ---- mainloop (mainloop.cuh) ------------------------------------------------------
        using Mainloop = typename Parts::template Mainloop<decltype(block_turn)>;
        const typename Mainloop::First first{T::kHiddenFirst ? hidden_first : half_first};
        const Mainloop mainloop{
            loop_params, smem, turns, block_turn, release, tile_scale_log2, consumer, it, w, n_end, n_tiles, mask, rows_at,
            q_tile, qb, first, o_acc, softmax, s, s_flat, p, s_half, next_at, sched, round};
        // The key blocks, down the offset's path: kCapOffset fixes it by the cap where the
        // cap allows (fragments.cuh), chosen once, so each path is its own copy of the loop.
        bool offset_in_log2 = false;
        if constexpr (T::kCapOffset) {
            offset_in_log2 = softmax.cap_offset_fits(score_scale_log2);
            if (offset_in_log2) {
                softmax.init_cap_offset(score_scale_log2);
                mainloop.run(CapOffset<true>{});
            } else {
                mainloop.run(CapOffset<false>{});
            }
        } else {
            mainloop.run(CapOffset<false>{});
        }

        // ---- epilogue (epilogue.cuh) ------------------------------------------------------
        // Its per-row numbers live in this frame: declared in the epilogue, ptxas's code
        // moved.
        float o_norm[2];     // the factor that normalises O
        float lse[2];
        float sink_log2[2];  // the sink logit of the row's head
        if constexpr (T::kIsFp8) {
            const float v_factor = descale->at(descale->v, w.batch, w.kv_head);
#pragma unroll
            for (int i = 0; i < kOTiles * 4; ++i) o_acc[i] *= v_factor;
        }
        epilogue.store(o_acc, softmax, offset_in_log2, tile_scale_log2, w, rows_at, wg_row_begin, round, maps,
                       o_norm, lse, sink_log2);

        it += n_tiles;
        ++q_round;
        if constexpr (T::kPersistent && !T::kSeparateO) {
            // The next tile's Q lands where this one's O was staged (by the async proxy),
            // once the TMA store has read it.
            fence_proxy_async();
            if (T::kTma && tid == 0) tma_store_wait_read();
            release(smem.empty_q(consumer, qb));
        }
    }
    epilogue.finish();
}

// ---- the kernel ---------------------------------------------------------------------------
// `split`: the TMA kernels' split tail arguments (TmaFwdParams), a reference into the
// parameters like `params`, read where used: taken by value or by pointer, they held
// registers through the key loop, which spilled at d256 and d128 over 176 keys.
// `descale`: FP8 kernels' descales (Fp8TmaFwdParams), else null.
template <class Config, class Parts = WsParts<Traits<Config>>>
__device__ __forceinline__ void forward_warp_specialized(const FwdParams& params, const TmaMaps maps,
                                                         const SplitArgs& split, const Descales* descale = nullptr) {
    using T = Traits<Config>;
    constexpr int kCluster = T::kClusterM;  // blocks per cluster, sharing their K/V loads

    // ---- shared memory (shared_storage.cuh) -----------------------------------------------
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const SharedStorage<T> smem(smem_u32(smem_raw));
    const SplitItems split_items = smem.split_share();

    // ---- the work tiles (tile_scheduler.cuh) ----------------------------------------------
    using Scheduler = typename Parts::Scheduler;
    Scheduler sched(params, split, split_items);
    const int kGroup = sched.row_group;
    // A block of a cluster whose first block has rows stays, rows or not: it loads its
    // share of the cluster's K/V tiles, and its consumers free its slots for the others.
    WorkTile first_work{};  // one block per tile: its tile, worked out once
    const int cluster_rank_m = kCluster > 1 ? int(cluster_rank()) : 0;
    if constexpr (!T::kPersistent) {
        first_work = sched.work_at(0);
        const bool cluster_has_rows = first_work.row_begin - cluster_rank_m * T::kBlockM < first_work.rows;
        if (!first_work.has_rows() && !(kCluster > 1 && cluster_has_rows)) return;
    }
    const QoRows<T> qo(params);  // Q's and O's rows: by TMA or by copies

    // ---- barriers ---------------------------------------------------------------------------
    if (threadIdx.x == 0) {
        smem.init();
        sched.write_share();
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    // A cluster's blocks arrive on and load into each other's barriers from here on.
    if constexpr (kCluster > 1) {
        cluster_sync();
    } else {
        __syncthreads();
    }
    sched.read_share();

    const int warpgroup = warp_uniform(threadIdx.x / 128);  // the slots' addresses follow from it
    const int tid = threadIdx.x % 128;  // within the warpgroup

    // ---- producer (producer.cuh) ----------------------------------------------------------
    if (warpgroup == 0) {
        const typename Parts::Producer producer{params, smem, qo, tid, kGroup};
        producer.run(sched, first_work, maps, cluster_rank_m, split.page_box_rows);
        return;
    }

    // ---- consumers -----------------------------------------------------------------------
    consume<T, Parts>(params, maps, split, smem, split_items, qo, sched, first_work, kGroup, warpgroup, tid, descale);
}

}  // namespace hopper
}  // namespace fa4
