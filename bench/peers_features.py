#!/usr/bin/env python3
"""Peers on the score features that PyTorch's SDPA backends do not take, for the same
device call as `fa4-gen bench --mask local --window W,0` and `fa4-gen bench --layers`.

Cells (bf16, the grid's shapes: 16384 tokens, hidden 2048, heads = 2048 / head dim):
  causal                 the reference each feature's cost is read against
  window W               FlashAttention's window_size (W, 0) with causal: row i sees keys
                         i - W to i; FLOPs count the pairs the window leaves (as
                         `fa4-gen bench` does), not the square
  sinks                  causal, one learned logit per head in the softmax's denominator
  softcap                causal, scores soft-capped at 50 (Gemma-2)
and the model layers of `fa4-gen bench --layers` that carry features: gpt-oss-20b's
sliding layer (64 query / 8 KV heads, head dim 64, window 128, sinks) and its full layer
(causal, sinks), 4 prompts of 4096 tokens.

Backends: fa4 (flash_attn.cute: window_size, learnable_sink, softcap, GQA natively) and
flex (FlexAttention through torch.compile: a causal sliding-window block mask whose empty
blocks it skips, softcap as a score_mod, enable_gqa; it takes no sinks, so its sink cells
are left out). Timing as `peers.py`: triton's do_bench (L2 flushed before each run),
50 ms warm-up, median. Rows: backend, hdim, seqlen, batch, heads, heads_kv, causal,
feature, window, layer, ms, tflops, rel_err_vs_first (O against the first backend that
ran the cell).
"""
import argparse, json
import torch
import triton

CAP = 50.0


def visible_pairs(s, window):
    """(query, key) pairs of one causal sequence of s tokens under window (window, 0)."""
    if window < 0 or window >= s - 1:
        return s * (s + 1) / 2
    # rows 0..window see i + 1 keys, the rest window + 1
    return (window + 1) * (window + 2) / 2 + (s - window - 1) * (window + 1)


def flops(b, h, s, d, window):
    if window < 0:
        return 4 * b * h * s * s * d / 2  # FlashAttention's causal convention
    return 4 * b * h * d * visible_pairs(s, window)


def fa4_backend():
    from flash_attn.cute import flash_attn_func

    def run(q, k, v, window, sinks, softcap):  # (b, s, h, d)
        o = flash_attn_func(q, k, v, causal=True,
                            window_size=(window if window >= 0 else None, 0 if window >= 0 else None),
                            learnable_sink=sinks, softcap=softcap or 0.0)
        return o[0] if isinstance(o, tuple) else o
    return run


def flex_backend():
    from torch.nn.attention.flex_attention import flex_attention, create_block_mask
    compiled = torch.compile(flex_attention, dynamic=False)
    masks = {}

    def run(q, k, v, window, sinks, softcap):
        if sinks is not None:
            raise NotImplementedError("FlexAttention takes no sink logits")
        s = q.shape[1]
        key = (s, window)
        if key not in masks:
            if window >= 0:
                fn = lambda b, h, qi, ki: (qi >= ki) & (qi - ki <= window)
            else:
                fn = lambda b, h, qi, ki: qi >= ki
            masks[key] = create_block_mask(fn, None, None, s, s)
        score_mod = None
        if softcap:
            score_mod = lambda score, b, h, qi, ki: softcap * torch.tanh(score / softcap)
        qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
        gqa = q.shape[2] != k.shape[2]
        return compiled(qt, kt, vt, block_mask=masks[key], score_mod=score_mod,
                        enable_gqa=gqa).transpose(1, 2)
    return run


def cells(a):
    """(label, hdim, seqlen, batch, heads, heads_kv, window, feature, layer)"""
    out = []
    for d in map(int, a.hdims.split(",")):
        h = a.hidden // d
        for s in map(int, a.seqlens.split(",")):
            b = max(1, a.total_tokens // s)
            out.append((d, s, b, h, h, -1, "none", ""))
            for w in map(int, a.windows.split(",")):
                out.append((d, s, b, h, h, w, "none", ""))
            for f in a.features.split(","):
                if f and f != "none":
                    out.append((d, s, b, h, h, -1, f, ""))
    if a.layers:
        out.append((64, 4096, 4, 64, 8, 128, "sinks", "gpt-oss-20b-sliding"))
        out.append((64, 4096, 4, 64, 8, -1, "sinks", "gpt-oss-20b-full"))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hdims", default="64,128")
    ap.add_argument("--seqlens", default="4096,16384")
    ap.add_argument("--windows", default="128,1024,4096")
    ap.add_argument("--features", default="sinks,softcap")
    ap.add_argument("--total-tokens", type=int, default=16384)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--layers", action="store_true", help="also gpt-oss-20b's layers")
    ap.add_argument("--backends", default="fa4,flex")
    ap.add_argument("--flex-seqlens", default="16384",
                    help="FlexAttention compiles per shape and mask: only these lengths, no features")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    makers = {"fa4": fa4_backend, "flex": flex_backend}
    fns = {}
    for name in a.backends.split(","):
        try:
            fns[name] = makers[name]()
        except Exception as e:
            print(f"# backend {name} unavailable: {type(e).__name__}: {e}", flush=True)
    print(f"# {torch.cuda.get_device_name()} torch {torch.__version__}", flush=True)
    rows = []
    for d, s, b, h, hkv, window, feature, layer in cells(a):
        torch.manual_seed(0)
        q = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(b, s, hkv, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        sinks = torch.randn(h, device="cuda", dtype=torch.float32) if feature == "sinks" else None
        softcap = CAP if feature == "softcap" else 0.0
        fl = flops(b, h, s, d, window)
        ref = None
        for name, fn in fns.items():
            if name == "flex" and (feature != "none" or layer or str(s) not in a.flex_seqlens.split(",")):
                continue
            row = dict(backend=name, hdim=d, seqlen=s, batch=b, heads=h, heads_kv=hkv, causal=1,
                       feature=feature, window=window, layer=layer)
            try:
                out = fn(q, k, v, window, sinks, softcap)
                torch.cuda.synchronize()
                err = None
                if ref is None:
                    ref = out.float()
                else:
                    err = ((out.float() - ref).norm() / ref.norm()).item()
                ms = triton.testing.do_bench(lambda: fn(q, k, v, window, sinks, softcap),
                                             warmup=50, rep=200, return_mode="median")
                row.update(ms=ms, tflops=fl / (ms * 1e-3) / 1e12, rel_err_vs_first=err)
                print(f"{name:5s} d={d:3d} s={s:5d} b={b} h={h}/{hkv} window={window:5d} {feature:8s} {layer:20s}"
                      f" {ms:8.3f} ms {row['tflops']:7.1f} TFLOP/s err={err}", flush=True)
            except Exception as e:
                row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
                print(f"{name:5s} d={d:3d} s={s:5d} window={window} {feature} {layer} ERROR {row['error']}", flush=True)
            rows.append(row)
            if a.json:  # after every row, so a call cut short keeps what it measured
                with open(a.json, "w") as f:
                    json.dump(rows, f, indent=1)
        del q, k, v, ref
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
