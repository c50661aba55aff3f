"""Checks fa4gen's FlashAttention calls on a GPU against PyTorch in f32.

    python -m fa4gen.check [--cache generated] [--json FILE] [--head-dims 64,128] [--cases calls,errors]

Every feature alone and combined, for head dims 64 to 256 and bf16/fp16, through the
public calls (``flash_attn_varlen_func``, ``flash_attn_func``, ``flash_attn_with_kvcache``
as SGLang calls it for extend, FlashAttention-2's packed qkv/kv calls): dense, varlen with empty
and ragged sequences, seqlen_q != seqlen_k (a cached prefix), GQA/MQA, causal, sliding
windows, sinks, softcap, paged K/V (page sizes 1 to 256, lengths from seqused_k or
cu_seqlens_k), strided Q/K/V, LSE, the gpt-oss-20b and Llama-3-8B layers, a call
captured in a CUDA graph and replayed on new inputs, and a call from another thread. Each output
is poisoned (NaN) before the call, so a row the kernel skips fails.

FP8 (group ``fp8``): e4m3 q/k/v with FlashAttention-3's descales (random per sequence and
KV head, None, per-tensor expanded, strided), dense, varlen and paged, causal, unmasked
and local windows, sinks, GQA, inputs with outlier channels, and bf16/fp16 q over e4m3
K/V (the call quantises q); O (bf16) against f32
attention on the dequantised inputs (e4m3 value x descale), relative L2 error at most 3e-2, LSE within 3e-2; and the FP8
argument errors. Without e4m3 kernels in the cache its numeric cases are skipped.

The reference is ``torch.nn.functional.scaled_dot_product_attention`` in f32 on the same
inputs (GQA expanded, the mask as an additive bias, each sink as one extra key of logit
``sink`` and value 0); softcap cannot be written as SDPA's bias, so softcap cases use the
same computation spelled out in f32 (scores, tanh cap, mask, softmax, PV). A row with no
visible key is 0 with LSE -inf (FlashAttention's convention); SDPA's NaN there is replaced.
Then the error paths: bad arguments, unsupported problems, a changed or foreign cubin, a
corrupt manifest, each a named error, and the device still works afterwards.

Exit status 0 when every case passes.
"""

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import fa4gen

O_TOL = {torch.bfloat16: 4e-3, torch.float16: 1e-3}  # as `fa4-gen verify`
E4M3 = getattr(torch, "float8_e4m3fn", None)
if E4M3 is not None:
    O_TOL[E4M3] = 3e-2  # e4m3 inputs and P
# LSE bounds as `fa4-gen verify`'s (lse_bound); e4m3 cases add each row's FP8
# accumulation slack (fp8_lse_slack, the reference kernel's bound).
LSE_TOL = {torch.bfloat16: 1e-3, torch.float16: 1e-3}
if E4M3 is not None:
    LSE_TOL[E4M3] = 3e-2
DEV = "cuda"


def visible_mask(sq, sk, causal, window):
    """[sq, sk] bool: keys each query sees, bottom-right aligned (FlashAttention's)."""
    left, right = window
    if causal:
        right = 0
    i = torch.arange(sq, device=DEV)[:, None]
    j = torch.arange(sk, device=DEV)[None, :]
    diag = i + sk - sq
    vis = torch.ones(sq, sk, dtype=torch.bool, device=DEV)
    if left >= 0:
        vis &= j >= diag - left
    if right >= 0:
        vis &= j <= diag + right
    return vis


def reference_one(q, k, v, scale, causal, window, softcap, sinks):
    """One sequence: q [sq, hq, d], k/v [sk, hkv, d]. Returns O [sq, hq, dv] f32 and
    LSE [hq, sq] f32."""
    sq, hq, _ = q.shape
    sk, hkv, dv = v.shape
    if sq == 0 or sk == 0:
        lse = torch.full((hq, sq), -math.inf, device=DEV)
        if sinks is not None:
            lse = sinks.float()[:, None].expand(hq, sq).clone()
        return torch.zeros(sq, hq, dv, device=DEV), lse
    qf = q.float().transpose(0, 1)  # [hq, sq, d]
    group = hq // hkv
    kf = k.float().transpose(0, 1).repeat_interleave(group, 0)  # [hq, sk, d]
    vf = v.float().transpose(0, 1).repeat_interleave(group, 0)
    vis = visible_mask(sq, sk, causal, window)
    scores = (qf @ kf.transpose(1, 2)) * scale
    if softcap:
        scores = softcap * torch.tanh(scores / softcap)
    masked = scores.masked_fill(~vis, -math.inf)
    if sinks is not None:
        masked = torch.cat([masked, sinks.float()[:, None, None].expand(hq, sq, 1)], -1)
    lse = torch.logsumexp(masked, -1)  # -inf where nothing is visible
    if softcap:
        p = torch.softmax(masked, -1).nan_to_num(0.0)
        o = p[..., :sk] @ vf
    else:
        bias = torch.zeros(hq, sq, sk, device=DEV).masked_fill(~vis, -math.inf)
        kx, vx = kf, vf
        if sinks is not None:
            bias = torch.cat([bias, sinks.float()[:, None, None].expand(hq, sq, 1)], -1)
            kx = torch.cat([kf, torch.zeros(hq, 1, kf.shape[-1], device=DEV)], 1)
            vx = torch.cat([vf, torch.zeros(hq, 1, dv, device=DEV)], 1)
        with sdpa_kernel([SDPBackend.MATH]):
            o = F.scaled_dot_product_attention(qf[None], kx[None], vx[None], attn_mask=bias[None], scale=scale)[0]
        o = o.nan_to_num(0.0)
    o = torch.where(torch.isinf(lse)[..., None], torch.zeros_like(o), o)
    return o.transpose(0, 1), lse


def rel_l2(out, ref):
    out, ref = out.float(), ref.float()
    if torch.isnan(out).any():
        return math.nan
    n = ref.norm().item()
    return (out - ref).norm().item() / max(n, 1e-30)


def lse_err(lse, ref, slack=None):
    """The largest |lse - ref|, and the largest part of it beyond the row's `slack` (a
    tensor of ref's shape, if given) (NaN where lse is NaN or not finite where ref is)."""
    fin = torch.isfinite(ref)
    if not torch.equal(torch.isfinite(lse), fin) or torch.isnan(lse).any():
        return math.nan, math.nan
    if not fin.any():
        return 0.0, 0.0
    diff = (lse[fin] - ref[fin]).abs()
    excess = diff if slack is None else diff - slack[fin]
    return diff.max().item(), excess.clamp_min(0.0).max().item()


def fp8_lse_slack(q, k, scale):
    """[hq, sq]: how far Hopper's FP8 accumulation may move each row's scores, hence its
    LSE. A k32 wgmma step keeps its products' sum to about 13 bits below the step's largest
    product and drops the rest, so each of its 32 products may lose up to 2^-13 of that
    largest one: up to 2^-8 of it per step. Bounded over the row's keys by the per-step
    maxima of |q| and |k| (dequantised q [sq, hq, d], k [sk, hkv, d]). Rows with outlier
    channels lose far more than f32 would (about 0.5 on scores of hundreds), rows of
    N(0,1) inputs about 1e-2."""
    sq, hq, d = q.shape
    sk, hkv, _ = k.shape
    if sq == 0 or sk == 0:
        return torch.zeros(hq, sq, device=DEV)
    steps = (d + 31) // 32
    qmax = F.pad(q.float().abs(), (0, steps * 32 - d)).view(sq, hq, steps, 32).amax(-1).transpose(0, 1)
    kmax = F.pad(k.float().abs(), (0, steps * 32 - d)).view(sk, hkv, steps, 32).amax(-1).transpose(0, 1)
    kmax = kmax.repeat_interleave(hq // hkv, 0)  # [hq, sk, steps]
    return 2.0 ** -8 * scale * (qmax @ kmax.transpose(1, 2)).amax(-1)  # [hq, sq]


def randn(*shape, dtype):
    return torch.randn(*shape, device=DEV, dtype=torch.float32).to(dtype)


def paged_cache(seqs, page_size, hkv, d, dv, dtype, gen_seed):
    """Shuffled pages for each sequence's keys; unused table entries point at a spare
    page. Returns k_cache, v_cache, block_table, and per sequence its dense K and V."""
    g = torch.Generator(device="cpu").manual_seed(gen_seed)
    pages = [(sk + page_size - 1) // page_size for _, sk in seqs]
    total = sum(pages) + 2
    order = torch.randperm(total, generator=g).tolist()
    spare = order[-1]
    width = max(pages + [0]) + 1
    table = torch.full((len(seqs), width), spare, dtype=torch.int32)
    it = iter(order)
    for b, n in enumerate(pages):
        for j in range(n):
            table[b, j] = next(it)
    kc = randn(total, page_size, hkv, d, dtype=dtype)
    vc = randn(total, page_size, hkv, dv, dtype=dtype)
    dense = []
    for b, (_, sk) in enumerate(seqs):
        ids = table[b, :pages[b]].long().to(DEV)
        dense.append((kc[ids].reshape(-1, hkv, d)[:sk], vc[ids].reshape(-1, hkv, dv)[:sk]))
    return kc, vc, table.to(DEV), dense


def cu(lengths):
    return torch.tensor([0] + list(torch.tensor(lengths).cumsum(0).tolist()), dtype=torch.int32, device=DEV)


def random_sinks(hq):
    """A sink logit per query head, in [-2, 6]: from negligible to dominating a row."""
    return torch.rand(hq, device=DEV) * 8 - 2


def run_varlen(name, d, dtype, seqs, hq, hkv, causal=False, window=(-1, -1), softcap=0.0, sinks=False,
               page_size=None, lengths_from="seqused_k", strided=False, dv=None, cache=None, via_kvcache=False):
    """A packed batch of (queries, keys) per sequence through flash_attn_varlen_func, or with
    `via_kvcache` (paged) through flash_attn_with_kvcache as SGLang calls it for extend."""
    dv = dv or d
    total_q = sum(s for s, _ in seqs)
    total_k = sum(s for _, s in seqs)
    if strided:
        # Q, K, V as views into one packed [tokens, 3, heads, d] buffer: row stride 3*h*d.
        qkv = randn(max(total_q, total_k), 3, hq, d, dtype=dtype)
        q = qkv[:total_q, 0]
        k = qkv[:total_k, 1, :hkv]
        v = qkv[:total_k, 2, :hkv]
    else:
        q = randn(total_q, hq, d, dtype=dtype)
        k = randn(total_k, hkv, d, dtype=dtype)
        v = randn(total_k, hkv, dv, dtype=dtype)
    sink_t = random_sinks(hq) if sinks else None
    cu_q, cu_k = cu([s for s, _ in seqs]), cu([s for _, s in seqs])
    scale = 1.0 / math.sqrt(d)
    kwargs = dict(causal=causal, window_size=window, softcap=softcap, sinks=sink_t, return_lse=True, cache=cache)
    out = torch.full((total_q, hq, dv), float("nan"), dtype=dtype, device=DEV)
    if page_size:
        kc, vc, table, dense = paged_cache(seqs, page_size, hkv, d, dv, dtype, hash(name) & 0xffff)
        used = torch.tensor([s for _, s in seqs], dtype=torch.int32, device=DEV)
        extra = dict(seqused_k=used) if lengths_from == "seqused_k" else {}
        if via_kvcache:
            o, lse = fa4gen.flash_attn_with_kvcache(
                q, kc, vc, page_table=table, cache_seqlens=used, cu_seqlens_q=cu_q, cu_seqlens_k_new=cu_k,
                max_seqlen_q=max(s for s, _ in seqs), causal=causal, window_size=window, softcap=softcap,
                sinks=sink_t, return_softmax_lse=True, out=out, cache=cache)
        else:
            o, lse = fa4gen.flash_attn_varlen_func(
                q, kc, vc, cu_q, None if extra else cu_k, max(s for s, _ in seqs), max(s for _, s in seqs),
                block_table=table, out=out, **extra, **kwargs)
    else:
        o, lse = fa4gen.flash_attn_varlen_func(
            q, k, v, cu_q, cu_k, max(s for s, _ in seqs), max(s for _, s in seqs), out=out, **kwargs)
        starts_k = cu_k.tolist()
        dense = [(k[starts_k[b]:starts_k[b + 1]], v[starts_k[b]:starts_k[b + 1]]) for b in range(len(seqs))]
    torch.cuda.synchronize()
    refs, ref_lses = [], []
    starts_q = cu_q.tolist()
    for b in range(len(seqs)):
        qb = q[starts_q[b]:starts_q[b + 1]]
        ro, rl = reference_one(qb, dense[b][0], dense[b][1], scale, causal, window, softcap, sink_t)
        refs.append(ro)
        ref_lses.append(rl)
    ref = torch.cat(refs, 0)
    ref_lse = torch.cat(ref_lses, 1)
    return verdict(name, d, dtype, o, ref, lse, ref_lse)


def run_dense(name, d, dtype, batch, sq, sk, hq, hkv, causal=False, window=(-1, -1), softcap=0.0, sinks=False,
              cache=None):
    q = randn(batch, sq, hq, d, dtype=dtype)
    k = randn(batch, sk, hkv, d, dtype=dtype)
    v = randn(batch, sk, hkv, d, dtype=dtype)
    sink_t = random_sinks(hq) if sinks else None
    out = torch.full((batch, sq, hq, d), float("nan"), dtype=dtype, device=DEV)
    o, lse = fa4gen.flash_attn_func(q, k, v, causal=causal, window_size=window, softcap=softcap, sinks=sink_t,
                                    return_lse=True, out=out, cache=cache)
    torch.cuda.synchronize()
    scale = 1.0 / math.sqrt(d)
    refs = [reference_one(q[b], k[b], v[b], scale, causal, window, softcap, sink_t) for b in range(batch)]
    ref = torch.stack([r[0] for r in refs])
    ref_lse = torch.stack([r[1] for r in refs])
    return verdict(name, d, dtype, o, ref, lse, ref_lse)


def run_kvcache_dense(name, d, dtype, batch, sq, cache_rows, lengths, hq, hkv, causal=False, window=(-1, -1),
                      batch_idx=False, cache=None):
    """flash_attn_with_kvcache over a dense cache [batch_cache, cache_rows, hkv, d]: `lengths`
    an int (every sequence) or one per sequence; with `batch_idx` the rows come from a
    shuffled cache_batch_idx into a larger cache."""
    q = randn(batch, sq, hq, d, dtype=dtype)
    rows = batch + 3 if batch_idx else batch
    kc, vc = randn(rows, cache_rows, hkv, d, dtype=dtype), randn(rows, cache_rows, hkv, d, dtype=dtype)
    idx = torch.randperm(rows)[:batch].to(torch.int32).to(DEV) if batch_idx else None
    if isinstance(lengths, int):
        cache_seqlens, lens = lengths, [min(lengths, cache_rows)] * batch
    else:
        cache_seqlens, lens = torch.tensor(lengths, dtype=torch.int32, device=DEV), lengths
    out = torch.full((batch, sq, hq, d), float("nan"), dtype=dtype, device=DEV)
    o, lse = fa4gen.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=cache_seqlens, cache_batch_idx=idx,
                                            causal=causal, window_size=window, return_softmax_lse=True, out=out,
                                            cache=cache)
    torch.cuda.synchronize()
    picks = idx.tolist() if batch_idx else list(range(batch))
    scale = 1.0 / math.sqrt(d)
    refs = [reference_one(q[b], kc[picks[b], :lens[b]], vc[picks[b], :lens[b]], scale, causal, window, 0.0, None)
            for b in range(batch)]
    return verdict(name, d, dtype, o, torch.stack([r[0] for r in refs]), lse, torch.stack([r[1] for r in refs]))


def verdict(name, d, dtype, o, ref, lse, ref_lse, lse_slack=None):
    e = rel_l2(o, ref)
    le, excess = lse_err(lse, ref_lse, lse_slack)
    ok = (not math.isnan(e)) and e <= O_TOL[dtype] and (not math.isnan(excess)) and excess <= LSE_TOL[dtype]
    row = {"case": name, "head_dim": d, "dtype": str(dtype).replace("torch.", ""), "o_rel_l2": e,
           "lse_max_abs": le, "pass": ok}
    print("%-4s d%-3d %-9s %-44s O %.2e  LSE %.2e" % ("ok" if ok else "FAIL", d, row["dtype"], name, e, le),
          flush=True)
    return row


RAGGED = [(0, 0), (1, 1), (77, 77), (513, 513), (300, 700), (0, 40), (129, 129)]
PREFIX = [(200, 1000), (1, 513), (77, 77), (0, 16), (64, 2048)]


def feature_cases(d, dtype, cache):
    yield run_dense("dense b2 s300", d, dtype, 2, 300, 300, 8, 8, cache=cache)
    yield run_dense("dense causal s200/k333 gqa4 sinks", d, dtype, 2, 200, 333, 8, 2, causal=True, sinks=True,
                    cache=cache)
    yield run_varlen("varlen ragged causal gqa4", d, dtype, RAGGED, 8, 2, causal=True, cache=cache)
    yield run_varlen("varlen ragged", d, dtype, RAGGED, 8, 8, cache=cache)
    yield run_varlen("varlen window(64,0)", d, dtype, RAGGED, 8, 8, causal=True, window=(64, 0), cache=cache)
    yield run_varlen("varlen window(48,16)", d, dtype, RAGGED, 8, 4, window=(48, 16), cache=cache)
    # A window of 500 keys: served by the width-512 bucket's tuned choice, not the default.
    yield run_varlen("varlen window(500,0) gqa4", d, dtype, [(2048, 2048), (700, 700), (77, 77), (0, 0)], 8, 2,
                     causal=True, window=(500, 0), cache=cache)
    yield run_varlen("varlen sinks causal gqa8", d, dtype, RAGGED, 16, 2, causal=True, sinks=True, cache=cache)
    yield run_varlen("varlen softcap causal", d, dtype, RAGGED, 8, 8, causal=True, softcap=2.0, cache=cache)
    yield run_varlen("varlen softcap+sinks window(32,0)", d, dtype, RAGGED, 8, 2, causal=True, window=(32, 0),
                     softcap=2.0, sinks=True, cache=cache)
    yield run_varlen("paged16 prefix causal mqa", d, dtype, PREFIX, 8, 1, causal=True, page_size=16, cache=cache)
    yield run_varlen("paged1 prefix sinks (cu_seqlens_k)", d, dtype, PREFIX, 8, 2, causal=True, sinks=True,
                     page_size=1, lengths_from="cu_seqlens_k", cache=cache)
    yield run_varlen("paged256 softcap window(100,0)", d, dtype, PREFIX, 8, 8, causal=True, window=(100, 0),
                     softcap=2.0, page_size=256, cache=cache)
    yield run_varlen("strided qkv causal", d, dtype, RAGGED, 8, 8, causal=True, strided=True, cache=cache)
    yield run_varlen("gqa16 causal", d, dtype, PREFIX, 16, 1, causal=True, cache=cache)


def layer_cases(cache):
    bf = torch.bfloat16
    yield run_varlen("gpt-oss-20b sliding layer (64/8, sinks, window 128)", 64, bf,
                     [(2048, 2048), (1000, 1000), (77, 77)], 64, 8, causal=True, window=(128, 0), sinks=True,
                     cache=cache)
    yield run_varlen("gpt-oss-20b full layer (64/8, sinks)", 64, bf, [(2048, 2048), (1000, 1000)], 64, 8,
                     causal=True, sinks=True, cache=cache)
    yield run_varlen("sliding window 1024 with sinks (64/8)", 64, bf, [(4096, 4096), (1500, 1500)], 64, 8,
                     causal=True, window=(1024, 0), sinks=True, cache=cache)
    yield run_varlen("llama-3-8b layer (32/8, causal)", 128, bf, [(2048, 2048), (513, 513), (0, 0)], 32, 8,
                     causal=True, cache=cache)
    yield run_varlen("llama-3-8b prefix over pages of 16", 128, bf, [(500, 1500), (1, 2047)], 32, 8, causal=True,
                     page_size=16, cache=cache)
    # Unmasked, dense, over 4096 keys, 288 tiles of 128 rows: a persistent pick shares
    # its last tiles out by keys through the stream's split workspace.
    yield run_dense("dense split tail q2200/k4100", 128, bf, 1, 2200, 4100, 16, 16, cache=cache)
    # Unmasked over 8k keys and more, where the H200 serves clusters of two blocks that
    # share their K/V loads: an odd count of m-blocks (the last pair's second block has
    # no rows), and a varlen batch whose short sequences leave blocks of a pair empty.
    yield run_dense("dense cluster pairs q9000/k9100", 128, bf, 1, 9000, 9100, 4, 2, cache=cache)
    yield run_varlen("varlen cluster pairs (unmasked)", 128, bf, [(8300, 8300), (100, 8300), (0, 0), (257, 300)],
                     4, 2, cache=cache)


def served(cache, head_dim, **select):
    """Whether the cache serves this head dim with these features (a cache built for some
    head dims only, as `--head-dims` checks); says so where it does not."""
    try:
        fa4gen.KernelCache(cache).select(head_dim=head_dim, max_seqlen_q=2048, **select)
    except fa4gen.Fa4genError as e:
        print("skip d%d: %s" % (head_dim, e), flush=True)
        return False
    return True


def call_cases(cache):
    """The other entry points. flash_attn_with_kvcache: SGLang's extend call (packed
    queries, a paged cache that already holds the new tokens, cache_seqlens), and dense
    caches; FlashAttention-2's packed calls, read in place from a fused projection."""
    bf, fp = torch.bfloat16, torch.float16
    seqs = [(300, 300), (0, 0), (77, 77), (513, 513)]
    qkv = randn(sum(s for s, _ in seqs), 3, 8, 128, dtype=bf)
    out = torch.full((qkv.shape[0], 8, 128), float("nan"), dtype=bf, device=DEV)
    o, lse = fa4gen.flash_attn_varlen_qkvpacked_func(qkv, cu([s for s, _ in seqs]), 513, causal=True,
                                                     return_lse=True, out=out, cache=cache)
    torch.cuda.synchronize()
    ref, ref_lse = reference_varlen(qkv[:, 0], qkv[:, 1], qkv[:, 2], seqs, True, (-1, -1), 0.0, None)
    yield verdict("varlen qkvpacked causal", 128, bf, o, ref, lse, ref_lse)
    q, kv = randn(2, 100, 8, 64, dtype=fp), randn(2, 333, 2, 2, 64, dtype=fp)
    o, lse = fa4gen.flash_attn_kvpacked_func(q, kv, causal=True, return_lse=True, cache=cache)
    torch.cuda.synchronize()
    refs = [reference_one(q[b], kv[b, :, 0], kv[b, :, 1], 1 / 8, True, (-1, -1), 0.0, None) for b in range(2)]
    yield verdict("kvpacked causal gqa4 q100/k333", 64, fp, o, torch.stack([r[0] for r in refs]), lse,
                  torch.stack([r[1] for r in refs]))
    yield run_varlen("kvcache extend pages of 1 (32/8, causal)", 128, bf, PREFIX, 32, 8, causal=True, page_size=1,
                     via_kvcache=True, cache=cache)
    yield run_varlen("kvcache extend pages of 16 (64/8, sinks, window 128)", 64, bf, PREFIX, 64, 8, causal=True,
                     window=(128, 0), sinks=True, page_size=16, via_kvcache=True, cache=cache)
    if served(cache, 256, dtype="fp16", causal=True, softcap=2.0, paged=True):
        yield run_varlen("kvcache extend pages of 64 softcap", 256, fp, PREFIX, 8, 2, causal=True, softcap=2.0,
                         page_size=64, via_kvcache=True, cache=cache)
    yield run_kvcache_dense("kvcache dense, one length (700 of 1000)", 128, bf, 2, 100, 1000, 700, 8, 2,
                            cache=cache)
    yield run_kvcache_dense("kvcache dense causal, lengths per sequence", 64, fp, 3, 77, 600, [600, 77, 0], 8, 8,
                            causal=True, cache=cache)
    yield run_kvcache_dense("kvcache cache_batch_idx causal", 128, bf, 3, 50, 900, [900, 333, 51], 16, 2,
                            causal=True, batch_idx=True, cache=cache)
    # DeepSeek's prefill (Q/K 192, V 128), where the cache serves it: packed, causal, a
    # cached prefix.
    if served(cache, 192, head_dim_v=128, causal=True):
        yield run_varlen("deepseek 192/128 prefix causal", 192, bf, PREFIX, 16, 16, causal=True, dv=128,
                         cache=cache)


def serving_cases(cache):
    """The ways an engine calls: from a CUDA graph (captured on its stream, replayed on
    new inputs) and from another thread (whose context is made current first)."""
    import threading

    bf = torch.bfloat16
    seqs = [(300, 300), (77, 77), (0, 0), (513, 513)]
    total = sum(s for s, _ in seqs)
    cu_ = cu([s for s, _ in seqs])
    q, k, v = (randn(total, 8, 128, dtype=bf) for _ in range(3))
    call = lambda: fa4gen.flash_attn_varlen_func(q, k, v, cu_, cu_, 513, 513, causal=True, return_lse=True,
                                                 cache=cache)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call()  # warm-up: loads the kernel before capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        o, lse = call()
    for t in (q, k, v):
        t.copy_(randn(*t.shape, dtype=bf))
    graph.replay()
    torch.cuda.synchronize()
    ref, ref_lse = reference_varlen(q, k, v, seqs, True, (-1, -1), 0.0, None)
    rows = [verdict("cuda graph capture + replay on new inputs", 128, bf, o, ref, lse, ref_lse)]

    result = {}

    def worker():
        try:
            result["out"] = call()
            torch.cuda.synchronize()
        except Exception as e:
            result["error"] = e

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    if "error" in result:
        print("FAIL another thread: %s" % result["error"], flush=True)
        rows.append({"case": "another thread", "message": str(result["error"]), "pass": False})
    else:
        rows.append(verdict("from another thread", 128, bf, result["out"][0], ref, result["out"][1], ref_lse))
    return rows


def reference_varlen(q, k, v, seqs, causal, window, softcap, sinks):
    scale = 1.0 / math.sqrt(q.shape[-1])
    sq = cu([s for s, _ in seqs]).tolist()
    sk = cu([s for _, s in seqs]).tolist()
    refs = [reference_one(q[sq[b]:sq[b + 1]], k[sk[b]:sk[b + 1]], v[sk[b]:sk[b + 1]], scale, causal, window,
                          softcap, sinks) for b in range(len(seqs))]
    return torch.cat([r[0] for r in refs], 0), torch.cat([r[1] for r in refs], 1)


def expect_error(name, fn, kind, words):
    try:
        fn()
    except kind as e:
        ok = all(w in str(e) for w in words)
        print("%-4s error: %-40s %s" % ("ok" if ok else "FAIL", name, e), flush=True)
        return {"case": "error: " + name, "message": str(e), "pass": ok}
    except Exception as e:  # the wrong kind of error
        print("FAIL error: %-40s %s: %s" % (name, type(e).__name__, e), flush=True)
        return {"case": "error: " + name, "message": "%s: %s" % (type(e).__name__, e), "pass": False}
    print("FAIL error: %-40s no error raised" % name, flush=True)
    return {"case": "error: " + name, "message": "no error", "pass": False}


def small_workspace_call(q):
    """A dense unmasked call (it brings the stream's split workspace) with that workspace
    swapped for one too small: the launch must refuse it, whatever the shape."""
    stream = fa4gen._raw_stream(torch, q.device.index)
    key = (q.device.index, stream)
    own = fa4gen._workspaces.get(key)
    fa4gen._workspaces[key] = torch.zeros(4096, dtype=torch.uint8, device=q.device)
    try:
        x = q.view(1, 64, 8, 128)
        return fa4gen.flash_attn_func(x, x, x)
    finally:
        if own is None:
            del fa4gen._workspaces[key]
        else:
            fa4gen._workspaces[key] = own


def error_cases(cache_dir):
    bf = torch.bfloat16
    q = randn(64, 8, 128, dtype=bf)
    k = randn(64, 8, 128, dtype=bf)
    cu_ = cu([64])
    E = fa4gen.Fa4genError
    call = fa4gen.flash_attn_varlen_func
    rows = [
        expect_error("head dim 80", lambda: call(randn(64, 8, 80, dtype=bf), randn(64, 8, 80, dtype=bf),
                                                 randn(64, 8, 80, dtype=bf), cu_, cu_, 64, 64), E,
                     ["head dim 80", "offered head dims are"]),
        expect_error("k head dim differs", lambda: call(q, randn(64, 8, 64, dtype=bf), k, cu_, cu_, 64, 64),
                     ValueError, ["head dim is 128 and k's 64"]),
        expect_error("heads 6 on 4 KV heads", lambda: call(randn(64, 6, 128, dtype=bf), randn(64, 4, 128, dtype=bf),
                                                           randn(64, 4, 128, dtype=bf), cu_, cu_, 64, 64), E,
                     ["heads_q (6) is not a multiple of heads_kv (4)"]),
        expect_error("float32 inputs", lambda: call(q.float(), k.float(), k.float(), cu_, cu_, 64, 64), TypeError,
                     ["torch.bfloat16 or torch.float16"]),
        expect_error("CPU tensor", lambda: call(q, k.cpu(), k, cu_, cu_, 64, 64), ValueError, ["q's CUDA device"]),
        expect_error("misaligned q", lambda: call(torch.empty(64 * 8 * 128 + 1, dtype=bf, device=DEV)[1:]
                                                  .view(64, 8, 128), k, k, cu_, cu_, 64, 64), E,
                     ["q at", "not 16-byte aligned"]),
        expect_error("head stride not a multiple of 8",
                     lambda: call(torch.empty(64, 8, 132, dtype=bf, device=DEV)[:, :, :128], k, k, cu_, cu_, 64, 64),
                     E, ["q_head_stride = 132", "not a multiple of 8"]),
        expect_error("int64 cu_seqlens", lambda: call(q, k, k, cu_.long(), cu_, 64, 64), ValueError,
                     ["cu_seqlens_q must be a contiguous 1-D torch.int32"]),
        expect_error("dropout", lambda: call(q, k, k, cu_, cu_, 64, 64, dropout_p=0.1), NotImplementedError,
                     ["no dropout"]),
        expect_error("negative softcap", lambda: call(q, k, k, cu_, cu_, 64, 64, softcap=-1.0), E,
                     ["softcap -1 is not a finite positive number"]),
        expect_error("split workspace too small", lambda: small_workspace_call(q), E,
                     ["split workspace of 4096 bytes", "fa4gen_split_workspace_bytes("]),
    ]
    # Broken caches: a copy of the manifest beside links to the real cubins.
    import json as _json
    src = cache_dir
    manifest = _json.load(open(os.path.join(src, "manifest.json")))
    # Every kernel the d128 causal spec may be served (the default and each GPU's dense
    # and ragged choices: the device takes its own GPU's, which select() does not name).
    spec = manifest["archs"]["sm90"]["specs"]["sm90_bf16_d128_causal"]
    kids = {spec["default"]}
    for field in ("tuned", "tuned_ragged"):
        kids.update(spec.get(field, {}).values())
    for field in ("tuned_by_gpu", "tuned_ragged_by_gpu"):
        for choices in spec.get(field, {}).values():
            kids.update(choices.values())

    def broken(mutate):
        tmp = tempfile.mkdtemp(prefix="fa4gen-broken-")
        for arch in ("sm90",):
            os.makedirs(os.path.join(tmp, arch), exist_ok=True)
        m = _json.loads(_json.dumps(manifest))
        for kid in kids:
            cubin = open(os.path.join(src, m["kernels"][kid]["cubin"]), "rb").read()
            cubin = mutate(m, kid, cubin)
            if cubin is not None:
                open(os.path.join(tmp, m["kernels"][kid]["cubin"]), "wb").write(cubin)
                # the varlen build as it is (the dense one is what each case breaks)
                if m["kernels"][kid].get("varlen_cubin_hash"):
                    varlen = m["kernels"][kid]["cubin"][:-len(".cubin")] + ".varlen.cubin"
                    shutil.copyfile(os.path.join(src, varlen), os.path.join(tmp, varlen))
        _json.dump(m, open(os.path.join(tmp, "manifest.json"), "w"))
        return tmp

    def fnv(b):
        h = 0xcbf29ce484222325
        for x in b:
            h = ((h ^ x) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
        return "%016x" % h

    def changed(m, kid, cubin):
        return cubin[:-1] + bytes([cubin[-1] ^ 1])

    def foreign(m, kid, cubin):
        # The same code claiming sm_100 in its ELF header, with the manifest's hash
        # updated to match: only the arch check stands between it and the driver.
        b = bytearray(cubin)
        flags = int.from_bytes(b[48:52], "little")
        flags = (flags & ~0xff00) | (100 << 8)
        b[48:52] = flags.to_bytes(4, "little")
        m["kernels"][kid]["cubin_hash"] = fnv(bytes(b))
        return bytes(b)

    def missing(m, kid, cubin):
        return None

    for what, mutate, words in [("cubin changed since the build", changed, ["does not match the manifest"]),
                                ("cubin for another GPU", foreign, ["machine code for sm_100", "this device is sm_90"]),
                                ("cubin missing", missing, ["fa4-gen build-cache"])]:
        d = broken(mutate)
        rows.append(expect_error(what, lambda: (call(q, k, k, cu_, cu_, 64, 64, causal=True, cache=d),
                                                torch.cuda.synchronize()), E, words))
        shutil.rmtree(d)
    d = tempfile.mkdtemp(prefix="fa4gen-corrupt-")
    open(os.path.join(d, "manifest.json"), "w").write("{ not json")
    rows.append(expect_error("corrupt manifest", lambda: call(q, k, k, cu_, cu_, 64, 64, cache=d), E,
                             ["cannot be read", "fa4-gen build-cache"]))
    m = dict(manifest, format="fa4-gen kernel cache 0")
    _json.dump(m, open(os.path.join(d, "manifest.json"), "w"))
    rows.append(expect_error("cache from another version", lambda: call(q, k, k, cu_, cu_, 64, 64, cache=d), E,
                             ["of format `fa4-gen kernel cache 0`"]))
    shutil.rmtree(d)
    # After all that, the device still computes correctly.
    rows.append(run_varlen("after the errors: varlen causal", 128, bf, RAGGED, 8, 2, causal=True))
    return rows


def quantise(x, scale=1.0):
    """x / scale in e4m3: round to nearest even, saturated at 448 (torch's cast gives NaN
    past 464)."""
    return (x / scale).clamp(-448.0, 448.0).to(E4M3)


def descale_rows(ds, b, heads):
    """[heads] f32 factors of sequence b from a [batch, heads_kv] descale (None: 1.0),
    each KV head's factor repeated for the heads of its group."""
    if ds is None:
        return torch.ones(heads, device=DEV)
    return ds[b].float().repeat_interleave(heads // ds.shape[1])


def dequantise(x8, ds, b):
    """One sequence's [rows, heads, d] e4m3 tensor in f32, times its descales."""
    return x8.float() * descale_rows(ds, b, x8.shape[1])[None, :, None]


def q_value(q, qd, b, hkv):
    """Sequence b's [rows, heads, d] q in f32 as the kernel sees it: e4m3 dequantised; a
    16-bit q quantised as the call quantises it (divided by its descale, else by the power
    of two that brings the sequence's largest |q| of each KV head's group into (224, 448]),
    so the bound is the kernel's. Quantising q costs about 1e-2 of O's error on N(0,1)
    inputs besides (fp8_layers.py reports O against the 16-bit q)."""
    if q.dtype == E4M3:
        return dequantise(q, qd, b)
    x = q.float()
    if qd is not None:
        ds = descale_rows(qd, b, x.shape[1])
    elif x.shape[0] == 0:
        return x
    else:
        group = x.shape[1] // hkv
        amax = x.abs().view(x.shape[0], hkv, group, -1).amax(dim=(0, 2, 3))
        least = 2.0 ** (-14 if q.dtype == torch.float16 else -100)
        ds = torch.exp2(torch.ceil(torch.log2(amax / 448.0))).clamp_min(least).repeat_interleave(group)
    return quantise(x / ds[None, :, None]).float() * ds[None, :, None]


def random_descales(batch, hkv):
    return torch.rand(batch, hkv, device=DEV) * 1.5 + 0.5  # in [0.5, 2]


def fp8_inputs(shape_q, shape_k, hkv, batch, descales, outliers=False, dv=None, q_dtype=None):
    """e4m3 q, k, v from N(0,1) and their descales: "random" ([0.5, 2] per sequence and
    KV head), "none", or with ``outliers`` (4 channels x 20) a per-tensor scale that fits
    them, expanded to [batch, hkv] (stride 0). v's last dim is ``dv`` (default k's).
    ``q_dtype`` (bf16/fp16): q in that dtype, for the call to quantise (by q's descale
    where "random", else from its largest values)."""
    shape_v = shape_k[:-1] + (dv or shape_k[-1],)
    xs = [torch.randn(*shape, device=DEV) for shape in (shape_q, shape_k, shape_v)]
    if outliers:
        ds = []
        for x in xs:
            chans = torch.randperm(x.shape[-1])[:4].to(DEV)
            x[..., chans] *= 20.0
            scale = x.abs().max().item() / 448.0
            ds.append(torch.full((1,), scale, device=DEV).expand(batch, hkv))
        return [quantise(x, d[0, 0].item()) for x, d in zip(xs, ds)] + ds
    ds = [random_descales(batch, hkv) for _ in range(3)] if descales == "random" else [None] * 3
    q = quantise(xs[0]) if q_dtype is None else xs[0].to(q_dtype)
    return [q] + [quantise(x) for x in xs[1:]] + ds


def fp8_verdict(name, d, o, lse, seqs, causal, packed=False, window=(-1, -1), sinks=None, softcap=0.0):
    """verdict of an e4m3 call: `seqs` holds each sequence's dequantised (q, k, v), whose
    f32 reference and FP8 LSE slack are joined as the call lays out its rows (`packed`:
    one after another, else stacked by sequence)."""
    scale = 1.0 / math.sqrt(d)
    refs = [reference_one(q, k, v, scale, causal, window, softcap, sinks) for q, k, v in seqs]
    slack = [fp8_lse_slack(q, k, scale) for q, k, _ in seqs]
    rows, heads = ((lambda x: torch.cat(x, 0)), (lambda x: torch.cat(x, 1))) if packed else (torch.stack, torch.stack)
    return verdict(name, d, E4M3, o, rows([r[0] for r in refs]), lse, heads([r[1] for r in refs]), heads(slack))


def run_fp8_dense(name, d, batch, sq, sk, hq, hkv, causal=False, descales="random", outliers=False, window=(-1, -1),
                  sinks=False, softcap=0.0, cache=None, dv=None, q_dtype=None):
    dv = dv or d
    q, k, v, qd, kd, vd = fp8_inputs((batch, sq, hq, d), (batch, sk, hkv, d), hkv, batch, descales, outliers, dv,
                                     q_dtype)
    sink_t = random_sinks(hq) if sinks else None
    out = torch.full((batch, sq, hq, dv), float("nan"), dtype=torch.bfloat16, device=DEV)
    o, lse = fa4gen.flash_attn_func(q, k, v, causal=causal, window_size=window, softcap=softcap, sinks=sink_t,
                                    q_descale=qd, k_descale=kd, v_descale=vd, return_lse=True, out=out, cache=cache)
    torch.cuda.synchronize()
    seqs = [(q_value(q[b], qd, b, hkv), dequantise(k[b], kd, b), dequantise(v[b], vd, b)) for b in range(batch)]
    return fp8_verdict(name, d, o, lse, seqs, causal, window=window, sinks=sink_t, softcap=softcap)


def run_fp8_varlen(name, d, seqs, hq, hkv, causal=False, descales="random", outliers=False, strided=False,
                   window=(-1, -1), sinks=False, softcap=0.0, cache=None, dv=None, q_dtype=None):
    """A packed e4m3 batch through flash_attn_varlen_func; with ``strided`` Q, K and V are
    views into one [tokens, 3, heads, d] buffer; ``descales`` may also be "mixed" (q's
    expanded per-tensor, k's a transposed view, v's contiguous: strides that differ)."""
    batch = len(seqs)
    total_q, total_k = sum(s for s, _ in seqs), sum(s for _, s in seqs)
    dv = dv or d
    q, k, v, qd, kd, vd = fp8_inputs((total_q, hq, d), (total_k, hkv, d), hkv, batch,
                                     "random" if descales == "mixed" else descales, outliers, dv, q_dtype)
    if strided:
        assert dv == d, "one [tokens, 3, heads, d] buffer"
        qkv = torch.empty(max(total_q, total_k), 3, hq, d, dtype=E4M3, device=DEV)
        qkv[:total_q, 0], qkv[:total_k, 1, :hkv], qkv[:total_k, 2, :hkv] = q, k, v
        q, k, v = qkv[:total_q, 0], qkv[:total_k, 1, :hkv], qkv[:total_k, 2, :hkv]
    if descales == "mixed":
        qd = torch.full((1,), 0.75, device=DEV).expand(batch, hkv)
        kd = kd.t().contiguous().t()
    cu_q, cu_k = cu([s for s, _ in seqs]), cu([s for _, s in seqs])
    sink_t = random_sinks(hq) if sinks else None
    out = torch.full((total_q, hq, dv), float("nan"), dtype=torch.bfloat16, device=DEV)
    o, lse = fa4gen.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(s for s, _ in seqs), max(s for _, s in seqs),
                                           causal=causal, window_size=window, softcap=softcap, sinks=sink_t,
                                           q_descale=qd, k_descale=kd, v_descale=vd, return_lse=True, out=out,
                                           cache=cache)
    torch.cuda.synchronize()
    sq_, sk_ = cu_q.tolist(), cu_k.tolist()
    seqs = [(q_value(q[sq_[b]:sq_[b + 1]], qd, b, hkv), dequantise(k[sk_[b]:sk_[b + 1]], kd, b),
             dequantise(v[sk_[b]:sk_[b + 1]], vd, b)) for b in range(batch)]
    return fp8_verdict(name, d, o, lse, seqs, causal, packed=True, window=window, sinks=sink_t, softcap=softcap)


def run_fp8_kvcache_dense(name, d, batch, sq, cache_rows, lengths, hq, hkv, causal=False, cache=None):
    """flash_attn_with_kvcache over dense e4m3 caches, one length per sequence."""
    q, kc, vc, qd, kd, vd = fp8_inputs((batch, sq, hq, d), (batch, cache_rows, hkv, d), hkv, batch, "random")
    used = torch.tensor(lengths, dtype=torch.int32, device=DEV)
    out = torch.full((batch, sq, hq, d), float("nan"), dtype=torch.bfloat16, device=DEV)
    o, lse = fa4gen.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=used, q_descale=qd, k_descale=kd, v_descale=vd,
                                            causal=causal, return_softmax_lse=True, out=out, cache=cache)
    torch.cuda.synchronize()
    seqs = [(dequantise(q[b], qd, b), dequantise(kc[b, :lengths[b]], kd, b), dequantise(vc[b, :lengths[b]], vd, b))
            for b in range(batch)]
    return fp8_verdict(name, d, o, lse, seqs, causal)


def run_fp8_kvcache_paged(name, d, sq, lengths, page_size, hq, hkv, causal=True, cache=None, q_dtype=None):
    """flash_attn_with_kvcache over paged e4m3 caches: each sequence's pages scattered
    through the pool in a random order, its length from cache_seqlens."""
    batch = len(lengths)
    counts = [max(1, -(-n // page_size)) for n in lengths]
    pool = sum(counts) + 3
    q, kc, vc, qd, kd, vd = fp8_inputs((batch, sq, hq, d), (pool, page_size, hkv, d), hkv, batch, "random",
                                       q_dtype=q_dtype)
    order = torch.randperm(pool, device=DEV).to(torch.int32)
    table = torch.zeros(batch, max(counts), dtype=torch.int32, device=DEV)
    at = 0
    for b, n in enumerate(counts):
        table[b, :n] = order[at:at + n]
        at += n
    used = torch.tensor(lengths, dtype=torch.int32, device=DEV)
    out = torch.full((batch, sq, hq, d), float("nan"), dtype=torch.bfloat16, device=DEV)
    o, lse = fa4gen.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=used, page_table=table, q_descale=qd,
                                            k_descale=kd, v_descale=vd, causal=causal, return_softmax_lse=True,
                                            out=out, cache=cache)
    torch.cuda.synchronize()
    rows = lambda c, b: c[table[b, :counts[b]].long()].reshape(-1, hkv, d)[:lengths[b]]  # noqa: E731
    seqs = [(q_value(q[b], qd, b, hkv), dequantise(rows(kc, b), kd, b), dequantise(rows(vc, b), vd, b))
            for b in range(batch)]
    return fp8_verdict(name, d, o, lse, seqs, causal)


def guard(run, name, d, *args, **kwargs):
    """run(name, d, ...)'s row, or a failing row naming the error it raised (a kernel the
    library refuses, a launch that fails): the cases after it still run."""
    try:
        return run(name, d, *args, **kwargs)
    except Exception as e:  # reported as the case's failure
        print("FAIL d%-3d %-9s %-44s %s: %s" % (d, "e4m3", name, type(e).__name__, e), flush=True)
        return {"case": name, "head_dim": d, "dtype": "float8_e4m3fn", "message": "%s: %s" % (type(e).__name__, e),
                "pass": False}


def fp8_kernels(cache, d, paged=False, softcap=False, dv=None):
    """None when the cache serves e4m3 at head dim d (V's dv; over pages with ``paged``,
    soft-capped with ``softcap``), else why not."""
    try:
        fa4gen.KernelCache(cache).select(head_dim=d, head_dim_v=dv or d, max_seqlen_q=2048, dtype="e4m3", causal=True,
                                         paged=paged, softcap=1.0 if softcap else 0.0)
        return None
    except fa4gen.Fa4genError as e:
        return str(e)


def fp8_cases(cache, head_dims):
    """e4m3 numerics (where the cache has e4m3 kernels), then the FP8 argument errors. Each
    case runs through ``guard``: one that raises fails alone."""
    if E4M3 is None:
        print("skip e4m3 cases: skipped: torch %s has no float8_e4m3fn" % torch.__version__, flush=True)
        return [{"case": "e4m3", "skipped": "torch has no float8_e4m3fn", "pass": True}]
    rows = []
    why = fp8_kernels(cache, 128)
    if why is not None:
        print("skip e4m3 cases: skipped: no e4m3 kernels in this cache (%s)" % why, flush=True)
        rows.append({"case": "e4m3", "skipped": "no e4m3 kernels in this cache", "message": why, "pass": True})
        return rows + fp8_error_cases(cache)
    d, dense, varlen = 128, run_fp8_dense, run_fp8_varlen
    rows += [
        guard(dense, "e4m3 dense causal b2 s300", d, 2, 300, 300, 8, 8, causal=True, cache=cache),
        guard(dense, "e4m3 dense unmasked b2 s1000", d, 2, 1000, 1000, 8, 8, cache=cache),
        guard(dense, "e4m3 dense causal s200/k333 gqa4 descales None", d, 2, 200, 333, 8, 2, causal=True,
              descales="none", cache=cache),
        guard(dense, "e4m3 dense unmasked q2200/k4100 (split tail)", d, 1, 2200, 4100, 16, 16, cache=cache),
        guard(varlen, "e4m3 varlen ragged causal gqa4", d, RAGGED, 8, 2, causal=True, cache=cache),
        guard(varlen, "e4m3 varlen ragged unmasked descales None", d, RAGGED, 8, 8, descales="none", cache=cache),
        guard(varlen, "e4m3 varlen prefix causal gqa8, descale strides differ", d, PREFIX, 16, 2, causal=True,
              descales="mixed", cache=cache),
        guard(varlen, "e4m3 varlen strided qkv causal", d, RAGGED, 8, 8, causal=True, strided=True, cache=cache),
        guard(varlen, "e4m3 varlen outlier channels x20 causal gqa4", d, RAGGED, 8, 2, causal=True, outliers=True,
              cache=cache),
        guard(dense, "e4m3 dense outlier channels x20 unmasked", d, 2, 700, 700, 8, 8, outliers=True, cache=cache),
        guard(varlen, "llama-3-8b layer e4m3 (32/8, causal)", d, [(2048, 2048), (513, 513), (0, 0)], 32, 8,
              causal=True, cache=cache),
        guard(run_fp8_kvcache_dense, "e4m3 kvcache dense causal, lengths per sequence", d, 3, 77, 600,
              [600, 77, 200], 8, 2, causal=True, cache=cache),
        guard(varlen, "e4m3 varlen window(64,0) causal gqa4", d, RAGGED, 8, 2, causal=True, window=(64, 0),
              cache=cache),
        guard(varlen, "e4m3 varlen window(48,16)", d, RAGGED, 8, 8, window=(48, 16), cache=cache),
        guard(dense, "e4m3 dense causal s200/k333 gqa4 sinks", d, 2, 200, 333, 8, 2, causal=True, sinks=True,
              cache=cache),
        guard(varlen, "e4m3 gpt-oss-style layer: window(128,0), sinks", d, RAGGED, 16, 2, causal=True,
              window=(128, 0), sinks=True, cache=cache),
        # 16-bit q over e4m3 K/V (an FP8 KV cache under bf16 activations): the call quantises q
        guard(dense, "bf16 q, e4m3 k/v: dense causal gqa4, q's descale from its max", d, 2, 300, 333, 8, 2,
              causal=True, descales="none", q_dtype=torch.bfloat16, cache=cache),
        guard(varlen, "bf16 q, e4m3 k/v: varlen prefix causal gqa8, q_descale given", d, PREFIX, 16, 2,
              causal=True, q_dtype=torch.bfloat16, cache=cache),
        guard(varlen, "fp16 q, e4m3 k/v: varlen ragged unmasked, descales None", d, RAGGED, 8, 8,
              descales="none", q_dtype=torch.float16, cache=cache),
    ]
    # Paged e4m3 caches (SGLang's and vLLM's FP8 KV caches), where the cache has them.
    if fp8_kernels(cache, d, paged=True) is None:
        paged = run_fp8_kvcache_paged
        rows += [
            guard(paged, "e4m3 paged cache causal, page 16, lengths per sequence", d, 77, [600, 77, 200], 16, 8, 2,
                  cache=cache),
            guard(paged, "e4m3 paged cache causal, page 1", d, 33, [90, 33], 1, 8, 8, cache=cache),
            # a sequence with nothing cached: its rows see no key (O 0, LSE -inf)
            guard(paged, "e4m3 paged cache causal, page 16, one cache empty", d, 40, [300, 0, 64], 16, 8, 2,
                  cache=cache),
            guard(paged, "e4m3 paged cache causal, page 256, gqa8", d, 300, [1000, 300], 256, 16, 2, cache=cache),
            guard(paged, "bf16 q, e4m3 paged cache causal, page 16 (vLLM/SGLang's FP8 cache)", d, 77,
                  [600, 77, 200], 16, 8, 2, cache=cache, q_dtype=torch.bfloat16),
        ]
    else:
        print("skip e4m3 paged cases: not in this cache (build-cache --features paged)", flush=True)
    # Soft-capped e4m3 (Gemma 2's caps, and tighter ones that bend most scores), where the
    # cache has the soft-capped kernels.
    if fp8_kernels(cache, d, softcap=True) is None:
        rows += [
            guard(dense, "e4m3 dense causal softcap 2 gqa4", d, 2, 300, 333, 8, 2, causal=True, softcap=2.0,
                  cache=cache),
            guard(varlen, "e4m3 varlen ragged softcap 50 (gemma-2), sinks", d, RAGGED, 8, 2, causal=True,
                  softcap=50.0, sinks=True, cache=cache),
            guard(varlen, "e4m3 varlen window(64,0) softcap 5", d, RAGGED, 8, 8, causal=True, window=(64, 0),
                  softcap=5.0, cache=cache),
        ]
    else:
        print("skip e4m3 softcap cases: not in this cache", flush=True)
    for d in head_dims:
        if d == 128:
            continue
        why = fp8_kernels(cache, d)
        if why is not None:
            print("skip e4m3 d%d: %s" % (d, why), flush=True)
            continue
        rows += [
            guard(dense, "e4m3 dense causal s300 gqa4", d, 2, 300, 300, 8, 2, causal=True, cache=cache),
            guard(varlen, "e4m3 varlen ragged unmasked", d, RAGGED, 8, 8, cache=cache),
            guard(varlen, "e4m3 varlen window(128,0) sinks gqa4", d, RAGGED, 8, 2, causal=True, window=(128, 0),
                  sinks=True, cache=cache),
        ]
    # DeepSeek's prefill (Q/K 192, V 128), where the cache has the kernels.
    why = fp8_kernels(cache, 192, dv=128)
    if why is None:
        rows += [
            guard(dense, "e4m3 192/128 dense causal s300/k333 gqa4", 192, 2, 300, 333, 8, 2, causal=True,
                  cache=cache, dv=128),
            guard(varlen, "e4m3 192/128 varlen prefix causal", 192, PREFIX, 16, 16, causal=True, cache=cache, dv=128),
            guard(varlen, "e4m3 192/128 varlen ragged unmasked outliers x20", 192, RAGGED, 8, 8, outliers=True,
                  cache=cache, dv=128),
        ]
    else:
        print("skip e4m3 192/128: %s" % why, flush=True)
    return rows + fp8_error_cases(cache)


def fp8_error_cases(cache):
    """FP8 arguments refused before any launch, each naming the problem."""
    q8 = quantise(torch.randn(2, 64, 8, 128, device=DEV))
    k8 = quantise(torch.randn(2, 64, 2, 128, device=DEV))
    qb, kb = q8.to(torch.bfloat16), k8.to(torch.bfloat16)
    good = torch.ones(2, 2, device=DEV)
    call = lambda *a, **kw: fa4gen.flash_attn_func(*a, cache=cache, **kw)  # noqa: E731
    return [
        expect_error("e4m3: descale of the wrong shape", lambda: call(q8, k8, k8, q_descale=torch.ones(2, 8, device=DEV)),
                     ValueError, ["q_descale has shape (2, 8)", "(batch, num_heads_kv) = (2, 2)"]),
        expect_error("e4m3: descale with bf16 inputs", lambda: call(qb, kb, kb, k_descale=good), ValueError,
                     ["k_descale given with torch.bfloat16 inputs", "torch.float8_e4m3fn"]),
        expect_error("e4m3: float16 descale", lambda: call(q8, k8, k8, v_descale=good.half()), ValueError,
                     ["v_descale is torch.float16", "torch.float32"]),
        expect_error("e4m3: descale on the CPU", lambda: call(q8, k8, k8, q_descale=good.cpu()), ValueError,
                     ["q_descale is on cpu", "q's CUDA device"]),
        expect_error("e4m3: q with bf16 k and v", lambda: call(q8, kb, kb), TypeError,
                     ["q, k and v are torch.float8_e4m3fn, torch.bfloat16 and torch.bfloat16",
                      "a bf16/fp16 q over e4m3 k and v"]),
        expect_error("bf16 q, e4m3 k/v: q_descale of the wrong shape",
                     lambda: call(qb, k8, k8, q_descale=torch.ones(2, 8, device=DEV)), ValueError,
                     ["q_descale has shape (2, 8)", "(batch, num_heads_kv) = (2, 2)"]),
        expect_error("e4m3: out in e4m3", lambda: call(q8, k8, k8, out=torch.empty_like(q8)), ValueError,
                     ["out is torch.float8_e4m3fn", "torch.bfloat16"]),
    ] + ([] if fp8_kernels(cache, 128, paged=True) is None else [
        expect_error("e4m3: paged cache not in this cache", lambda: fa4gen.flash_attn_with_kvcache(
            q8, k8.view(8, 16, 2, 128), k8.view(8, 16, 2, 128), page_table=torch.arange(8, dtype=torch.int32,
                                                                                        device=DEV).view(2, 4),
            cache_seqlens=64, cache=cache), fa4gen.Fa4genError, ["e4m3", "paged", "build-cache --features paged"]),
    ])


GROUPS = ("features", "layers", "calls", "serving", "errors", "fp8")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", default=None, help="kernel cache folder [FA4GEN_CACHE or generated]")
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--head-dims", default="64,96,128,192,256")
    ap.add_argument("--cases", default=",".join(GROUPS),
                    help="the groups of cases to run, of %s (default: every group)" % ", ".join(GROUPS))
    args = ap.parse_args()
    groups = args.cases.split(",")
    unknown = sorted(set(groups) - set(GROUPS))
    if unknown:
        ap.error("unknown case groups %s: the groups are %s" % (", ".join(unknown), ", ".join(GROUPS)))
    cache_dir = args.cache or fa4gen._default_cache_dir()
    torch.manual_seed(0)
    t0 = time.time()
    rows = []
    if "features" in groups:
        for d in [int(x) for x in args.head_dims.split(",")]:
            for dtype in (torch.bfloat16, torch.float16):
                rows += list(feature_cases(d, dtype, cache_dir))
    for name, cases in (("layers", layer_cases), ("calls", call_cases), ("serving", serving_cases),
                        ("errors", error_cases)):
        if name in groups:
            rows += list(cases(cache_dir))
    if "fp8" in groups:
        rows += fp8_cases(cache_dir, [int(x) for x in args.head_dims.split(",")])
    passed = sum(r["pass"] for r in rows)
    numeric = [r for r in rows if "o_rel_l2" in r]
    worst = {}
    for r in numeric:
        worst[r["dtype"]] = max(worst.get(r["dtype"], 0.0), r["o_rel_l2"])
    summary = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "fa4gen": fa4gen.version(),
               "passed": passed, "cases": len(rows), "skipped": [r["case"] for r in rows if r.get("skipped")],
               "worst_o_rel_l2": worst, "seconds": round(time.time() - t0, 1)}
    print(json.dumps(summary))
    if args.json:
        json.dump({"summary": summary, "rows": rows}, open(args.json, "w"), indent=1)
    sys.exit(0 if passed == len(rows) else 1)


if __name__ == "__main__":
    main()
