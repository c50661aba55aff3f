# Which kernels cuDNN launches on the grid: name, grid, block,
# registers, shared memory, duration (torch.profiler's trace), to see their tiling.
# Usage (GPU host, torch with cuDNN): python3 bench/peer_kernels.py OUT.json
# Runs back to back without an L2 flush, so its TFLOP/s are above do_bench's.
import json, sys, torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
from torch.profiler import profile, ProfilerActivity
out = sys.argv[1]
rows = []
for d in (64, 128, 256):
    for s in (512, 1024, 2048, 16384):
        for c in (0, 1):
            b, h = 16384 // s, 2048 // d
            q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
            for name, be in (("cudnn", SDPBackend.CUDNN_ATTENTION),):
                with sdpa_kernel([be]):
                    for _ in range(3):
                        F.scaled_dot_product_attention(q, k, v, is_causal=bool(c))
                    torch.cuda.synchronize()
                    with profile(activities=[ProfilerActivity.CUDA]) as p:
                        for _ in range(5):
                            F.scaled_dot_product_attention(q, k, v, is_causal=bool(c))
                        torch.cuda.synchronize()
                    p.export_chrome_trace("/tmp/t.json")
                    ev = json.load(open("/tmp/t.json"))["traceEvents"]
                    ks = [e for e in ev if e.get("cat") == "kernel"]
                    seen = {}
                    for e in ks:
                        a = e.get("args", {})
                        key = e["name"]
                        seen.setdefault(key, []).append(e.get("dur", 0))
                        seen[key + "#args"] = {x: a.get(x) for x in ("grid", "block", "registers per thread", "shared memory", "blocks per SM", "warps per SM", "est. achieved occupancy %")}
                    for key, durs in seen.items():
                        if key.endswith("#args"): continue
                        r = dict(backend=name, d=d, s=s, causal=c, kernel=key[:200], us=sorted(durs)[len(durs)//2], n=len(durs), **seen[key + "#args"])
                        rows.append(r); print(json.dumps(r), flush=True)
json.dump(rows, open(out, "w"), indent=1)
