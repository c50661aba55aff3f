// -----------------------------------------------------------------------------------------
// fa4-gen kernel hopper_sm90_bf16_d192v128_causal_sinks_softcap_paged_m128n128w12s2_capoffset1_overlap1_pingpong1_ws1_4bd33ec2c3
// template  hopper_fwd.cu.tera (hash e8516e2a69916b43)
// spec      arch=sm90 dtype=bf16 head_dim=192 head_dim_v=128 mask=causal features=sinks+softcap+paged
// config    block_m=128 block_n=128 warps=12 stages=2 capoffset=1 overlap=1 pingpong=1 ws=1
// Rendered by fa4-gen: edit templates/, not this file.
// -----------------------------------------------------------------------------------------
#include "fa4/hopper/kernel.cuh"
#include "fa4/hopper/kernel_ws.cuh"

namespace fa4 {
namespace hopper {
// wgmma.m64nNk16 (k32 for FP8) for the N this kernel uses: d holds the thread's N/2 f32 accumulators
// (layout in wgmma.cuh); `accumulate` 0 overwrites them (scale-d), 1 adds.

template <>
struct Wgmma<64, fa4::bf16> {
    // A and B from shared memory (both K-major).
    __device__ __forceinline__ static void ss(float (&d)[32], u64 a, u64 b, int accumulate) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
            : "l"(a), "l"(b), "r"(accumulate));
    }
    // A from registers (4 x b32, mma.sync's A fragment), B from shared memory MN-major.
    __device__ __forceinline__ static void rs(float (&d)[32], const u32 (&a)[4], u64 b, int accumulate) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, "
            "%36, p, 1, 1, 1;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));
    }
};

template <>
struct Wgmma<128, fa4::bf16> {
    // A and B from shared memory (both K-major).
    __device__ __forceinline__ static void ss(float (&d)[64], u64 a, u64 b, int accumulate) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
            : "l"(a), "l"(b), "r"(accumulate));
    }
    // A from registers (4 x b32, mma.sync's A fragment), B from shared memory MN-major.
    __device__ __forceinline__ static void rs(float (&d)[64], const u32 (&a)[4], u64 b, int accumulate) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, "
            "%68, p, 1, 1, 1;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));
    }
};

}  // namespace hopper
}  // namespace fa4

struct KernelConfig {
    using Element = fa4::bf16;
    static constexpr fa4::MaskKind kMask = fa4::MaskKind::Causal;
    static constexpr int kHeadDim = 192;
    static constexpr int kHeadDimV = 128;
    static constexpr int kWarpgroups = 2;
    static constexpr int kBlockN = 128;
    static constexpr int kStages = 2;
    static constexpr bool kSinks = true;
    static constexpr bool kSoftcap = true;
    static constexpr bool kPaged = true;
    static constexpr bool kPackGqa = false;
    static constexpr bool kWarpSpecialized = true;
    static constexpr bool kPingpong = true;
    static constexpr bool kOverlap = true;
    static constexpr bool kTma = false;
    static constexpr bool kPersistent = false;
    static constexpr int kOSlots = 0;
    static constexpr int kQBuffers = 1;
    static constexpr bool kOInVRing = false;
    static constexpr bool kLazyRescale = false;
    static constexpr int kExp2EmuEvery = 0;
    static constexpr bool kCapOffset = true;
    static constexpr bool kHalfFirst = true;
    static constexpr bool kHiddenFirst = false;
    static constexpr bool kMufuTurns = false;
    static constexpr int kBlocksPerSm = 1;
    static constexpr int kProducerRegs = 56;  // 0: no reallocation
    static constexpr int kConsumerRegs = 224;
    static constexpr int kClusterM = 1;
    static constexpr bool kVarlenTiles = false;  // the dense grid (tile_scheduler.cuh)
};

using KernelTraits = fa4::hopper::Traits<KernelConfig>;
static_assert(KernelTraits::kSmemBytes == 214112, "shared memory differs from the config space's model");
static_assert(KernelTraits::kBlockM == 128, "block_m differs from the config space's model");

static_assert(KernelTraits::kThreads == 384, "threads differ from the config space's model");

// Q/K/V loaded and O stored by TMA (paged: K/V alone, through maps over the page pool):
// the argument block carries the tensor maps.
extern "C" __global__ void __launch_bounds__(KernelTraits::kThreads, KernelTraits::kBlocksPerSm)
fa4_fwd(const __grid_constant__ fa4::hopper::TmaFwdParams params) {
    fa4::hopper::forward_warp_specialized<KernelConfig>(params.fwd,
                                                        {&params.q_map, &params.k_map, &params.v_map, &params.o_map},
                                                        params.split);
}

