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

// Standard normal samples (Box-Muller on a counter-based hash), rounded to the dtype.
extern "C" __global__ void fill_normal(u16* out, u64 n, u64 seed, int is_bf16) {
    for (u64 i = global_thread(); i < n; i += grid_threads()) {
        const u64 h = mix64(seed ^ mix64(i + 0x9e3779b97f4a7c15ull));
        const float u1 = float((h >> 40) + 1) * (1.0f / 16777217.0f);  // (0, 1]
        const float u2 = float((h >> 16) & 0xffffff) * (1.0f / 16777216.0f);
        const float z = sqrtf(-2.f * logf(u1)) * cosf(6.28318530718f * u2);
        out[i] = from_f32(z, is_bf16);
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
// Dynamic shared memory: 32 + head_dim + seqlen_k floats. mask_kind: 0 none, 1 causal,
// 2 local (window from the params); soft-capping when params.softcap > 0; sink logits
// when params.sinks is set; paged: K/V through the page table. Writes O in f32 as
// [token rows, heads_q, head_dim_v] (token row b * seqlen_q + t, or cu_seqlens_q[b] + t)
// and LSE in the kernels' layout (see FwdParams).
extern "C" __global__ void reference_attention(const __grid_constant__ fa4::FwdParams p, int is_bf16, int mask_kind,
                                               int paged, int head_dim, int head_dim_v, float* o_ref,
                                               float* lse_ref) {
    const int row = blockIdx.x;
    const int head = blockIdx.y;
    const int b = blockIdx.z;
    const int kv_head = head / (p.heads_q / p.heads_kv);
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
    const u16* qg = static_cast<const u16*>(p.q) + head * p.q_head_stride +
                    (varlen_q ? token * p.q_row_stride : b * p.q_batch_stride + i64(row) * p.q_row_stride);
    auto key_row = [&](const void* base, i64 batch_stride, i64 row_stride, i64 head_stride, int j) {
        i64 off = kv_head * head_stride;
        if (paged) {
            const int page = p.page_table[i64(b) * p.page_table_batch_stride + j / p.page_size];
            off += i64(page) * batch_stride + i64(j % p.page_size) * row_stride;
        } else if (p.cu_seqlens_k != nullptr) {
            off += (i64(p.cu_seqlens_k[b]) + j) * row_stride;
        } else {
            off += b * batch_stride + i64(j) * row_stride;
        }
        return static_cast<const u16*>(base) + off;
    };
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) q[d] = to_f32(qg[d], is_bf16);
    __syncthreads();

    const int diag = row + seqlen_k - seqlen_q;
    int lo = 0, hi = seqlen_k;
    if (mask_kind == 1) hi = min(seqlen_k, max(0, diag + 1));
    if (mask_kind == 2) {
        if (p.window_left >= 0) lo = min(seqlen_k, max(0, diag - p.window_left));
        if (p.window_right >= 0) hi = min(seqlen_k, max(0, diag + p.window_right + 1));
    }
    if (hi < lo) hi = lo;

    float mx = fa4::neg_inf();
    for (int j = lo + threadIdx.x; j < hi; j += blockDim.x) {
        const u16* kr = key_row(p.k, p.k_batch_stride, p.k_row_stride, p.k_head_stride, j);
        float dot = 0.f;
        for (int d = 0; d < head_dim; ++d) dot += q[d] * to_f32(kr[d], is_bf16);
        float s = dot * p.softmax_scale;
        if (p.softcap > 0.f) s = p.softcap * tanhf(s / p.softcap);
        score[j] = s;
        mx = fmaxf(mx, s);
    }
    mx = block_max(mx, scratch);
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
        for (int j = lo; j < hi; ++j)
            acc += score[j] * to_f32(key_row(p.v, p.v_batch_stride, p.v_row_stride, p.v_head_stride, j)[d], is_bf16);
        o[d] = hi > lo ? acc / sum : 0.f;
    }
    if (threadIdx.x == 0) {
        const bool any = hi > lo || p.sinks != nullptr;
        const i64 lse_at = (varlen_q ? i64(p.cu_seqlens_q[b]) : b * p.lse_batch_stride) + head * p.lse_head_stride + row;
        lse_ref[lse_at] = any ? top + logf(sum) : fa4::neg_inf();
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

extern "C" __global__ void compare_lse(const float* lse, const float* lse_ref, u64 n, u64 alloc, u32 guard,
                                       u64* counts, u32* maxima) {
    u64 nan = 0, inf_mismatch = 0, guard_bad = 0;
    float max_diff = 0.f;
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
            max_diff = fmaxf(max_diff, fabsf(ours - ref));
        }
    }
    for (int s = 16; s > 0; s >>= 1) {
        nan += __shfl_xor_sync(0xffffffffu, nan, s);
        inf_mismatch += __shfl_xor_sync(0xffffffffu, inf_mismatch, s);
        guard_bad += __shfl_xor_sync(0xffffffffu, guard_bad, s);
        max_diff = fmaxf(max_diff, __shfl_xor_sync(0xffffffffu, max_diff, s));
    }
    if (threadIdx.x % 32 == 0) {
        atomicAdd(&counts[2], nan);
        atomicAdd(&counts[3], inf_mismatch);
        atomicAdd(&counts[4], guard_bad);
        atomicMax(&maxima[1], __float_as_uint(max_diff));
    }
}
