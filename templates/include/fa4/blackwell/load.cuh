// The load warp: Q once, then K and V through the ring, all by TMA (one lane issues).
//
// The whole warp walks the loop and waits; one elected lane issues (tcgen05.cuh's
// elect_one keeps the TMA operands uniform).
//
// A key block that runs past the sequence's keys would bring in rows that are not this
// sequence's: the next sequence's in a packed batch, unused cache slots past seqused_k.
// S hides their keys (the softmax masks them to -inf, so P is 0), but 0 times a NaN in V
// is NaN. So such a block's V lands on its own barrier first; the warp zeroes the rows
// past the keys, fences them for the tensor cores, and only then marks V full. The
// walk's last block is the only one that can run past the keys.
#pragma once

#include "fa4/blackwell/shared_storage.cuh"
#include "fa4/blackwell/tcgen05.cuh"
#include "fa4/blackwell/tile.cuh"
#include "fa4/hopper/tma.cuh"
#include "fa4/hopper/wgmma.cuh"

namespace fa4 {
namespace blackwell {

template <class T>
struct Loader {
    const SharedStorage<T>& smem;
    const hopper::TmaFwdParams& args;
    int lane;

    __device__ void run(const BlockTile<T>& tile) const {
        using namespace hopper;
        const int blocks = tile.n_blocks();
        if (blocks == 0) return;  // no GEMM runs: Q is not needed either

        // ---- Q: every stage's 128 rows, two 64-row boxes per 64-column block ------------
        if (elect_one()) {
            for (int stage = 0; stage < T::kQStages; ++stage) {
                const u32 full = smem.q_full(stage);
                mbarrier_arrive_expect_tx(full, T::kQTileBytes);
                const int row = tile.q_map_row + tile.row(stage, 0);
#pragma unroll
                for (int cb = 0; cb < T::kQkPad / 64; ++cb)
#pragma unroll
                    for (int half = 0; half < 2; ++half)
                        tma_load_4d(smem.q_tile(stage) + cb * 128 * 128 + half * 64 * 128, &args.q_map, full, cb * 64,
                                    row + 64 * half, tile.head, tile.q_map_batch);
            }
        }

        // ---- K and V: key block by key block into the ring ------------------------------
        for (int i = 0; i < blocks; ++i) {
            const RingPos<T> at(i);
            const int key0 = (tile.n_begin + i) * T::kBlockN;
            const int row = tile.k_map_row + key0;

            mbarrier_wait(smem.k_empty(at.slot), at.parity ^ 1);
            if (elect_one()) {
                mbarrier_arrive_expect_tx(smem.k_full(at.slot), T::kKTileBytes);
                tma_load_tile<T::kQkPad, T::kBlockN>(smem.k_tile(at.slot), &args.k_map, smem.k_full(at.slot), row,
                                                      tile.kv_head, tile.k_map_batch);
            }

            mbarrier_wait(smem.v_empty(at.slot), at.parity ^ 1);
            const int keys = tile.seq.seqlen_k - key0;
            const u32 lands_on = keys >= T::kBlockN ? smem.v_full(at.slot) : smem.v_landed(at.slot);
            if (elect_one()) {
                mbarrier_arrive_expect_tx(lands_on, T::kVTileBytes);
                tma_load_tile<T::kVPad, T::kBlockN>(smem.v_tile(at.slot), &args.v_map, lands_on, row, tile.kv_head,
                                                     tile.k_map_batch);
            }
            if (keys < T::kBlockN) zero_rows_past(at.slot, keys);
        }
    }

    // The last key block's V rows [keys, kBlockN) to zero, then V full. Once per tile, so
    // "V landed" is in its first phase.
    __device__ void zero_rows_past(int slot, int keys) const {
        using namespace hopper;
        mbarrier_wait(smem.v_landed(slot), 0);
        constexpr int kChunks = T::kVPad / 64 * 8;  // 16-byte chunks per row, over the column blocks
        const int rows = T::kBlockN - keys;
        for (int c = lane; c < rows * kChunks; c += 32) {
            const int r = keys + c / kChunks;
            const int cb = (c % kChunks) / 8;
            const u32 dst = smem.v_tile(slot) + cb * T::kBlockN * 128 + r * 128 + (c % 8) * 16;
            asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(dst), "r"(0) : "memory");
        }
        fence_proxy_async();  // the tensor cores read what these stores wrote
        __syncwarp();
        if (lane == 0) mbarrier_arrive(smem.v_full(slot));
    }
};

}  // namespace blackwell
}  // namespace fa4
