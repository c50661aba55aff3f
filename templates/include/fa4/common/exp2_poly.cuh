// 2^x on the FMA and integer pipes (FA4's exp2 emulation), for kernels whose MUFU is the
// bottleneck: a share of their exponentials moves off it.
//
// x = n + f with n = round(x) and f in [-0.5, 0.5]: 2^f by a degree-3 polynomial (relative
// error 1.0e-4, under half a last place of a 16-bit float), and n added to its exponent.
// Adding 1.5 * 2^23 rounds x to an integer held in the low mantissa bits, which the shift
// by 23 moves into the exponent field. Clamped at -127, where the two exponents sum to
// exactly 0: a masked score (-inf) gives 0, as ex2 does. Both templates' softmaxes use it.
#pragma once

namespace fa4 {

__device__ __forceinline__ float exp2_emulated(float x) {
    constexpr float kRound = 12582912.f;
    x = fmaxf(x, -127.f);
    const float shifted = x + kRound;
    const float f = x - (shifted - kRound);
    float p = fmaf(0.055008746f, f, 0.24221076f);
    p = fmaf(p, f, 0.6932829f);
    p = fmaf(p, f, 1.f);
    return __int_as_float(__float_as_int(p) + (__float_as_int(shifted) << 23));
}

}  // namespace fa4
