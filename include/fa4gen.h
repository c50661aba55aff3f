/* fa4-gen runtime: pick the kernel that serves a prefill problem from a kernel cache.
 *
 * Link against libfa4_gen.so (cargo build --release: target/release/libfa4_gen.so).
 * Every call returns FA4GEN_OK or an error code; fa4gen_last_error() then gives the
 * calling thread's message, naming the problem and the fix. No call aborts or
 * unwinds into the caller. Selection is a pure lookup: no GPU, no allocation.
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
    FA4GEN_ERR_INTERNAL = 4          /* a bug in fa4-gen */
};

typedef struct fa4gen_cache fa4gen_cache;

typedef struct {
    uint32_t arch;         /* compute capability x 10: 80, 86, 89, 90, 100, 120 */
    uint32_t dtype;        /* 0 bf16, 1 fp16 */
    uint32_t head_dim;
    uint32_t head_dim_v;
    uint32_t mask;         /* 0 none, 1 causal, 2 local (sliding window) */
    uint32_t features;     /* bit 0 sinks, bit 1 softcap, bit 2 paged K/V */
    uint32_t max_seqlen_q; /* longest query sequence of the batch */
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
    uint32_t reason;       /* 0 the bucket's tuned choice, 1 the nearest tuned bucket's, 2 the default */
    uint32_t bucket;       /* the tuned bucket used, 0 for the default */
    uint32_t is_default;
} fa4gen_selection;

const char* fa4gen_version(void);
const char* fa4gen_last_error(void);
int fa4gen_cache_open(const char* dir, fa4gen_cache** out);
void fa4gen_cache_close(fa4gen_cache* cache);
int fa4gen_select(const fa4gen_cache* cache, const fa4gen_query* q, fa4gen_selection* out);

#ifdef __cplusplus
}
#endif

#endif /* FA4GEN_H */
