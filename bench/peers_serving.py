#!/usr/bin/env python3
"""The serving batches of `fa4-gen bench --serving`, timed through Python: fa4-gen's
`flash_attn_varlen_func` (what an engine calls) beside FA4's, PyTorch's FlashAttention-2
varlen op and cuDNN (PyTorch's nested-tensor SDPA), on the same packed batches.

    fa4-gen bench --serving all --db DB --json ours.json      # the CLI's rows, the mixes in them
    python3 bench/peers_serving.py ours.json --json peers.json  # same call, same GPU

Each backend is timed with triton's do_bench (L2 flushed before every run, the median),
as the grid's peers are. Rows: backend, layer, mix, hdim, heads, heads_kv, batch,
total_q, max_seqlen_q, ms, tflops (the pairs the causal mask leaves, counted exactly, as
the CLI's rows count them), rel_err (O against fa4-gen's, relative L2). The table at the
end gives per mix each backend's ms and fa4-gen's ratio to the best peer (>1: faster),
for the CLI's tuned row and the Python call."""
import argparse, itertools, json, math, sys
import torch
import triton


def visible_pairs(seqlens):
    return sum(q * k - q * (q - 1) // 2 for q, k in seqlens)


def packed(seqlens, heads, heads_kv, d, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    tq, tk = sum(q for q, _ in seqlens), sum(k for _, k in seqlens)
    mk = lambda n, h: torch.randn(n, h, d, device="cuda", dtype=torch.bfloat16, generator=g)
    cu = lambda xs: torch.tensor([0] + list(itertools.accumulate(xs)), device="cuda", dtype=torch.int32)
    return (mk(tq, heads), mk(tk, heads_kv), mk(tk, heads_kv),
            cu([q for q, _ in seqlens]), cu([k for _, k in seqlens]),
            max(q for q, _ in seqlens), max(k for _, k in seqlens))


def fa4gen_backend():
    import fa4gen

    def run(q, k, v, cq, ck, mq, mk, seqlens):
        return fa4gen.flash_attn_varlen_func(q, k, v, cq, ck, mq, mk, causal=True)
    return run


def fa4_backend():
    from flash_attn.cute import flash_attn_varlen_func

    def run(q, k, v, cq, ck, mq, mk, seqlens):
        o = flash_attn_varlen_func(q, k, v, cu_seqlens_q=cq, cu_seqlens_k=ck, max_seqlen_q=mq,
                                   max_seqlen_k=mk, causal=True)
        return o[0] if isinstance(o, tuple) else o
    return run


def flash_backend():
    # PyTorch's FlashAttention-2 varlen op (GQA native, causal bottom-right)
    def run(q, k, v, cq, ck, mq, mk, seqlens):
        return torch.ops.aten._flash_attention_forward(q, k, v, cq, ck, mq, mk, 0.0, True, False)[0]
    return run


def cudnn_backend():
    # cuDNN through cudnn-frontend's varlen SDPA op (packed (T, H, D) with cu_seqlens, GQA
    # native, causal aligned bottom-right as FlashAttention's); PyTorch's SDPA on nested
    # (jagged) tensors with the cuDNN backend took 46 to 51 ms a mix on the H100, the
    # same for every mix: not a cuDNN kernel's time
    import cudnn
    sdpa = cudnn.sdpa_torch

    def run(q, k, v, cq, ck, mq, mk, seqlens):
        return sdpa(q, k, v, is_causal=True, causal_bottom_right=True, cu_seqlens_q=cq, cu_seqlens_kv=ck,
                    max_seqlen_q=mq, max_seqlen_kv=mk)
    return run


BACKENDS = {"fa4gen": fa4gen_backend, "fa4": fa4_backend, "flash": flash_backend, "cudnn": cudnn_backend}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ours", help="rows of `fa4-gen bench --serving` (the mixes come from them)")
    ap.add_argument("--backends", default="fa4gen,fa4,cudnn,flash")
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--rep", type=int, default=300, help="do_bench's rep, ms")
    a = ap.parse_args()
    ours = json.load(open(a.ours))
    cells = {}
    for r in ours:
        if r.get("mix"):
            cells.setdefault((r["layer"], r["mix"]), r)
    gpu = torch.cuda.get_device_name()
    print(f"{gpu}, torch {torch.__version__}, {len(cells)} serving cells", flush=True)
    makers = {}
    for name in a.backends.split(","):
        try:
            makers[name] = BACKENDS[name]()
        except Exception as e:
            print(f"backend {name} skipped: {type(e).__name__}: {e}", flush=True)
    rows = []
    for (layer, mix), r in cells.items():
        seqlens = [tuple(s) for s in r["seqlens"]]
        d, h, hk = r["hdim"], r["heads"], r["heads_kv"]
        args = packed(seqlens, h, hk, d, 1234)
        flops = 4 * d * h * visible_pairs(seqlens)
        first = None
        for name, fn in makers.items():
            row = dict(backend=name, layer=layer, mix=mix, hdim=d, heads=h, heads_kv=hk, batch=len(seqlens),
                       total_q=sum(q for q, _ in seqlens), max_seqlen_q=max(q for q, _ in seqlens), gpu=gpu)
            try:
                out = fn(*args, seqlens).float()
                torch.cuda.synchronize()
                if first is None:
                    first = out
                row["rel_err"] = ((out - first).norm() / first.norm()).item()
                ms = triton.testing.do_bench(lambda: fn(*args, seqlens), warmup=50, rep=a.rep, return_mode="median")
                row.update(ms=ms, tflops=flops / ms / 1e9)
            except Exception as e:
                row["error"] = f"{type(e).__name__}: {str(e)[:200]}"
            rows.append(row)
            print(json.dumps(row), flush=True)
    if a.json:
        json.dump(rows, open(a.json, "w"), indent=1)
    # The table: per mix, ms of each backend; fa4-gen (CLI tuned row, Python call) over the best peer.
    cli = {(r["layer"], r["mix"]): r["ms"] for r in ours if r.get("mix") and r["backend"].endswith("-tuned")}
    peers = [n for n in makers if n != "fa4gen"]
    print(f"\n{'layer':12} {'mix':8} {'cli':>8} {'python':>8} " + " ".join(f"{p:>8}" for p in peers)
          + "  best   cli/best  py/best")
    ratios_cli, ratios_py = [], []
    for key in cells:
        got = {r["backend"]: r.get("ms") for r in rows if (r["layer"], r["mix"]) == key}
        best = min((got[p], p) for p in peers if got.get(p)) if any(got.get(p) for p in peers) else None
        c, py = cli.get(key), got.get("fa4gen")
        fmt = lambda x: f"{x:8.3f}" if x else f"{'-':>8}"
        line = f"{key[0]:12} {key[1]:8} {fmt(c)} {fmt(py)} " + " ".join(fmt(got.get(p)) for p in peers)
        if best:
            line += f"  {best[1]:6}"
            if c:
                ratios_cli.append(best[0] / c)
                line += f" {best[0] / c:7.3f}"
            if py:
                ratios_py.append(best[0] / py)
                line += f"  {best[0] / py:7.3f}"
        print(line)
    for name, rs in (("cli", ratios_cli), ("python", ratios_py)):
        if rs:
            geo = math.exp(sum(map(math.log, rs)) / len(rs))
            print(f"{name}: {len(rs)} mixes, geomean {geo:.3f}x the best peer, min {min(rs):.3f}")


if __name__ == "__main__":
    sys.exit(main())
