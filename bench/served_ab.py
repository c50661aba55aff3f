#!/usr/bin/env python3
"""The kernels two kernel caches serve, timed side by side through the Python binding:
an A/B of a change to what the dispatcher serves (a re-tune, a cache-building rule).

    PYTHONPATH=python python3 bench/served_ab.py OLD_CACHE NEW_CACHE --json OUT.json \
        [--cells 128:causal:sinks,128:none:sinks,128:local1024:sinks] [--seqlens 512,...]

A cell is HEAD_DIM:MASK:FEATURES with MASK none, causal or localW (window (W, 0) with
causal) and FEATURES none, sinks, softcap or sinks+softcap; bf16 on the grid's shapes
(16384 tokens, hidden 2048). Each (cell, length) is timed from both caches in two passes,
the caches' order swapped in the second, by triton's do_bench (L2 flushed before every
run, 50 ms warm-up, median). Rows: cache (0 or 1), pass, hdim, seqlen, mask, window,
features, kernel, reason, ms, tflops, and rel_err of cache 1's O against cache 0's.
FLOPs: FlashAttention's convention (causal halves the square; a window counts the pairs
it leaves).
"""
import argparse, json
import torch
import triton
import fa4gen
from peers_features import visible_pairs  # this folder's: the pairs a causal window leaves

CAP = 30.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("caches", nargs=2)
    ap.add_argument("--cells", default="128:causal:sinks,128:none:sinks,192:causal:sinks,"
                                       "256:causal:sinks,256:none:sinks,128:local1024:sinks")
    ap.add_argument("--seqlens", default="512,1024,2048,4096,16384")
    ap.add_argument("--total-tokens", type=int, default=16384)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    caches = [fa4gen.Cache(p) for p in a.caches]
    rows = []
    for cell in a.cells.split(","):
        d, mask, feats = cell.split(":")
        d = int(d)
        window = int(mask[5:]) if mask.startswith("local") else -1
        causal = mask != "none"
        sinks_on = "sinks" in feats
        softcap = CAP if "softcap" in feats else 0.0
        h = a.hidden // d
        for s in map(int, a.seqlens.split(",")):
            b = max(1, a.total_tokens // s)
            torch.manual_seed(0)
            q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
            sinks = torch.rand(h, device="cuda") * 4 - 1 if sinks_on else None
            if window >= 0:
                flops = 4 * b * h * d * visible_pairs(s, window)
            else:
                flops = 4 * b * h * s * s * d / (2 if causal else 1)
            ws = (window, 0) if window >= 0 else (-1, -1)
            outs = []
            for path in a.caches:
                o = fa4gen.flash_attn_func(q, k, v, causal=causal, window_size=ws, softcap=softcap,
                                           sinks=sinks, cache=path)
                outs.append(o.float())
            err = ((outs[1] - outs[0]).norm() / outs[0].norm()).item()
            for p, order in enumerate(([0, 1], [1, 0])):
                for i in order:
                    sel = caches[i].select(d, s, dtype="bf16", causal=causal, window_size=ws,
                                           sinks=sinks_on, softcap=softcap)
                    path = a.caches[i]
                    ms = triton.testing.do_bench(
                        lambda: fa4gen.flash_attn_func(q, k, v, causal=causal, window_size=ws, softcap=softcap,
                                                       sinks=sinks, cache=path),
                        warmup=50, rep=100, return_mode="median")
                    row = dict(cache=i, pass_=p, hdim=d, seqlen=s, batch=b, heads=h, mask=mask, window=window,
                               features=feats, kernel=sel["kernel"], reason=sel["reason"], ms=ms,
                               tflops=flops / (ms * 1e-3) / 1e12, rel_err=err)
                    rows.append(row)
                    print(f"cache {i} pass {p} d={d} {mask:9s} {feats:13s} s={s:5d} {ms:8.3f} ms "
                          f"{row['tflops']:6.1f} TFLOP/s {sel['reason']:9s} {sel['kernel']}", flush=True)
            if a.json:
                with open(a.json, "w") as f:
                    json.dump(rows, f, indent=1)
            del q, k, v, outs
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
