// Online softmax over register fragments (FlashAttention's running max and sum).
//
// A thread holds scores in C fragments `s[kMTiles][kNTiles][4]` of 16x8 MMA tiles:
// elements 0,1 of a fragment belong to one row and 2,3 to the row 8 below (see ptx.cuh),
// so a thread owns 2 rows per m-tile and the 4 lanes of a quad share each row.
// The softmax scale is folded into the exponent: p = 2^(s * scale_log2 - max * scale_log2),
// one FFMA and one MUFU.EX2 per element.
#pragma once

#include "fa4/common/ptx.cuh"

namespace fa4 {

template <int kMTiles, int kNTiles>
struct OnlineSoftmax {
    static constexpr int kRows = 2 * kMTiles;

    float row_max[kRows];  // running max of raw scores; -inf while a row has seen nothing
    float row_sum[kRows];  // this lane's share of the running sum, reduced in finalize()

    __device__ __forceinline__ void init() {
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
            row_max[r] = neg_inf();
            row_sum[r] = 0.f;
        }
    }

    // Turns the scores of one key block into unnormalised probabilities, in place, and
    // returns per row the factor by which the output accumulated so far must be scaled.
    __device__ __forceinline__ void update(float (&s)[kMTiles][kNTiles][4], float scale_log2,
                                           float (&o_scale)[kRows]) {
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = mt * 2 + h;
                float mx = row_max[r];
#pragma unroll
                for (int nt = 0; nt < kNTiles; ++nt) {
                    mx = fmaxf(mx, fmaxf(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]));
                }
                mx = quad_max(mx);
                // A row that has seen only masked keys keeps max = -inf; offset by 0 then,
                // so every p is exp2(-inf) = 0 instead of NaN from (-inf) - (-inf).
                const float offset = mx == neg_inf() ? 0.f : mx * scale_log2;
                o_scale[r] = exp2_approx(row_max[r] * scale_log2 - offset);
                row_max[r] = mx;
                float sum = 0.f;
#pragma unroll
                for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
                    for (int e = 2 * h; e < 2 * h + 2; ++e) {
                        const float p = exp2_approx(fmaf(s[mt][nt][e], scale_log2, -offset));
                        s[mt][nt][e] = p;
                        sum += p;
                    }
                }
                row_sum[r] = row_sum[r] * o_scale[r] + sum;
            }
        }
    }

    // Per row: the factor that normalises the output and the log-sum-exp of the row's
    // scaled scores in natural log. `sink_log2_rows` holds per row a logit (times log2 e) that joins the
    // denominator only, -inf for none. A row that saw no key gets factor 0 and LSE -inf,
    // or the sink's logit when there is one.
    __device__ __forceinline__ void finalize(float scale_log2, const float (&sink_log2_rows)[kRows],
                                             float (&o_scale)[kRows], float (&lse)[kRows]) {
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
            const float sink_log2 = sink_log2_rows[r];
            const float sum = quad_sum(row_sum[r]);
            const bool seen = sum > 0.f;
            const float row_top = seen ? row_max[r] * scale_log2 : neg_inf();
            const float top = fmaxf(row_top, sink_log2);  // keeps every exp2 below <= 1
            if (top == neg_inf()) {
                o_scale[r] = 0.f;
                lse[r] = neg_inf();
                continue;
            }
            const float keys = seen ? exp2f(row_top - top) : 0.f;
            const float total = keys * sum + exp2f(sink_log2 - top);
            o_scale[r] = keys / total;
            lse[r] = (top + log2f(total)) * kLn2;
        }
    }
};

}  // namespace fa4
