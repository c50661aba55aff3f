// Tile geometry of the Hopper (wgmma) forward kernel, derived from the rendered config.
// The Rust config space (src/space/hopper.rs) prunes with the same arithmetic; the
// static_asserts here are the backstop.
#pragma once

#include "fa4/common/mask.cuh"
#include "fa4/common/types.cuh"
#include "fa4/hopper/fp8.cuh"
#include "fa4/hopper/wgmma.cuh"

namespace fa4 {
namespace hopper {

// A if kFirst, else B: how a config picks its parts' policy types.
template <bool kFirst, class A, class B>
struct Select {
    using type = A;
};
template <class A, class B>
struct Select<false, A, B> {
    using type = B;
};

template <class Config>
struct Traits {
    using Element = typename Config::Element;
    static constexpr bool kIsBf16 = Element::kIsBf16;  // P (16-bit) and O in bf16, else fp16
    // FP8 (e4m3) Q, K and V: P in e4m3 too, O in bf16 (kIsBf16), the descales folded into
    // the softmax scale and O (kernel_ws.cuh).
    static constexpr bool kIsFp8 = IsFp8<Element>::value;
    static constexpr int kElemBytes = kIsFp8 ? 1 : 2;
    static constexpr MaskKind kMask = Config::kMask;

    // Columns of Q/K and of V/O in global memory.
    static constexpr int kHeadDim = Config::kHeadDim;
    static constexpr int kHeadDimV = Config::kHeadDimV;
    // Q, K and V move (TMA boxes, copies, shared-memory tiles) as 16-bit units: an FP8 row
    // of d elements is d / 2 of them, so every load path is the 16-bit one and the host
    // passes FP8 strides in units. These are their columns in units.
    static constexpr int kQkCols = kHeadDim * kElemBytes / 2;
    static constexpr int kVCols = kHeadDimV * kElemBytes / 2;
    // In shared memory and as the PV GEMM's N, head dims run in whole 64-column blocks
    // (the 128-byte swizzle atom; an MN-major operand cannot end inside one): d96 sits
    // in d128's tiles. The QK GEMM steps over the real columns only; V's padding columns
    // (zeros by TMA, stale by cp.async) feed O columns that are never stored.
    // kHeadDimPad: Q's and K's units in shared memory; kHeadDimVPad: O's columns (V's
    // units too but for FP8, kVColsPad).
    static constexpr int kHeadDimPad = (kQkCols + 63) / 64 * 64;
    static constexpr int kHeadDimVPad = (kHeadDimV + 63) / 64 * 64;
    static constexpr int kVColsPad = (kVCols + 63) / 64 * 64;
    static constexpr int kWarpgroups = Config::kWarpgroups;  // each owns 64 query rows
    // Warp specialisation: one more warpgroup loads K/V for the others (kernel_ws.cuh);
    // the consumers take turns at the tensor cores (pingpong) and issue the next QK GEMM
    // before the last PV GEMM has finished (overlap).
    static constexpr bool kWarpSpecialized = Config::kWarpSpecialized;
    static constexpr bool kPingpong = Config::kPingpong;
    static constexpr bool kOverlap = Config::kOverlap;
    static constexpr bool kTma = Config::kTma;  // Q/K/V by TMA, O too (strided K/V only)
    // Paged K/V: the producer's whole key tiles go by TMA too, a box per page (or one of
    // a page of whole tiles), where the launcher encoded maps over the page pool.
    static constexpr bool kTmaPages = kWarpSpecialized && Config::kPaged;
    // A grid of about one block per SM, each striding over the work tiles, so the
    // producer loads the next tile's K/V while the consumers store this one's O.
    static constexpr bool kPersistent = Config::kPersistent;
    // Persistent grids with shared memory to spare stage O beside Q, so the producer
    // loads the next tile's Q as soon as the last QK GEMM is done: a slot per consumer
    // (kOSlots == kWarpgroups), or one that two consumers take in turn (kSharedO).
    static constexpr int kOSlots = Config::kOSlots;
    static constexpr bool kSeparateO = kOSlots > 0;
    static constexpr bool kSharedO = kOSlots == 1 && kWarpgroups > 1;
    // With O in a slot of its own, two Q slots per consumer where they fit: the producer
    // loads the next tile's Q while the consumers still read this one's.
    static constexpr int kQBuffers = Config::kQBuffers;
    // FP8 on a grid of one block per tile, where Q slots that also staged O (16-bit, twice
    // Q's bytes) would not fit: O is staged in the V ring, consumer c in slot c. The ring
    // holds only what TMA landed, all of it transposed before the last "full V" that each
    // consumer waits on, and the block's one work tile loads nothing after it.
    static constexpr bool kOInVRing = Config::kOInVRing;
    // Lazy rescaling of O (FA4's): only when a row's max grows past a threshold.
    static constexpr bool kLazyRescale = Config::kLazyRescale;
    // Every k-th 8-column fragment of P exponentiated on the FMA pipes (0: none).
    static constexpr int kExp2EmuEvery = Config::kExp2EmuEvery;
    static constexpr bool kCapOffset = Config::kCapOffset;  // exponent offset fixed by the cap, no row max
    // A masked tile's first key block over the half a consumer sees, where it is at most
    // half visible (kernel_ws.cuh; the config space decides where it pays).
    static constexpr bool kHalfFirst = Config::kHalfFirst;
    // Where there is no half first block: a consumer that sees none of its first block
    // skips it but for its turn at the MUFU (kernel_ws.cuh).
    static constexpr bool kHiddenFirst = Config::kHiddenFirst;
    // Pingpong turns around each block's exponentials instead of its GEMM issues.
    static constexpr bool kMufuTurns = Config::kMufuTurns;
    static constexpr int kBlocksPerSm = Config::kBlocksPerSm;
    static constexpr int kProducerRegs = Config::kProducerRegs;
    static constexpr int kConsumerRegs = Config::kConsumerRegs;
    static constexpr int kBlockN = Config::kBlockN;
    static constexpr int kStages = Config::kStages;
    static constexpr bool kSinks = Config::kSinks;
    static constexpr bool kSoftcap = Config::kSoftcap;
    static constexpr bool kPaged = Config::kPaged;
    static constexpr bool kPackGqa = Config::kPackGqa;
    // An unmasked persistent grid may split its last tiles by keys (schedule.cuh's
    // SplitTail) when the host hands it a workspace (with the tensor maps): not with
    // sinks (they join one denominator) or paged K/V. space/hopper.rs says the same.
    static constexpr bool kSplitTail =
        kPersistent && kWarpSpecialized && kTma && kMask == MaskKind::None && !kSinks && !kPaged;
    static constexpr int kSplitTailBytes = kSplitTail ? 56 : 0;  // the block's share (schedule.cuh)
    // Blocks per cluster along m (1: none). A cluster's blocks take consecutive m-blocks of
    // one head, so they read the same K/V tiles: each block's producer loads a share of
    // every tile's 64-column boxes and multicasts it into all of them, and a slot is free
    // once every block's consumers are done with it (kernel_ws.cuh).
    static constexpr int kClusterM = Config::kClusterM;
    static constexpr bool kVarlenTiles = Config::kVarlenTiles;  // varlen tiles numbered by sequence

    static constexpr int kBlockM = 64 * kWarpgroups;
    static constexpr int kWarps = 4 * (kWarpgroups + (kWarpSpecialized ? 1 : 0));
    static constexpr int kThreads = kWarps * 32;
    static constexpr int kRowsPerWarp = 16;
    static constexpr int kNTiles = kBlockN / 8;   // 8-column fragments of S per thread
    static constexpr int kOTiles = kHeadDimVPad / 8; // 8-column fragments of O per thread
    static constexpr int kQkSteps = kQkCols / 16;  // k16 steps, or k32 for FP8: 32 bytes of a row each
    static constexpr int kPvSteps = kBlockN / (kIsFp8 ? 32 : 16);
    // FP8's P is scaled by 2^kPShiftLog2 towards the top of e4m3's range (448): p <= 2^8
    // by the shift alone, or by 2^4 and lazy rescaling's threshold of 2^4 (fragments.cuh).
    static constexpr int kPShiftLog2 = kIsFp8 ? (Config::kLazyRescale ? 4 : 8) : 0;
    // As in the portable kernel: large accumulators keep the compact K/V load form.
    static constexpr int kAccumulatorRegs = (kOTiles + kNTiles) * 4;
    static constexpr bool kCompactLoads = kAccumulatorRegs > 160;

    using LayoutQ = WgmmaLayout<kBlockM, kQkCols>;
    using LayoutK = WgmmaLayout<kBlockN, kQkCols>;
    using LayoutV = WgmmaLayout<kBlockN, kVCols>;
    using LayoutO = WgmmaLayout<kBlockM, kHeadDimV>;  // O is staged where Q was (stage 1)
    // FP8: the PV GEMM's B must be K-major, so the producer transposes each V tile into Vt
    // (head dim along N, keys along K, kBlockN keys as kBlockN / 2 units), its keys
    // permuted within every 32 to match P's registers (producer.cuh).
    using LayoutVt = WgmmaLayout<kHeadDimVPad, (kIsFp8 ? kBlockN / 2 : 16)>;
    // Per warpgroup: kQBuffers slots for its 64 rows of Q, which also stage its O unless O
    // has slots beside them (kSeparateO) or goes to the V ring (kOInVRing).
    static constexpr int kSmemQSlot =
        64 * (kSeparateO || kOInVRing || kHeadDimPad > kHeadDimVPad ? kHeadDimPad : kHeadDimVPad);
    static constexpr int kSmemOSlot = 64 * kHeadDimVPad;
    static constexpr int kSmemQRegion = kWarpgroups * kQBuffers * kSmemQSlot;
    static constexpr int kSmemORegion = kOSlots * kSmemOSlot;
    static constexpr int kSmemQO = kSmemQRegion;  // stage 1: the block's Q, then its O
    static constexpr int kSmemK = kBlockN * kHeadDimPad;  // one stage
    static constexpr int kSmemV = kBlockN * kVColsPad;
    static constexpr int kSmemVt = kIsFp8 ? kHeadDimVPad * ((kBlockN / 2 + 63) / 64 * 64) : 0;
    static constexpr int kSmemTilesBytes =
        (kSmemQRegion + kSmemORegion + kStages * (kSmemK + kSmemV + kSmemVt)) * 2;
    // The warp-specialised producer's page table rows (a key tile's page and row within it).
    static constexpr int kPageRowsBytes = kWarpSpecialized && kPaged ? 8 * kBlockN : 0;
    // + the per-block scalars, or the mbarriers: the K/V ring's (full and empty, K and V,
    // per stage), each consumer's Q slot's (full and empty) and a shared O slot's (free)
    static constexpr int kSmemBytes =
        kSmemTilesBytes + (kWarpSpecialized ? 32 * kStages + 16 * kWarpgroups * kQBuffers + (kSharedO ? 8 : 0) +
                                                  (kMufuTurns ? 8 : 0) + kSplitTailBytes + (kIsFp8 ? 8 * kStages : 0) +
                                                  kPageRowsBytes
                                            : 16);

    static_assert(kWarpgroups >= 1 && kWarpgroups <= 3, "1 to 3 warpgroups");
    static_assert(kBlockN % 16 == 0 && kBlockN <= 256, "wgmma's N: a multiple of 16, at most 256");
    static_assert(kHeadDimVPad <= 256, "wgmma's N: at most 256");
    static_assert(kHeadDim % 16 == 0 && kHeadDimV % 16 == 0, "head dims of whole 16-column k-steps");
    static_assert(kStages >= 1 && kStages <= (kWarpSpecialized ? 3 : 2), "1 or 2 K/V stages (3 in the producer's ring)");
    static_assert(!kPingpong || (kWarpSpecialized && kWarpgroups >= 2), "pingpong takes two or more consumers");
    static_assert(!kTma || (kWarpSpecialized && !kPaged), "TMA loads are the producer's, of strided K/V");
    static_assert(!kPersistent || kWarpSpecialized, "the persistent grid is the warp-specialised schedule's");
    static_assert(!kSeparateO || kPersistent, "a slot for O pays only on a persistent grid");
    static_assert(kOSlots == 0 || kOSlots == kWarpgroups || (kOSlots == 1 && kWarpgroups == 2),
                  "O slots: none, one per consumer, or one shared by two consumers (whose turns alternate)");
    static_assert(!kHalfFirst || (kWarpSpecialized && kMask != MaskKind::None),
                  "the half first block is the masked warp-specialised schedule's");
    static_assert(!kHiddenFirst || (kMufuTurns && !kHalfFirst && kMask != MaskKind::None),
                  "the hidden first block is skipped on masked tiles with MUFU turns and no half block");
    static_assert(kQBuffers == 1 || (kQBuffers == 2 && kSeparateO), "a second Q slot needs a slot for O");
    static_assert(!kOInVRing || (kIsFp8 && !kPersistent && !kSeparateO && kStages >= kWarpgroups &&
                                 kSmemV >= kSmemOSlot),
                  "O in the V ring: FP8, one block per tile, a V slot per consumer that holds its O");
    static_assert(!kMufuTurns || kPingpong, "turns at the MUFU are pingpong's");
    static_assert(kClusterM == 1 || (kClusterM == 2 && kTma && !kPersistent && kMask == MaskKind::None),
                  "clusters of two blocks: TMA, one block per tile, unmasked (the pair's key tiles are the same)");
    static_assert(!kLazyRescale || kWarpSpecialized, "lazy rescaling is the warp-specialised schedule's");
    static_assert(kExp2EmuEvery == 0 || kWarpSpecialized, "exp2 emulation is the warp-specialised schedule's");
    static_assert(!kCapOffset || (kWarpSpecialized && kSoftcap && kIsBf16 && !kIsFp8),
                  "a fixed offset: warp-specialised, soft-capped, P in bf16");
    static_assert(!kIsFp8 || (kWarpSpecialized && (kTma || kPaged) && kStages >= 2 && kBlockN % 32 == 0),
                  "FP8: the warp-specialised schedule, K/V by TMA or from pages (its producer transposes "
                  "V), a ring of two or more stages, whole k32 steps of keys");
    static_assert(!kIsFp8 || (!kHalfFirst && !kHiddenFirst && !kPackGqa && kClusterM == 1),
                  "FP8: whole key blocks; no pack-GQA or clusters yet");
    // Registers move from the producer to the consumers within the block's allotment.
    static constexpr int kLaunchRegs = (65536 / (kThreads * kBlocksPerSm) > 255 ? 255 : 65536 / (kThreads * kBlocksPerSm)) / 8 * 8;
    static_assert(!kWarpSpecialized || kProducerRegs * 128 + kConsumerRegs * 128 * kWarpgroups <= kLaunchRegs * kThreads,
                  "the register split exceeds the block's allotment");
    // Every tile starts on a 1024-byte swizzle atom.
    static_assert((kSmemQSlot * 2) % 1024 == 0 && (kSmemOSlot * 2) % 1024 == 0 && (kSmemK * 2) % 1024 == 0 &&
                      (kSmemV * 2) % 1024 == 0 && (kSmemVt * 2) % 1024 == 0,
                  "tiles are whole swizzle atoms");
};

}  // namespace hopper
}  // namespace fa4
