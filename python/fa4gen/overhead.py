"""What a prefill call costs the host, from Python: fa4gen beside FA4 and FA2.

    python -m fa4gen.overhead [--cache generated] [--json]

One small varlen problem (one sequence of 128 tokens, 16 heads, head dim 128, bf16,
causal) whose kernels take a few microseconds, so each call's wall time is the host's
work: argument handling, kernel choice and launch. Measured per call (median and 90th
percentile over 2000 calls, the stream synchronised every 50 calls outside the timed
calls) for fa4gen.flash_attn_varlen_func, FA4's flash_attn.cute.flash_attn_varlen_func
(when importable) and FlashAttention-2 through PyTorch's SDPA flash backend; and the
first call of each in this fresh process: fa4gen's loads the library, opens the cache
and loads one cubin; FA4's compiles its kernel (its JIT).
"""

import argparse
import inspect
import json
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def first_and_per_call(fn, calls=2000):
    t = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    first_ms = (time.perf_counter() - t) * 1e3
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    times = []
    for i in range(calls):
        t = time.perf_counter_ns()
        fn()
        times.append((time.perf_counter_ns() - t) / 1e3)
        if i % 50 == 49:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    times.sort()
    return {"first_call_ms": round(first_ms, 3), "per_call_us": round(times[calls // 2], 2),
            "per_call_p90_us": round(times[calls * 9 // 10], 2), "calls": calls}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", default=None)
    ap.add_argument("--json", action="store_true", help="end with one line of JSON")
    args = ap.parse_args()
    torch.cuda.init()
    dev = torch.device("cuda")
    s, h, d = 128, 16, 128
    q, k, v = (torch.randn(s, h, d, device=dev, dtype=torch.bfloat16) for _ in range(3))
    cu = torch.tensor([0, s], dtype=torch.int32, device=dev)
    torch.cuda.synchronize()
    out = {"problem": "bf16 d%d causal, 1 x %d tokens, %d heads (varlen)" % (d, s, h),
           "gpu": torch.cuda.get_device_name(), "torch": torch.__version__}

    import fa4gen

    def ours():
        fa4gen.flash_attn_varlen_func(q, k, v, cu, cu, s, s, causal=True, cache=args.cache)

    # The first call loads the library, opens the cache, binds to the context and
    # loads one cubin.
    r = first_and_per_call(ours)
    r["kernel"] = fa4gen.KernelCache(args.cache).select(head_dim=d, max_seqlen_q=s, causal=True)["kernel"]
    out["fa4gen"] = r

    try:
        from flash_attn.cute import flash_attn_varlen_func as fa4_varlen
        params = inspect.signature(fa4_varlen).parameters
        kw = {"cu_seqlens_q": cu, "cu_seqlens_k": cu, "causal": True}
        for name in ("max_seqlen_q", "max_seqlen_k"):
            if name in params:
                kw[name] = s

        def fa4():
            fa4_varlen(q, k, v, **kw)

        out["fa4"] = first_and_per_call(fa4)
    except Exception as e:  # not installed, or an API this script does not know
        out["fa4"] = {"skipped": "%s: %s" % (type(e).__name__, e)}

    qd, kd, vd = (x.unsqueeze(0).transpose(1, 2) for x in (q, k, v))

    def fa2():
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            F.scaled_dot_product_attention(qd, kd, vd, is_causal=True)

    out["fa2_sdpa_flash"] = first_and_per_call(fa2)
    for name in ("fa4gen", "fa4", "fa2_sdpa_flash"):
        print("%-15s %s" % (name, out[name]))
    if args.json:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
