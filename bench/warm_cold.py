# Usage (GPU host, a cache built there: fa4-gen build-cache --arch sm90 --out /tmp/gen):
#   FA4GEN_CACHE=/tmp/gen PYTHONPATH=python python3 bench/warm_cold.py OUT.json
# Our served kernels (fa4gen through the cache) and cuDNN on the grid's cells,
# timed two ways in one process: do_bench (L2 flushed before each run, the grid's way)
# and back to back without a flush (as a profiler sees them).
import json, sys, torch, triton
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
import fa4gen
out = sys.argv[1]
rows = []
def warm(fn, ms_target=100):
    for _ in range(5): fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record(); fn(); b.record(); torch.cuda.synchronize()
    n = max(5, int(ms_target / max(a.elapsed_time(b), 1e-3)))
    ts = []
    for _ in range(3):
        a.record()
        for _ in range(n): fn()
        b.record(); torch.cuda.synchronize(); ts.append(a.elapsed_time(b) / n)
    return min(ts)
for d in (64, 128, 256):
    for s in (512, 1024, 2048, 16384):
        for c in (0, 1):
            bsz, h = 16384 // s, 2048 // d
            q, k, v = (torch.randn(bsz, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
            qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
            def ours(): return fa4gen.flash_attn_func(q, k, v, causal=bool(c))
            def cudnn():
                with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                    return F.scaled_dot_product_attention(qt, kt, vt, is_causal=bool(c))
            flops = 4 * bsz * h * s * s * d / (2 if c else 1)
            for name, fn in (("fa4-gen", ours), ("cudnn", cudnn)):
                cold = triton.testing.do_bench(fn, warmup=50, rep=200, return_mode="median")
                hot = warm(fn)
                r = dict(backend=name, hdim=d, seqlen=s, causal=c, cold_ms=cold, warm_ms=hot,
                         cold_tflops=flops / cold / 1e9, warm_tflops=flops / hot / 1e9)
                rows.append(r)
                print(f"{name:8s} d{d:3d} s{s:5d} c{c} cold {r['cold_tflops']:6.1f} warm {r['warm_tflops']:6.1f} TFLOP/s  x{cold/hot:.3f}", flush=True)
json.dump(rows, open(out, "w"), indent=1)
