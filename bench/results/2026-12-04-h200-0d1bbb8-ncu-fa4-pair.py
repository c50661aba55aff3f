"""One d128 unmasked 16k call each of FA4 and fa4-gen (the served pick, and the plain
128x128 tile through the same binding) for ncu to read, after a warm-up."""
import sys
import torch
from flash_attn.cute import flash_attn_func as fa4
import fa4gen
hdim = int(sys.argv[1]) if len(sys.argv) > 1 else 128
heads = 2048 // hdim
q, k, v = (torch.randn(1, 16384, heads, hdim, device="cuda", dtype=torch.bfloat16) for _ in range(3))
for _ in range(2):
    fa4(q, k, v)
    fa4gen.flash_attn_func(q, k, v)
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStart()
fa4(q, k, v)
fa4gen.flash_attn_func(q, k, v)
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
