// The portable FlashAttention forward kernel: mma.sync.m16n8k16 + ldmatrix + cp.async,
// online softmax in registers (FlashAttention-2's algorithm). Runs on sm80 and every
// later arch.
//
// One thread block computes kBlockM query rows of one (batch, head); each warp owns
// kRowsPerWarp of those rows and walks the visible key blocks from the last to the first
// (the blocks that need masking come first, the rest run mask-free). The parts, in the
// order a block runs them:
//
//   schedule.cuh  which rows (causal grids: the heaviest m-block first), which key blocks
//   layout.cuh    shared memory: Q (then O), kStages K and V slots, padded or swizzled
//   pipeline.cuh  load Q once, K and V through the ring of slots (cp.async)
//   mainloop.cuh  per key block: QK GEMM, softcap, mask, online softmax, PV GEMM
//                 (gemm.cuh, scores.cuh, softmax.cuh)
//   stagger.cuh   kStagger's loop: the same steps m-tile by m-tile in one branch-free
//                 body, so that ptxas interleaves one m-tile's tanh and exp2 with the
//                 other's GEMMs
//   epilogue.cuh  O / rowsum (sink logits join the rowsum) through shared memory to
//                 global; LSE per row
//
// kCapOffset (either loop) drops the row max: soft-capped scores are bounded, so one
// fixed offset serves every row (softmax.cuh).
//
// Every served kernel's machine code is a tuned, verified artefact, so the parts keep
// the exact instruction stream the one-function kernel had. Three rules do that (each
// broke it once, seen in the PTX): arrays the loop works in are declared here and lent
// to the parts; a switch's branch is decided where the part is called, not inside it;
// and a value that is a constant expression here (kGroup without pack-GQA) is one in
// each part too.
#pragma once

#include "fa4/common/params.cuh"
#include "fa4/common/ptx.cuh"
#include "fa4/common/seqlen.cuh"
#include "fa4/common/tile_copy.cuh"
#include "fa4/portable/epilogue.cuh"
#include "fa4/portable/gemm.cuh"
#include "fa4/portable/layout.cuh"
#include "fa4/portable/mainloop.cuh"
#include "fa4/portable/pipeline.cuh"
#include "fa4/portable/schedule.cuh"
#include "fa4/portable/softmax.cuh"
#include "fa4/portable/stagger.cuh"
#include "fa4/portable/traits.cuh"

namespace fa4 {
namespace portable {

template <class Config>
__device__ __forceinline__ void forward(const FwdParams& params) {
    using T = Traits<Config>;
    constexpr int kMTiles = T::kMTiles;
    constexpr int kNTiles = T::kNTiles;
    constexpr int kOTiles = T::kOTiles;

    extern __shared__ __align__(128) unsigned char smem_raw[];
    const SmemTiles<T> smem(smem_raw);

    // ---- which rows, which keys ------------------------------------------------------------
    BlockTile<T> block;
    if (!block.locate_rows(params)) return;
    block.locate_heads();
    // The thread's place in the block's MMA fragments. Set here, not by a BlockTile
    // member: the ldmatrix lane addresses formed from them below keep their sm100/sm120
    // PTX only so.
    const int tid = threadIdx.x;
    const int warp = tid / 32;
    const int lane = tid % 32;
    block.tid = tid;
    block.lane = lane;
    block.quad_row = lane / 4;
    block.quad_col = lane % 4;
    block.warp_row = warp * T::kRowsPerWarp;
    const KeyBlocks keys = key_blocks<T>(params, block, smem.scalars);
    // Soft-capped scores reach the softmax as cap * tanh(S * scale / cap), or, where the
    // MUFU is relieved (kCapFolded), as the tanh alone, the cap's multiply folded into
    // the exponent's FMA. (Folded everywhere, d128's best soft-capped tile spills.)
    constexpr bool kCapFolded = T::kSoftcap && T::kExp2EmuEvery > 0;
    const float score_scale_log2 =
        T::kSoftcap ? (kCapFolded ? params.softcap * kLog2e : kLog2e) : params.scale_log2;

    // ---- load: Q, then the first K/V tiles --------------------------------------------------
    // The block's K/V pointers and page table are formed here, where the paged k_offset
    // of 0 is known, and lent to the loader.
    const SeqView& seq = block.seq;
    const u16* const q_gmem = static_cast<const u16*>(params.q) + seq.q_offset + block.head * params.q_head_stride;
    const u16* const k_gmem =
        static_cast<const u16*>(params.k) + seq.k_offset + block.kv_head * params.k_head_stride;
    const u16* const v_gmem =
        static_cast<const u16*>(params.v) + seq.v_offset + block.kv_head * params.v_head_stride;
    const PageTable page_table{params.page_table + i64(block.batch) * params.page_table_batch_stride,
                               params.page_size};
    typename KvLoader<T>::KCopy::PagedRows paged_rows;
    KvLoader<T> kv(params, k_gmem, v_gmem, page_table, block, smem, keys.n_end, paged_rows);
    using LayoutQK = typename T::LayoutQK;
    using LayoutV = typename T::LayoutV;
    const LdmatrixLanes<T> lanes{smem_u32(smem.q) + LayoutQK::lane_base(block.warp_row + lane % 16, lane / 16),
                                 LayoutQK::lane_base((lane / 16) * 8 + lane % 8, (lane / 8) % 2),
                                 LayoutV::lane_base(((lane / 8) % 2) * 8 + lane % 8, lane / 16)};
    load_q<T>(params, block, q_gmem, smem.q);
    cp_async_commit();
    kv.load_first_tiles(keys.n_tiles);

    // ---- what a warp carries from one key block to the next ---------------------------------
    float o_acc[kMTiles][kOTiles][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int ot = 0; ot < kOTiles; ++ot)
#pragma unroll
            for (int e = 0; e < 4; ++e) o_acc[mt][ot][e] = 0.f;

    Softmax<kMTiles, kNTiles, T::kLazy, T::kExp2EmuEvery> softmax;
    softmax.init();
    QFrags<T> q_frag;  // kQInRegs: Q's fragments, loaded with the first key block
    // kCapOffset: the exponent's offset fixed by the cap (softmax.cuh), where it fits.
    const float cap_log2 = params.softcap * kLog2e;
    bool cap_offset = false;
    if constexpr (T::kCapOffset) {
        cap_offset = softmax.cap_offset_fits(cap_log2);
        if (cap_offset) softmax.init_cap_offset(cap_log2);
    }

    // ---- the key loop -----------------------------------------------------------------------
    if constexpr (T::kStagger) {
        staggered_loop<T>(params, block, keys, kv, lanes, smem.scalars, o_acc, softmax, q_frag, cap_offset, cap_log2,
                          score_scale_log2);
    } else {
        float s[kMTiles][kNTiles][4];
        u32 a_qk[kMTiles][4];
        float o_scale[2 * kMTiles];
        u32 a_pv[kMTiles][4];
        key_loop<T>(params, block, keys, kv, lanes, smem.scalars, o_acc, softmax, q_frag, cap_offset,
                    score_scale_log2, KeyBlockFragments<T>{s, a_qk, o_scale, a_pv});
    }

    // ---- epilogue: O / rowsum -> shared -> global (16-byte stores); LSE per row -------------
    cp_async_wait<0>();
    __syncthreads();  // all warps are past their last read of Q: its space takes O
    // Where this block's rows go, read again rather than held in registers over the loop.
    const SeqView seq_out = seq_view<T::kPaged>(params, blockIdx.z);
    const int kGroup = T::kPackGqa ? block.group : 1;
    const int seq_rows = seq_out.seqlen_q * kGroup;
    float o_norm[2 * kMTiles];
    float lse[2 * kMTiles];
    float sink_log2[2 * kMTiles];
    sink_logits<T>(params, block, sink_log2);
    // Under kCapOffset's fixed offset the max holds it in log2 units already.
    softmax.finalize(cap_offset ? 1.f : score_scale_log2, sink_log2, o_norm, lse);
    stage_o<T>(block, o_acc, o_norm, smem.o);
    store_lse<T>(params, block, seq_out, seq_rows, lse);
    __syncthreads();
    store_o<T>(params, block, seq_out, seq_rows, smem.o);
}

}  // namespace portable
}  // namespace fa4
