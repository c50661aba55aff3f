// -----------------------------------------------------------------------------------------
// fa4-gen kernel portable_sm90_bf16_d96_none_m128n64w4s1_qregs0_55dd55ce16
// template  portable_fwd.cu.tera (hash 8825930d0d237ee9)
// spec      arch=sm90 dtype=bf16 head_dim=96 head_dim_v=96 mask=none features=none
// config    block_m=128 block_n=64 warps=4 stages=1 qregs=0
// Rendered by fa4-gen: edit templates/, not this file.
// -----------------------------------------------------------------------------------------
#include "fa4/portable/kernel.cuh"

struct KernelConfig {
    using Element = fa4::bf16;
    static constexpr fa4::MaskKind kMask = fa4::MaskKind::None;
    static constexpr int kHeadDim = 96;
    static constexpr int kHeadDimV = 96;
    static constexpr int kBlockM = 128;
    static constexpr int kBlockN = 64;
    static constexpr int kWarps = 4;
    static constexpr int kStages = 1;
    static constexpr bool kQInRegs = false;
    static constexpr bool kSinks = false;
    static constexpr bool kSoftcap = false;
    static constexpr bool kPaged = false;
    static constexpr bool kPackGqa = false;
    static constexpr bool kWarpSkip = false;
    static constexpr bool kLazy = false;
    static constexpr int kExp2EmuEvery = 0;
    static constexpr bool kStagger = false;
    static constexpr bool kCapOffset = false;
    static constexpr bool kSwizzle = false;
};

using KernelTraits = fa4::portable::Traits<KernelConfig>;
static_assert(KernelTraits::kSmemBytes == 53248, "shared memory differs from the config space's model");

// min_blocks > 1 caps the registers so that many blocks share an SM (the config space's
// `minblocks` switch).
extern "C" __global__ void __launch_bounds__(KernelTraits::kThreads, 1)
fa4_fwd(const __grid_constant__ fa4::FwdParams params) {
    fa4::portable::forward<KernelConfig>(params);
}
