#!/usr/bin/env python3
"""Model layers over an FP8 (e4m3) paged KV cache, called as vLLM calls FlashAttention-3.

    PYTHONPATH=python python3 bench/fp8_layers.py [--out DIR] [--cache DIR]

Each layer is a prefill of ``--batch`` prompts of ``--seqlen`` tokens (4 x 4096, as
`fa4-gen bench --layers`) whose K/V sit in a paged cache of ``--page-size`` keys a page
(vLLM's 16), the pages of each sequence scattered through the pool:
  llama-3-8b           32 query / 8 KV heads, d128, causal
  gpt-oss-20b-full     64 / 8, d64, causal, a sink per query head
  gpt-oss-20b-sliding  64 / 8, d64, causal window of 128 keys, sinks

vLLM's call (its FlashAttention backend with ``kv_cache_dtype=fp8``): q quantised to e4m3
by the engine, ``flash_attn_varlen_func(q, k_cache, v_cache, cu_seqlens_q, None,
max_seqlen_q, max_seqlen_k, seqused_k=..., block_table=..., causal=True, q_descale=...,
k_descale=..., v_descale=...)``, descales (batch, heads_kv), O in bf16.

Backends, each timed with triton's do_bench (L2 flushed before each run, the median):
  e4m3-paged       that call on fa4-gen's kernels (random descales in [0.5, 2])
  bf16q-e4m3-paged the same with q in bf16, quantised by the call (an engine that keeps
                   16-bit activations over an FP8 cache); the quantisation is timed in it
  e4m3-packed      the same e4m3 K/V packed by cu_seqlens_k, no pages: what paging costs
  bf16-paged       a bf16 paged cache (the same values): what FP8 gains
  cudnn-e4m3       cuDNN's FP8 SDPA (bench/peers_fp8.py's graph) on dense BSHD e4m3 tensors,
                   K/V repeated to the query heads where its graph refuses GQA; full
                   layers only, without sinks (no peer here takes FP8 pages, sinks or
                   windows)
Each fa4-gen row also gives O's relative L2 error on the first sequence against f32
attention on the same dequantised inputs (sinks and window included). FLOPs count the
pairs the mask leaves (4 x d per pair: FlashAttention's convention).

Output: OUT/fp8_layers.json (a row per layer and backend: layer, backend, ms, tflops,
rel_err, kernel, error) and a table; OUT is --out, else $OUT, else the current folder.
"""
import argparse
import json
import math
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peers_fp8 import CudnnFp8, quantise  # noqa: E402  (beside this file)

LAYERS = {  # name: (head dim, query heads, KV heads, window left or None, sinks)
    "llama-3-8b": (128, 32, 8, None, False),
    "gpt-oss-20b-full": (64, 64, 8, None, True),
    "gpt-oss-20b-sliding": (64, 64, 8, 128, True),
}
BACKENDS = ("e4m3-paged", "bf16q-e4m3-paged", "e4m3-packed", "bf16-paged", "cudnn-e4m3")


def pairs(s, window):
    """Causal (query, key) pairs of one sequence of s tokens, a window of `window` keys
    before each query (None: all)."""
    w = s if window is None else min(s, window + 1)
    return w * (w + 1) // 2 + (s - w) * w


def reference(torch, q, k, v, scale, window, sinks):
    """f32 O of one sequence: q [s, hq, d], k/v [s, hkv, d] f32, causal, a window of
    `window` keys (None: all) and a sink logit per query head (None: none)."""
    s, hq, d = q.shape
    group = hq // k.shape[1]
    out = torch.empty_like(q)
    i = torch.arange(s, device=q.device)
    keep = i[None, :] <= i[:, None]
    if window is not None:
        keep &= i[None, :] >= i[:, None] - window
    for h in range(hq):
        scores = (q[:, h] @ k[:, h // group].T) * scale
        scores = scores.masked_fill(~keep, float("-inf"))
        if sinks is not None:
            scores = torch.cat([scores, sinks[h].float().expand(s, 1)], 1)
        p = torch.softmax(scores, -1)[:, :s]
        out[:, h] = p @ v[:, h // group]
    return out


def page_table(torch, lengths, page_size, seed):
    """A [batch, max_pages] int32 table giving each sequence its pages in a random order
    through a pool of one page more than they need."""
    counts = [-(-n // page_size) for n in lengths]
    order = torch.randperm(sum(counts) + 1, generator=torch.Generator().manual_seed(seed)).to(torch.int32)
    table = torch.zeros(len(lengths), max(counts), dtype=torch.int32)
    at = 0
    for b, c in enumerate(counts):
        table[b, :c] = order[at:at + c]
        at += c
    return table.cuda()


def to_pages(torch, x, table, lengths, page_size):
    """A [pages, page_size, hkv, d] pool holding the sequences of a packed [total, hkv, d]
    tensor where `table` puts them."""
    pool = torch.zeros(int(table.max()) + 2, page_size, *x.shape[1:], dtype=x.dtype, device=x.device)
    # moved as bytes: e4m3 tensors take few of torch's indexing ops
    flat, src, row = pool.view(torch.uint8).flatten(0, 1), x.view(torch.uint8), 0
    for b, n in enumerate(lengths):
        pages = table[b, :(n + page_size - 1) // page_size].long()
        index = (pages[:, None] * page_size + torch.arange(page_size, device=x.device)).reshape(-1)[:n]
        flat[index] = src[row:row + n]
        row += n
    return pool


def run_layer(name, a):
    import torch
    import triton
    import fa4gen

    d, hq, hkv, window, with_sinks = LAYERS[name]
    b, s = a.batch, a.seqlen
    total = b * s
    scale = 1.0 / math.sqrt(d)
    ggen = torch.Generator(device="cuda").manual_seed(7)
    xq, xk, xv = (torch.randn(total, h, d, device="cuda", generator=ggen) for h in (hq, hkv, hkv))
    qd, kd, vd = (torch.rand(b, hkv, device="cuda", generator=ggen) * 1.5 + 0.5 for _ in range(3))
    per_row = lambda ds, h: ds.repeat_interleave(s, 0).repeat_interleave(h // hkv, 1)[:, :, None]  # noqa: E731
    q8 = quantise(torch, xq, per_row(qd, hq))
    k8, v8 = quantise(torch, xk, per_row(kd, hkv)), quantise(torch, xv, per_row(vd, hkv))
    qb = (q8.float() * per_row(qd, hq)).to(torch.bfloat16)  # q as a bf16 activation
    kb, vb = ((t.float() * per_row(ds, hkv)).to(torch.bfloat16) for t, ds in ((k8, kd), (v8, vd)))
    sinks = torch.randn(hq, device="cuda", generator=ggen) if with_sinks else None
    lengths = [s] * b
    cu = torch.arange(0, total + 1, s, dtype=torch.int32, device="cuda")
    used = torch.full((b,), s, dtype=torch.int32, device="cuda")
    table = page_table(torch, lengths, a.page_size, seed=7)
    k_pool, v_pool, kb_pool, vb_pool = (to_pages(torch, x, table, lengths, a.page_size) for x in (k8, v8, kb, vb))
    win = (-1, -1) if window is None else (window, 0)
    common = dict(causal=True, window_size=win, sinks=sinks, cache=a.cache)
    calls = {
        "e4m3-paged": lambda: fa4gen.flash_attn_varlen_func(
            q8, k_pool, v_pool, cu, None, s, s, seqused_k=used, block_table=table, q_descale=qd, k_descale=kd,
            v_descale=vd, **common),
        "bf16q-e4m3-paged": lambda: fa4gen.flash_attn_varlen_func(
            qb, k_pool, v_pool, cu, None, s, s, seqused_k=used, block_table=table, k_descale=kd, v_descale=vd,
            **common),
        "e4m3-packed": lambda: fa4gen.flash_attn_varlen_func(
            q8, k8, v8, cu, cu, s, s, q_descale=qd, k_descale=kd, v_descale=vd, **common),
        "bf16-paged": lambda: fa4gen.flash_attn_varlen_func(
            qb, kb_pool, vb_pool, cu, None, s, s, seqused_k=used, block_table=table, **common),
    }
    if window is None and "cudnn-e4m3" in a.backends:
        calls["cudnn-e4m3"] = cudnn_call(torch, q8, k8, v8, b, s, hq, hkv, d, scale)
    ref = None
    flops = 4 * d * hq * b * pairs(s, window)
    rows = []
    for backend in a.backends:
        row = dict(layer=name, backend=backend, head_dim=d, heads=hq, heads_kv=hkv, batch=b, seqlen=s,
                   page_size=a.page_size, window=window, sinks=with_sinks, flops=flops)
        if backend not in calls:
            row["error"] = "not run: " + ("no peer takes windows" if backend == "cudnn-e4m3" else "unknown")
            rows.append(row)
            continue
        try:
            fn = calls[backend]
            if hasattr(fn, "note"):
                row["note"] = fn.note
            out = fn()
            torch.cuda.synchronize()
            row["ms"] = triton.testing.do_bench(fn, warmup=a.warmup, rep=a.rep, return_mode="median")
            row["tflops"] = flops / row["ms"] / 1e9
            if backend.startswith("cudnn"):
                out = out.reshape(total, hq, d) if out.dim() == 4 else out
            else:
                kw = dict(head_dim=d, max_seqlen_q=s, causal=True, dtype="bf16" if backend == "bf16-paged" else "e4m3",
                          paged=backend.endswith("paged"), sinks=with_sinks, ragged=b > 1)
                if window is not None:
                    kw.update(window_size=win, max_seqlen_k=s)
                try:
                    row["kernel"] = fa4gen.KernelCache(a.cache).select(**kw)["kernel"]
                except Exception as e:  # the row's kernel name is a nicety
                    row["kernel"] = "%s: %s" % (type(e).__name__, str(e)[:120])
            if ref is None:
                deq = lambda t, ds, h: t[:s].float() * per_row(ds, h)[:s]  # noqa: E731
                prec = torch.backends.cuda.matmul.allow_tf32
                torch.backends.cuda.matmul.allow_tf32 = False
                try:
                    ref = reference(torch, deq(q8, qd, hq), deq(k8, kd, hkv), deq(v8, vd, hkv), scale, window, sinks)
                finally:
                    torch.backends.cuda.matmul.allow_tf32 = prec
            o = out[:s].float()
            if not backend.startswith("cudnn"):
                row["rel_err"] = ((o - ref).norm() / ref.norm()).item()
        except Exception as e:
            row["error"] = "%s: %s" % (type(e).__name__, str(e).strip()[:300])
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def cudnn_call(torch, q8, k8, v8, b, s, hq, hkv, d, scale):
    """cuDNN's FP8 SDPA on dense BSHD views of the packed tensors (descales 1: its time
    does not depend on them; its O is then compared on inputs without descales, so its
    rel_err is left out)."""
    q, k, v = (t.view(b, s, -1, d) for t in (q8, k8, v8))
    if hkv != hq:  # sdpa_fp8's graph is built with one head count for Q, K and V
        k, v = (t.view(torch.uint8).repeat_interleave(hq // hkv, 2).view(torch.float8_e4m3fn) for t in (k, v))
    g = CudnnFp8(torch, b, s, hq, d, True, scale, "auto", 1.0)
    pack = g.pack(q, k, v)

    def call():
        g.graph.execute(pack, g.ws, handle=g.handle)
        return g.out
    call.note = "K/V repeated to %d heads, O %s" % (hq, g.o)
    return call


def table(rows):
    print("\n%-20s %-17s %9s %8s %9s  %s" % ("layer", "backend", "ms", "TFLOP/s", "O err", "kernel / note / error"))
    for r in rows:
        ms, tf, err = r.get("ms"), r.get("tflops"), r.get("rel_err")
        print("%-20s %-17s %9s %8s %9s  %s" % (
            r["layer"], r["backend"], "%.3f" % ms if ms else "-", "%.1f" % tf if tf else "-",
            "%.2e" % err if err is not None else "-", r.get("error") or r.get("note") or r.get("kernel", "")))
    by = {(r["layer"], r["backend"]): r.get("ms") for r in rows}
    print()
    for layer in sorted({r["layer"] for r in rows}):
        base = by.get((layer, "e4m3-paged"))
        for other in BACKENDS[1:]:
            if base and by.get((layer, other)):
                print("%-20s e4m3-paged / %-17s %.3fx (time ratio, >1: e4m3-paged faster)"
                      % (layer, other, by[(layer, other)] / base))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", default=",".join(LAYERS))
    ap.add_argument("--backends", default=",".join(BACKENDS))
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seqlen", type=int, default=4096)
    ap.add_argument("--page-size", type=int, default=16)
    ap.add_argument("--warmup", type=int, default=25)
    ap.add_argument("--rep", type=int, default=200)
    ap.add_argument("--cache", default=None, help="the kernel cache (default: FA4GEN_CACHE or the shipped one)")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    a = ap.parse_args()
    a.backends = a.backends.split(",")
    import torch
    print("# %s, torch %s" % (torch.cuda.get_device_name(), torch.__version__), flush=True)
    rows = []
    for name in a.layers.split(","):
        rows += run_layer(name, a)
        Path(a.out).mkdir(parents=True, exist_ok=True)
        Path(a.out, "fp8_layers.json").write_text(json.dumps(rows, indent=1))
    table(rows)


if __name__ == "__main__":
    main()
