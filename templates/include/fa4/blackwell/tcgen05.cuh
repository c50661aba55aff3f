// Blackwell's fifth-generation tensor cores (tcgen05, sm_100a): tensor memory, the MMA
// that accumulates into it, and the loads and stores that move it to and from registers.
//
// Every instruction here was introduced in PTX ISA 8.6 (CUDA 12.8) for the arch-specific
// targets sm_100a and sm_101a (later ISAs add sm_103a, sm_110a and the sm_10xf families).
// A kernel that includes this header must be compiled for sm_100a: ptxas (13.0) refuses
// every one of them for sm_90a, and all but allocation for plain sm_100
// (tests/blackwell.rs checks both).
//
// Tensor memory (TMEM) is per CTA: 128 lanes (rows) x 512 columns of 32-bit cells. A TMEM
// address is one 32-bit word: the lane in bits 31-16, the column in bits 15-0 (tmem_addr).
// The MMA writes D there (and may read A there); warps move it to and from registers.
//
// Rules that bind every caller (PTX ISA, "Tensor Memory" and the tcgen05 instructions):
//
// - Allocation (tmem_alloc, tmem_dealloc, tmem_relinquish_alloc_permit) is .sync.aligned:
//   every thread of one warp executes it together, with the same operands. With
//   .cta_group::1 one warp of the CTA allocates and deallocates. The column count is a
//   power of two from 32 to 512 (a static_assert checks it). The allocated address (lane
//   0, its first column) is written to shared memory, not to a register: the warps that
//   use it read it back after a barrier, each fenced (fence_before/after_thread_sync).
//   CTAs on one SM share its 512 columns: tmem_alloc blocks (ptxas emits a retry loop)
//   until enough are free. Everything allocated must be deallocated before the kernel
//   exits, with the address and count of its allocation.
// - The MMA (mma_ss, mma_ts) and mma_commit are issued by one thread. The MMA is
//   asynchronous: it reads its operands and writes D in TMEM after the instruction
//   retires. mma_commit makes an mbarrier track every asynchronous tcgen05 operation this
//   thread has issued so far (MMAs here; tcgen05.cp and .shift too, not loads or stores);
//   the barrier gets one arrival when they have all completed. Whoever reads D or
//   overwrites an operand (shared memory, or P in TMEM) waits on that barrier first.
//   Operands written in shared memory by ordinary stores need fence.proxy.async first
//   (hopper/wgmma.cuh's fence_proxy_async); TMA writes need none.
// - Shared-memory descriptors are the 64-bit ones of render/tcgen05.rs (bits 46-48 hold
//   0b001, which wgmma's do not); the 32-bit instruction descriptor carries the shape,
//   formats and majorness. Both are rendered literals; the device adds addresses only.
// - Loads and stores (tmem_ld_*, tmem_st_*) are .sync.aligned: a whole warp, same
//   address. Warp w of a warpgroup reaches lanes 32 (w % 4) .. 32 (w % 4) + 31 only, and
//   its address names the first of them (tmem_addr(base, 32 * (w % 4), column)). With the
//   32x32b shape, thread t of the warp holds lane 32 (w % 4) + t: register i is column
//   column + i. They are asynchronous too: registers a load fills are undefined until
//   tmem_wait_ld, and the cells a store writes are not written until tmem_wait_st.
// - Ordering across threads: between tcgen05 operations of one thread and a barrier
//   (bar.sync, mbarrier arrive/wait) that hands their results to another thread, the
//   issuing side fences before the barrier (fence_before_thread_sync) and the receiving
//   side after it (fence_after_thread_sync). A softmax warp that stores P and then
//   arrives on a barrier the MMA thread waits on does: tmem_st, tmem_wait_st,
//   fence_before_thread_sync, arrive | wait, fence_after_thread_sync, mma_ts.
#pragma once

#include "fa4/common/types.cuh"

namespace fa4 {
namespace blackwell {

// The TMEM address `lane` lanes and `column` columns on from `base` (an allocated one).
__device__ __forceinline__ u32 tmem_addr(u32 base, u32 lane, u32 column) { return base + (lane << 16) + column; }

// ---- allocation: one warp, .sync.aligned -------------------------------------------------
// Allocates kCols columns of all 128 lanes; their address is written to the 4 bytes of
// shared memory at `dst` (a shared::cta address).
template <int kCols>
__device__ __forceinline__ void tmem_alloc(u32 dst) {
    static_assert(kCols >= 32 && kCols <= 512 && (kCols & (kCols - 1)) == 0,
                  "TMEM is allocated in powers of two from 32 to 512 columns");
    asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], %1;\n" ::"r"(dst), "n"(kCols)
                 : "memory");
}

// Frees the kCols columns at `taddr` (what tmem_alloc<kCols> wrote). No tcgen05 operation
// of any warp may still use them: their last users fence before the barrier that
// precedes this.
template <int kCols>
__device__ __forceinline__ void tmem_dealloc(u32 taddr) {
    static_assert(kCols >= 32 && kCols <= 512 && (kCols & (kCols - 1)) == 0,
                  "TMEM is allocated in powers of two from 32 to 512 columns");
    asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, %1;\n" ::"r"(taddr), "n"(kCols) : "memory");
}

// Gives up this CTA's right to allocate: a later tmem_alloc by it is illegal. Issued by
// the allocating warp after its last tmem_alloc (one allocation per kernel: right after
// it).
__device__ __forceinline__ void tmem_relinquish_alloc_permit() {
    asm volatile("tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;\n" ::: "memory");
}

// ---- the MMA: one thread, asynchronous ---------------------------------------------------
// D (f32 or f16 in TMEM at `d_tmem`, M lanes x N columns) = A * B, plus D where
// `accumulate` (the enable-input-d predicate; false overwrites, as the first k-step of
// every tile must). `idesc` is an instruction descriptor of render/tcgen05.rs: its kind
// must be the template's (F16 for f16/bf16, K = 16 per instruction; F8f6f4 for e4m3/e5m2,
// K = 32).
enum class MmaKind { F16, F8f6f4 };

// A and B from shared memory: the QK GEMM (S = Q K^T) with Q and K K-major.
template <MmaKind kKind>
__device__ __forceinline__ void mma_ss(u32 d_tmem, u64 a_desc, u64 b_desc, u32 idesc, bool accumulate) {
    if constexpr (kKind == MmaKind::F16) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %4, 0;\n"
            "tcgen05.mma.cta_group::1.kind::f16 [%0], %1, %2, %3, p;\n}\n" ::"r"(d_tmem),
            "l"(a_desc), "l"(b_desc), "r"(idesc), "r"(u32(accumulate))
            : "memory");
    } else {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %4, 0;\n"
            "tcgen05.mma.cta_group::1.kind::f8f6f4 [%0], %1, %2, %3, p;\n}\n" ::"r"(d_tmem),
            "l"(a_desc), "l"(b_desc), "r"(idesc), "r"(u32(accumulate))
            : "memory");
    }
}

// A from TMEM at `a_tmem` (M lanes, K elements packed into 32-bit columns: 8 columns per
// 16-bit k-step), B from shared memory: the PV GEMM (O += P V) with P where the softmax
// warps stored it and V MN-major. A from TMEM is always K-major (idesc's transpose-A bit
// clear).
template <MmaKind kKind>
__device__ __forceinline__ void mma_ts(u32 d_tmem, u32 a_tmem, u64 b_desc, u32 idesc, bool accumulate) {
    if constexpr (kKind == MmaKind::F16) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %4, 0;\n"
            "tcgen05.mma.cta_group::1.kind::f16 [%0], [%1], %2, %3, p;\n}\n" ::"r"(d_tmem),
            "r"(a_tmem), "l"(b_desc), "r"(idesc), "r"(u32(accumulate))
            : "memory");
    } else {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %4, 0;\n"
            "tcgen05.mma.cta_group::1.kind::f8f6f4 [%0], [%1], %2, %3, p;\n}\n" ::"r"(d_tmem),
            "r"(a_tmem), "l"(b_desc), "r"(idesc), "r"(u32(accumulate))
            : "memory");
    }
}

// One arrival on the mbarrier at `bar` (a shared::cta address, which names this CTA's own
// barrier in the shared::cluster window) once every MMA this thread has issued so far
// has completed. Issued by the thread that issued them; the barrier's phase counts this
// arrival among those it expects.
__device__ __forceinline__ void mma_commit(u32 bar) {
    asm volatile("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];\n" ::"r"(bar)
                 : "memory");
}

// ---- TMEM <-> registers: one warp, .sync.aligned, asynchronous ---------------------------
// Shape 32x32b: 32 lanes, lane 32 (w % 4) + t to thread t; .xN: N consecutive columns,
// the address's column + i to r[i]. N = 8, 16 or 32 (S of 128 keys is four x32 loads).
template <int N>
__device__ __forceinline__ void tmem_ld_32x32b(u32 taddr, u32 (&r)[N]);
template <int N>
__device__ __forceinline__ void tmem_st_32x32b(u32 taddr, const u32 (&r)[N]);

#define FA4_R4(c, i) c(r[i]), c(r[i + 1]), c(r[i + 2]), c(r[i + 3])
#define FA4_R8(c, i) FA4_R4(c, i), FA4_R4(c, i + 4)
#define FA4_R16(c, i) FA4_R8(c, i), FA4_R8(c, i + 8)

template <>
__device__ __forceinline__ void tmem_ld_32x32b<8>(u32 taddr, u32 (&r)[8]) {
    asm volatile("tcgen05.ld.sync.aligned.32x32b.x8.b32 {%0, %1, %2, %3, %4, %5, %6, %7}, [%8];\n"
                 : FA4_R8("=r", 0)
                 : "r"(taddr)
                 : "memory");
}
template <>
__device__ __forceinline__ void tmem_ld_32x32b<16>(u32 taddr, u32 (&r)[16]) {
    asm volatile(
        "tcgen05.ld.sync.aligned.32x32b.x16.b32 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, "
        "%14, %15}, [%16];\n"
        : FA4_R16("=r", 0)
        : "r"(taddr)
        : "memory");
}
template <>
__device__ __forceinline__ void tmem_ld_32x32b<32>(u32 taddr, u32 (&r)[32]) {
    asm volatile(
        "tcgen05.ld.sync.aligned.32x32b.x32.b32 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, "
        "%14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, [%32];\n"
        : FA4_R16("=r", 0), FA4_R16("=r", 16)
        : "r"(taddr)
        : "memory");
}

template <>
__device__ __forceinline__ void tmem_st_32x32b<8>(u32 taddr, const u32 (&r)[8]) {
    asm volatile("tcgen05.st.sync.aligned.32x32b.x8.b32 [%0], {%1, %2, %3, %4, %5, %6, %7, %8};\n" ::"r"(taddr),
                 FA4_R8("r", 0)
                 : "memory");
}
template <>
__device__ __forceinline__ void tmem_st_32x32b<16>(u32 taddr, const u32 (&r)[16]) {
    asm volatile(
        "tcgen05.st.sync.aligned.32x32b.x16.b32 [%0], {%1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, "
        "%14, %15, %16};\n" ::"r"(taddr),
        FA4_R16("r", 0)
        : "memory");
}
template <>
__device__ __forceinline__ void tmem_st_32x32b<32>(u32 taddr, const u32 (&r)[32]) {
    asm volatile(
        "tcgen05.st.sync.aligned.32x32b.x32.b32 [%0], {%1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, "
        "%14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32};\n" ::"r"(
            taddr),
        FA4_R16("r", 0), FA4_R16("r", 16)
        : "memory");
}

#undef FA4_R4
#undef FA4_R8
#undef FA4_R16

// Until this warp's loads so far have filled their registers. The compiler does not know
// that the registers change at the wait, not at the load: pass the loaded arrays, and
// their uses are held after it (as hopper/wgmma.cuh's fence_regs holds wgmma's).
__device__ __forceinline__ void tmem_wait_ld() { asm volatile("tcgen05.wait::ld.sync.aligned;\n" ::: "memory"); }
template <int N, class... Rest>
__device__ __forceinline__ void tmem_wait_ld(u32 (&r)[N], Rest&... rest) {
    tmem_wait_ld(rest...);
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}
// Until this warp's stores so far have written TMEM.
__device__ __forceinline__ void tmem_wait_st() { asm volatile("tcgen05.wait::st.sync.aligned;\n" ::: "memory"); }

// ---- one lane of a converged warp --------------------------------------------------------
// True in exactly one lane of the (whole, converged) warp that executes it. A branch on
// it is one ptxas knows to be taken by a single lane: the tcgen05 instructions inside
// keep their uniform operands, where a branch on `lane == 0` makes ptxas wrap each in a
// loop over the lanes' distinct operands (BRA.U.ANY around every UTCHMMA).
__device__ __forceinline__ bool elect_one() {
    u32 elected;
    asm volatile(
        "{\n.reg .pred p;\n.reg .b32 leader;\n"
        "elect.sync leader|p, 0xffffffff;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(elected)
        :
        : "memory");
    return elected != 0;
}

// ---- ordering around thread synchronisation ----------------------------------------------
// This thread's tcgen05 operations so far are ordered before the barrier or mbarrier
// arrival that follows.
__device__ __forceinline__ void fence_before_thread_sync() {
    asm volatile("tcgen05.fence::before_thread_sync;\n" ::: "memory");
}
// This thread's tcgen05 operations from here are ordered after the barrier or mbarrier
// wait that precedes.
__device__ __forceinline__ void fence_after_thread_sync() {
    asm volatile("tcgen05.fence::after_thread_sync;\n" ::: "memory");
}

}  // namespace blackwell
}  // namespace fa4
