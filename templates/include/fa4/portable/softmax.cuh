// The portable kernel's online softmax: common/softmax.cuh's, with two compile-time
// options from FA4.
//
// The mma.sync kernel is bound by instruction issue (exp2s moved to the FMA pipes made
// soft-capped d64 slower, 248 -> 230 TFLOP/s, not faster): rescaling O costs
// one FMUL per accumulator per key block, 2 x head_dim / 8 per thread per row pair
// (128 at d128 over 32 rows per warp, as many as its 64 scores take for max, exp2 and
// sum). With kLazy a row keeps the max O is scaled to until a key block raises it by more
// than kLazyRescaleLog2 (log2 units); the warp votes, and skips the rescale when none of
// its rows moved. p then stays at most 2^8, well inside 16 bits, and the sum and the LSE
// follow the max actually used: the same softmax.
//
// Soft-capping adds a tanh per score, a second MUFU op beside the exp2: at d64 the MUFU
// then needs more cycles per key block than the mma.sync GEMMs. With kExp2EmuEvery = k,
// every k-th 8-column fragment is exponentiated on the FMA pipes (exp2_emulated) instead.
//
// With neither option update() is OnlineSoftmax's and always says "rescale", so those
// kernels keep their machine code.
//
// A soft-capped score is bounded, |cap * tanh(x)| <= cap, so its exponent's offset need
// not follow the row max (kCapOffset, bf16 only): every row is offset by the bound minus
// kCapOffsetHeadroomLog2, once. p then lies in [2^(48 - 2 C), 2^48] with C = cap * log2 e:
// normal in f32 and bf16 (not fp16) with 24 binades to spare below while C <= 75 (caps up
// to 51.9, Gemma-2's 50 among them), and 2^48 leaves V's values and the sum of 2^20 keys
// far from f32's overflow. No max, no shuffles, no rescale of O: the softmax becomes
// tanh, FFMA and exp2 per score, independent of one another. Softmax is shift-invariant,
// so O, the sum and the LSE are those of the max-offset softmax. Larger caps take the
// max-offset path (the kernel holds both; the cap is a launch argument).
//
// (The Hopper template's RescalingSoftmax makes the same test for its one 16-row slice
// per warp; this one serves one or two slices. Kept apart so that the portable switch
// leaves every Hopper kernel's name and tuning record alone.)
#pragma once

#include "fa4/common/exp2_poly.cuh"
#include "fa4/common/softmax.cuh"

namespace fa4 {
namespace portable {

constexpr float kLazyRescaleLog2 = 8.f;
constexpr float kCapOffsetHeadroomLog2 = 48.f;
constexpr float kCapOffsetMaxCapLog2 = 75.f;

template <int kMTiles, int kNTiles, bool kLazy, int kExp2EmuEvery>
struct Softmax : OnlineSoftmax<kMTiles, kNTiles> {
    using Base = OnlineSoftmax<kMTiles, kNTiles>;
    using Base::kRows;
    using Base::row_max;
    using Base::row_sum;

    static __device__ __forceinline__ bool emulated(int nt) {
        return kExp2EmuEvery > 0 && nt % kExp2EmuEvery == kExp2EmuEvery - 1;
    }

    // Row h of m-tile mt (register row r = 2 mt + h): its new max, the factor for its O
    // so far, its probabilities in place and its running sum. `grew` is set where a lazy
    // row moved its max.
    __device__ __forceinline__ void update_row(float (&s)[kMTiles][kNTiles][4], int mt, int h, float scale_log2,
                                               float& o_scale, bool& grew_any) {
        const int r = mt * 2 + h;
        float mx = row_max[r];
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]));
        mx = quad_max(mx);
        // From -inf the difference is +inf (NaN while every key so far was masked, and
        // then mx is -inf too): the row takes the new max.
        if (kLazy && mx * scale_log2 - row_max[r] * scale_log2 <= kLazyRescaleLog2) mx = row_max[r];
        // A row that has seen only masked keys keeps max = -inf; offset by 0 then, so
        // every p is exp2(-inf) = 0 instead of NaN.
        const float offset = mx == neg_inf() ? 0.f : mx * scale_log2;
        if constexpr (kLazy) {
            const bool grew = mx != row_max[r];
            o_scale = grew ? exp2_approx(row_max[r] * scale_log2 - offset) : 1.f;
            grew_any |= grew;
        } else {
            o_scale = exp2_approx(row_max[r] * scale_log2 - offset);
        }
        row_max[r] = mx;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
            for (int e = 2 * h; e < 2 * h + 2; ++e) {
                const float x = fmaf(s[mt][nt][e], scale_log2, -offset);
                const float p = emulated(nt) ? exp2_emulated(x) : exp2_approx(x);
                s[mt][nt][e] = p;
                sum += p;
            }
        }
        row_sum[r] = row_sum[r] * o_scale + sum;
    }

    // Scores of one key block to unnormalised probabilities, in place; per row the factor
    // for O so far. Returns whether the warp must rescale O (the same on every lane).
    __device__ __forceinline__ bool update(float (&s)[kMTiles][kNTiles][4], float scale_log2,
                                           float (&o_scale)[kRows]) {
        if constexpr (!kLazy && kExp2EmuEvery == 0) {
            Base::update(s, scale_log2, o_scale);
            return true;
        } else {
            bool grew_any = false;
#pragma unroll
            for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
                for (int h = 0; h < 2; ++h) update_row(s, mt, h, scale_log2, o_scale[mt * 2 + h], grew_any);
            }
            return kLazy ? __any_sync(0xffffffffu, grew_any) : true;
        }
    }

    // kCapOffset: every row's offset fixed at cap * log2 e - kCapOffsetHeadroomLog2 (the
    // max holds it, in log2 units: finalize() with scale 1). Only while the cap allows.
    static __device__ __forceinline__ bool cap_offset_fits(float cap_log2) { return cap_log2 <= kCapOffsetMaxCapLog2; }
    __device__ __forceinline__ void init_cap_offset(float cap_log2) {
#pragma unroll
        for (int r = 0; r < kRows; ++r) row_max[r] = cap_log2 - kCapOffsetHeadroomLog2;
    }

    // One m-tile's exponentials under the fixed offset, -inf where masked: `s` holds
    // tanh(score / cap) with `scale_log2` = cap * log2 e (the cap folded into the FFMA),
    // or the capped score with log2 e.
    __device__ __forceinline__ void exp_cap_offset_m_tile(float (&s)[kMTiles][kNTiles][4], int mt, float scale_log2) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = mt * 2 + h;
            float sum = 0.f;
#pragma unroll
            for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
                for (int e = 2 * h; e < 2 * h + 2; ++e) {
                    const float p = exp2_approx(fmaf(s[mt][nt][e], scale_log2, -row_max[r]));
                    s[mt][nt][e] = p;
                    sum += p;
                }
            }
            row_sum[r] += sum;
        }
    }

    // Every m-tile's exponentials under the fixed offset.
    __device__ __forceinline__ void exp_cap_offset(float (&s)[kMTiles][kNTiles][4], float scale_log2) {
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) exp_cap_offset_m_tile(s, mt, scale_log2);
    }

    // update() for the two rows of one m-tile only (kStagger: each m-tile's softmax runs
    // as soon as its own QK GEMM is done). Same arithmetic, per m-tile votes.
    __device__ __forceinline__ bool update_m_tile(float (&s)[kMTiles][kNTiles][4], int mt, float scale_log2,
                                                  float (&o_scale)[2]) {
        bool grew_any = false;
#pragma unroll
        for (int h = 0; h < 2; ++h) update_row(s, mt, h, scale_log2, o_scale[h], grew_any);
        return kLazy ? __any_sync(0xffffffffu, grew_any) : true;
    }
};

// One m-tile's rows of O times their factors from update_m_tile().
template <int kMTiles, int kOTiles>
__device__ __forceinline__ void rescale_o_m_tile(float (&o_acc)[kMTiles][kOTiles][4], int mt,
                                                 const float (&o_scale)[2]) {
#pragma unroll
    for (int ot = 0; ot < kOTiles; ++ot)
#pragma unroll
        for (int e = 0; e < 4; ++e) o_acc[mt][ot][e] *= o_scale[e / 2];
}

// O so far times each row's factor from update(): the rows of m-tile mt are o_scale[2 mt]
// (C fragment elements 0, 1) and o_scale[2 mt + 1] (elements 2, 3).
template <int kMTiles, int kOTiles>
__device__ __forceinline__ void rescale_o(float (&o_acc)[kMTiles][kOTiles][4], const float (&o_scale)[2 * kMTiles]) {
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int ot = 0; ot < kOTiles; ++ot)
#pragma unroll
            for (int e = 0; e < 4; ++e) o_acc[mt][ot][e] *= o_scale[mt * 2 + e / 2];
}

}  // namespace portable
}  // namespace fa4
