/* A C caller of the fa4-gen runtime: open a cache, pick kernels, read errors, and (on a
 * machine without a GPU) see a prefill refused with a message instead of a crash.
 * Usage: select <cache dir>. Prints one line per query; exit status 0 when every
 * answer is what the header promises. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "fa4gen.h"

int main(int argc, char** argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s <cache dir>\n", argv[0]);
        return 2;
    }
    fa4gen_cache* cache = NULL;
    if (fa4gen_cache_open(argv[1], &cache) != FA4GEN_OK) {
        fprintf(stderr, "open: %s\n", fa4gen_last_error());
        return 1;
    }
    fa4gen_query q = {90, 0, 128, 128, 1, 0, 4096};
    fa4gen_selection s;
    if (fa4gen_select(cache, &q, &s) != FA4GEN_OK) {
        fprintf(stderr, "select: %s\n", fa4gen_last_error());
        return 1;
    }
    printf("d128 causal 4096: %s reason %u bucket %u threads %u smem %u\n", s.kernel_id, s.reason, s.bucket,
           s.threads, s.smem_bytes);
    q.head_dim = q.head_dim_v = 80;
    int code = fa4gen_select(cache, &q, &s);
    printf("d80: code %d: %s\n", code, fa4gen_last_error());

    /* The params struct is the library's, byte for byte. */
    int layout = sizeof(fa4gen_params) == fa4gen_params_size() && offsetof(fa4gen_params, sinks) == 176 &&
                 offsetof(fa4gen_params, lse_batch_stride) == 216 && offsetof(fa4gen_params, page_size) == 236 &&
                 offsetof(fa4gen_prefill_args, params) == 16 &&
                 offsetof(fa4gen_prefill_args, split_workspace) == 256 &&
                 offsetof(fa4gen_prefill_args, q_descale) == 272 &&
                 offsetof(fa4gen_prefill_args, descale_head_stride) == 304 && sizeof(fa4gen_prefill_args) == 312 &&
                 fa4gen_split_workspace_bytes(132) > 0;
    printf("params layout: %s\n", layout ? "ok" : "MISMATCH");
    fa4gen_prefill_args a;
    memset(&a, 0, sizeof a);
    a.head_dim = a.head_dim_v = 128;
    a.causal = 1;
    int launch = fa4gen_prefill(cache, &a, NULL);
    printf("prefill without a current context: code %d: %s\n", launch, fa4gen_last_error());
    int null_args = fa4gen_prefill(cache, NULL, NULL);
    /* e4m3 (dtype 2) is a dtype the library knows, descales and all; 3 is not. */
    a.dtype = 2;
    int fp8 = fa4gen_prefill(cache, &a, NULL);
    a.dtype = 3;
    int unknown = fa4gen_prefill(cache, &a, NULL);
    printf("e4m3 prefill without a current context: code %d; dtype 3: code %d: %s\n", fp8, unknown,
           fa4gen_last_error());
    fa4gen_cache_close(cache);
    return code == FA4GEN_ERR_UNSUPPORTED && s.threads > 0 && strlen(s.kernel_id) > 0 && layout &&
                   launch == FA4GEN_ERR_CUDA && null_args == FA4GEN_ERR_INVALID_ARGUMENT && fp8 == FA4GEN_ERR_CUDA &&
                   unknown == FA4GEN_ERR_INVALID_ARGUMENT
               ? 0
               : 1;
}
