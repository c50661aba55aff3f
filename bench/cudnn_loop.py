# cuDNN's attention on one FA3-grid cell, back to back for a few seconds (for clocks and power).
import sys, time, torch, torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
b, h, s, d, secs = (int(x) for x in sys.argv[1:6])
q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
    F.scaled_dot_product_attention(q, k, v); torch.cuda.synchronize()
    t0 = time.time(); n = 0
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    while time.time() - t0 < secs:
        for _ in range(50):
            F.scaled_dot_product_attention(q, k, v)
        n += 50
        torch.cuda.synchronize()
    end.record(); torch.cuda.synchronize()
    ms = start.elapsed_time(end) / n
    print(f"cudnn b{b} h{h} s{s} d{d}: {n} runs, {ms:.4f} ms each, {4*b*h*s*s*d/ms/1e9:.1f} TFLOP/s back to back")
