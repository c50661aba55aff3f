// What the warp-specialised Hopper kernel synchronises with (sm_90a): mbarriers for the
// K/V ring between the producer warpgroup and the consumers, named barriers for the
// consumers' turns at the tensor cores, and register reallocation between the roles.
#pragma once

#include "fa4/common/types.cuh"

namespace fa4 {
namespace hopper {

// ---- mbarrier: a phase completes once `count` arrivals are in ---------------------------
__device__ __forceinline__ void mbarrier_init(u32 bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// Blocks until the phase of parity `parity` has completed. A fresh barrier is in phase 0,
// so waiting for parity 1 returns at once: that is how a producer sees every slot of a
// new ring as free.
__device__ __forceinline__ void mbarrier_wait(u32 bar, u32 parity) {
    u32 done;
    do {
        asm volatile(
            "{\n.reg .pred p;\n"
            "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
            "selp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
    } while (!done);
}

__device__ __forceinline__ void mbarrier_arrive(u32 bar) {
    asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// Holds the barrier's current phase open until this thread's cp.async copies issued so
// far have landed: the pending count grows by one now and shrinks when they land, so
// this is not one of the phase's expected arrivals.
__device__ __forceinline__ void cp_async_mbarrier_track(u32 bar) {
    asm volatile("cp.async.mbarrier.arrive.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

// ---- clusters: the blocks of one cluster arrive on each other's mbarriers ---------------
__device__ __forceinline__ u32 cluster_rank() {
    u32 rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
    return rank;
}

// Arrives on the barrier at `bar`'s offset in block `rank` of the cluster (this block's
// own included). At the default .release.cta: the slot's readers are wgmmas already
// waited for, so nothing needs ordering at cluster scope, which costs a MEMBAR.GPU
// before every arrival (ptxas), a third of the loop's speed at d128.
__device__ __forceinline__ void mbarrier_arrive_cluster(u32 bar, u32 rank) {
    asm volatile(
        "{\n.reg .b32 remote;\n"
        "mapa.shared::cluster.u32 remote, %0, %1;\n"
        "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n" ::"r"(bar),
        "r"(rank)
        : "memory");
}

// Every thread of the cluster that has not exited meets here (whole warps).
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// ---- a consumer warp's release of a slot -------------------------------------------------
// A warp is done with a slot once its wgmma reads of it have completed: it arrives on the
// slot's "empty" barrier once (lane 0). A K or V slot in a cluster: every block's
// producer multicasts into it, so its warps free it in every block (lane r arrives in
// block r). (Holds a reference to the lane, as the lambdas it replaces captured it.)
template <int kCluster>
struct SlotRelease {
    const int& lane;

    __device__ void operator()(u32 bar) const {
        __syncwarp();
        if (lane == 0) mbarrier_arrive(bar);
    }
    __device__ void kv(u32 bar) const {
        if constexpr (kCluster > 1) {
            __syncwarp();
            if (lane < kCluster) mbarrier_arrive_cluster(bar, lane);
        } else {
            (*this)(bar);
        }
    }
};

// ---- named barriers (id 0 is __syncthreads) ----------------------------------------------
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// ---- warp-uniform values ---------------------------------------------------------------
// A value every lane holds alike, broadcast from lane 0 so that the compiler knows it is
// warp-uniform and keeps what follows from it (ring slots, shared-memory descriptors) in
// uniform registers instead of converting each wgmma descriptor with R2UR.
__device__ __forceinline__ int warp_uniform(int x) { return __shfl_sync(0xffffffffu, x, 0); }

// ---- register reallocation: the producer gives registers back, consumers take them ------
template <int kRegs>
__device__ __forceinline__ void registers_release() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void registers_claim() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

}  // namespace hopper
}  // namespace fa4
