# One cuDNN SDPA call per cell, for Nsight Compute to profile with instruction-level
# counters (cuDNN builds its kernels at run time, so its SASS is only seen this way).
# Usage (GPU host): ncu -k regex:sdpa --launch-skip 2 --launch-count 1 \
#   --section SourceCounters -o REPORT python3 bench/ncu_sass.py D SEQLEN CAUSAL
# then `ncu -i REPORT.ncu-rep --page source --print-source sass --csv`.
import sys, torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
d, s, c = (int(x) for x in sys.argv[1:4])
b, h = 16384 // s, 2048 // d
q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
    for _ in range(4):
        F.scaled_dot_product_attention(q, k, v, is_causal=bool(c))
torch.cuda.synchronize()
