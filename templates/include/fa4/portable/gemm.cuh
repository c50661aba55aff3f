// The two GEMMs of a key block on mma.sync.m16n8k16, operands from shared memory by
// ldmatrix (fragment layouts in ptx.cuh): S = Q K^T into f32 accumulators, then
// O += P V with P packed to 16 bits straight from S's fragments (it never leaves
// registers). Each comes whole (every m-tile of the warp per k-step, so a K or V
// fragment is read once for all of them) and per m-tile (the staggered loop).
#pragma once

#include "fa4/common/ptx.cuh"
#include "fa4/common/tile_copy.cuh"
#include "fa4/portable/layout.cuh"
#include "fa4/portable/schedule.cuh"
#include "fa4/portable/traits.cuh"

namespace fa4 {
namespace portable {

// A warp's fragments: S (or P) of one key block, O, and Q when held in registers.
template <class T>
using Scores = float[T::kMTiles][T::kNTiles][4];
template <class T>
using OAccum = float[T::kMTiles][T::kOTiles][4];
template <class T>
using QFrags = u32[T::kQInRegs ? T::kMTiles : 1][T::kQInRegs ? T::kQkSteps : 1][4];

// Where each lane points ldmatrix, as byte offsets of its row (lane_base):
//   Q (A operand, x4 = rows 0-7|8-15 x cols 0-7|8-15):  row lane%16, col (lane/16)*8
//   K (B operand, x4 = two n-tiles x two k-halves):     row (lane/16)*8 + lane%8, col (lane/8)%2*8
//   V (B operand via .trans, x4 = two k-halves x two n-tiles): row (lane/8)%2*8 + lane%8, col (lane/16)*8
// Q's is absolute (Q has one slot); K's and V's are added to a ring slot's address.
template <class T>
struct LdmatrixLanes {
    u32 q;
    u32 k;
    u32 v;

};

// A lane offset for one key block's ldmatrix addresses. Swizzled, it is made opaque
// once per block, so that its XOR-ed variants are computed where used rather than hoisted
// out of the loop into registers (the d128 128x64 tile spilled when they were).
template <class T>
__device__ __forceinline__ u32 fresh(u32 lane_offset) {
    return T::kSwizzle ? opaque(lane_offset) : lane_offset;
}

// Q's fragments into registers, once (kQInRegs).
template <class T>
__device__ __forceinline__ void load_q_frags(QFrags<T>& q_frag, u32 q_lane) {
#pragma unroll
    for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
        for (int ks = 0; ks < T::kQkSteps; ++ks) ldmatrix_x4(q_frag[mt][ks], T::LayoutQK::at(q_lane, mt * 16, ks));
}

// Q's A fragment for k-step ks of m-tile mt: from registers (kQInRegs) or shared memory.
template <class T>
__device__ __forceinline__ void q_fragment(u32 (&a)[4], const QFrags<T>& q_frag, u32 q_base, int mt, int ks) {
    if constexpr (T::kQInRegs) {
#pragma unroll
        for (int i = 0; i < 4; ++i) a[i] = q_frag[mt][ks][i];
    } else {
        ldmatrix_x4(a, T::LayoutQK::at(q_base, mt * 16, ks));
    }
}

// S = Q K^T over the warp's m-tiles. q_base and k_base: the lane's ldmatrix addresses
// in Q and in this block's K slot.
template <class T>
__device__ __forceinline__ void qk_gemm(Scores<T>& s, const QFrags<T>& q_frag, u32 q_base, u32 k_base,
                                        u32 (&a)[T::kMTiles][4]) {
    constexpr int kMTiles = T::kMTiles;
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int nt = 0; nt < T::kNTiles; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.f;
#pragma unroll
    for (int ks = 0; ks < T::kQkSteps; ++ks) {
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) q_fragment<T>(a[mt], q_frag, q_base, mt, ks);
#pragma unroll
        for (int np = 0; np < T::kNTiles / 2; ++np) {
            u32 b[4];
            ldmatrix_x4(b, T::LayoutQK::at(k_base, np * 16, ks));
#pragma unroll
            for (int mt = 0; mt < kMTiles; ++mt) {
                mma_16816<T::kIsBf16>(s[mt][2 * np], a[mt], b[0], b[1]);
                mma_16816<T::kIsBf16>(s[mt][2 * np + 1], a[mt], b[2], b[3]);
            }
        }
    }
}

// P's A fragment for k-step ks of m-tile mt: the C fragments of S's n-tiles 2 ks and
// 2 ks + 1, packed in pairs to 16 bits (ptx.cuh: they are exactly the A layout).
template <class T>
__device__ __forceinline__ void pack_p(u32 (&a)[4], const Scores<T>& s, int mt, int ks) {
    constexpr bool kBf16 = T::kIsBf16;
    a[0] = pack2<kBf16>(s[mt][2 * ks][0], s[mt][2 * ks][1]);
    a[1] = pack2<kBf16>(s[mt][2 * ks][2], s[mt][2 * ks][3]);
    a[2] = pack2<kBf16>(s[mt][2 * ks + 1][0], s[mt][2 * ks + 1][1]);
    a[3] = pack2<kBf16>(s[mt][2 * ks + 1][2], s[mt][2 * ks + 1][3]);
}

// O += P V over the warp's m-tiles; v_base: the lane's ldmatrix address in this block's
// V slot.
template <class T>
__device__ __forceinline__ void pv_gemm(OAccum<T>& o_acc, const Scores<T>& s, u32 v_base, u32 (&a)[T::kMTiles][4]) {
    constexpr int kMTiles = T::kMTiles;
    constexpr bool kBf16 = T::kIsBf16;
#pragma unroll
    for (int ks = 0; ks < T::kPvSteps; ++ks) {
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
            pack_p<T>(a[mt], s, mt, ks);
        }
#pragma unroll
        for (int dp = 0; dp < T::kOTiles / 2; ++dp) {
            u32 b[4];
            ldmatrix_x4_trans(b, T::LayoutV::at(v_base, ks * 16, dp));
#pragma unroll
            for (int mt = 0; mt < kMTiles; ++mt) {
                mma_16816<kBf16>(o_acc[mt][2 * dp], a[mt], b[0], b[1]);
                mma_16816<kBf16>(o_acc[mt][2 * dp + 1], a[mt], b[2], b[3]);
            }
        }
    }
}

// S = Q K^T for m-tile mt alone (the staggered loop).
template <class T>
__device__ __forceinline__ void qk_gemm_m_tile(Scores<T>& s, int mt, const QFrags<T>& q_frag, u32 q_base, u32 k_base) {
#pragma unroll
    for (int nt = 0; nt < T::kNTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.f;
#pragma unroll
    for (int ks = 0; ks < T::kQkSteps; ++ks) {
        u32 a[4];
        q_fragment<T>(a, q_frag, q_base, mt, ks);
#pragma unroll
        for (int np = 0; np < T::kNTiles / 2; ++np) {
            u32 b[4];
            ldmatrix_x4(b, T::LayoutQK::at(k_base, np * 16, ks));
            mma_16816<T::kIsBf16>(s[mt][2 * np], a, b[0], b[1]);
            mma_16816<T::kIsBf16>(s[mt][2 * np + 1], a, b[2], b[3]);
        }
    }
}

// O += P V for m-tile mt alone (the staggered loop).
template <class T>
__device__ __forceinline__ void pv_gemm_m_tile(OAccum<T>& o_acc, const Scores<T>& s, int mt, u32 v_base) {
    constexpr bool kBf16 = T::kIsBf16;
#pragma unroll
    for (int ks = 0; ks < T::kPvSteps; ++ks) {
        u32 a[4];
        pack_p<T>(a, s, mt, ks);
#pragma unroll
        for (int dp = 0; dp < T::kOTiles / 2; ++dp) {
            u32 b[4];
            ldmatrix_x4_trans(b, T::LayoutV::at(v_base, ks * 16, dp));
            mma_16816<kBf16>(o_acc[mt][2 * dp], a, b[0], b[1]);
            mma_16816<kBf16>(o_acc[mt][2 * dp + 1], a, b[2], b[3]);
        }
    }
}

}  // namespace portable
}  // namespace fa4
