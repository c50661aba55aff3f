// What both Hopper schedules do to a warpgroup's fragments between and after the GEMMs:
// soft-capping and masking S, packing P for the PV GEMM, and the epilogue's staging of O
// and its LSE. A thread holds, per 16-row slice of its warp, rows `quad_row` and
// `quad_row + 8` (h = 0, 1) and, per 8-column fragment, columns 2 * quad_col and the next
// (wgmma.cuh's accumulator layout).
#pragma once

#include "fa4/common/exp2_poly.cuh"
#include "fa4/common/mask.cuh"
#include "fa4/common/params.cuh"
#include "fa4/common/ptx.cuh"
#include "fa4/common/softmax.cuh"
#include "fa4/hopper/fp8.cuh"

namespace fa4 {
namespace hopper {

// Where a thread's fragment rows sit: `first_row` is the warp's first row (block rows,
// which pack-GQA maps to query row / group), `group` the rows per query row.
struct FragmentRows {
    int first_row;
    int group;
    int quad_row;
    int quad_col;

    __device__ __forceinline__ int row(int h) const { return first_row + h * 8 + quad_row; }
    __device__ __forceinline__ int query(int h) const { return row(h) / group; }
};

// The PV GEMM's k16 steps (two 8-column fragments of P each) that hold the first
// kLiveTiles fragments: the only ones packed and multiplied.
template <int kLiveTiles>
__host__ __device__ constexpr int live_pv_steps() {
    return (kLiveTiles + 1) / 2;
}

// ---- soft-capping: S = tanh(S * scale / cap); the softmax then scales by cap * log2(e) ---
// (softcap_scale_log2), which folds the cap's multiply into the exp2's FMA. Only the
// first kLiveTiles 8-column fragments: the rest of the block is hidden from every row.
__device__ __forceinline__ float softcap_scale_log2(const FwdParams& params) { return params.softcap * kLog2e; }

template <bool kSoftcap, int kLiveTiles, int kNTiles>
__device__ __forceinline__ void softcap_scores(float (&s)[1][kNTiles][4], const FwdParams& params) {
    if constexpr (kSoftcap) {
        const float to_unit = params.softmax_scale / params.softcap;
#pragma unroll
        for (int nt = 0; nt < kLiveTiles; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[0][nt][e] = tanh_approx(s[0][nt][e] * to_unit);
    }
}

// ---- mask: -inf where a row may not see a key of the block at col_begin ------------------
// The row's bounds are taken relative to the thread's first column once, so each score
// costs one compare against a constant (two with a window's left edge) and a select.
template <MaskKind kMaskKind, int kLiveTiles, int kNTiles>
__device__ __forceinline__ void mask_scores(float (&s)[1][kNTiles][4], const Mask<kMaskKind>& mask,
                                            const FragmentRows& at, int col_begin) {
    const int thread_col = col_begin + at.quad_col * 2;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int query = at.query(h);
        const int first = mask.col_begin(query) - thread_col;  // 0 unless Local
        const int end = mask.col_end(query) - thread_col;
#pragma unroll
        for (int nt = 0; nt < kLiveTiles; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int col = nt * 8 + e;
                const bool hidden = kMaskKind == MaskKind::Local ? col < first || col >= end : col >= end;
                if (hidden) s[0][nt][2 * h + e] = neg_inf();
            }
    }
}

// The MUFU's reciprocal and log2 (ftz), for the epilogue's normalisation.
__device__ __forceinline__ float rcp_approx(float x) {
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(x));
    return r;
}
__device__ __forceinline__ float lg2_approx(float x) {
    float r;
    asm("lg2.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(x));
    return r;
}

// ---- online softmax, optionally with lazy rescaling -------------------------------------
// OnlineSoftmax (one 16-row slice per warp). With kLazy (FA4's lazy rescaling) a row keeps
// the max O is scaled to until a key block raises it by more than kLazyRescaleLog2 (log2
// units), and update() says whether any factor of the thread's differs from 1, so a warp
// whose rows all kept their max skips the rescale of O. p then stays at most 2^8 (well
// inside 16 bits), and the sum and the LSE follow the max actually used: the same
// softmax. Without kLazy the code is OnlineSoftmax's (update() always says "rescale"):
// testing for an unchanged max cost 2 to 4% at d64, where the softmax is the bottleneck.
// With kExp2EmuEvery = k > 0, every k-th 8-column fragment's exp2 runs on the FMA pipes
// (exp2_emulated) instead of the MUFU, which d64 and soft-capping keep busiest.
constexpr float kLazyRescaleLog2 = 8.f;

// Nothing around a block's exponentials (the default); a kernel that takes turns at the
// MUFU passes a turn whose before() runs between the row maxima and the exponentials and
// after() once their row sums are in (kernel_ws.cuh's MufuTurn).
struct NoTurn {
    __device__ __forceinline__ void before(float (&)[2]) {}
    __device__ __forceinline__ void after(float, float) {}
};
template <class F>
struct IsNoTurn {
    static constexpr bool value = false;
};
template <>
struct IsNoTurn<NoTurn> {
    static constexpr bool value = true;
};

template <int kNTiles, bool kLazy, int kExp2EmuEvery = 0, int kPShiftLog2 = 0>
struct RescalingSoftmax : OnlineSoftmax<1, kNTiles> {
    using OnlineSoftmax<1, kNTiles>::row_max;
    using OnlineSoftmax<1, kNTiles>::row_sum;

    // FP8's shifted p (kPShiftLog2) leaves lazy rescaling the rest of 2^8: p stays within
    // e4m3's range, and nearer its top than without the shift, where the subnormals of
    // small p cost O 2.6e-2 of relative error against 1e-2 (H100, the first FP8 verify).
    static constexpr float kLazyLimitLog2 = kLazyRescaleLog2 - float(kPShiftLog2);

    static __device__ __forceinline__ bool emulated(int nt) {
        return kExp2EmuEvery > 0 && nt % kExp2EmuEvery == kExp2EmuEvery - 1;
    }

    // Row h's new maximum over the first kLiveTiles fragments: sets o_scale[h] (and
    // `rescales` where it differs from 1) and returns the offset its exponentials subtract.
    template <int kLiveTiles>
    __device__ __forceinline__ float row_offset(int h, const float (&s)[1][kNTiles][4], float scale_log2,
                                                float (&o_scale)[2], bool& rescales) {
        float mx = row_max[h];
#pragma unroll
        for (int nt = 0; nt < kLiveTiles; ++nt) mx = fmaxf(mx, fmaxf(s[0][nt][2 * h], s[0][nt][2 * h + 1]));
        mx = quad_max(mx);
        // From -inf the difference is +inf (or NaN while every key so far was masked):
        // the row takes the new max.
        if (kLazy && mx * scale_log2 - row_max[h] * scale_log2 <= kLazyLimitLog2) mx = row_max[h];
        // A row that has seen only masked keys keeps max = -inf; offset by 0 then, so
        // every p is exp2(-inf) = 0 instead of NaN from (-inf) - (-inf).
        const float offset = mx == neg_inf() ? 0.f : mx * scale_log2;
        if constexpr (kLazy) {
            const bool grew = mx != row_max[h];
            o_scale[h] = grew ? exp2_approx(row_max[h] * scale_log2 - offset) : 1.f;
            rescales |= grew;
        } else {
            o_scale[h] = exp2_approx(row_max[h] * scale_log2 - offset);
            rescales = true;
        }
        row_max[h] = mx;
        return offset;
    }

    // Row h's scores to probabilities (in place) and the block's row sum into row_sum[h];
    // returns the block's row sum.
    template <int kLiveTiles>
    __device__ __forceinline__ float row_exps(int h, float (&s)[1][kNTiles][4], float scale_log2, float offset,
                                              const float (&o_scale)[2]) {
        float sum = 0.f;
        // FP8: p scaled by 2^kPShiftLog2 (traits.cuh); the sum with it, so O's factor is
        // unchanged and only the LSE takes it out (finalize).
        if constexpr (kPShiftLog2 != 0) offset -= float(kPShiftLog2);
#pragma unroll
        for (int nt = 0; nt < kLiveTiles; ++nt) {
#pragma unroll
            for (int e = 2 * h; e < 2 * h + 2; ++e) {
                const float x = fmaf(s[0][nt][e], scale_log2, -offset);
                const float p = emulated(nt) ? exp2_emulated(x) : exp2_approx(x);
                s[0][nt][e] = p;
                sum += p;
            }
        }
        row_sum[h] = row_sum[h] * o_scale[h] + sum;
        return sum;
    }

    // Scores of one key block to unnormalised probabilities, in place; per row the factor
    // for the output so far. Returns whether a factor of this thread's differs from 1.
    // Only the first kLiveTiles 8-column fragments are scores: the rest of the block is
    // hidden from every row (kernel_ws.cuh's first block) and no PV GEMM reads it, but for
    // a fragment that shares the last live k16 step, whose p is 0. (Zeros written to the
    // whole dead half made ptxas serialise every wgmma of the overlapped schedule: C7511.)
    // With a `turn` other than NoTurn, both rows' maxima come first, then turn.before()
    // (which may rewrite the offsets: the exponentials depend on it), every exponential,
    // and turn.after() on the row sums.
    template <int kLiveTiles = kNTiles, class Turn = NoTurn>
    __device__ __forceinline__ bool update(float (&s)[1][kNTiles][4], float scale_log2, float (&o_scale)[2],
                                           Turn turn = {}) {
        bool rescales = false;
#pragma unroll
        for (int nt = kLiveTiles; nt < 2 * live_pv_steps<kLiveTiles>(); ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[0][nt][e] = 0.f;
        if constexpr (IsNoTurn<Turn>::value) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const float offset = row_offset<kLiveTiles>(h, s, scale_log2, o_scale, rescales);
                row_exps<kLiveTiles>(h, s, scale_log2, offset, o_scale);
            }
        } else {
            float offset[2], sums[2];
#pragma unroll
            for (int h = 0; h < 2; ++h) offset[h] = row_offset<kLiveTiles>(h, s, scale_log2, o_scale, rescales);
            turn.before(offset);
#pragma unroll
            for (int h = 0; h < 2; ++h) sums[h] = row_exps<kLiveTiles>(h, s, scale_log2, offset[h], o_scale);
            turn.after(sums[0], sums[1]);
        }
        return rescales;
    }

    // kCapOffset (portable/softmax.cuh's reasoning): soft-capped scores are at most the
    // cap, so every row's exponent offset is fixed at cap * log2 e - 48 while that keeps
    // p normal (caps up to 51.9); the max holds it in log2 units (finalize() with scale 1).
    static constexpr float kCapOffsetHeadroomLog2 = 48.f;
    static constexpr float kCapOffsetMaxCapLog2 = 75.f;
    static __device__ __forceinline__ bool cap_offset_fits(float cap_log2) { return cap_log2 <= kCapOffsetMaxCapLog2; }
    __device__ __forceinline__ void init_cap_offset(float cap_log2) {
        row_max[0] = row_max[1] = cap_log2 - kCapOffsetHeadroomLog2;
    }
    // update() under the fixed offset: the exponentials and row sums alone (O never needs
    // a rescale); `s` holds tanh(score / cap), `scale_log2` is cap * log2 e.
    template <int kLiveTiles = kNTiles, class Turn = NoTurn>
    __device__ __forceinline__ void update_cap_offset(float (&s)[1][kNTiles][4], float scale_log2, Turn turn = {}) {
#pragma unroll
        for (int nt = kLiveTiles; nt < 2 * live_pv_steps<kLiveTiles>(); ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[0][nt][e] = 0.f;
        float offset[2] = {row_max[0], row_max[1]};
        const float keep[2] = {1.f, 1.f};
        float sums[2];
        turn.before(offset);
#pragma unroll
        for (int h = 0; h < 2; ++h) sums[h] = row_exps<kLiveTiles>(h, s, scale_log2, offset[h], keep);
        turn.after(sums[0], sums[1]);
    }

    // Per row: the factor that normalises O and the LSE (natural log), as OnlineSoftmax's
    // finalize() but on the MUFU's approximations (ex2, rcp, lg2; relative errors near
    // 2^-22) instead of exp2f, division and log2f, whose range checks and slow-path calls
    // ran on every work tile's tail (ncu, d64 at 512 tokens). Without sinks the sink term
    // is gone at compile time. A row that saw no key gets factor 0 and LSE -inf, or the
    // sink's logit.
    template <bool kSinks>
    __device__ __forceinline__ void finalize(float scale_log2, const float (&sink_log2_rows)[2], float (&o_scale)[2],
                                             float (&lse)[2]) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const float sum = quad_sum(row_sum[h]);
            const bool seen = sum > 0.f;
            const float row_top = seen ? row_max[h] * scale_log2 : neg_inf();
            const float sink_log2 = kSinks ? sink_log2_rows[h] : neg_inf();
            const float top = kSinks ? fmaxf(row_top, sink_log2) : row_top;  // every exp2 below stays <= 1
            const float keys = seen ? (kSinks ? exp2_approx(row_top - top) : 1.f) : 0.f;
            // (FP8's shifted sum: the sink's term takes the shift too)
            const float sink_top = kPShiftLog2 != 0 ? top - float(kPShiftLog2) : top;
            const float total = kSinks ? keys * sum + exp2_approx(sink_log2 - sink_top) : sum;
            const bool any = top != neg_inf();
            o_scale[h] = any ? keys * rcp_approx(total) : 0.f;
            if constexpr (kPShiftLog2 != 0) {
                lse[h] = any ? (top + lg2_approx(total) - float(kPShiftLog2)) * kLn2 : neg_inf();
            } else {
                lse[h] = any ? (top + lg2_approx(total)) * kLn2 : neg_inf();
            }
        }
    }
};

// Which exponent offset a kernel's key blocks take: the row max (false) or the cap's
// fixed one (true, kCapOffset), as a type so that each is its own copy of the loop.
template <bool kFixed>
struct CapOffset {
    static constexpr bool value = kFixed;
};

// ---- one key block's scores: soft-capping, mask, online softmax --------------------------
// The count of live 8-column fragments as a type, so that one generic lambda of a kernel
// serves the whole block and its visible half.
template <int kCount>
struct LiveTiles {
    static constexpr int value = kCount;
};

// Whether a key block at col_begin needs per-score masking: one that crosses a mask edge
// or, unmasked, the first block (the last keys) where it runs past the keys.
template <int kBlockN, MaskKind kMaskKind>
__device__ __forceinline__ bool block_needs_mask(const Mask<kMaskKind>& mask, bool first_block, int query_first,
                                                 int query_last, int col_begin) {
    return kMaskKind == MaskKind::None ? first_block && col_begin + kBlockN > mask.seqlen_k
                                       : mask.block_needs_mask(query_first, query_last, col_begin, col_begin + kBlockN);
}

// S to unnormalised P in place over the first kLiveTiles fragments (the rest of the block
// hidden from every row and left to the PV GEMM to skip), o_scale the factor for O so far;
// returns update()'s answer (whether a factor of this thread's differs from 1).
// The same with the cap's fixed offset (kCapOffset): O never needs a rescale.
template <int kLiveTiles, MaskKind kMaskKind, class Softmax, int kNTiles, class Turn = NoTurn>
__device__ __forceinline__ void block_scores_cap_offset(float (&s)[1][kNTiles][4], Softmax& softmax,
                                                        const FwdParams& params, const Mask<kMaskKind>& mask,
                                                        bool needs_mask, const FragmentRows& at, int col_begin,
                                                        float scale_log2, Turn turn = {}) {
    softcap_scores<true, kLiveTiles>(s, params);
    if (needs_mask) mask_scores<kMaskKind, kLiveTiles>(s, mask, at, col_begin);
    softmax.template update_cap_offset<kLiveTiles>(s, scale_log2, turn);
}

template <int kLiveTiles, bool kSoftcap, MaskKind kMaskKind, class Softmax, int kNTiles, class Turn = NoTurn>
__device__ __forceinline__ bool block_scores(float (&s)[1][kNTiles][4], Softmax& softmax, const FwdParams& params,
                                             const Mask<kMaskKind>& mask, bool needs_mask, const FragmentRows& at,
                                             int col_begin, float scale_log2, float (&o_scale)[2], Turn turn = {}) {
    softcap_scores<kSoftcap, kLiveTiles>(s, params);
    if (needs_mask) mask_scores<kMaskKind, kLiveTiles>(s, mask, at, col_begin);
    return softmax.template update<kLiveTiles>(s, scale_log2, o_scale, turn);
}

// ---- P to 16 bits in the A-fragment order of the PV GEMM (k16 steps of two 8-col tiles) --
// The k16 steps that hold the first kLiveTiles fragments; the PV GEMM reads only those.
template <bool kBf16, int kLiveTiles, int kPvSteps, int kNTiles>
__device__ __forceinline__ void pack_p(const float (&s)[1][kNTiles][4], u32 (&p)[kPvSteps][4]) {
    static_assert(kNTiles == 2 * kPvSteps, "two 8-column fragments per k16 step");
#pragma unroll
    for (int ks = 0; ks < live_pv_steps<kLiveTiles>(); ++ks) {
        p[ks][0] = pack2<kBf16>(s[0][2 * ks][0], s[0][2 * ks][1]);
        p[ks][1] = pack2<kBf16>(s[0][2 * ks][2], s[0][2 * ks][3]);
        p[ks][2] = pack2<kBf16>(s[0][2 * ks + 1][0], s[0][2 * ks + 1][1]);
        p[ks][3] = pack2<kBf16>(s[0][2 * ks + 1][2], s[0][2 * ks + 1][3]);
    }
}

// FP8: P to e4m3 as the PV GEMM's A takes it per k32 step (wgmma.cuh): a thread's row-g
// bytes are its fragments 4ks and 4ks + 1 (then 4ks + 2 and 4ks + 3), columns 2t and
// 2t + 1 of each: keys 2t, 2t + 1, 8 + 2t, 9 + 2t of the step, which is the order the
// producer gave Vt's columns (transpose.cuh).
template <int kPvSteps, int kNTiles>
__device__ __forceinline__ void pack_p_e4m3(const float (&s)[1][kNTiles][4], u32 (&p)[kPvSteps][4]) {
    static_assert(kNTiles == 4 * kPvSteps, "four 8-column fragments per k32 step");
#pragma unroll
    for (int ks = 0; ks < kPvSteps; ++ks) {
        const float(&a)[4] = s[0][4 * ks];
        const float(&b)[4] = s[0][4 * ks + 1];
        const float(&c)[4] = s[0][4 * ks + 2];
        const float(&d)[4] = s[0][4 * ks + 3];
        p[ks][0] = pack4_e4m3(a[0], a[1], b[0], b[1]);
        p[ks][1] = pack4_e4m3(a[2], a[3], b[2], b[3]);
        p[ks][2] = pack4_e4m3(c[0], c[1], d[0], d[1]);
        p[ks][3] = pack4_e4m3(c[2], c[3], d[2], d[3]);
    }
}

// ---- epilogue -------------------------------------------------------------------------
// The sink logit of each fragment row's head (log2 units), or -inf without sinks.
template <bool kSinks>
__device__ __forceinline__ void sink_logits(const FwdParams& params, int head, const FragmentRows& at,
                                            float (&sink_log2)[2]) {
#pragma unroll
    for (int h = 0; h < 2; ++h) sink_log2[h] = kSinks ? params.sinks[head + at.row(h) % at.group] * kLog2e : neg_inf();
}

// O / rowsum into the staging tile (16-bit, `Layout`); `stage_row` is the warp's first
// row within it.
template <bool kBf16, class Layout, int kAccs>
__device__ __forceinline__ void stage_o(u16* stage, const float (&o_acc)[kAccs], const float (&o_norm)[2],
                                        int stage_row, const FragmentRows& at) {
    constexpr int kOTiles = kAccs / 4;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int row = stage_row + h * 8 + at.quad_row;
#pragma unroll
        for (int ot = 0; ot < kOTiles; ++ot) {
            const int col = ot * 8 + at.quad_col * 2;
            *reinterpret_cast<u32*>(stage + Layout::offset(row, col)) =
                pack2<kBf16>(o_acc[ot * 4 + 2 * h] * o_norm[h], o_acc[ot * 4 + 2 * h + 1] * o_norm[h]);
        }
    }
}

// LSE of the fragment rows that are rows of the sequence (`rows` of them), one thread per row.
__device__ __forceinline__ void store_lse(const FwdParams& params, i64 lse_offset, int head, const FragmentRows& at,
                                          int rows, const float (&lse)[2]) {
    if (at.quad_col != 0) return;
    float* const lse_gmem = params.lse + lse_offset + head * params.lse_head_stride;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int row = at.row(h);
        if (row < rows) lse_gmem[(row % at.group) * params.lse_head_stride + row / at.group] = lse[h];
    }
}

}  // namespace hopper
}  // namespace fa4
