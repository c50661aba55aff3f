// The checking kernels of `fa4-gen verify`: random inputs, a plain f32 reference
// attention, and the comparison of a kernel's output with it.
//
// Deliberately simple and separate from the kernels under test: one thread block per
// query row, scores in shared memory, f32 throughout, no tiling, no online softmax.
// Only the argument block (FwdParams) is shared, so both read the same tensors.
#include "fa4/common/params.cuh"

using fa4::i64;
using fa4::u16;
using fa4::u32;
using fa4::u64;
using u8 = unsigned char;

// The f32 descales of e4m3 Q, K and V, one per (sequence, KV head) at
// b * batch_stride + h_kv * head_stride; a null pointer means 1.0. Mirrors
// `fa4_runtime::Descales` (the kernels' own is `fa4::hopper::Descales`).
struct Descales {
    const float* q;
    const float* k;
    const float* v;
    i64 batch_stride;
    i64 head_stride;
};
static_assert(sizeof(Descales) == 40, "Descales must match fa4_runtime::Descales");

// The reference's input dtype codes: 0 fp16 and 1 bf16 (as `is_bf16` elsewhere), 2 e4m3.
constexpr int kE4m3 = 2;

namespace {

__device__ __forceinline__ u64 mix64(u64 x) {  // splitmix64's finaliser
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

__device__ __forceinline__ float to_f32(u16 bits, int is_bf16) {
    if (is_bf16) return __uint_as_float(u32(bits) << 16);
    float r;
    asm("cvt.f32.f16 %0, %1;" : "=f"(r) : "h"(bits));
    return r;
}

__device__ __forceinline__ u16 from_f32(float x, int is_bf16) {
    u16 r;
    if (is_bf16) {
        asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(x));
    } else {
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(x));
    }
    return r;
}

// OCP e4m3 (PyTorch's float8_e4m3fn): 4 exponent bits (bias 7), 3 mantissa bits, no
// infinities, S.1111.111 NaN, ±448 the largest finite value. Spelled out in integer and
// f32 operations so that every arch's build (sm80 too) has it.
__device__ __forceinline__ float e4m3_to_f32(u32 v) {
    const u32 e = (v >> 3) & 0xf, m = v & 7;
    float mag;
    if (e == 0xf && m == 7) {
        mag = __uint_as_float(0x7fc00000u);
    } else if (e == 0) {
        mag = float(m) * (1.f / 512.f);  // subnormal: m x 2^-9
    } else {
        mag = __uint_as_float((e + 120) << 23) * (1.f + float(m) * 0.125f);  // 2^(e-7) x 1.m
    }
    return v & 0x80 ? -mag : mag;
}

// Rounds to the nearest e4m3 value, ties to even, saturating at ±448 (PTX's
// cvt.rn.satfinite.e4m3x2.f32, which sm80 lacks).
__device__ __forceinline__ u8 f32_to_e4m3(float x) {
    const u32 sign = (__float_as_uint(x) >> 24) & 0x80;
    const float a = fabsf(x);
    if (a != a) return u8(sign | 0x7f);
    if (a >= 448.f) return u8(sign | 0x7e);
    // The binade of `a` (subnormals share the lowest normal one's step, 2^-9), and `a`
    // in steps of 2^(e-3): 8 to 16 in a normal binade, below 8 only for subnormals.
    int e = int((__float_as_uint(a) >> 23) & 0xff) - 127;
    if (e < -6) e = -6;
    int n = __float2int_rn(a * __uint_as_float(u32(127 + 3 - e) << 23));
    int field = e + 7;
    if (n >= 16) {  // rounded up into the next binade
        n = 8;
        field += 1;
    }
    if (n < 8) field = 0;
    return u8(sign | (u32(field) << 3) | (u32(n) & 7));
}

// An input element of dtype code `dtype` at `index` elements from `base`, as f32.
__device__ __forceinline__ float load_input(const void* base, i64 index, int dtype) {
    if (dtype == kE4m3) return e4m3_to_f32(static_cast<const u8*>(base)[index]);
    return to_f32(static_cast<const u16*>(base)[index], dtype);
}

// A standard normal sample, element `i` of the stream `seed` (Box-Muller on a
// counter-based hash).
__device__ __forceinline__ float normal_sample(u64 seed, u64 i) {
    const u64 h = mix64(seed ^ mix64(i + 0x9e3779b97f4a7c15ull));
    const float u1 = float((h >> 40) + 1) * (1.0f / 16777217.0f);  // (0, 1]
    const float u2 = float((h >> 16) & 0xffffff) * (1.0f / 16777216.0f);
    return sqrtf(-2.f * logf(u1)) * cosf(6.28318530718f * u2);
}

__device__ __forceinline__ u64 global_thread() { return u64(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ __forceinline__ u64 grid_threads() { return u64(gridDim.x) * blockDim.x; }

// Reductions over the whole block; `scratch` holds 32 floats. Every thread gets the result.
__device__ float block_max(float v, float* scratch) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();
    if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
    __syncthreads();
    v = threadIdx.x % 32 < blockDim.x / 32 ? scratch[threadIdx.x % 32] : fa4::neg_inf();
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ float block_sum(float v, float* scratch) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
    __syncthreads();
    v = threadIdx.x % 32 < blockDim.x / 32 ? scratch[threadIdx.x % 32] : 0.f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

}  // namespace

// ---- inputs ------------------------------------------------------------------------------

// Standard normal samples, rounded to the dtype.
extern "C" __global__ void fill_normal(u16* out, u64 n, u64 seed, int is_bf16) {
    for (u64 i = global_thread(); i < n; i += grid_threads()) out[i] = from_f32(normal_sample(seed, i), is_bf16);
}

// Standard normal samples quantised to e4m3 (to nearest even, saturating at ±448). The
// outlier channels, c % 32 == 7 of every head (c: the element's place in its token row
// of `row_stride` elements, modulo `head_dim`), are multiplied by `outlier_scale` first.
extern "C" __global__ void fill_normal_e4m3(u8* out, u64 n, u64 seed, u64 row_stride, u32 head_dim,
                                            float outlier_scale) {
    for (u64 i = global_thread(); i < n; i += grid_threads()) {
        float z = normal_sample(seed, i);
        if (i % row_stride % head_dim % 32 == 7) z *= outlier_scale;
        out[i] = f32_to_e4m3(z);
    }
}

// The output buffer before a run: `poison` (a NaN) wherever the kernel must write and
// `guard` everywhere else, so both unwritten cells and stray writes show.
// Layout: rows of `row_stride` elements, the first `row_elems` of each row logical,
// `rows` rows in all; the allocation may run past them (a tail guard).
extern "C" __global__ void fill_output_pattern(u16* out, u64 alloc, u64 rows, u64 row_stride, u64 row_elems,
                                               u32 poison, u32 guard) {
    for (u64 i = global_thread(); i < alloc; i += grid_threads()) {
        const bool logical = i / row_stride < rows && i % row_stride < row_elems;
        out[i] = u16(logical ? poison : guard);
    }
}

extern "C" __global__ void fill_u32(u32* out, u64 n, u64 n_logical, u32 poison, u32 guard) {
    for (u64 i = global_thread(); i < n; i += grid_threads()) out[i] = i < n_logical ? poison : guard;
}

// ---- reference ---------------------------------------------------------------------------

// One block per (query row, head, sequence); rows past a sequence's length return.
// Dynamic shared memory: 32 + head_dim + seqlen_k floats. dtype: Q, K and V's code (0
// fp16, 1 bf16, 2 e4m3; strides in elements either way); e4m3 inputs are dequantised
// with `descale` before anything else. mask_kind: 0 none, 1 causal, 2 local (window from
// the params); soft-capping when params.softcap > 0; sink logits when params.sinks is
// set; paged: K/V through the page table. Writes O in f32 as [token rows, heads_q,
// head_dim_v] (token row b * seqlen_q + t, or cu_seqlens_q[b] + t) and LSE in the
// kernels' layout (see FwdParams). e4m3: also each row's FP8 accumulation slack at its LSE's
// place in `lse_slack` (fp8_slack; 0 for 16-bit inputs, where nothing is written).
extern "C" __global__ void reference_attention(const __grid_constant__ fa4::FwdParams p, int dtype, int mask_kind,
                                               int paged, int head_dim, int head_dim_v, Descales descale,
                                               float* o_ref, float* lse_ref, float* lse_slack) {
    const int row = blockIdx.x;
    const int head = blockIdx.y;
    const int b = blockIdx.z;
    const int kv_head = head / (p.heads_q / p.heads_kv);
    const i64 descale_at = b * descale.batch_stride + kv_head * descale.head_stride;
    auto factor = [&](const float* d) { return dtype == kE4m3 && d != nullptr ? d[descale_at] : 1.f; };
    const float q_scale = factor(descale.q), k_scale = factor(descale.k), v_scale = factor(descale.v);
    extern __shared__ float smem[];
    float* scratch = smem;
    float* q = smem + 32;
    float* score = q + head_dim;

    // This sequence's lengths and where its rows are, spelled out case by case.
    const bool varlen_q = p.cu_seqlens_q != nullptr;
    const int seqlen_q = varlen_q ? p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b] : p.seqlen_q;
    int seqlen_k = p.seqlen_k;
    if (p.cu_seqlens_k != nullptr) seqlen_k = p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b];
    if (p.seqused_k != nullptr) seqlen_k = p.seqused_k[b];
    if (row >= seqlen_q) return;
    const i64 token = varlen_q ? i64(p.cu_seqlens_q[b]) + row : i64(b) * p.seqlen_q + row;
    const i64 q_row = head * p.q_head_stride +
                      (varlen_q ? token * p.q_row_stride : b * p.q_batch_stride + i64(row) * p.q_row_stride);
    // Where key j's row of K or V starts, in elements.
    auto key_row = [&](i64 batch_stride, i64 row_stride, i64 head_stride, int j) {
        i64 off = kv_head * head_stride;
        if (paged) {
            const int page = p.page_table[i64(b) * p.page_table_batch_stride + j / p.page_size];
            off += i64(page) * batch_stride + i64(j % p.page_size) * row_stride;
        } else if (p.cu_seqlens_k != nullptr) {
            off += (i64(p.cu_seqlens_k[b]) + j) * row_stride;
        } else {
            off += b * batch_stride + i64(j) * row_stride;
        }
        return off;
    };
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) q[d] = load_input(p.q, q_row + d, dtype) * q_scale;
    __syncthreads();

    const int diag = row + seqlen_k - seqlen_q;
    int lo = 0, hi = seqlen_k;
    if (mask_kind == 1) hi = min(seqlen_k, max(0, diag + 1));
    if (mask_kind == 2) {
        if (p.window_left >= 0) lo = min(seqlen_k, max(0, diag - p.window_left));
        if (p.window_right >= 0) hi = min(seqlen_k, max(0, diag + p.window_right + 1));
    }
    if (hi < lo) hi = lo;

    // FP8 accumulation slack: Hopper's QGMMA sums each k32 step's products about 13 bits
    // below the step's largest and drops the rest, so a score may lose up to 2^-8 of that
    // largest product per step. Bounded per key by the step maxima of |q| and |k|; the
    // row's slack is the largest over its keys, times the softmax scale (fa4gen.check's
    // fp8_lse_slack is the same bound).
    const bool fp8 = dtype == kE4m3;
    float q_step_max[8];  // head dims up to 256: 8 k32 steps
    for (int st = 0; st < 8; ++st) {
        q_step_max[st] = 0.f;
        for (int d = st * 32; fp8 && d < min(head_dim, st * 32 + 32); ++d) q_step_max[st] = fmaxf(q_step_max[st], fabsf(q[d]));
    }
    float mx = fa4::neg_inf(), slack = 0.f;
    for (int j = lo + threadIdx.x; j < hi; j += blockDim.x) {
        const i64 kr = key_row(p.k_batch_stride, p.k_row_stride, p.k_head_stride, j);
        float dot = 0.f, key_slack = 0.f, k_step_max = 0.f;
        for (int d = 0; d < head_dim; ++d) {
            const float k = load_input(p.k, kr + d, dtype) * k_scale;
            dot += q[d] * k;
            k_step_max = fmaxf(k_step_max, fabsf(k));
            if (d % 32 == 31 || d == head_dim - 1) {
                key_slack += q_step_max[d / 32] * k_step_max;
                k_step_max = 0.f;
            }
        }
        slack = fmaxf(slack, key_slack);
        float s = dot * p.softmax_scale;
        if (p.softcap > 0.f) s = p.softcap * tanhf(s / p.softcap);
        score[j] = s;
        mx = fmaxf(mx, s);
    }
    mx = block_max(mx, scratch);
    if (fp8) slack = block_max(slack, scratch) * 0x1p-8f * fabsf(p.softmax_scale);
    const float sink = p.sinks != nullptr ? p.sinks[head] : fa4::neg_inf();
    const float top = fmaxf(mx, sink);
    float sum = 0.f;
    for (int j = lo + threadIdx.x; j < hi; j += blockDim.x) {
        const float e = expf(score[j] - top);
        score[j] = e;
        sum += e;
    }
    sum = block_sum(sum, scratch);  // also makes every score visible to every thread
    if (p.sinks != nullptr) sum += expf(sink - top);

    float* o = o_ref + (token * p.heads_q + head) * head_dim_v;
    for (int d = threadIdx.x; d < head_dim_v; d += blockDim.x) {
        float acc = 0.f;
        for (int j = lo; j < hi; ++j) {
            const i64 vr = key_row(p.v_batch_stride, p.v_row_stride, p.v_head_stride, j);
            acc += score[j] * (load_input(p.v, vr + d, dtype) * v_scale);
        }
        o[d] = hi > lo ? acc / sum : 0.f;
    }
    if (threadIdx.x == 0) {
        const bool any = hi > lo || p.sinks != nullptr;
        const i64 lse_at = (varlen_q ? i64(p.cu_seqlens_q[b]) : b * p.lse_batch_stride) + head * p.lse_head_stride + row;
        lse_ref[lse_at] = any ? top + logf(sum) : fa4::neg_inf();
        if (fp8) lse_slack[lse_at] = slack;
    }
}

// ---- comparison --------------------------------------------------------------------------
// sums:   [0] sum (o - ref)^2   [1] sum ref^2
// counts: [0] NaN in O (unwritten or computed)   [1] guard cells of O changed
//         [2] NaN in LSE                          [3] LSE -inf where the reference is finite or back
//         [4] guard cells of LSE changed
// maxima (f32 bits of non-negative values): [0] max |o - ref|   [1] max |lse - ref|

// O laid out as fill_output_pattern describes: `rows` token rows of `row_stride`
// elements, the first `row_elems` (heads_q x head_dim_v) of each logical.
extern "C" __global__ void compare_output(const u16* o, int is_bf16, u64 rows, u64 row_stride, u64 row_elems,
                                          const float* o_ref, u64 alloc, u32 guard, double* sums, u64* counts,
                                          u32* maxima) {
    double diff_sq = 0.0, ref_sq = 0.0;
    u64 nan = 0, guard_bad = 0;
    float max_diff = 0.f;
    for (u64 i = global_thread(); i < alloc; i += grid_threads()) {
        const u64 r = i / row_stride, c = i % row_stride;
        if (r < rows && c < row_elems) {
            const float ours = to_f32(o[i], is_bf16);
            const float ref = o_ref[r * row_elems + c];
            if (isnan(ours)) {
                ++nan;
            } else {
                const float d = ours - ref;
                diff_sq += double(d) * d;
                ref_sq += double(ref) * ref;
                max_diff = fmaxf(max_diff, fabsf(d));
            }
        } else if (o[i] != u16(guard)) {
            ++guard_bad;
        }
    }
    for (int s = 16; s > 0; s >>= 1) {
        diff_sq += __shfl_xor_sync(0xffffffffu, diff_sq, s);
        ref_sq += __shfl_xor_sync(0xffffffffu, ref_sq, s);
        nan += __shfl_xor_sync(0xffffffffu, nan, s);
        guard_bad += __shfl_xor_sync(0xffffffffu, guard_bad, s);
        max_diff = fmaxf(max_diff, __shfl_xor_sync(0xffffffffu, max_diff, s));
    }
    if (threadIdx.x % 32 == 0) {
        atomicAdd(&sums[0], diff_sq);
        atomicAdd(&sums[1], ref_sq);
        atomicAdd(&counts[0], nan);
        atomicAdd(&counts[1], guard_bad);
        atomicMax(&maxima[0], __float_as_uint(max_diff));
    }
}

// maxima[1]: the largest |lse - ref|; maxima[2]: the largest part of it beyond the row's
// `slack` (FP8's accumulation slack, reference_attention's; zeros for 16-bit inputs).
extern "C" __global__ void compare_lse(const float* lse, const float* lse_ref, const float* slack, u64 n, u64 alloc,
                                       u32 guard, u64* counts, u32* maxima) {
    u64 nan = 0, inf_mismatch = 0, guard_bad = 0;
    float max_diff = 0.f, max_excess = 0.f;
    for (u64 i = global_thread(); i < alloc; i += grid_threads()) {
        const float ours = lse[i];
        if (i >= n) {
            guard_bad += __float_as_uint(ours) != guard;
            continue;
        }
        const float ref = lse_ref[i];
        if (isnan(ours)) {
            ++nan;
        } else if (isinf(ours) || isinf(ref)) {
            inf_mismatch += ours != ref;
        } else {
            const float diff = fabsf(ours - ref);
            max_diff = fmaxf(max_diff, diff);
            max_excess = fmaxf(max_excess, diff - slack[i]);
        }
    }
    for (int s = 16; s > 0; s >>= 1) {
        nan += __shfl_xor_sync(0xffffffffu, nan, s);
        inf_mismatch += __shfl_xor_sync(0xffffffffu, inf_mismatch, s);
        guard_bad += __shfl_xor_sync(0xffffffffu, guard_bad, s);
        max_diff = fmaxf(max_diff, __shfl_xor_sync(0xffffffffu, max_diff, s));
        max_excess = fmaxf(max_excess, __shfl_xor_sync(0xffffffffu, max_excess, s));
    }
    if (threadIdx.x % 32 == 0) {
        atomicAdd(&counts[2], nan);
        atomicAdd(&counts[3], inf_mismatch);
        atomicAdd(&counts[4], guard_bad);
        // non-negative floats order as their bit patterns (max_excess starts at 0)
        atomicMax(&maxima[1], __float_as_uint(max_diff));
        atomicMax(&maxima[2], __float_as_uint(max_excess));
    }
}
