// How the consumers of the warp-specialised Hopper kernel take turns (kernel_ws.cuh), as
// policy types the mainloop is written against:
//
//   NoTurns    one consumer, or no pingpong: every consumer issues when its operands are in
//   GemmTurns  pingpong at the tensor cores: each consumer issues its GEMMs in its turn,
//              round robin from consumer 0 (the last one lets it start), so one
//              warpgroup's softmax runs under the others' GEMMs
//   MufuTurns  pingpong at the MUFU (kMufuTurns): each consumer takes its turn between a
//              block's row maxima and its exponentials and passes it after them, and issues
//              its GEMMs whenever its operands are in (cuDNN's d64 kernel places its turns so)
//
// take() and pass() go around each turn's GEMM issues, block() is what a block's
// exponentials run inside (fragments.cuh's update()), start() lets consumer 0 begin.
#pragma once

#include "fa4/common/types.cuh"
#include "fa4/hopper/fragments.cuh"
#include "fa4/hopper/pipeline.cuh"
#include "fa4/hopper/traits.cuh"

namespace fa4 {
namespace hopper {

// Named barriers: 1 + c is consumer c's own (128 threads); kTurnBarrier + c is its turn
// (its 128 threads wait, the consumer before it arrives); the producer's warps meet at
// kProducerBarrier (producer.cuh).
constexpr int kTurnBarrier = 4;

// A consumer's turn at the MUFU: wait for the turn between a block's row maxima and its
// exponentials, pass it once their row sums are in. Named barriers order memory only, and
// ptxas moves arithmetic across them, so the exponentials are tied to the turn through
// shared memory: after the wait, a load of a word that holds 0 is OR-ed into the offsets
// every exponential subtracts; before the pass, the row sums (which need every
// exponential) AND-ed with it are stored back.
struct MufuTurn {
    int take_barrier, pass_barrier;
    u32 word;  // shared memory, 0
    u32 zero;
    __device__ __forceinline__ void before(float (&offset)[2]) {
        named_barrier_sync(take_barrier, 256);
        asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(zero) : "r"(word) : "memory");
        offset[0] = __uint_as_float(__float_as_uint(offset[0]) | zero);
        offset[1] = __uint_as_float(__float_as_uint(offset[1]) | zero);
    }
    __device__ __forceinline__ void after(float sum0, float sum1) {
        const u32 tie = (__float_as_uint(sum0) | __float_as_uint(sum1)) & zero;
        asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(word), "r"(tie) : "memory");
        named_barrier_arrive(pass_barrier, 256);
    }
};

// Each holds references to the consumer's index and the turn word (shared memory), as
// the lambdas it replaces captured them: held by value, they moved ptxas's code.
template <int kConsumers>
struct NoTurns {
    const int& consumer;
    const u32& turn_word;
    __device__ void take() const {}
    __device__ void pass() const {}
    __device__ NoTurn block() const { return NoTurn{}; }
    __device__ __forceinline__ void start() const {}
};

template <int kConsumers>
struct GemmTurns {
    const int& consumer;
    const u32& turn_word;
    __device__ void take() const { named_barrier_sync(kTurnBarrier + consumer, 256); }
    __device__ void pass() const { named_barrier_arrive(kTurnBarrier + (consumer + 1) % kConsumers, 256); }
    __device__ NoTurn block() const { return NoTurn{}; }
    __device__ __forceinline__ void start() const {
        if (consumer == kConsumers - 1) named_barrier_arrive(kTurnBarrier, 256);
    }
};

template <int kConsumers>
struct MufuTurns {
    const int& consumer;
    const u32& turn_word;
    __device__ void take() const {}
    __device__ void pass() const {}
    __device__ MufuTurn block() const {
        return MufuTurn{kTurnBarrier + consumer, kTurnBarrier + (consumer + 1) % kConsumers, turn_word, 0};
    }
    __device__ __forceinline__ void start() const {
        if (consumer == kConsumers - 1) named_barrier_arrive(kTurnBarrier, 256);
    }
};

template <class T>
using TurnsOf = typename Select<T::kMufuTurns, MufuTurns<T::kWarpgroups>,
                                typename Select<T::kPingpong, GemmTurns<T::kWarpgroups>, NoTurns<T::kWarpgroups>>::type>::type;

}  // namespace hopper
}  // namespace fa4
