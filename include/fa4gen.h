/* fa4-gen runtime: pick the kernel that serves a prefill problem from a kernel cache,
 * and launch it on the caller's CUDA stream.
 *
 * Link against libfa4_runtime.so (cargo build --release: target/release/libfa4_runtime.so).
 * Every call returns FA4GEN_OK or an error code; fa4gen_last_error() then gives the
 * calling thread's message, naming the problem and the fix. No call aborts or
 * unwinds into the caller. Selection is a pure lookup: no GPU, no allocation.
 * A handle is safe to share between threads.
 */
#ifndef FA4GEN_H
#define FA4GEN_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
    FA4GEN_OK = 0,
    FA4GEN_ERR_INVALID_ARGUMENT = 1, /* null pointer, unknown enum value, non-UTF-8 path */
    FA4GEN_ERR_CACHE = 2,            /* cache missing, corrupt or from another version */
    FA4GEN_ERR_UNSUPPORTED = 3,      /* no cached kernel covers the problem */
    FA4GEN_ERR_INTERNAL = 4,         /* a bug in fa4-gen */
    FA4GEN_ERR_CUDA = 5              /* no driver or current context, another device's context, a CUDA call failed */
};

typedef struct fa4gen_cache fa4gen_cache;

typedef struct {
    uint32_t arch;         /* compute capability x 10: 80, 86, 89, 90, 100, 120 */
    uint32_t dtype;        /* 0 bf16, 1 fp16, 2 e4m3 (FP8; sm90 kernels only) */
    uint32_t head_dim;
    uint32_t head_dim_v;
    uint32_t mask;         /* 0 none, 1 causal, 2 local (sliding window) */
    uint32_t features;     /* bit 0 sinks, bit 1 softcap, bit 2 paged K/V; bit 3: the call is a varlen */
                           /* batch of several sequences (served its bucket's ragged choice) */
    uint32_t max_seqlen_q; /* longest query sequence of the batch */
    int32_t window_left;   /* FlashAttention's window_size (-1: unbounded), read for local masks: */
    int32_t window_right;  /* a window bounded on both sides is served by its width's bucket */
    uint32_t max_seqlen_k; /* longest key sequence (0: max_seqlen_q); a window wider than the keys */
                           /* is looked up as the causal or unmasked kernel a prefill launches */
} fa4gen_query;

typedef struct {
    char kernel_id[128];   /* NUL-terminated */
    char cubin[256];       /* NUL-terminated, relative to the cache folder */
    uint32_t threads;      /* block size */
    uint32_t block_m;      /* query rows per block (grid x = ceil(rows / block_m)) */
    uint32_t block_n;
    uint32_t smem_bytes;   /* dynamic shared memory */
    uint32_t pack_gqa;     /* rows are (query, head) pairs of one KV head */
    uint32_t registers;
    uint32_t reason;       /* 0 the bucket's tuned choice, 1 the nearest tuned bucket's, 2 the default,
                              3 a related spec's tuned choice for the bucket (the spec untuned: the
                              same spec without sinks; see generated/manifest.json's borrowed_from),
                              4 the bucket's choice tuned on ragged varlen batches (features bit 3) */
    uint32_t bucket;       /* the tuned bucket used, 0 for the default */
    uint32_t is_default;
} fa4gen_selection;

/* The tensors of a prefill call, FlashAttention's layout (strides in elements, last dim
 * contiguous; for e4m3 Q, K and V an element is a byte, and O is bf16). Dense: Q [batch, seqlen_q, heads_q, d], K [batch, seqlen_k, heads_kv, d],
 * V like K with d_v, O like Q with d_v, LSE f32 [batch, heads_q, seqlen_q].
 * Varlen (cu_seqlens_q set): Q and O packed [total_q, heads, d], seqlen_q = max_seqlen_q,
 * batch strides ignored, LSE [heads_q, total_q]; cu_seqlens_k packs K and V the same way.
 * Paged (page_table set): K/V [num_pages, page_size, heads_kv, d] with the page stride in
 * k/v_batch_stride, sequence b's keys seqused_k[b] (cu_seqlens_k must be 0).
 * Query head h reads KV head h / (heads_q / heads_kv). 240 bytes: fa4gen_params_size(). */
typedef struct {
    uint64_t q, k, v, o, lse;              /* device pointers (16-byte aligned; lse 4) */
    int64_t q_batch_stride, q_row_stride, q_head_stride;
    int64_t k_batch_stride, k_row_stride, k_head_stride;
    int64_t v_batch_stride, v_row_stride, v_head_stride;
    int64_t o_batch_stride, o_row_stride, o_head_stride;
    int32_t batch, seqlen_q, seqlen_k, heads_q, heads_kv;
    float softmax_scale;
    float scale_log2;                      /* set by fa4gen_prefill */
    int32_t window_left, window_right;     /* FlashAttention's window_size; -1 unbounded */
    float softcap;                         /* 0: none */
    uint64_t sinks;                        /* f32 [heads_q] sink logits, or 0 */
    uint64_t cu_seqlens_q, cu_seqlens_k;   /* i32 [batch + 1], or 0 */
    uint64_t seqused_k;                    /* i32 [batch], or 0 */
    uint64_t page_table;                   /* i32 [batch, page_table_batch_stride], or 0 */
    int64_t lse_batch_stride, lse_head_stride;
    int32_t page_table_batch_stride, page_size;
} fa4gen_params;

#ifdef __cplusplus
static_assert(sizeof(fa4gen_params) == 240, "fa4gen_params is FwdParams: 240 bytes");
#else
_Static_assert(sizeof(fa4gen_params) == 240, "fa4gen_params is FwdParams: 240 bytes");
#endif

typedef struct {
    uint32_t dtype;        /* 0 bf16, 1 fp16, 2 e4m3 (FP8 Q, K, V: PyTorch's float8_e4m3fn; O is bf16) */
    uint32_t head_dim;
    uint32_t head_dim_v;
    uint32_t causal;       /* FlashAttention's causal (bottom-right aligned) */
    fa4gen_params params;
    /* Optional: fa4gen_split_workspace_bytes(sm_count) bytes of device memory, 256-byte
     * aligned, zeroed once when allocated (each launch leaves it so), used by one stream
     * at a time; 0 for none. With it, unmasked persistent kernels on dense batches share
     * their last tiles out by keys instead of leaving SMs idle. A workspace that is
     * misaligned or smaller than that fails every call (FA4GEN_ERR_INVALID_ARGUMENT), not
     * only the calls that would split. */
    uint64_t split_workspace;
    uint64_t split_workspace_bytes;
    /* e4m3 only, read only when dtype is 2 (a bf16 or fp16 call may pass the 272 bytes
     * before them, the struct of earlier versions): FlashAttention-3's q/k/v_descale,
     * f32 device pointers (4-byte aligned) or 0 for 1.0. Query head h of sequence b
     * reads its KV head h_kv's factors at b * descale_batch_stride + h_kv *
     * descale_head_stride (in floats; FA3's [batch, heads_kv] tensors: heads_kv and 1).
     * Dequantised Q is e4m3(Q) x q_descale, likewise K and V. Q, K and V strides
     * (elements, i.e. bytes) must be multiples of 16; head_dim and head_dim_v of 16. */
    uint64_t q_descale, k_descale, v_descale;
    int64_t descale_batch_stride, descale_head_stride;
} fa4gen_prefill_args;

#ifdef __cplusplus
static_assert(sizeof(fa4gen_prefill_args) == 312, "fa4gen_prefill_args: 272 bytes, then the descales");
#else
_Static_assert(sizeof(fa4gen_prefill_args) == 312, "fa4gen_prefill_args: 272 bytes, then the descales");
#endif

const char* fa4gen_version(void);
const char* fa4gen_last_error(void);
int fa4gen_cache_open(const char* dir, fa4gen_cache** out);
void fa4gen_cache_close(fa4gen_cache* cache);
int fa4gen_select(const fa4gen_cache* cache, const fa4gen_query* q, fa4gen_selection* out);
uint32_t fa4gen_params_size(void);
uint64_t fa4gen_split_workspace_bytes(uint32_t sm_count);
/* Launch on `stream` (a CUstream; NULL: the legacy default stream), asynchronously. The
 * handle binds to the CUDA context current on the thread of its first prefill or preload;
 * each kernel's cubin is checked (hash, arch) and loaded on first use. */
int fa4gen_prefill(const fa4gen_cache* cache, const fa4gen_prefill_args* args, void* stream);
/* Load every kernel of the bound device's arch now; *loaded (if not NULL) gets the count. */
int fa4gen_preload(const fa4gen_cache* cache, uint32_t* loaded);

#ifdef __cplusplus
}
#endif

#endif /* FA4GEN_H */
