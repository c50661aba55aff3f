// Tile geometry of the portable (mma.sync) forward kernel, derived from the rendered
// config. The Rust config space (src/space/portable.rs) prunes with the same arithmetic;
// the static_asserts here are the backstop.
#pragma once

#include "fa4/common/mask.cuh"
#include "fa4/common/types.cuh"
#include "fa4/portable/layout.cuh"

namespace fa4 {
namespace portable {

template <class Config>
struct Traits {
    using Element = typename Config::Element;
    static constexpr bool kIsBf16 = Element::kIsBf16;
    static constexpr MaskKind kMask = Config::kMask;

    static constexpr int kHeadDim = Config::kHeadDim;    // Q/K
    static constexpr int kHeadDimV = Config::kHeadDimV;  // V/O
    static constexpr int kBlockM = Config::kBlockM;      // query rows per block
    static constexpr int kBlockN = Config::kBlockN;      // key rows per iteration
    static constexpr int kWarps = Config::kWarps;
    static constexpr int kStages = Config::kStages;
    static constexpr bool kQInRegs = Config::kQInRegs;   // Q fragments loaded once
    static constexpr bool kSinks = Config::kSinks;       // per-head sink logits
    static constexpr bool kSoftcap = Config::kSoftcap;   // cap * tanh(score / cap)
    static constexpr bool kPaged = Config::kPaged;       // K/V through a page table
    static constexpr bool kPackGqa = Config::kPackGqa;   // rows = (query, head) of one KV head
    static constexpr bool kWarpSkip = Config::kWarpSkip; // warps skip masked blocks they cannot see
    static constexpr bool kLazy = Config::kLazy;         // rescale O only when a row's max grows 2^8
    static constexpr int kExp2EmuEvery = Config::kExp2EmuEvery;  // every k-th S fragment's exp2 by FMAs (0: none)
    static constexpr bool kStagger = Config::kStagger;   // m-tiles one after the other, softmax beside GEMM
    static constexpr bool kCapOffset = Config::kCapOffset;  // exponent offset fixed by the cap, no row max

    static constexpr int kThreads = kWarps * 32;
    static constexpr int kRowsPerWarp = kBlockM / kWarps;
    static constexpr int kMTiles = kRowsPerWarp / 16;  // 16-row MMA tiles per warp
    static constexpr int kNTiles = kBlockN / 8;        // 8-column tiles of S per warp
    static constexpr int kOTiles = kHeadDimV / 8;      // 8-column tiles of O per warp
    static constexpr int kQkSteps = kHeadDim / 16;     // k-steps of S = Q K^T
    static constexpr int kPvSteps = kBlockN / 16;      // k-steps of O += P V

    // f32 accumulator registers per thread (O and S). Tiles past 160 form their K/V
    // loads' step offsets anew each tile (StepAddress::kOpaque32): the hoisted form
    // spills them at the 255-register limit (d128 128x64 causal: 60 bytes).
    static constexpr int kAccumulatorRegs = kMTiles * (kOTiles + kNTiles) * 4;
    static constexpr bool kCompactLoads = kAccumulatorRegs > 160;

    // Shared memory, in 16-bit elements (layouts in layout.cuh): swizzled rows of whole
    // 128-byte lines, or padded rows.
    static constexpr bool kSwizzle = Config::kSwizzle;
    static_assert(!kSwizzle || (kHeadDim % 64 == 0 && kHeadDimV % 64 == 0), "swizzling needs 128-byte rows");
    using LayoutQK = SmemLayout<kHeadDim, kSwizzle>;
    using LayoutV = SmemLayout<kHeadDimV, kSwizzle>;
    static constexpr int kPad = kSwizzle ? 0 : 8;
    static constexpr int kPitchQK = LayoutQK::kPitch;
    static constexpr int kPitchV = LayoutV::kPitch;
    static constexpr int kSmemQ = kBlockM * kPitchQK;
    static constexpr int kSmemO = kBlockM * kPitchV;  // the epilogue stages O where Q was
    static constexpr int kSmemQO = kSmemQ > kSmemO ? kSmemQ : kSmemO;
    static constexpr int kSmemK = kBlockN * kPitchQK;  // one stage
    static constexpr int kSmemV = kBlockN * kPitchV;   // one stage
    static constexpr int kSmemTilesBytes = (kSmemQO + kStages * (kSmemK + kSmemV)) * 2;
    // Swizzled tiles leave no padding for the per-block scalars: 16 bytes after them.
    static constexpr int kSmemBytes = kSmemTilesBytes + (kSwizzle ? 16 : 0);

    static_assert(kWarps >= 1 && kWarps <= 16, "1 to 16 warps");
    static_assert(kBlockM % (16 * kWarps) == 0, "each warp owns whole 16-row MMA tiles");
    static_assert(kBlockN % 16 == 0, "block_n is a multiple of 16 (one PV k-step)");
    static_assert(kHeadDim % 16 == 0 && kHeadDimV % 16 == 0, "head dims are multiples of 16");
    static_assert(kStages >= 1 && kStages <= 4, "1 to 4 K/V stages");
    static_assert(!kStagger || (kStages >= 2 && !kWarpSkip), "the staggered schedule waits for V with K: a ring");
    static_assert(!kCapOffset || (kSoftcap && kIsBf16 && kExp2EmuEvery == 0),
                  "a fixed offset needs a cap, P in bf16 (2^48 overflows fp16) and every exp2 on the MUFU");
};

}  // namespace portable
}  // namespace fa4
