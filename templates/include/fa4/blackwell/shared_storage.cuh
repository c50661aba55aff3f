// The shared memory of the Blackwell kernel, in bytes from the block's dynamic shared
// memory (1024-byte aligned); traits.cuh's kSmemBytes is its size:
//
//   Q         kQStages tiles of 128 rows (WgmmaLayout: 64-column blocks of 128-byte rows,
//             128-byte swizzle), loaded once by TMA
//   K ring    kStages tiles of kBlockN rows
//   V ring    kStages tiles of kBlockN rows
//   stats     per Q stage, per row: O's rescale factor for the block in flight (softmax to
//             correction), then the row's sum and max once the last block is done
//   barriers  8 bytes each, per ring slot: K full, V full, V landed, K empty, V empty;
//             per Q stage: Q full, S full, P full, stats full, O ready, O corrected, final
//   TMEM      the address tmem_alloc wrote, 8 bytes
//
// Who arrives on each barrier, and how many arrivals a phase takes:
//
//   K/V full     the load warp's arrival with the tile's bytes (1); a key block that runs
//                past the sequence lands V on "V landed" instead, and the load warp
//                arrives on "V full" once it has zeroed the rows past the keys (1)
//   K/V empty    tcgen05.commit by the MMA thread once the GEMMs reading the slot are done
//   Q full       the load warp's arrival with the tile's bytes (1)
//   S full       tcgen05.commit once S_q = Q_q K^T is in TMEM (1)
//   P full       every softmax thread, P_q stored to TMEM (128)
//   stats full   every softmax thread, O's rescale for the block written (128)
//   O ready      tcgen05.commit once O_q += P_q V is in TMEM (1)
//   O corrected  every correction thread, O_q rescaled (128)
//   final        every softmax thread, the row's sum and max written (128)
#pragma once

#include "fa4/blackwell/traits.cuh"
#include "fa4/hopper/pipeline.cuh"

namespace fa4 {
namespace blackwell {

template <class T>
struct SharedStorage {
    static constexpr int kQOffset = 0;
    static constexpr int kKOffset = kQOffset + T::kQStages * T::kQTileBytes;
    static constexpr int kVOffset = kKOffset + T::kStages * T::kKTileBytes;
    static constexpr int kStatsOffset = kVOffset + T::kStages * T::kVTileBytes;
    static constexpr int kBarrierOffset = kStatsOffset + T::kStatsBytes;
    static constexpr int kTmemSlotOffset = kBarrierOffset + 8 * T::kBarriers;
    static_assert(kTmemSlotOffset + 8 == T::kSmemBytes, "the layout's size is traits.cuh's kSmemBytes");

    u32 base;

    __device__ __forceinline__ explicit SharedStorage(u32 smem_base) : base(smem_base) {}

    // ---- tiles ------------------------------------------------------------------------------
    __device__ __forceinline__ u32 q_tile(int stage) const { return base + kQOffset + stage * T::kQTileBytes; }
    __device__ __forceinline__ u32 k_tile(int slot) const { return base + kKOffset + slot * T::kKTileBytes; }
    __device__ __forceinline__ u32 v_tile(int slot) const { return base + kVOffset + slot * T::kVTileBytes; }

    // ---- per-row statistics (f32), softmax to correction ------------------------------------
    __device__ __forceinline__ u32 rescale(int stage, int row) const {
        return base + kStatsOffset + (stage * 3 * 128 + row) * 4;
    }
    __device__ __forceinline__ u32 row_sum(int stage, int row) const { return rescale(stage, row) + 128 * 4; }
    __device__ __forceinline__ u32 row_max(int stage, int row) const { return rescale(stage, row) + 2 * 128 * 4; }

    // ---- barriers ---------------------------------------------------------------------------
    __device__ __forceinline__ u32 bar(int i) const { return base + kBarrierOffset + 8 * i; }
    __device__ __forceinline__ u32 k_full(int slot) const { return bar(slot); }
    __device__ __forceinline__ u32 v_full(int slot) const { return bar(T::kStages + slot); }
    __device__ __forceinline__ u32 v_landed(int slot) const { return bar(2 * T::kStages + slot); }
    __device__ __forceinline__ u32 k_empty(int slot) const { return bar(3 * T::kStages + slot); }
    __device__ __forceinline__ u32 v_empty(int slot) const { return bar(4 * T::kStages + slot); }
    __device__ __forceinline__ u32 stage_bar(int which, int stage) const {
        return bar(5 * T::kStages + which * T::kQStages + stage);
    }
    __device__ __forceinline__ u32 q_full(int stage) const { return stage_bar(0, stage); }
    __device__ __forceinline__ u32 s_full(int stage) const { return stage_bar(1, stage); }
    __device__ __forceinline__ u32 p_full(int stage) const { return stage_bar(2, stage); }
    __device__ __forceinline__ u32 stats_full(int stage) const { return stage_bar(3, stage); }
    __device__ __forceinline__ u32 o_ready(int stage) const { return stage_bar(4, stage); }
    __device__ __forceinline__ u32 o_corrected(int stage) const { return stage_bar(5, stage); }
    __device__ __forceinline__ u32 final_stats(int stage) const { return stage_bar(6, stage); }

    __device__ __forceinline__ u32 tmem_slot() const { return base + kTmemSlotOffset; }

    // One thread, before the block's first barrier.
    __device__ __forceinline__ void init() const {
        using hopper::mbarrier_init;
        for (int slot = 0; slot < T::kStages; ++slot) {
            mbarrier_init(k_full(slot), 1);
            mbarrier_init(v_full(slot), 1);
            mbarrier_init(v_landed(slot), 1);
            mbarrier_init(k_empty(slot), 1);
            mbarrier_init(v_empty(slot), 1);
        }
        for (int stage = 0; stage < T::kQStages; ++stage) {
            mbarrier_init(q_full(stage), 1);
            mbarrier_init(s_full(stage), 1);
            mbarrier_init(p_full(stage), 128);
            mbarrier_init(stats_full(stage), 128);
            mbarrier_init(o_ready(stage), 1);
            mbarrier_init(o_corrected(stage), 128);
            mbarrier_init(final_stats(stage), 128);
        }
    }
};

}  // namespace blackwell
}  // namespace fa4
