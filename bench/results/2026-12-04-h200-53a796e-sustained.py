"""Sustained back-to-back runs of one cell per backend (FA4, fa4-gen through its Python
binding, cuDNN), each for a few seconds, with wall-clock stamps so that an nvidia-smi
clock log taken beside it tells each backend's SM clock and board power under load."""
import json, sys, time
import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend

def backends():
    out = {}
    try:
        from flash_attn.cute import flash_attn_func as fa4
        out["fa4"] = lambda q, k, v: fa4(q, k, v)
    except Exception as e:  # noqa: BLE001
        print("# fa4 unavailable:", e, flush=True)
    import fa4gen
    out["fa4-gen"] = lambda q, k, v: fa4gen.flash_attn_func(q, k, v)
    def cudnn(q, k, v):
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return F.scaled_dot_product_attention(*(x.transpose(1, 2) for x in (q, k, v)))
    out["cudnn"] = cudnn
    return out

def sustained(fn, q, k, v, secs):
    for _ in range(3):
        fn(q, k, v)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.time()
    n = 0
    start.record()
    while time.time() - t0 < secs:
        for _ in range(20):
            fn(q, k, v)
        n += 20
        torch.cuda.synchronize()
    end.record()
    torch.cuda.synchronize()
    return t0, time.time(), start.elapsed_time(end) / n, n

def main():
    secs = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
    rows = []
    fns = backends()
    for hdim in (128, 64):
        heads = 2048 // hdim
        q, k, v = (torch.randn(1, 16384, heads, hdim, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        flops = 4 * heads * 16384 * 16384 * hdim
        for rep in range(2):
            for name, fn in fns.items():
                t0, t1, ms, n = sustained(fn, q, k, v, secs)
                row = {"backend": name, "hdim": hdim, "seqlen": 16384, "heads": heads, "rep": rep,
                       "start": t0, "end": t1, "ms": ms, "runs": n, "tflops": flops / ms / 1e9}
                rows.append(row)
                print(json.dumps(row), flush=True)
                time.sleep(1.0)
    json.dump(rows, open(sys.argv[2] if len(sys.argv) > 2 else "sustained.json", "w"), indent=1)

main()
