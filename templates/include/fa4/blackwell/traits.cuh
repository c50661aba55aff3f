// What a Blackwell kernel's config implies: its warp roles, its tensor-memory columns and
// its shared memory. src/space/blackwell.rs models the same numbers (the rendered
// kernel asserts they agree).
//
// A thread block owns kQStages tiles of 128 query rows ("Q stages"), FA4's layout:
//
//   warpgroup q < kQStages   softmax of Q stage q: thread t owns row t (TMEM lane t)
//   warpgroup kQStages       correction: rescales O in TMEM, then the epilogue
//   warpgroup kQStages + 1   warp 0 loads (TMA), warp 1 issues the MMAs, warps 2-3 idle
//
// Tensor memory, per Q stage q: S_q (kBlockN f32 columns; P_q, 16-bit, packed two to a
// column, overwrites its first kBlockN / 2 once S_q is in registers) and O_q (kVPad f32
// columns):
//
//   columns [q kBlockN, (q + 1) kBlockN)                      S_q, then P_q
//   columns [kQStages kBlockN + q kVPad, ... + kVPad)          O_q
//
// With two Q stages the tensor cores run one stage's GEMMs while the other's softmax
// runs: S_1 = Q_1 K^T and O_0 += P_0 V overlap softmax 0 and 1 in turn.
#pragma once

#include "fa4/common/mask.cuh"
#include "fa4/common/types.cuh"

namespace fa4 {
namespace blackwell {

template <class C>
struct Traits {
    using Element = typename C::Element;
    static constexpr MaskKind kMask = C::kMask;
    static constexpr int kHeadDim = C::kHeadDim;
    static constexpr int kHeadDimV = C::kHeadDimV;
    static constexpr int kQStages = C::kQStages;
    static constexpr int kBlockN = C::kBlockN;
    static constexpr int kStages = C::kStages;
    static constexpr bool kSinks = C::kSinks;
    static constexpr bool kSoftcap = C::kSoftcap;
    static constexpr bool kLazyRescale = C::kLazyRescale;
    static constexpr int kExp2EmuEvery = C::kExp2EmuEvery;

    static constexpr int kBlockM = 128 * kQStages;
    static constexpr int kThreads = 128 * (kQStages + 2);
    static constexpr int kCorrectionWarpgroup = kQStages;
    static constexpr int kIssueWarpgroup = kQStages + 1;  // its warp 0 loads, warp 1 issues MMAs

    // Head dims in whole 64-column blocks (128 bytes of 16-bit elements: one swizzle
    // row); TMA zero-fills the padding, which the QK GEMM skips and the PV GEMM computes.
    static constexpr int kQkPad = (kHeadDim + 63) / 64 * 64;
    static constexpr int kVPad = (kHeadDimV + 63) / 64 * 64;
    static constexpr int kQkSteps = kHeadDim / 16;  // K = 16 per f16-kind MMA
    static constexpr int kPvSteps = kBlockN / 16;

    // ---- tensor memory -----------------------------------------------------------------
    static constexpr int kSColumn = 0;
    static constexpr int kOColumn = kQStages * kBlockN;
    static constexpr int kColumnsUsed = kQStages * (kBlockN + kVPad);
    static constexpr int kTmemColumns = kColumnsUsed <= 32    ? 32
                                        : kColumnsUsed <= 64  ? 64
                                        : kColumnsUsed <= 128 ? 128
                                        : kColumnsUsed <= 256 ? 256
                                                              : 512;
    static_assert(kColumnsUsed <= 512, "S and O of every Q stage must fit TMEM's 512 columns");

    // ---- shared memory (bytes, from a 1024-byte aligned base) ----------------------------
    static constexpr int kQTileBytes = 128 * kQkPad * 2;
    static constexpr int kKTileBytes = kBlockN * kQkPad * 2;
    static constexpr int kVTileBytes = kBlockN * kVPad * 2;
    static constexpr int kStatsBytes = kQStages * 128 * 4 * 3;  // per row: O's rescale, sum, max
    static constexpr int kBarriers = 5 * kStages + 7 * kQStages;
    static constexpr int kSmemBytes = kQStages * kQTileBytes + kStages * (kKTileBytes + kVTileBytes) + kStatsBytes +
                                      8 * kBarriers + 8;  // + the TMEM address
    static_assert(kQTileBytes % 1024 == 0 && kKTileBytes % 1024 == 0 && kVTileBytes % 1024 == 0,
                  "every tile starts on a 1024-byte swizzle atom");

    // ---- registers (setmaxnreg): softmax rows hold a key block of scores ----------------
    // What the launch gives every thread (65536 / kThreads, rounded down to 8), and the
    // split: the load/MMA warpgroup gives most of its share to the softmax warpgroups.
    // Two stages up to d128 take FA4's 56 / 72 (the MMA warp's descriptors then stay in
    // uniform registers); wider heads' correction needs 80, leaving 48 to issue.
    static constexpr int kLaunchRegs = (65536 / kThreads) / 8 * 8;
    static constexpr int kIssueRegs = kQStages == 1 ? 96 : kQkPad <= 128 ? 56 : 48;
    static constexpr int kCorrectionRegs = kQStages == 1 ? 160 : kQkPad <= 128 ? 72 : 80;
    static constexpr int kSoftmaxRegs =
        ((kLaunchRegs * (kQStages + 2) - kIssueRegs - kCorrectionRegs) / kQStages) / 8 * 8;
    static_assert(kSoftmaxRegs <= 256, "setmaxnreg takes at most 256");
    static_assert(kSoftmaxRegs * kQStages + kIssueRegs + kCorrectionRegs <= kLaunchRegs * (kQStages + 2),
                  "the split hands out no more registers than the launch holds");

    static_assert(kQStages == 1 || kQStages == 2, "one or two Q stages");
    static_assert(kBlockN % 32 == 0 && kBlockN <= 256, "key blocks of whole 32-column TMEM loads, N <= 256");
    static_assert(kStages >= 2, "the K/V ring overlaps loads with the GEMMs");
    static_assert(kHeadDim % 16 == 0 && kHeadDimV % 16 == 0, "whole k-steps");
};

}  // namespace blackwell
}  // namespace fa4
