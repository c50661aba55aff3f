// The MMA warp: one thread issues every tcgen05.mma of the block and hands their results
// on with tcgen05.commit. The whole warp walks the loop and waits (so addresses and
// descriptors stay warp-uniform, in uniform registers); one elected lane issues.
//
// Per key block i and Q stage q, in issue order:
//
//   PV_q(i-1)   O_q += P_q(i-1) V(i-1)   once softmax q stored P_q(i-1) (P full) and
//                                        correction rescaled O_q for it (O corrected)
//   QK_q(i)     S_q = Q_q K(i)^T         into the columns P_q(i-1) occupied
//
// P_q(i-1) lives where S_q(i) goes; tcgen05 MMAs of one thread run in issue order, so
// issuing PV_q(i-1) first is all it takes. While softmax 0 works on S_0(i), the tensor
// cores run PV_1(i-1) and QK_1(i), and the other way round: the two Q stages keep them
// busy. The descriptors are rendered constants (render/tcgen05.rs) to which the tile's
// shared address is added, as hopper/wgmma.cuh's smem_desc does.
#pragma once

#include "fa4/blackwell/shared_storage.cuh"
#include "fa4/blackwell/tcgen05.cuh"
#include "fa4/blackwell/tile.cuh"

namespace fa4 {
namespace blackwell {

template <class T, class C>
struct MmaIssuer {
    static constexpr MmaKind kKind = MmaKind::F16;
    const SharedStorage<T>& smem;
    u32 tmem;

    // A rendered descriptor (start address 0) for the operand at shared address `addr`.
    __device__ __forceinline__ static u64 desc(u64 constant, u32 addr) {
        return constant + u64((addr & 0x3FFFF) >> 4);
    }

    // ---- QK GEMM: S_q = Q_q K^T, both K-major, k-steps of 16 through 64-column blocks ----
    __device__ __forceinline__ void qk(int stage, int slot) const {
        const u32 s = tmem + T::kSColumn + stage * T::kBlockN;
#pragma unroll
        for (int ks = 0; ks < T::kQkSteps; ++ks) {
            const u32 step = (ks & 3) * 32;  // 16 elements into the 128-byte row
            const u64 a = desc(C::kDescKMajor, smem.q_tile(stage) + (ks >> 2) * 128 * 128 + step);
            const u64 b = desc(C::kDescKMajor, smem.k_tile(slot) + (ks >> 2) * T::kBlockN * 128 + step);
            if (elect_one()) mma_ss<kKind>(s, a, b, C::kIdescQk, ks > 0);
        }
    }

    // ---- PV GEMM: O_q += P_q V, P from TMEM (8 columns per 16 keys), V MN-major ----------
    __device__ __forceinline__ void pv(int stage, int slot, bool accumulate) const {
        const u32 o = tmem + T::kOColumn + stage * T::kVPad;
        const u32 p = tmem + T::kSColumn + stage * T::kBlockN;
#pragma unroll
        for (int ks = 0; ks < T::kPvSteps; ++ks) {
            const u64 b = desc(C::kDescV, smem.v_tile(slot) + ks * 16 * 128);  // 16 keys of 128-byte rows
            if (elect_one()) mma_ts<kKind>(o, p + ks * 8, b, C::kIdescPv, accumulate || ks > 0);
        }
    }

    __device__ __forceinline__ void commit(u32 bar) const {
        if (elect_one()) mma_commit(bar);
    }

    // PV_q(i) once its P and its rescaled O are in, then O ready.
    __device__ __forceinline__ void pv_when_ready(int stage, int i, int slot) const {
        using hopper::mbarrier_wait;
        mbarrier_wait(smem.p_full(stage), i & 1);
        if (i > 0) mbarrier_wait(smem.o_corrected(stage), (i - 1) & 1);
        fence_after_thread_sync();
        pv(stage, slot, i > 0);
        commit(smem.o_ready(stage));
    }

    __device__ void run(const BlockTile<T>& tile) const {
        using hopper::mbarrier_wait;
        const int blocks = tile.n_blocks();
        if (blocks == 0) return;
#pragma unroll
        for (int stage = 0; stage < T::kQStages; ++stage) mbarrier_wait(smem.q_full(stage), 0);

        // ---- the first key block: QK only -------------------------------------------------
        {
            const RingPos<T> at(0);
            mbarrier_wait(smem.k_full(at.slot), at.parity);
            fence_after_thread_sync();
#pragma unroll
            for (int stage = 0; stage < T::kQStages; ++stage) {
                qk(stage, at.slot);
                commit(smem.s_full(stage));
            }
            commit(smem.k_empty(at.slot));
        }

        // ---- steady state: PV of block i-1, QK of block i, stage by stage ----------------
        for (int i = 1; i < blocks; ++i) {
            const RingPos<T> k_at(i), v_at(i - 1);
            mbarrier_wait(smem.k_full(k_at.slot), k_at.parity);
            mbarrier_wait(smem.v_full(v_at.slot), v_at.parity);
#pragma unroll
            for (int stage = 0; stage < T::kQStages; ++stage) {
                pv_when_ready(stage, i - 1, v_at.slot);
                qk(stage, k_at.slot);
                commit(smem.s_full(stage));
            }
            commit(smem.k_empty(k_at.slot));
            commit(smem.v_empty(v_at.slot));
        }

        // ---- the last block's PV ----------------------------------------------------------
        const RingPos<T> v_at(blocks - 1);
        mbarrier_wait(smem.v_full(v_at.slot), v_at.parity);
#pragma unroll
        for (int stage = 0; stage < T::kQStages; ++stage) pv_when_ready(stage, blocks - 1, v_at.slot);
        commit(smem.v_empty(v_at.slot));
    }
};

}  // namespace blackwell
}  // namespace fa4
