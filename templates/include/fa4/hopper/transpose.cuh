// FP8's V transpose (sm_90a), by the producer warpgroup (producer.cuh).
//
// wgmma transposes only 16-bit operands, and the PV GEMM's B (V: keys along K, the head
// dim along N) arrives MN-major, so each FP8 V tile is rewritten K-major into the Vt ring:
// Vt row n holds head-dim column n of every key of the tile. Within each 32 keys Vt's
// columns are permuted to the order in which a consumer thread's S fragments hold the keys
// (wgmma.cuh): column 4t + i is key 2t + i for i < 2 and 8 + 2t + i - 2 otherwise, and
// columns 16 .. 31 the same over keys 16 .. 31. P then packs straight from S's registers
// (fragments.cuh's pack_p_e4m3), since the PV GEMM sums over the keys in whatever order
// both operands share.
//
// One warp step moves 32 keys x 16 head-dim columns: ldmatrix.trans (b16) reads four
// 8-key x 16-byte matrices, so a lane holds keys 8i + 2t and 8i + 2t + 1 of head-dim
// columns 2c and 2c + 1 (c = lane / 4, t = lane % 4) in register i; two byte permutes per
// pair of registers give Vt's words (columns 2c, 2c + 1 x positions 4t .. 4t + 3), and
// stmatrix writes four 8-row x 16-byte pieces. Its matrices take rows 2c + (c >= 4) and
// 2c + (c < 4), so each 8-lane phase hits eight different swizzled chunks (rows 2c alone
// would hit four, a two-way bank conflict).
#pragma once

#include "fa4/common/ptx.cuh"
#include "fa4/hopper/fp8.cuh"
#include "fa4/hopper/wgmma.cuh"

namespace fa4 {
namespace hopper {

template <class T, int kThreads>
__device__ __forceinline__ void transpose_v(u32 v_tile, u32 vt_tile, int tid) {
    using LayoutV = typename T::LayoutV;    // keys x head dim, 16-bit units
    using LayoutVt = typename T::LayoutVt;  // head dim x keys, 16-bit units
    constexpr int kColBlocks = T::kHeadDimV / 16;
    constexpr int kKeyBlocks = T::kBlockN / 32;
    constexpr int kWarps = kThreads / 32;
    static_assert(T::kHeadDimV % 16 == 0 && T::kBlockN % 32 == 0, "whole 16-column x 32-key steps");
    const int warp = tid / 32;
    const int lane = tid % 32;
    // stmatrix: lane L gives row L % 8 of matrix L / 8 (even matrices rows 2c + (c >= 4),
    // odd ones 2c + (c < 4); the last two over keys 16 .. 31).
    const int st_matrix = lane / 8;
    const int st_r = lane % 8;
    const int st_row = 2 * st_r + ((st_matrix & 1) ^ (st_r >= 4 ? 1 : 0));
    const int st_col = 8 * (st_matrix / 2);
    const bool swap = lane >= 16;  // this lane's row c >= 4: odd rows in the even matrices
#pragma unroll 2
    for (int step = warp; step < kColBlocks * kKeyBlocks; step += kWarps) {
        const int cb = step % kColBlocks;
        const int kb = step / kColBlocks;
        u32 r[4];
        // ldmatrix: lane L gives row L % 8 of matrix L / 8, i.e. key 32 kb + L.
        ldmatrix_x4_trans(r, v_tile + u32(LayoutV::offset(32 * kb + lane, 8 * cb)) * 2);
        const u32 even_lo = byte_perm<0x6420>(r[0], r[1]);  // column 2c, positions 4t .. 4t + 3
        const u32 odd_lo = byte_perm<0x7531>(r[0], r[1]);   // column 2c + 1
        const u32 even_hi = byte_perm<0x6420>(r[2], r[3]);  // the same, positions 16 + 4t ..
        const u32 odd_hi = byte_perm<0x7531>(r[2], r[3]);
        const u32 w[4] = {swap ? odd_lo : even_lo, swap ? even_lo : odd_lo, swap ? odd_hi : even_hi,
                          swap ? even_hi : odd_hi};
        stmatrix_x4(vt_tile + u32(LayoutVt::offset(16 * cb + st_row, 16 * kb + st_col)) * 2, w);
    }
}

}  // namespace hopper
}  // namespace fa4
