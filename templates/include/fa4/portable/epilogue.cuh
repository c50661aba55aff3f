// The epilogue: O normalised by the row sums (sink logits join them), staged through
// shared memory for 16-byte global stores; the LSE per row.
#pragma once

#include "fa4/common/params.cuh"
#include "fa4/common/ptx.cuh"
#include "fa4/common/seqlen.cuh"
#include "fa4/common/tile_copy.cuh"
#include "fa4/portable/gemm.cuh"
#include "fa4/portable/layout.cuh"
#include "fa4/portable/row_walk.cuh"
#include "fa4/portable/schedule.cuh"
#include "fa4/portable/traits.cuh"

namespace fa4 {
namespace portable {

// Sink logits (times log2 e) of the thread's rows, -inf without sinks: one head per
// block, or with pack-GQA the head of each row.
template <class T>
__device__ __forceinline__ void sink_logits(const FwdParams& params, const BlockTile<T>& tile,
                                            float (&sink_log2)[2 * T::kMTiles]) {
    const int kGroup = T::kPackGqa ? tile.group : 1;
#pragma unroll
    for (int r = 0; r < 2 * T::kMTiles; ++r) {
        const int row = tile.row_begin + tile.warp_row + (r / 2) * 16 + (r % 2) * 8 + tile.quad_row;
        sink_log2[r] = T::kSinks ? params.sinks[tile.head + row % kGroup] * kLog2e : neg_inf();
    }
}

// O normalised, packed to 16 bits, into shared memory (where Q was).
template <class T>
__device__ __forceinline__ void stage_o(const BlockTile<T>& tile, const OAccum<T>& o_acc,
                                        const float (&o_norm)[2 * T::kMTiles], u16* o_smem) {
    using LayoutV = typename T::LayoutV;
    // The thread's first fragment position; the others are a constant away (chunk_at).
    const u32 o_frag = u32(LayoutV::offset(tile.warp_row + tile.quad_row, tile.quad_col * 2)) * 2;
#pragma unroll
    for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const float norm = o_norm[mt * 2 + h];
#pragma unroll
            for (int ot = 0; ot < T::kOTiles; ++ot) {
                *reinterpret_cast<u32*>(reinterpret_cast<unsigned char*>(o_smem) +
                                        LayoutV::chunk_at(o_frag, mt * 16 + h * 8, ot)) =
                    pack2<T::kIsBf16>(o_acc[mt][ot][2 * h] * norm, o_acc[mt][ot][2 * h + 1] * norm);
            }
        }
}

// The LSE of the thread's rows (one lane of each quad writes).
template <class T>
__device__ __forceinline__ void store_lse(const FwdParams& params, const BlockTile<T>& tile, const SeqView& seq_out,
                                          int seq_rows, const float (&lse)[2 * T::kMTiles]) {
    const int kGroup = T::kPackGqa ? tile.group : 1;
    if (tile.quad_col == 0) {
        float* const lse_gmem = params.lse + seq_out.lse_offset + tile.head * params.lse_head_stride;
#pragma unroll
        for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = tile.row_begin + tile.warp_row + mt * 16 + h * 8 + tile.quad_row;
                if (row < seq_rows) lse_gmem[(row % kGroup) * params.lse_head_stride + row / kGroup] = lse[mt * 2 + h];
            }
    }
}

// O from shared memory to global, 16 bytes per thread per step.
template <class T>
__device__ __forceinline__ void store_o(const FwdParams& params, const BlockTile<T>& tile, const SeqView& seq_out,
                                        int seq_rows, const u16* o_smem) {
    const int kGroup = T::kPackGqa ? tile.group : 1;
    const int row_begin = tile.row_begin;
    u16* const o_gmem = static_cast<u16*>(params.o) + seq_out.o_offset + tile.head * params.o_head_stride;
    if constexpr (T::kPackGqa) {
        store_rows<T::kBlockM, typename T::LayoutV, T::kThreads>(
            [&](int r) {
                const int row = row_begin + r;
                return o_gmem + i64(row / kGroup) * params.o_row_stride + (row % kGroup) * params.o_head_stride;
            },
            o_smem, seq_rows - row_begin, tile.tid);
    } else {
        RowWalkCopy<T::kBlockM, typename T::LayoutV, T::kThreads>(tile.tid).store(
            o_gmem + i64(row_begin) * params.o_row_stride, params.o_row_stride, o_smem, seq_rows - row_begin);
    }
}

}  // namespace portable
}  // namespace fa4
