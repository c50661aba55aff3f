// Tile geometry of the Hopper (wgmma) forward kernel, derived from the rendered config.
// The Rust config space (src/space/hopper.rs) prunes with the same arithmetic; the
// static_asserts here are the backstop.
#pragma once

#include "fa4/common/mask.cuh"
#include "fa4/common/types.cuh"
#include "fa4/hopper/wgmma.cuh"

namespace fa4 {
namespace hopper {

template <class Config>
struct Traits {
    using Element = typename Config::Element;
    static constexpr bool kIsBf16 = Element::kIsBf16;
    static constexpr MaskKind kMask = Config::kMask;

    static constexpr int kHeadDim = Config::kHeadDim;
    static constexpr int kHeadDimV = Config::kHeadDimV;
    static constexpr int kWarpgroups = Config::kWarpgroups;  // each owns 64 query rows
    static constexpr int kBlockN = Config::kBlockN;
    static constexpr int kStages = Config::kStages;
    static constexpr bool kSinks = Config::kSinks;
    static constexpr bool kSoftcap = Config::kSoftcap;
    static constexpr bool kPaged = Config::kPaged;
    static constexpr bool kPackGqa = Config::kPackGqa;

    static constexpr int kBlockM = 64 * kWarpgroups;
    static constexpr int kWarps = 4 * kWarpgroups;
    static constexpr int kThreads = kWarps * 32;
    static constexpr int kRowsPerWarp = 16;
    static constexpr int kNTiles = kBlockN / 8;   // 8-column fragments of S per thread
    static constexpr int kOTiles = kHeadDimV / 8; // 8-column fragments of O per thread
    static constexpr int kQkSteps = kHeadDim / 16;
    static constexpr int kPvSteps = kBlockN / 16;
    // As in the portable kernel: large accumulators keep the compact K/V load form.
    static constexpr int kAccumulatorRegs = (kOTiles + kNTiles) * 4;
    static constexpr bool kCompactLoads = kAccumulatorRegs > 160;

    using LayoutQ = WgmmaLayout<kBlockM, kHeadDim>;
    using LayoutK = WgmmaLayout<kBlockN, kHeadDim>;
    using LayoutV = WgmmaLayout<kBlockN, kHeadDimV>;
    using LayoutO = WgmmaLayout<kBlockM, kHeadDimV>;  // O is staged where Q was
    static constexpr int kSmemQ = kBlockM * kHeadDim;
    static constexpr int kSmemO = kBlockM * kHeadDimV;
    static constexpr int kSmemQO = kSmemQ > kSmemO ? kSmemQ : kSmemO;
    static constexpr int kSmemK = kBlockN * kHeadDim;  // one stage
    static constexpr int kSmemV = kBlockN * kHeadDimV;
    static constexpr int kSmemTilesBytes = (kSmemQO + kStages * (kSmemK + kSmemV)) * 2;
    static constexpr int kSmemBytes = kSmemTilesBytes + 16;  // + the per-block scalars

    static_assert(kWarpgroups >= 1 && kWarpgroups <= 3, "1 to 3 warpgroups");
    static_assert(kBlockN % 16 == 0 && kBlockN <= 256, "wgmma's N: a multiple of 16, at most 256");
    static_assert(kHeadDimV <= 256, "wgmma's N: at most 256");
    static_assert(kStages >= 1 && kStages <= 2, "1 or 2 K/V stages");
    // Every tile starts on a 1024-byte swizzle atom.
    static_assert((kSmemQO * 2) % 1024 == 0 && (kSmemK * 2) % 1024 == 0 && (kSmemV * 2) % 1024 == 0,
                  "tiles are whole swizzle atoms");
};

}  // namespace hopper
}  // namespace fa4
