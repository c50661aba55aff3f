// FlashAttention forward on Blackwell's fifth-generation tensor cores (sm_100a): FA4's
// structure in raw PTX. S and O accumulate in tensor memory, P goes back there as the A
// operand of the PV GEMM, and the warps split into roles (traits.cuh):
//
//   load warp         Q, then K and V through a ring of kStages slots, by TMA   (load.cuh)
//   MMA warp          every tcgen05.mma, one thread                             (mma.cuh)
//   softmax q         Q stage q's rows, one per thread                          (softmax.cuh)
//   correction        O's rescaling in TMEM, then the epilogue                  (correction.cuh)
//
// They meet only at the mbarriers of shared_storage.cuh. One block per tile of kBlockM
// query rows (the grid: m-blocks x query heads x sequences).
#pragma once

#include "fa4/blackwell/correction.cuh"
#include "fa4/blackwell/load.cuh"
#include "fa4/blackwell/mma.cuh"
#include "fa4/blackwell/shared_storage.cuh"
#include "fa4/blackwell/softmax.cuh"
#include "fa4/blackwell/tcgen05.cuh"
#include "fa4/blackwell/tile.cuh"
#include "fa4/common/ptx.cuh"
#include "fa4/hopper/pipeline.cuh"
#include "fa4/hopper/tma.cuh"

namespace fa4 {
namespace blackwell {

template <class C>
__device__ __forceinline__ void forward(const hopper::TmaFwdParams& args) {
    using T = Traits<C>;
    using namespace hopper;
    extern __shared__ __align__(1024) unsigned char smem_bytes[];
    const FwdParams& params = args.fwd;
    const BlockTile<T> tile = BlockTile<T>::make(params);
    if (!tile.has_rows()) return;

    const SharedStorage<T> smem(smem_u32(smem_bytes));
    const int warpgroup = warp_uniform(threadIdx.x / 128);
    const int warp = warp_uniform(threadIdx.x / 32 % 4);  // within the warpgroup: its TMEM lanes
    const int lane = threadIdx.x % 32;
    const bool mma_warp = warpgroup == T::kIssueWarpgroup && warp == 1;

    // ---- barriers and tensor memory --------------------------------------------------------
    if (threadIdx.x == 0) {
        smem.init();
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        tma_prefetch(&args.q_map);
        tma_prefetch(&args.k_map);
        tma_prefetch(&args.v_map);
    }
    if (mma_warp) {  // the warp that allocates also frees, at the end
        tmem_alloc<T::kTmemColumns>(smem.tmem_slot());
        tmem_relinquish_alloc_permit();
    }
    fence_before_thread_sync();
    __syncthreads();
    fence_after_thread_sync();
    u32 tmem;
    asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(tmem) : "r"(smem.tmem_slot()) : "memory");

    // ---- the roles ---------------------------------------------------------------------------
    if (warpgroup < T::kQStages) {
        registers_claim<T::kSoftmaxRegs>();
        const RowSoftmax<T> softmax{smem, params, tmem, warpgroup, int(threadIdx.x % 128)};
        softmax.run(tile);
    } else if (warpgroup == T::kCorrectionWarpgroup) {
        registers_release<T::kCorrectionRegs>();
        const Correction<T> correction{smem, params, tmem, int(threadIdx.x % 128)};
        correction.run(tile);
    } else {
        registers_release<T::kIssueRegs>();
        if (warp == 0) {
            const Loader<T> loader{smem, args, lane};
            loader.run(tile);
        } else if (warp == 1) {
            const MmaIssuer<T, C> mma{smem, tmem};
            mma.run(tile);
        }
    }

    // ---- teardown: every tcgen05 operation has completed before TMEM is freed -----------------
    fence_before_thread_sync();
    __syncthreads();
    if (mma_warp) {
        fence_after_thread_sync();
        tmem_dealloc<T::kTmemColumns>(tmem);
    }
}

}  // namespace blackwell
}  // namespace fa4
