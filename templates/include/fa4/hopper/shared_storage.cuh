// The shared memory of the warp-specialised Hopper kernel (kernel_ws.cuh): one layout,
// in bytes from the start of the block's dynamic shared memory (1024-byte aligned), whose
// size traits.cuh models as kSmemBytes (and the rendered kernel asserts):
//
//   Q slots     kWarpgroups x kQBuffers of kSmemQSlot: each consumer's rows of Q (work
//               tile r's in buffer r % kQBuffers), which also stage its O unless O has
//               slots of its own
//   O slots     kOSlots of kSmemOSlot (kSeparateO): a slot per consumer, or one shared
//   K ring      kStages tiles of kSmemK
//   V ring      kStages tiles of kSmemV (with kOInVRing, consumer c stages O in slot c)
//   Vt ring     (FP8) kStages tiles of kSmemVt: V transposed by the producer, which the
//               PV GEMM reads (the V ring then holds what TMA loaded, until transposed)
//   barriers    8 bytes each: full K, full V, empty K, empty V (kStages of each), then full
//               Q and empty Q (per consumer and Q buffer), then a shared O slot's free
//   turn word   (kMufuTurns) MufuTurn's zero, 8 bytes
//   split share (kSplitTail) the block's share of the split tail (SplitItems)
//   loaded V    (FP8) per stage, the barrier of the V tile's load; "full V" then means its
//               transpose is in the Vt slot, "empty V" that the Vt slot is free
//   page rows   (paged K/V) kBlockN pairs of 32-bit words: the page and the row within it of
//               each key of the tile the producer is copying
//
// Every tile starts on a 1024-byte swizzle atom (traits.cuh asserts the sizes).
#pragma once

#include "fa4/common/types.cuh"
#include "fa4/hopper/pipeline.cuh"
#include "fa4/hopper/schedule.cuh"
#include "fa4/hopper/traits.cuh"

namespace fa4 {
namespace hopper {

template <class T>
struct SharedStorage {
    static constexpr int kStages = T::kStages;
    static constexpr int kConsumers = T::kWarpgroups;
    static constexpr int kQBuffers = T::kQBuffers;
    static constexpr int kQSlotBytes = T::kSmemQSlot * 2;  // one consumer's Q (and, unless kSeparateO, its O)
    static constexpr int kOSlotBytes = T::kSmemOSlot * 2;
    // The regions' offsets.
    static constexpr int kOOffset = T::kSeparateO ? kConsumers * kQBuffers * kQSlotBytes : 0;
    static constexpr int kKOffset = (T::kSmemQRegion + T::kSmemORegion) * 2;
    static constexpr int kVOffset = kKOffset + kStages * T::kSmemK * 2;
    static constexpr int kBarrierOffset = T::kSmemTilesBytes;
    static constexpr int kOFreeOffset = kBarrierOffset + 8 * (4 * kStages + 2 * kConsumers * kQBuffers);
    static constexpr int kTurnOffset = kOFreeOffset + (T::kSharedO ? 8 : 0);
    static constexpr int kSplitOffset = kTurnOffset + (T::kMufuTurns ? 8 : 0);
    static constexpr int kVtOffset = kVOffset + kStages * T::kSmemV * 2;
    static constexpr int kLoadedVOffset = kSplitOffset + T::kSplitTailBytes;
    static constexpr int kPageRowsOffset = kLoadedVOffset + (T::kIsFp8 ? 8 * kStages : 0);
    static_assert(kVtOffset + kStages * T::kSmemVt * 2 == kBarrierOffset, "the tiles end where the barriers start");
    static_assert(kPageRowsOffset + T::kPageRowsBytes == T::kSmemBytes, "the layout's size is traits.cuh's kSmemBytes");

    // Shared-memory addresses of the regions.
    u32 q, o, k, v;
    u32 bars;       // the first barrier
    u32 o_free;     // a shared O slot's free
    u32 turn_word;  // MufuTurn's zero

    __device__ __forceinline__ explicit SharedStorage(u32 base)
        : q(base),
          o(base + kOOffset),
          k(base + kKOffset),
          v(k + kStages * T::kSmemK * 2),
          bars(base + kBarrierOffset),
          o_free(bars + 8 * (4 * kStages + 2 * kConsumers * kQBuffers)),
          turn_word(o_free + (T::kSharedO ? 8 : 0)) {}

    // FP8: the Vt ring and the loaded-V barriers (kVtOffset, kLoadedVOffset from the base).
    __device__ __forceinline__ u32 vt_tile(int slot) const { return q + kVtOffset + slot * T::kSmemVt * 2; }
    __device__ __forceinline__ u32 loaded_v(int slot) const { return q + kLoadedVOffset + 8 * slot; }
    // Paged K/V: the page rows (kPageRowsOffset from the base).
    __device__ __forceinline__ u32 page_rows() const { return q + kPageRowsOffset; }

    // One thread, before the block's first barrier: each barrier's arrivals per phase, and
    // the turn word's zero.
    __device__ __forceinline__ void init() const {
        for (int slot = 0; slot < kStages; ++slot) {
            mbarrier_init(full_k(slot), 1);  // the producer's one arrival (+ its copies)
            mbarrier_init(full_v(slot), 1);
            mbarrier_init(empty_k(slot), 4 * kConsumers * T::kClusterM);  // every consumer warp (of the cluster)
            mbarrier_init(empty_v(slot), 4 * kConsumers * T::kClusterM);
        }
        for (int c = 0; c < kConsumers; ++c) {
            for (int b = 0; b < kQBuffers; ++b) {
                mbarrier_init(full_q(c, b), 1);
                mbarrier_init(empty_q(c, b), 4);  // the consumer's warps
            }
        }
        if constexpr (T::kSharedO) mbarrier_init(o_free, 1);  // the last user's store has read it
        if constexpr (T::kMufuTurns) asm volatile("st.shared.u32 [%0], 0;\n" ::"r"(turn_word) : "memory");
        if constexpr (T::kIsFp8) {
            for (int slot = 0; slot < kStages; ++slot) mbarrier_init(loaded_v(slot), 1);  // the producer's one arrival
        }
    }

    // Work tile r's Q goes to buffer r % kQBuffers of each consumer's slots.
    __device__ u32 q_slot(int consumer, int buffer) const { return q + (consumer * kQBuffers + buffer) * kQSlotBytes; }
    __device__ __forceinline__ u32 k_tile(int slot) const { return k + slot * T::kSmemK * 2; }
    __device__ __forceinline__ u32 v_tile(int slot) const { return v + slot * T::kSmemV * 2; }

    __device__ u32 full_k(int slot) const { return bars + 8 * slot; }
    __device__ u32 full_v(int slot) const { return bars + 8 * (kStages + slot); }
    __device__ u32 empty_k(int slot) const { return bars + 8 * (2 * kStages + slot); }
    __device__ u32 empty_v(int slot) const { return bars + 8 * (3 * kStages + slot); }
    __device__ u32 full_q(int consumer, int buffer) const {
        return bars + 8 * (4 * kStages + consumer * kQBuffers + buffer);
    }
    __device__ u32 empty_q(int consumer, int buffer) const {
        return bars + 8 * (4 * kStages + (kConsumers + consumer) * kQBuffers + buffer);
    }
    // The block's share of a split tail (schedule.cuh), written once at the start.
    __device__ __forceinline__ SplitItems split_share() const { return SplitItems{turn_word + (T::kMufuTurns ? 8 : 0)}; }
};

}  // namespace hopper
}  // namespace fa4
