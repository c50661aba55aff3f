# Usage (GPU host; libfa4_runtime.so in python/fa4gen/ or target/, a cache with the served
# kernels in generated/ or FA4GEN_CACHE):
#   nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
#       --format=csv -lms 20 > clocks.csv &
#   PYTHONPATH=python python3 bench/sustained.py SECONDS OUT.json [--flush]
#   kill %1; python3 bench/clock_windows.py OUT.json clocks.csv
"""Sustained back-to-back runs of the grid's short cells (and two long ones for reference),
fa4-gen through its Python binding and the shipped cache beside cuDNN, each for a few
seconds, with wall-clock stamps so that an nvidia-smi log taken beside it gives each
backend's SM clock and board power under load.

--flush times the way the grid does (triton's do_bench, FA3's protocol): every run after
a 256 MiB L2 flush, each run alone between CUDA events, the median kept; the same few
seconds per cell, so that the clocks of the grid's regime can be logged too."""
import json, sys, time
import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
import fa4gen

def ours(q, k, v, causal):
    return fa4gen.flash_attn_func(q, k, v, causal=causal)

def cudnn(q, k, v, causal):
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        return F.scaled_dot_product_attention(*(x.transpose(1, 2) for x in (q, k, v)), is_causal=causal)

def sustained(fn, q, k, v, causal, secs):
    for _ in range(3):
        fn(q, k, v, causal)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.time()
    n = 0
    start.record()
    while time.time() - t0 < secs:
        for _ in range(50):
            fn(q, k, v, causal)
        n += 50
        torch.cuda.synchronize()
    end.record()
    torch.cuda.synchronize()
    return t0, time.time(), start.elapsed_time(end) / n, n

def flushed(fn, q, k, v, causal, secs):
    cache = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int, device="cuda")
    for _ in range(3):
        fn(q, k, v, causal)
    torch.cuda.synchronize()
    times = []
    t0 = time.time()
    while time.time() - t0 < secs:
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(20)]
        for start, end in events:
            cache.zero_()
            start.record()
            fn(q, k, v, causal)
            end.record()
        torch.cuda.synchronize()
        times += [start.elapsed_time(end) for start, end in events]
    times.sort()
    return t0, time.time(), times[len(times) // 2], len(times)

def main():
    secs = float(sys.argv[1])
    timed = flushed if "--flush" in sys.argv[3:] else sustained
    cells = [(128, 512, 0), (128, 512, 1), (64, 512, 0), (64, 512, 1), (256, 512, 0), (256, 512, 1),
             (128, 16384, 0), (64, 16384, 0)]
    rows = []
    for hdim, seqlen, causal in cells:
        heads = 2048 // hdim
        batch = 16384 // seqlen
        q, k, v = (torch.randn(batch, seqlen, heads, hdim, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        flops = 4 * batch * heads * seqlen * seqlen * hdim / (2 if causal else 1)
        for rep in range(2):
            for name, fn in (("fa4-gen", ours), ("cudnn", cudnn)):
                t0, t1, ms, n = timed(fn, q, k, v, bool(causal), secs)
                row = {"backend": name, "hdim": hdim, "seqlen": seqlen, "causal": causal, "rep": rep,
                       "protocol": "flushed" if timed is flushed else "back to back",
                       "start": t0, "end": t1, "ms": ms, "runs": n, "tflops": flops / ms / 1e9}
                rows.append(row)
                print(json.dumps(row), flush=True)
                time.sleep(0.5)
    json.dump(rows, open(sys.argv[2], "w"), indent=1)

main()
