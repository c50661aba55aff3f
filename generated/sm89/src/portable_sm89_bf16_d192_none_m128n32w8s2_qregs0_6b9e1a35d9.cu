// -----------------------------------------------------------------------------------------
// fa4-gen kernel portable_sm89_bf16_d192_none_m128n32w8s2_qregs0_6b9e1a35d9
// template  portable_fwd.cu.tera (hash 8825930d0d237ee9)
// spec      arch=sm89 dtype=bf16 head_dim=192 head_dim_v=192 mask=none features=none
// config    block_m=128 block_n=32 warps=8 stages=2 qregs=0
// Rendered by fa4-gen: edit templates/, not this file.
// -----------------------------------------------------------------------------------------
#include "fa4/portable/kernel.cuh"

struct KernelConfig {
    using Element = fa4::bf16;
    static constexpr fa4::MaskKind kMask = fa4::MaskKind::None;
    static constexpr int kHeadDim = 192;
    static constexpr int kHeadDimV = 192;
    static constexpr int kBlockM = 128;
    static constexpr int kBlockN = 32;
    static constexpr int kWarps = 8;
    static constexpr int kStages = 2;
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
    static constexpr bool kSwizzle = true;
};

using KernelTraits = fa4::portable::Traits<KernelConfig>;
static_assert(KernelTraits::kSmemBytes == 98320, "shared memory differs from the config space's model");

// min_blocks > 1 caps the registers so that many blocks share an SM (the config space's
// `minblocks` switch).
extern "C" __global__ void __launch_bounds__(KernelTraits::kThreads, 1)
fa4_fwd(const __grid_constant__ fa4::FwdParams params) {
    fa4::portable::forward<KernelConfig>(params);
}
