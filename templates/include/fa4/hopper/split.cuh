// Where the two pieces of a split tile meet (schedule.cuh's SplitTail): a workspace the
// caller hands over, its counters zero, which every launch leaves zero again.
//
// Layout: one counter per (slot, consumer) in the first kSplitCounterBytes, the same for
// every kernel (one that left its entries there would break the next one's counts), then
// per (slot, piece, consumer) an entry of the consumer's 128 threads' O fragments,
// normalised (float4 per 8-column fragment, thread-fastest, so each store is coalesced),
// and their two rows' LSE. The same thread of the same consumer reads them back: the
// merge needs no shuffle. src/gpu/launch.rs sizes it (split_workspace_bytes).
#pragma once

#include "fa4/common/types.cuh"
#include "fa4/hopper/pipeline.cuh"

namespace fa4 {
namespace hopper {

constexpr int kSplitCounterBytes = 4096;  // gpu::SPLIT_COUNTER_BYTES

template <int kOTiles, int kConsumers>
struct SplitWorkspace {
    static constexpr int kEntryFloats = 128 * (kOTiles * 4 + 2);
    char* base;

    __device__ __forceinline__ int* counter(int slot, int consumer) const {
        return reinterpret_cast<int*>(base) + slot * kConsumers + consumer;
    }
    __device__ __forceinline__ float* entry(int slot, int piece, int consumer) const {
        return reinterpret_cast<float*>(base + kSplitCounterBytes) + (i64(slot) * 2 + piece) * kConsumers * kEntryFloats +
               i64(consumer) * kEntryFloats;
    }
};

// One consumer's piece of a split tile, after finalize(): leaves its O (times o_norm) and
// LSE in `mine`, then counts itself in on `counter`. Returns false for the first piece
// in, which is done; the second merges `other` into o_acc, o_norm and lse (the LSE-
// weighted mean of the two normalised O), sets the counter back to 0 and returns true:
// it writes the tile's O and LSE. `word` is shared memory the consumer may write (its O
// staging slot, free here), `barrier` its own named barrier.
template <int kOTiles>
__device__ __forceinline__ bool split_meet(float (&o_acc)[kOTiles * 4], float (&o_norm)[2], float (&lse)[2],
                                           float* mine, const float* other, int* counter, u32 word, int tid,
                                           int barrier) {
    float4* const o_mine = reinterpret_cast<float4*>(mine);
#pragma unroll
    for (int ot = 0; ot < kOTiles; ++ot) {
        o_mine[ot * 128 + tid] = make_float4(o_acc[ot * 4] * o_norm[0], o_acc[ot * 4 + 1] * o_norm[0],
                                             o_acc[ot * 4 + 2] * o_norm[1], o_acc[ot * 4 + 3] * o_norm[1]);
    }
    reinterpret_cast<float2*>(mine + kOTiles * 4 * 128)[tid] = make_float2(lse[0], lse[1]);
    __threadfence();  // every thread's partial is out before the count says so
    named_barrier_sync(barrier, 128);
    if (tid == 0) {
        const int arrived = atomicAdd(counter, 1);
        if (arrived == 1) {
            atomicExch(counter, 0);  // both are in: the next launch finds it zero
            __threadfence();         // the first piece's partial before ours is read
        }
        asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(word), "r"(arrived) : "memory");
    }
    named_barrier_sync(barrier, 128);
    int arrived;
    asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(arrived) : "r"(word) : "memory");
    named_barrier_sync(barrier, 128);  // read by all before the O staging overwrites it
    if (arrived == 0) return false;

    const float2 lse_other = __ldcg(reinterpret_cast<const float2*>(other + kOTiles * 4 * 128) + tid);
    const float other_lse[2] = {lse_other.x, lse_other.y};
    float mine_weight[2], other_weight[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const float top = fmaxf(lse[h], other_lse[h]);
        const float a = __expf(lse[h] - top);
        const float b = __expf(other_lse[h] - top);
        const float inv = 1.f / (a + b);
        mine_weight[h] = o_norm[h] * a * inv;  // o_acc is not normalised yet
        other_weight[h] = b * inv;
        lse[h] = top + __logf(a + b);
        o_norm[h] = 1.f;
    }
    const float4* const o_other = reinterpret_cast<const float4*>(other);
#pragma unroll
    for (int ot = 0; ot < kOTiles; ++ot) {
        const float4 v = __ldcg(o_other + ot * 128 + tid);
        o_acc[ot * 4] = o_acc[ot * 4] * mine_weight[0] + v.x * other_weight[0];
        o_acc[ot * 4 + 1] = o_acc[ot * 4 + 1] * mine_weight[0] + v.y * other_weight[0];
        o_acc[ot * 4 + 2] = o_acc[ot * 4 + 2] * mine_weight[1] + v.z * other_weight[1];
        o_acc[ot * 4 + 3] = o_acc[ot * 4 + 3] * mine_weight[1] + v.w * other_weight[1];
    }
    return true;
}

}  // namespace hopper
}  // namespace fa4
