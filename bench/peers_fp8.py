#!/usr/bin/env python3
"""FlashAttention-3's FP8 grid: fa4-gen's e4m3 kernels beside cuDNN's FP8 SDPA and fa4-gen's
bf16 kernels, on the same GPU in the same call.

    PYTHONPATH=python python3 bench/peers_fp8.py [--quick] [--out DIR] [--cache DIR]

Cells (FlashAttention-3's paper grid, BSHD, MHA): head dims 64, 128, 256; seqlens 512 to
16384; causal and not; batch 16384 // seqlen, heads 2048 // head dim. FLOPs 4*b*h*s*s*d,
halved when causal (shared/bench/peers.py's convention). ``--quick``: d128 at 2048 and 8192.

Backends, each timed with triton's do_bench (L2 flushed before each run, the median):
  fa4-gen-e4m3  fa4gen.flash_attn_func on e4m3 q/k/v with random descales per (sequence,
                head) in [0.5, 2]; O in bf16
  cudnn-e4m3    cuDNN's FP8 SDPA through cudnn-frontend (per-tensor descales), O in bf16
                where the graph takes it, else e4m3 O (the row's ``cudnn_o`` says which, and
                ``cudnn_notes`` why bf16 was not taken)
  fa4-gen-bf16  fa4gen.flash_attn_func on bf16 inputs of the same shape (the e4m3 inputs'
                values)
and each backend's O against f32 attention on the same dequantised e4m3 inputs (relative
L2 error over the first and last sequence of the batch), for two kinds of inputs:
  normal        N(0,1) quantised to e4m3 (descale 1)
  outliers      N(0,1) with 4 head-dim channels x20, quantised with a per-tensor scale that
                fits them (descale amax / 448)
(fa4-gen-bf16 runs the dequantised inputs in bf16: the error of 16-bit inputs beside FP8's.)

Every cell runs in a process of its own (``--in-process``: all in this one), so that a CUDA
error ends that process, not the run; a backend that fails is recorded in the row's
``errors`` and the cell's other backends still run (after an error that leaves the CUDA
context unusable, in a fresh process).

Output, rewritten after every cell: OUT/fp8_grid.json (a row per cell: hdim, seqlen, batch,
heads, causal, flops, ms, tflops and rel_err per backend, errors), OUT/fp8_rows.json (a row
per cell and backend, in shared/bench/compare.py's form:
``compare.py fp8_rows.json --ours fa4-gen-e4m3 --vs cudnn-e4m3,fa4-gen-bf16``), and the
table: per cell ours / cuDNN-FP8 and ours-e4m3 / ours-bf16 (>1: ours faster), then their
geomeans and minima. OUT is --out, else $OUT, else the current folder.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

BACKENDS = ("fa4-gen-e4m3", "cudnn-e4m3", "fa4-gen-bf16")
KINDS = ("normal", "outliers")
E4M3_MAX = 448.0


def cells(a):
    hdims, seqlens = ("128", "2048,8192") if a.quick else (a.hdims, a.seqlens)
    for d in map(int, hdims.split(",")):
        for s in map(int, seqlens.split(",")):
            for c in map(int, a.causal.split(",")):
                yield d, s, c


def flops(b, h, s, d, causal):
    return 4 * b * h * s * s * d / (2 if causal else 1)


# ---------------------------------------------------------------- one cell (GPU process)

def quantise(torch, x, scale=1.0):
    """x / scale in e4m3, saturated at 448 (torch's cast gives NaN past 464)."""
    return (x / scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)


def reference(torch, q, k, v, causal, scale):
    """f32 attention of [n, s, h, d] f32 tensors, by blocks of query rows (scores of at
    most 2^28 floats at a time). Returns O [n, s, h, d] f32."""
    n, s, h, d = q.shape
    out = torch.empty(n, s, h, v.shape[-1], device=q.device)
    rows = max(64, min(s, (1 << 28) // (h * k.shape[1])))
    keys = torch.arange(k.shape[1], device=q.device)
    for i in range(n):
        qi, ki, vi = (x[i].transpose(0, 1) for x in (q, k, v))  # [h, s, d]
        for r0 in range(0, s, rows):
            r1 = min(s, r0 + rows)
            scores = torch.matmul(qi[:, r0:r1], ki.transpose(1, 2)) * scale
            if causal:  # s_q == s_k: aligned top-left and bottom-right alike
                scores.masked_fill_(keys[None, :] > torch.arange(r0, r1, device=q.device)[:, None], -math.inf)
            out[i, r0:r1] = torch.matmul(torch.softmax(scores, -1), vi).transpose(0, 1)
    return out


def rel_err(torch, out, ref):
    """Relative L2 error of out against ref (NaN where out is not finite)."""
    out = out.float()
    if not bool(torch.isfinite(out).all()):
        return math.nan
    return ((out - ref).norm() / ref.norm()).item()


class Inputs:
    """A cell's e4m3 inputs: the timed ones (N(0,1), random descales per sequence and
    head) and, per kind, inputs with per-tensor descales and the f32 reference of the
    sequences the error is measured on."""

    def __init__(self, torch, b, s, h, d, causal, seed, err_seqs):
        self.torch, self.shape, self.causal = torch, (b, s, h, d), causal
        self.scale = 1.0 / math.sqrt(d)
        g = torch.Generator(device="cuda").manual_seed(seed)
        normal = [torch.randn(*self.shape, device="cuda", generator=g) for _ in range(3)]
        self.q8, self.k8, self.v8 = (quantise(torch, x) for x in normal)
        self.descales = [torch.rand(b, h, device="cuda", generator=g) * 1.5 + 0.5 for _ in range(3)]
        self.seqs = sorted({0, b - 1})[:err_seqs]
        # outliers: 4 channels x20, each tensor quantised with the per-tensor scale that fits it
        chans = torch.randperm(d, generator=torch.Generator().manual_seed(seed))[:4].cuda()
        out8, scales = [], []
        for x in normal:
            x[..., chans] *= 20.0
            sc = x.abs().max().item() / E4M3_MAX
            out8.append(quantise(torch, x, sc))
            scales.append(sc)
        del normal
        self.kinds = {"normal": ((self.q8, self.k8, self.v8), (1.0, 1.0, 1.0)), "outliers": (tuple(out8), tuple(scales))}
        self._refs = {}

    def ref(self, kind):
        """f32 O of the error sequences, from the dequantised inputs of `kind`."""
        if kind not in self._refs:
            torch = self.torch
            xs, scales = self.kinds[kind]
            deq = [self.pick(x) * sc for x, sc in zip(xs, scales)]
            prec = torch.backends.cuda.matmul.allow_tf32
            torch.backends.cuda.matmul.allow_tf32 = False  # f32 products, not TF32
            try:
                self._refs[kind] = reference(torch, *deq, self.causal, self.scale)
            finally:
                torch.backends.cuda.matmul.allow_tf32 = prec
        return self._refs[kind]

    def pick(self, t):
        """The error sequences of a [b, s, h, d] tensor, in f32 (basic indexing only: e4m3
        tensors take few of torch's ops)."""
        return self.torch.stack([t[i].float() for i in self.seqs])

    def err(self, kind, out):
        return rel_err(self.torch, self.pick(out), self.ref(kind))


def fa4gen_e4m3(torch, x, a):
    import fa4gen
    b, _, h, _ = x.shape
    qd, kd, vd = x.descales
    timed = lambda: fa4gen.flash_attn_func(x.q8, x.k8, x.v8, causal=x.causal, q_descale=qd, k_descale=kd,  # noqa: E731
                                           v_descale=vd, cache=a.cache)

    def run(kind):
        xs, scales = x.kinds[kind]
        ds = [torch.full((1,), sc, device="cuda").expand(b, h) for sc in scales]  # per-tensor, stride 0
        return fa4gen.flash_attn_func(*xs, causal=x.causal, q_descale=ds[0], k_descale=ds[1], v_descale=ds[2],
                                      cache=a.cache)
    return timed, run, {}


def fa4gen_bf16(torch, x, a):
    import fa4gen
    qb, kb, vb = (t.to(torch.bfloat16) for t in (x.q8, x.k8, x.v8))
    timed = lambda: fa4gen.flash_attn_func(qb, kb, vb, causal=x.causal, cache=a.cache)  # noqa: E731

    def run(kind):
        xs, scales = x.kinds[kind]
        return fa4gen.flash_attn_func(*((t.float() * sc).to(torch.bfloat16) for t, sc in zip(xs, scales)),
                                      causal=x.causal, cache=a.cache)
    return timed, run, {}


class CudnnFp8:
    """cuDNN's FP8 SDPA forward (cudnn-frontend's sdpa_fp8) over BSHD memory: Q, K, V in
    e4m3 with per-tensor descales, P quantised with scale_s, O in bf16 or in e4m3 (then
    scaled by scale_o)."""

    def __init__(self, torch, b, s, h, d, causal, scale, o_choice, scale_s):
        import cudnn
        self.torch, self.cudnn, self.shape = torch, cudnn, (b, s, h, d)
        self.handle = cudnn.create_handle()
        cudnn.set_stream(handle=self.handle, stream=torch.cuda.current_stream().cuda_stream)
        self.notes = []
        for o in (("bf16", "e4m3") if o_choice == "auto" else (o_choice,)):
            try:
                self._build(b, s, h, d, causal, scale, o)
                self.o = o
                break
            except Exception as e:
                self.notes.append("O %s: %s: %s" % (o, type(e).__name__, str(e).strip()[:300]))
        else:
            raise RuntimeError("no cuDNN FP8 SDPA graph: " + " | ".join(self.notes))
        f32 = lambda v: torch.full((1, 1, 1, 1), v, device="cuda")  # noqa: E731
        self.scalars = {n: f32(1.0) for n in ("dq", "dk", "dv", "so")}
        self.scalars.update(ss=f32(scale_s), ds=f32(1.0 / scale_s))
        self.amax_s, self.amax_o = f32(0.0), f32(0.0)
        out_dtype = torch.bfloat16 if self.o == "bf16" else torch.float8_e4m3fn
        self.out = torch.empty(b, s, h, d, device="cuda", dtype=out_dtype)
        self.ws = torch.empty(self.graph.get_workspace_size(), device="cuda", dtype=torch.uint8)

    def _build(self, b, s, h, d, causal, scale, o):
        cudnn = self.cudnn
        fp8, f32 = cudnn.data_type.FP8_E4M3, cudnn.data_type.FLOAT
        dims, strides = [b, h, s, d], [s * h * d, d, h * d, 1]  # BHSD logical over BSHD memory
        g = cudnn.pygraph(io_data_type=fp8, intermediate_data_type=f32, compute_data_type=f32, handle=self.handle)
        q, k, v = (g.tensor(name=n, dim=dims, stride=strides, data_type=fp8) for n in ("q", "k", "v"))
        sc = {n: g.tensor(name=n, dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=f32)
              for n in ("dq", "dk", "dv", "ds", "ss", "so")}
        kw = dict(q=q, k=k, v=v, descale_q=sc["dq"], descale_k=sc["dk"], descale_v=sc["dv"], descale_s=sc["ds"],
                  scale_s=sc["ss"], scale_o=sc["so"], attn_scale=scale, use_causal_mask=bool(causal))
        try:
            o_t, _, amax_s, amax_o = g.sdpa_fp8(generate_stats=False, **kw)
        except TypeError:  # frontends before generate_stats
            o_t, _, amax_s, amax_o = g.sdpa_fp8(is_inference=True, **kw)
        o_t.set_output(True).set_dim(dims).set_stride(strides).set_data_type(
            cudnn.data_type.BFLOAT16 if o == "bf16" else fp8)
        for t in (amax_s, amax_o):
            t.set_output(True).set_dim([1, 1, 1, 1]).set_stride([1, 1, 1, 1]).set_data_type(f32)
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        g.check_support()
        g.build_plans()
        self.graph, self.q, self.k, self.v, self.o_t, self.sc = g, q, k, v, o_t, sc
        self.amax_t = (amax_s, amax_o)

    def __call__(self, q8, k8, v8, descales=(1.0, 1.0, 1.0), scale_o=1.0):
        """O [b, s, h, d] (bf16, or e4m3 O x scale_o) of BSHD e4m3 inputs."""
        for n, val in zip(("dq", "dk", "dv"), descales):
            self.scalars[n].fill_(val)
        self.scalars["so"].fill_(scale_o)
        self.graph.execute(self.pack(q8, k8, v8), self.ws, handle=self.handle)
        return self.out

    def pack(self, q8, k8, v8):
        """The variant pack: each graph tensor's memory (BSHD tensors seen as the graph's
        BHSD dims, the same memory)."""
        bhsd = lambda t: t.transpose(1, 2)  # noqa: E731
        pack = {self.q: bhsd(q8), self.k: bhsd(k8), self.v: bhsd(v8), self.o_t: bhsd(self.out),
                self.amax_t[0]: self.amax_s, self.amax_t[1]: self.amax_o}
        pack.update({self.sc[n]: t for n, t in self.scalars.items()})
        return pack


def cudnn_e4m3(torch, x, a):
    b, s, h, d = x.shape
    g = CudnnFp8(torch, b, s, h, d, x.causal, x.scale, a.cudnn_o, a.cudnn_scale_s)
    pack = g.pack(x.q8, x.k8, x.v8)  # descales 1: the time does not depend on them
    timed = lambda: g.graph.execute(pack, g.ws, handle=g.handle)  # noqa: E731

    def run(kind):
        xs, scales = x.kinds[kind]
        if g.o == "bf16":
            return g(*xs, descales=scales).clone()
        # e4m3 O: scaled by a power of two that fits the reference's largest |O| twice over
        amax = x.ref(kind).abs().max().item()
        scale_o = 2.0 ** math.floor(math.log2(E4M3_MAX / (2 * max(amax, 1e-30))))
        return g(*xs, descales=scales, scale_o=scale_o).float() / scale_o
    return timed, run, {"cudnn_o": g.o, "cudnn_notes": g.notes}


MAKERS = {"fa4-gen-e4m3": fa4gen_e4m3, "cudnn-e4m3": cudnn_e4m3, "fa4-gen-bf16": fa4gen_bf16}


def cuda_alive(torch):
    """False once an error has left the CUDA context unusable (every later call fails)."""
    try:
        torch.cuda.synchronize()
        return torch.ones(1, device="cuda").sum().item() == 1.0
    except Exception:
        return False


def run_cell(d, s, c, backends, a):
    """One cell's row: each backend's time and errors; stops at an error that leaves the
    CUDA context unusable (row["dead"]: the backends left to a fresh process)."""
    import torch
    import triton

    b, h = max(1, a.total_tokens // s), a.hidden // d
    row = dict(hdim=d, seqlen=s, batch=b, heads=h, causal=c, flops=flops(b, h, s, d, c),
               gpu=torch.cuda.get_device_name(), ms={}, tflops={}, rel_err={}, errors={})
    try:
        import fa4gen
        row["kernel_e4m3"] = fa4gen.KernelCache(a.cache).select(head_dim=d, max_seqlen_q=s, dtype="e4m3",
                                                                causal=bool(c))["kernel"]
    except Exception as e:
        row["kernel_e4m3"] = "%s: %s" % (type(e).__name__, str(e)[:200])
    x = Inputs(torch, b, s, h, d, bool(c), seed=1000 * d + s + c, err_seqs=a.err_seqs)
    for name in backends:
        try:
            timed, run, extra = MAKERS[name](torch, x, a)
            row.update(extra)
            timed()
            torch.cuda.synchronize()
            ms = triton.testing.do_bench(timed, warmup=a.warmup, rep=a.rep, return_mode="median")
            row["ms"][name], row["tflops"][name] = ms, row["flops"] / ms / 1e9
            row["rel_err"][name] = {kind: x.err(kind, run(kind)) for kind in KINDS}
        except Exception as e:
            row["errors"][name] = "%s: %s" % (type(e).__name__, str(e).strip()[:400])
            if not cuda_alive(torch):
                row["dead"] = name
                row["left"] = backends[backends.index(name) + 1:]
                break
        finally:
            timed = run = None
            torch.cuda.empty_cache()
    return row


# ---------------------------------------------------------------- the grid (driver)

def cell_in_child(d, s, c, backends, a):
    """run_cell in a fresh process; a crash or time-out is the row's error."""
    cmd = [sys.executable, os.path.abspath(__file__), "--cell", "%d,%d,%d" % (d, s, c), "--backends", ",".join(backends),
           "--warmup", str(a.warmup), "--rep", str(a.rep), "--total-tokens", str(a.total_tokens),
           "--hidden", str(a.hidden), "--err-seqs", str(a.err_seqs), "--cudnn-o", a.cudnn_o,
           "--cudnn-scale-s", str(a.cudnn_scale_s)] + (["--cache", a.cache] if a.cache else [])
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.cell_timeout)
        out, err, why = p.stdout, p.stderr, "exit status %d" % p.returncode
    except subprocess.TimeoutExpired as e:
        out, err, why = e.stdout or "", e.stderr or "", "timed out after %ds" % a.cell_timeout
        out, err = (t.decode() if isinstance(t, bytes) else t for t in (out, err))
    for line in out.splitlines():
        if line.startswith("ROW "):
            return json.loads(line[4:])
    b, h = max(1, a.total_tokens // s), a.hidden // d
    tail = " | ".join(err.strip().splitlines()[-3:])[-400:]
    return dict(hdim=d, seqlen=s, batch=b, heads=h, causal=c, flops=flops(b, h, s, d, c), ms={}, tflops={},
                rel_err={}, errors={n: "cell process: %s: %s" % (why, tail) for n in backends})


def grid_cell(d, s, c, a):
    backends = a.backends.split(",")
    if a.in_process:
        row = run_cell(d, s, c, backends, a)
    else:
        row = cell_in_child(d, s, c, backends, a)
        while row.get("dead") and row.get("left"):  # the backends after a sticky CUDA error, afresh
            more = cell_in_child(d, s, c, row.pop("left"), a)
            for key in ("ms", "tflops", "rel_err", "errors"):
                row[key].update(more[key])
            row.update({k: v for k, v in more.items() if k in ("cudnn_o", "cudnn_notes", "dead", "left")})
            row.setdefault("dead_in_earlier_process", []).append(row.pop("dead"))
            if not more.get("dead"):
                row.pop("dead", None)
    row.pop("left", None)
    return row


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else math.nan


def ratio(row, a_, b_):
    t = row["tflops"]
    return t[a_] / t[b_] if t.get(a_) and t.get(b_) else None


def table(rows):
    def f(x, w=7, p=1):
        return ("%*.*f" % (w, p, x)) if isinstance(x, (int, float)) and not math.isnan(x) else "%*s" % (w, "-")

    def e(row, name, kind):
        v = row["rel_err"].get(name, {}).get(kind)
        return ("%8.1e" % v) if isinstance(v, float) and not math.isnan(v) else "%8s" % "-"

    print("\n%4s %6s %3s %3s %2s | %7s %7s %4s %7s | %7s %7s | %-17s %-17s %-17s"
          % ("hdim", "seqlen", "b", "h", "c", "e4m3", "cudnn8", "O", "bf16", "x cudnn", "x bf16",
             "err e4m3 n / out", "err cudnn n / out", "err bf16 n / out"))
    for r in rows:
        t = r["tflops"]
        print("%4d %6d %3d %3d %2d | %s %s %4s %s | %s %s | %s %s %s %s %s %s"
              % (r["hdim"], r["seqlen"], r["batch"], r["heads"], r["causal"], f(t.get(BACKENDS[0])),
                 f(t.get(BACKENDS[1])), r.get("cudnn_o", "-"), f(t.get(BACKENDS[2])),
                 f(ratio(r, BACKENDS[0], BACKENDS[1]), 7, 3), f(ratio(r, BACKENDS[0], BACKENDS[2]), 7, 3),
                 e(r, BACKENDS[0], "normal"), e(r, BACKENDS[0], "outliers"), e(r, BACKENDS[1], "normal"),
                 e(r, BACKENDS[1], "outliers"), e(r, BACKENDS[2], "normal"), e(r, BACKENDS[2], "outliers")))
        for name, msg in r["errors"].items():
            print("      %s: %s" % (name, msg[:160]))
    print()
    for label, (x, y) in (("fa4-gen-e4m3 / cudnn-e4m3", BACKENDS[:2]), ("fa4-gen-e4m3 / fa4-gen-bf16", (BACKENDS[0], BACKENDS[2]))):
        for causal in (None, 0, 1):
            rs = [ratio(r, x, y) for r in rows if causal is None or r["causal"] == causal]
            rs = [v for v in rs if v]
            which = "all" if causal is None else ("causal" if causal else "unmasked")
            if rs:
                print("%-28s %-8s cells %2d  geomean %.3f  min %.3f  max %.3f"
                      % (label, which, len(rs), geomean(rs), min(rs), max(rs)))
            else:
                print("%-28s %-8s no cell with both" % (label, which))


def compare_rows(rows):
    """shared/bench/compare.py's form: a row per cell and backend that has a time."""
    out = []
    for r in rows:
        for name, tf in r["tflops"].items():
            out.append(dict(backend=name, hdim=r["hdim"], seqlen=r["seqlen"], batch=r["batch"], heads=r["heads"],
                            causal=r["causal"], ms=r["ms"][name], tflops=tf,
                            dtype="bf16" if name.endswith("bf16") else "e4m3"))
    return out


def versions():
    import torch
    v = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
    try:
        import cudnn
        v.update(cudnn_backend=cudnn.backend_version_string(), cudnn_frontend=getattr(cudnn, "__version__", "?"))
    except Exception as e:
        v["cudnn"] = "unavailable: %s: %s" % (type(e).__name__, e)
    try:
        import fa4gen
        v["fa4gen"] = fa4gen.version()
    except Exception as e:
        v["fa4gen"] = "unavailable: %s: %s" % (type(e).__name__, e)
    return v


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="d128 at seqlens 2048 and 8192 only (a smoke run)")
    ap.add_argument("--hdims", default="64,128,256")
    ap.add_argument("--seqlens", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--total-tokens", type=int, default=16384, help="batch = this // seqlen")
    ap.add_argument("--hidden", type=int, default=2048, help="heads = this // head dim")
    ap.add_argument("--backends", default=",".join(BACKENDS))
    ap.add_argument("--cache", default=None, help="fa4-gen's kernel cache [FA4GEN_CACHE or generated]")
    ap.add_argument("--out", default=None, help="folder of the JSON files [$OUT or .]")
    ap.add_argument("--warmup", type=int, default=50, help="do_bench's warm-up, ms")
    ap.add_argument("--rep", type=int, default=200, help="do_bench's rep, ms")
    ap.add_argument("--err-seqs", type=int, default=2, help="sequences of each batch the error is measured on")
    ap.add_argument("--cudnn-o", default="auto", choices=("auto", "bf16", "e4m3"),
                    help="cuDNN's O: auto tries bf16, then e4m3")
    ap.add_argument("--cudnn-scale-s", type=float, default=256.0,
                    help="cuDNN's scale of P before its e4m3 cast (descale_s its inverse)")
    ap.add_argument("--cell-timeout", type=int, default=300, help="seconds one cell's process may take")
    ap.add_argument("--in-process", action="store_true", help="every cell in this process")
    ap.add_argument("--cell", help=argparse.SUPPRESS)  # hdim,seqlen,causal: one cell, its row on stdout
    a = ap.parse_args()
    try:
        import fa4gen  # noqa: F401
    except ImportError:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
    unknown = set(a.backends.split(",")) - set(BACKENDS)
    if unknown:
        ap.error("unknown backends %s: the backends are %s" % (", ".join(sorted(unknown)), ", ".join(BACKENDS)))
    if a.cell:
        d, s, c = map(int, a.cell.split(","))
        row = run_cell(d, s, c, a.backends.split(","), a)
        print("ROW " + json.dumps(row), flush=True)
        return

    out_dir = Path(a.out or os.environ.get("OUT") or ".")
    out_dir.mkdir(parents=True, exist_ok=True)
    env = versions()
    print("# %s" % json.dumps(env), flush=True)
    rows, t0 = [], time.time()
    for d, s, c in cells(a):
        row = grid_cell(d, s, c, a)
        row["versions"] = env
        rows.append(row)
        brief = {k: (round(v, 1) if isinstance(v, float) else v) for k, v in row["tflops"].items()}
        print("d%-3d s%-5d causal=%d  TFLOP/s %s  errors %s  (%.0fs)"
              % (d, s, c, json.dumps(brief), json.dumps(row["errors"])[:300], time.time() - t0), flush=True)
        (out_dir / "fp8_grid.json").write_text(json.dumps(rows, indent=1) + "\n")
        (out_dir / "fp8_rows.json").write_text(json.dumps(compare_rows(rows), indent=1) + "\n")
    table(rows)


if __name__ == "__main__":
    main()
