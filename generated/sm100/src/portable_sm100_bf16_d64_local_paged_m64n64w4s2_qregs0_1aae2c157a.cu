// -----------------------------------------------------------------------------------------
// fa4-gen kernel portable_sm100_bf16_d64_local_paged_m64n64w4s2_qregs0_1aae2c157a
// template  portable_fwd.cu.tera (hash 8825930d0d237ee9)
// spec      arch=sm100 dtype=bf16 head_dim=64 head_dim_v=64 mask=local features=paged
// config    block_m=64 block_n=64 warps=4 stages=2 qregs=0
// Rendered by fa4-gen: edit templates/, not this file.
// -----------------------------------------------------------------------------------------
#include "fa4/portable/kernel.cuh"

struct KernelConfig {
    using Element = fa4::bf16;
    static constexpr fa4::MaskKind kMask = fa4::MaskKind::Local;
    static constexpr int kHeadDim = 64;
    static constexpr int kHeadDimV = 64;
    static constexpr int kBlockM = 64;
    static constexpr int kBlockN = 64;
    static constexpr int kWarps = 4;
    static constexpr int kStages = 2;
    static constexpr bool kQInRegs = false;
    static constexpr bool kSinks = false;
    static constexpr bool kSoftcap = false;
    static constexpr bool kPaged = true;
    static constexpr bool kPackGqa = false;
    static constexpr bool kWarpSkip = false;
    static constexpr bool kLazy = false;
    static constexpr int kExp2EmuEvery = 0;
    static constexpr bool kStagger = false;
    static constexpr bool kCapOffset = false;
    static constexpr bool kSwizzle = true;
};

using KernelTraits = fa4::portable::Traits<KernelConfig>;
static_assert(KernelTraits::kSmemBytes == 40976, "shared memory differs from the config space's model");

// min_blocks > 1 caps the registers so that many blocks share an SM (the config space's
// `minblocks` switch).
extern "C" __global__ void __launch_bounds__(KernelTraits::kThreads, 1)
fa4_fwd(const __grid_constant__ fa4::FwdParams params) {
    fa4::portable::forward<KernelConfig>(params);
}
