#!/usr/bin/env python3
"""Peers on the model layers of `fa4-gen bench --layers`, for the same device call.

Each layer is a prefill of 4 prompts of 4096 tokens with grouped KV heads:
  gpt-oss-20b-full   64 query / 8 KV heads, head dim 64, causal (its sinks: no peer here
                     takes them; they cost fa4-gen nothing measurable)
  llama-3-8b         32 query / 8 KV heads, head dim 128, causal
  deepseek-v3        16 / 16 heads (one GPU's of 128 at 8-way tensor parallelism), head
                     dims 192 for Q and K and 128 for V, causal (SDPA's flash backend
                     takes equal head dims only: its row says so)
The sliding-window layer of gpt-oss (window 128) has no peer among PyTorch's backends.
Backends: torch SDPA flash (FlashAttention-2) and cuDNN, with enable_gqa where the backend
takes it, else K/V repeated outside the timed call. FLOPs: FlashAttention's convention
(2*b*h*s*s*(d + d_v), halved when causal). Rows: backend, hdim (hdim_v where it
differs), seqlen, batch, heads, heads_kv, causal, layer, ms, tflops.
"""
import argparse, json
import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
import triton

# (name, QK head dim, V head dim, query heads, KV heads)
LAYERS = [("gpt-oss-20b-full", 64, 64, 64, 8), ("llama-3-8b", 128, 128, 32, 8), ("deepseek-v3", 192, 128, 16, 16)]
BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}


def runner(backend, q, k, v):
    """A call of the backend on (b, h, s, d) tensors: native GQA if it runs, else repeated K/V."""
    be = BACKENDS[backend]
    def native():
        with sdpa_kernel([be]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    try:
        native()
        torch.cuda.synchronize()
        return native, "enable_gqa"
    except Exception:
        group = q.shape[1] // k.shape[1]
        kr, vr = (x.repeat_interleave(group, dim=1) for x in (k, v))
        def repeated():
            with sdpa_kernel([be]):
                return F.scaled_dot_product_attention(q, kr, vr, is_causal=True)
        return repeated, "repeated K/V"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seqlen", type=int, default=4096)
    ap.add_argument("--json", default=None)
    ap.add_argument("--layers", default="all", help="comma-separated name prefixes [all]")
    a = ap.parse_args()
    wanted = a.layers.split(",")
    print(f"# {torch.cuda.get_device_name()} torch {torch.__version__} cudnn {torch.backends.cudnn.version()}", flush=True)
    rows = []
    for layer, d, dv, hq, hkv in LAYERS:
        if "all" not in wanted and not any(layer.startswith(w) for w in wanted):
            continue
        torch.manual_seed(0)
        b, s = a.batch, a.seqlen
        q = torch.randn(b, hq, s, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, hkv, s, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(b, hkv, s, dv, device="cuda", dtype=torch.bfloat16)
        flops = 2 * b * hq * s * s * (d + dv) / 2
        for backend in BACKENDS:
            row = dict(backend=backend, hdim=d, seqlen=s, batch=b, heads=hq, heads_kv=hkv, causal=1, layer=layer)
            if dv != d:
                row["hdim_v"] = dv
            try:
                fn, how = runner(backend, q, k, v)
                ms = triton.testing.do_bench(fn, warmup=50, rep=200, return_mode="median")
                row.update(ms=ms, tflops=flops / (ms * 1e-3) / 1e12, gqa=how)
                print(f"{backend:6s} {layer:18s} {ms:8.3f} ms {row['tflops']:7.1f} TFLOP/s ({how})", flush=True)
            except Exception as e:
                row["error"] = f"{type(e).__name__}: {str(e)[:200]}"
                print(f"{backend:6s} {layer:18s} ERROR {row['error']}", flush=True)
            rows.append(row)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
