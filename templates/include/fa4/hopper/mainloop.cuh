// The consumer mainloop of the warp-specialised Hopper kernel (kernel_ws.cuh): one work
// tile's key blocks, last first, for one consumer's 64 query rows.
//
//   QK GEMM   S = Q K^T            wgmma SS from the Q and K slots
//   scores    soft-capping, the mask (only on blocks that straddle a mask edge or the end
//             of the keys), online softmax: P = exp2(S * scale_log2 - max * scale_log2)
//   PV GEMM   O = O * rescale + P V   wgmma RS: P from registers, V from the V slot
//
// Two schedules: plain (QK, softmax, PV, each waited for, block by block) and overlapped
// (kOverlap: iteration j issues QK(j) and then PV(j - 1) before waiting for either, so the
// softmax of block j runs under PV(j - 1)). Turns (turns.cuh) and the first block's width
// (FirstBlock*, below) are policy types; the accumulators and the softmax state are the
// caller's, as FlashAttention-3's mainloop takes them.
//
// The former lambdas of the kernel are plain __device__ functions here, holding
// references to the consumer's variables as the lambdas captured them, and the lambdas
// that remain capture local references, never the mainloop itself: PTX identical to the
// single function it was (an always-inlined part, a copy of a variable, or a lambda that
// reads one through `this` each moved ptxas's code).
#pragma once

#include "fa4/common/mask.cuh"
#include "fa4/common/params.cuh"
#include "fa4/hopper/fragments.cuh"
#include "fa4/hopper/pipeline.cuh"
#include "fa4/hopper/shared_storage.cuh"
#include "fa4/hopper/tile_scheduler.cuh"
#include "fa4/hopper/traits.cuh"
#include "fa4/hopper/wgmma.cuh"

namespace fa4 {
namespace hopper {

// ---- the first block's width --------------------------------------------------------------
// With a mask, the first block (the last keys) often reaches past a consumer's last
// visible key: causal's diagonal block for the first of two consumers, half of 128 keys or
// all of 64 or 80. The choice is the consumer's, uniform over its warpgroup, and fixed at
// compile time down each of its paths: a wgmma's accumulators must not differ between
// paths that join while it runs (ptxas serialises every wgmma then). with_width_of(tile,
// body) runs body(LiveTiles<n>) for the block's live 8-column fragments.
//
//   FirstBlockWhole   every block whole (no mask, or the config space found no gain)
//   FirstBlockHalf    (kHalfFirst) where at most half of it is visible, its QK GEMM runs
//                     over that half (an N / 2 wgmma into s_half, copied into S once in),
//                     its softmax too (p is 0 beyond), its PV GEMM over the k-steps that
//                     half's keys span. (Skipping a hidden block outright threw the
//                     consumers' pingpong out of step: 0.94x at d256.)
//   FirstBlockHidden  (kHiddenFirst: MUFU turns, no half path, head dims past 128) a first
//                     block the consumer sees none of goes down a path of no live
//                     fragments, with no GEMM and no exponential; its slots are waited for
//                     and freed, and its turn at the MUFU is taken and passed so that the
//                     pair's softmaxes stay in turn (skipped with turns at the GEMMs
//                     instead, one consumer ran into its second softmax during the other's
//                     first: 0.94x at d256)
template <int kNTiles>
struct FirstBlockWhole {
    const bool& narrow;  // unused: every block is whole
    template <class Body>
    __device__ void with_width_of(int, Body&& body) const {
        body(LiveTiles<kNTiles>{});
    }
};

template <int kNTiles>
struct FirstBlockHalf {
    static_assert(kNTiles % 2 == 0, "the half block is whole 8-column fragments");
    const bool& narrow;  // the consumer sees at most half of its first block
    template <class Body>
    __device__ void with_width_of(int tile, Body&& body) const {
        if (tile == 0 && narrow) {
            body(LiveTiles<kNTiles / 2>{});
            return;
        }
        body(LiveTiles<kNTiles>{});
    }
};

template <int kNTiles>
struct FirstBlockHidden {
    const bool& narrow;  // the consumer sees none of its first block
    template <class Body>
    __device__ void with_width_of(int tile, Body&& body) const {
        if (tile == 0 && narrow) {
            body(LiveTiles<0>{});
            return;
        }
        body(LiveTiles<kNTiles>{});
    }
};

template <class T>
using FirstBlockOf = typename Select<T::kHalfFirst, FirstBlockHalf<T::kNTiles>,
                                     typename Select<T::kHiddenFirst, FirstBlockHidden<T::kNTiles>,
                                                     FirstBlockWhole<T::kNTiles>>::type>::type;

// ---- the mainloop -----------------------------------------------------------------------
template <class T, class Turns, class BlockTurn, class Scheduler>
struct Mainloop {
    static constexpr bool kBf16 = T::kIsBf16;
    static constexpr int kNTiles = T::kNTiles;
    static constexpr int kOTiles = T::kOTiles;
    static constexpr int kStages = T::kStages;
    using MmaO = Wgmma<T::kHeadDimVPad, typename T::Element>;
    using LayoutQ = WgmmaLayout<64, T::kQkCols>;  // one consumer's rows
    using Whole = LiveTiles<kNTiles>;
    using Softmax = RescalingSoftmax<kNTiles, T::kLazyRescale, T::kExp2EmuEvery, T::kPShiftLog2>;
    using Coords = typename Scheduler::Coords;
    using First = FirstBlockOf<T>;
    // A persistent grid places its next work tile (the schedule's integer divisions) under
    // this tile's last PV GEMM, off the path from one tile to the next, where O has a slot
    // of its own and K/V are not paged. Otherwise (d256, d128 over 176 keys, pages) the
    // registers are short: ptxas then serialised every wgmma (C7514, 0.63x), so there it
    // waits for the PV GEMM.
    static constexpr bool kNextUnderPv = T::kPersistent && T::kSeparateO && !T::kSharedO && !T::kPaged;

    // The block's and the consumer's.
    const FwdParams& params;
    const SharedStorage<T>& smem;
    const Turns& turns;
    const BlockTurn& block_turn;  // what a block's exponentials run inside
    const SlotRelease<T::kClusterM>& release;
    const float& score_scale_log2;
    const int& consumer;
    // The work tile's.
    const int& it;  // key tiles consumed before this work tile (ring slot and phase)
    const WorkTile& w;
    const int& n_end;
    const int& n_tiles;
    const Mask<T::kMask>& mask;
    const FragmentRows& rows_at;
    const u32& q_tile;  // this consumer's Q slot
    const int& qb;      // its buffer (freed once the last QK GEMM is done, with kSeparateO)
    const First& first;
    // The accumulators: O and the softmax state (the caller's), S, P and the half block's S.
    float (&o_acc)[kOTiles * 4];
    Softmax& softmax;
    float (&s)[1][kNTiles][4];
    float (&s_flat)[kNTiles * 4];
    u32 (&p)[T::kPvSteps][4];
    // The half block's QK accumulators, copied into S's first half once in: accumulating
    // into S itself made ptxas serialise the wgmmas of d256's 80-key tiles (C7511), where
    // registers are tightest.
    float (&s_half)[kNTiles * 2];
    // The next work tile's coordinates, worked out under the last PV GEMM (persistent).
    Coords& next_at;
    const Scheduler& sched;
    const int& round;

    // ---- QK GEMM: S = Q K^T over the live fragments (wgmma SS), issued only ---------------
    template <class Live>
    __device__ void issue_qk(int tile, Live) const {
        constexpr int kLive = Live::value;
        const int slot = (it + tile) % kStages;
        mbarrier_wait(smem.full_k(slot), ((it + tile) / kStages) & 1);
        if constexpr (kLive > 0) {
            using Mma = Wgmma<kLive * 8, typename T::Element>;
            // cp.async's writes (generic proxy) before wgmma's reads; TMA's need no fence.
            if (!T::kTma || (tile == 0 && w.first_by_copy)) fence_proxy_async();
            const u32 k_tile = smem.k_tile(slot);
            wgmma_fence();
#pragma unroll
            for (int ks = 0; ks < T::kQkSteps; ++ks) {
                const u64 q_desc = k_major_desc<LayoutQ>(q_tile, ks);
                const u64 k_desc = k_major_desc<typename T::LayoutK>(k_tile, ks);
                if constexpr (kLive == kNTiles) {
                    Mma::ss(s_flat, q_desc, k_desc, ks > 0);
                } else {
                    Mma::ss(s_half, q_desc, k_desc, ks > 0);
                }
            }
            wgmma_commit();
        }
    }

    // ---- PV GEMM: O += P V over the live fragments' keys, issued only --------------------
    // (wgmma RS: P from registers, V MN-major; a k16 step covers two fragments. FP8:
    // issue_pv_vt.)
    template <class Live>
    __device__ void issue_pv(int tile, Live) const {
        if constexpr (T::kIsFp8) {
            static_assert(Live::value == kNTiles, "FP8 key blocks are whole");
            issue_pv_vt(tile);
        } else {
            constexpr int kSteps = live_pv_steps<Live::value>();
            const int slot = (it + tile) % kStages;
            mbarrier_wait(smem.full_v(slot), ((it + tile) / kStages) & 1);
            if (!T::kTma || (tile == 0 && w.first_by_copy)) fence_proxy_async();
            const u32 v_tile = smem.v_tile(slot);
            wgmma_fence();
#pragma unroll
            for (int ks = 0; ks < kSteps; ++ks) {
                MmaO::rs(o_acc, p[ks], mn_major_desc<typename T::LayoutV>(v_tile, ks), 1);
            }
            wgmma_commit();
        }
    }
    // FP8: from Vt, the producer's K-major transpose (which it fenced for the async proxy);
    // a k32 step covers four fragments.
    __device__ void issue_pv_vt(int tile) const {
        const int slot = (it + tile) % kStages;
        mbarrier_wait(smem.full_v(slot), ((it + tile) / kStages) & 1);
        const u32 vt_tile = smem.vt_tile(slot);
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < T::kPvSteps; ++ks) {
            MmaO::rs(o_acc, p[ks], k_major_desc<typename T::LayoutVt>(vt_tile, ks), 1);
        }
        wgmma_commit();
    }

    // ---- soft-capping, mask, online softmax on S (which the QK GEMM has written) ----------
    // Returns whether O must be rescaled by o_scale (lazy: the same answer for the whole
    // warp, so the rescale is skipped without divergence; else always). (`fixed`:
    // CapOffset<true> under the cap's fixed offset, where O needs no rescale.)
    template <class Live, class Fixed>
    __device__ bool scores(int tile, Live, float (&o_scale)[2], Fixed) const {
        const int col_begin = (n_end - 1 - tile) * T::kBlockN;
        const bool needs_mask = block_needs_mask<T::kBlockN>(mask, tile == 0, w.query_first, w.query_last, col_begin);
        if constexpr (Fixed::value) {
            block_scores_cap_offset<Live::value>(s, softmax, params, mask, needs_mask, rows_at, col_begin,
                                                 score_scale_log2, block_turn);
            return false;
        } else {
            const bool rescales = block_scores<Live::value, T::kSoftcap>(s, softmax, params, mask, needs_mask, rows_at,
                                                                         col_begin, score_scale_log2, o_scale, block_turn);
            return T::kLazyRescale ? __any_sync(0xffffffffu, rescales) : true;
        }
    }
    template <class Live>
    __device__ void pack(Live) const {
        if constexpr (T::kIsFp8) {
            pack_p_e4m3(s, p);
        } else {
            pack_p<kBf16, Live::value>(s, p);
        }
    }
    __device__ void rescale_o(const float (&o_scale)[2]) const {
#pragma unroll
        for (int ot = 0; ot < kOTiles; ++ot)
#pragma unroll
            for (int e = 0; e < 4; ++e) o_acc[ot * 4 + e] *= o_scale[e / 2];
    }
    __device__ void pv_done(int tile) const {
        fence_regs(o_acc);
#pragma unroll
        for (int ks = 0; ks < T::kPvSteps; ++ks) fence_regs(p[ks]);
        release.kv(smem.empty_v((it + tile) % kStages));
    }

    // QK(tile) in its turn, waited for; then its scores and P. Returns whether O must be
    // rescaled (the overlapped schedule ignores the first block's answer: O is still zero).
    template <class Live, class Fixed>
    __device__ bool qk_scores(int tile, Live live, float (&o_scale)[2], Fixed fixed) const {
        turns.take();
        issue_qk(tile, live);
        turns.pass();
        wgmma_wait<0>();
        constexpr int kLiveQ = Live::value;
        if constexpr (kLiveQ == 0) {
            // no scores: the hidden block's softmax only takes its turn
        } else if constexpr (kLiveQ < kNTiles) {
            fence_regs(s_half);
#pragma unroll
            for (int i = 0; i < kNTiles * 2; ++i) s_flat[i] = s_half[i];
        } else {
            fence_regs(s_flat);
        }
        release.kv(smem.empty_k((it + tile) % kStages));
        return scores(tile, live, o_scale, fixed);
    }

    // ---- the key blocks, down the exponent offset's path (`fixed`, kCapOffset) ------------
    template <class Fixed>
    __device__ void run(Fixed fixed) const {
        // (The blocks' lambdas capture these, not the mainloop.)
        const First& first = this->first;
        const Turns& turns = this->turns;
        const SlotRelease<T::kClusterM>& release = this->release;
        const SharedStorage<T>& smem = this->smem;
        const int& it = this->it;
        const int& n_tiles = this->n_tiles;
        float(&s_flat)[kNTiles * 4] = this->s_flat;
        Coords& next_at = this->next_at;
        const Scheduler& sched = this->sched;
        const int& round = this->round;
        if constexpr (T::kOverlap) {
            // Block 0 alone; then QK(j) and PV(j - 1) in one turn, softmax(j) under PV(j - 1);
            // the last PV GEMM in a turn of its own.
            if (n_tiles > 0) {
                first.with_width_of(0, [&](auto live) {
                    float o_scale[2];
                    qk_scores(0, live, o_scale, fixed);  // O is still zero: nothing to rescale
                    pack(live);
                });
            }
            for (int tile = 1; tile < n_tiles; ++tile) {
                first.with_width_of(tile - 1, [&](auto live_prev) {
                    turns.take();
                    issue_qk(tile, Whole{});
                    issue_pv(tile - 1, live_prev);
                    turns.pass();
                    wgmma_wait<1>();  // S(tile) is in; PV(tile - 1) may still run
                    fence_regs(s_flat);
                    release.kv(smem.empty_k((it + tile) % kStages));
                    float o_scale[2];
                    const bool rescale = scores(tile, Whole{}, o_scale, fixed);
                    wgmma_wait<0>();
                    pv_done(tile - 1);
                    if (rescale) rescale_o(o_scale);
                    pack(Whole{});
                });
            }
            // Every QK GEMM is done: the producer may load the next tile's Q.
            if constexpr (T::kSeparateO) release(smem.empty_q(consumer, qb));
            if (n_tiles > 0) {
                first.with_width_of(n_tiles - 1, [&](auto live) {
                    turns.take();
                    issue_pv(n_tiles - 1, live);
                    turns.pass();
                    if constexpr (kNextUnderPv) next_at = sched.coords(round + 1);
                    wgmma_wait<0>();
                    pv_done(n_tiles - 1);
                });
            } else if constexpr (kNextUnderPv) {
                next_at = sched.coords(round + 1);
            }
            if constexpr (T::kPersistent && !kNextUnderPv) next_at = sched.coords(round + 1);
        } else {
            // QK, softmax, PV, each waited for, block by block.
            for (int tile = 0; tile < n_tiles; ++tile) {
                first.with_width_of(tile, [&](auto live) {
                    float o_scale[2];
                    if (qk_scores(tile, live, o_scale, fixed)) rescale_o(o_scale);
                    pack(live);
                    turns.take();
                    issue_pv(tile, live);
                    turns.pass();
                    wgmma_wait<0>();
                    pv_done(tile);
                });
            }
            if constexpr (T::kSeparateO) release(smem.empty_q(consumer, qb));
            if constexpr (T::kPersistent) next_at = sched.coords(round + 1);
        }
    }
};

}  // namespace hopper
}  // namespace fa4
