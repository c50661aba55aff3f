"""fa4-gen as an attention implementation of Hugging Face transformers.

    import fa4gen.transformers
    fa4gen.transformers.register()                  # attn_implementation="fa4gen"
    model = AutoModelForCausalLM.from_pretrained(name, attn_implementation="fa4gen", dtype=torch.bfloat16)
    with torch.no_grad():
        out = model.generate(**batch)               # prefill on fa4-gen, decode steps on sdpa
    fa4gen.transformers.stats()                     # {'fa4gen': 24, 'fallbacks': {...: 240}, 'masks': {...}}

``register()`` puts two functions under one name: an attention function in transformers'
``AttentionInterface`` and a mask function in its ``AttentionMaskInterface`` (without
one, transformers hands a custom implementation no mask at all). The mask function
gives the attention function what FlashAttention's calls take:

- ``None``: causal attention over every key, the queries being the last keys (a prompt,
  or a chunk of one after a dynamic cache's keys); the sliding window is the module's
  ``sliding_window`` (transformers' ``sliding_window=w`` keeps the last w keys, the
  diagonal included: FlashAttention's ``window_size=(w - 1, 0)``);
- the 2D padding mask over the keys, bool ``[batch, kv_len]``: the same with padding
  (left- or right-padded batches; with a sliding window, each row's tokens in one run),
  unpadded to a varlen call and padded back, padded rows' outputs 0;
- transformers' 4D boolean mask for anything else (packed sequences, a model's own mask
  functions, a static cache whose keys do not end at the queries, padding that is not one
  run under a window), whose calls go to the fallback.

The attention function runs fa4-gen's ``flash_attn_func`` (no padding) or
``flash_attn_varlen_func`` (padding), causal, bottom-right aligned when the keys outnumber
the queries, with the module's ``scaling``, ``sliding_window``, ``softcap`` and gpt-oss's
sinks (``s_aux``, the module's ``sinks``), GQA/MQA heads as they are. The fallback
(transformers' ``sdpa``, or the model's own eager attention where sdpa would drop sinks or
softcap, or for ``output_attentions``) gets the calls that fa4-gen does not compute, each
reason counted in ``stats()``: calls with fewer than ``min_queries`` queries a sequence
(decode steps; as ``fa4gen.routed``), dtypes other than bf16/fp16, dropout, calls that
need gradients (the kernels are forward only), non-causal attention, 4D masks, tensors
off CUDA, and problems no kernel of the cache serves.

Only this module's functions need torch and transformers, and only when called:
``import fa4gen.transformers`` works without them, ``register()`` says what is missing.
Written against transformers 5.x (the GPU host's 5.17); the mask interface's older form
(``cache_position`` instead of ``q_length``/``q_offset``) is read too.
"""

import sys
import threading

__all__ = ["register", "stats", "reset_stats", "flash_window", "mask_pattern", "padding_runs", "unpad",
           "dense_causal_mask"]

_lock = threading.Lock()
_counts = {"fa4gen": 0, "fallbacks": {}, "masks": {}}


def stats():
    """What the registered functions did since the last ``reset_stats()``: ``fa4gen``, the
    attention calls fa4-gen ran; ``fallbacks``, reason -> calls handed to the fallback;
    ``masks``, what the mask function gave per kind (``causal``, ``padding``, or
    ``4D: <why>``: a mask whose calls fall back)."""
    with _lock:
        return {"fa4gen": _counts["fa4gen"], "fallbacks": dict(_counts["fallbacks"]),
                "masks": dict(_counts["masks"])}


def reset_stats():
    with _lock:
        _counts["fa4gen"] = 0
        _counts["fallbacks"].clear()
        _counts["masks"].clear()


def _count(group, key):
    with _lock:
        if group == "fa4gen":
            _counts["fa4gen"] += 1
        else:
            _counts[group][key] = _counts[group].get(key, 0) + 1


def flash_window(sliding_window):
    """FlashAttention's ``window_size`` for transformers' ``sliding_window``: w keeps a
    query's last w keys, its own included (``kv_idx > q_idx - w``), so (w - 1, 0) with
    causal; None (or 0) is no window, (-1, -1)."""
    if sliding_window is None or sliding_window == 0:
        return (-1, -1)
    w = int(sliding_window)
    if w < 1:
        raise ValueError("sliding_window=%r: a window keeps at least the diagonal (w >= 1)" % (sliding_window,))
    return (w - 1, 0)


# --- masks ---------------------------------------------------------------------------

def mask_pattern(mask_function, batch_size, q_offset, q_length, kv_offset, kv_length, windows=(), device="cpu",
                 budget=1 << 24):
    """Which FlashAttention mask transformers' ``mask_function(batch_idx, head_idx, q_idx,
    kv_idx)`` is over this call's absolute positions (queries ``q_offset..``, keys
    ``kv_offset..``): ``"causal"`` (each query sees every key up to its own position),
    a window w of ``windows`` (the last w keys of those), or None for anything else. The
    function is evaluated as transformers' non-vmap mask code does (broadcast index
    tensors), ``budget`` cells at a time; a window that hides no key of this call reads
    as ``"causal"``."""
    import torch

    windows = [int(w) for w in windows if w]
    if q_length == 0 or kv_length == 0:
        return "causal"
    rows = max(1, budget // max(1, batch_size * kv_length))
    b = torch.arange(batch_size, device=device)[:, None, None, None]
    h = torch.zeros(1, dtype=torch.long, device=device)[None, :, None, None]
    kv = (torch.arange(kv_length, device=device) + kv_offset)[None, None, None, :]
    ok_causal = torch.ones((), dtype=torch.bool, device=device)
    ok_window = [torch.ones((), dtype=torch.bool, device=device) for _ in windows]
    for start in range(0, q_length, rows):
        q = (torch.arange(start, min(q_length, start + rows), device=device) + q_offset)[None, None, :, None]
        try:
            got = mask_function(b, h, q, kv)
        except Exception:  # a mask function that only vmap can evaluate: not one of ours
            return None
        if not isinstance(got, torch.Tensor):
            return None
        got = got.to(device=device, dtype=torch.bool)
        causal = kv <= q
        ok_causal &= (got == causal).all()
        for i, w in enumerate(windows):
            ok_window[i] &= (got == (causal & (kv > q - w))).all()
    if ok_causal.item():
        return "causal"
    for w, ok in zip(windows, ok_window):
        if ok.item():
            return w
    return None


def padding_runs(padding):
    """bool [batch]: whether each row of a 2D padding mask keeps its tokens in one run
    (left or right padding, or none at all)."""
    import torch

    kept = padding.sum(-1)
    width = padding.shape[-1]
    first = padding.to(torch.int8).argmax(-1)
    last = width - 1 - padding.flip(-1).to(torch.int8).argmax(-1)
    return (kept == 0) | (last - first + 1 == kept)


def _mask_function(**kw):
    """transformers' mask interface entry: None, the 2D padding mask, or sdpa's 4D mask
    (see the module's docstring)."""
    import torch
    from transformers import masking_utils

    def dense(why):
        _count("masks", "4D: " + why)
        return masking_utils.sdpa_mask(**dict(kw, allow_is_causal_skip=False))

    if kw.get("use_vmap"):
        return dense("a model's own mask function")
    batch_size, kv_length = kw["batch_size"], int(kw["kv_length"])
    kv_offset = int(kw.get("kv_offset", 0) or 0)
    device = kw.get("device", "cpu")
    if kw.get("q_length") is not None:
        q_length, q_offset = int(kw["q_length"]), int(kw.get("q_offset", 0) or 0)
    else:  # the older interface: the queries' positions
        positions = kw["cache_position"]
        q_length = positions.numel()
        q_offset = int(positions[0]) if q_length else 0
        if q_length and int(positions[-1]) - q_offset != q_length - 1:
            return dense("queries not one run of positions")
    if q_offset + q_length != kv_offset + kv_length:
        return dense("keys that do not end at the queries (a static cache)")
    mask_function = kw.get("mask_function", masking_utils.causal_mask_function)
    if mask_function is not masking_utils.causal_mask_function:
        config = kw.get("config")
        windows = [getattr(config, "sliding_window", None)] if config is not None else []
        pattern = mask_pattern(mask_function, batch_size, q_offset, q_length, kv_offset, kv_length, windows, device)
        if pattern is None:
            return dense("neither causal nor a sliding window")
        window = None if pattern == "causal" else pattern
    else:
        window = None
    padding = kw.get("attention_mask")
    if padding is not None:
        if padding.dim() != 2 or padding.shape[-1] < kv_offset + kv_length:
            return dense("a padding mask that does not cover the keys")
        padding = padding[:, kv_offset:kv_offset + kv_length].to(device=device, dtype=torch.bool)
        if padding.all():
            padding = None
    if padding is not None and window is not None and not padding_runs(padding).all():
        return dense("padding within a sliding window's rows")
    _count("masks", "causal" if padding is None else "padding")
    return None if padding is None else padding.contiguous()


def dense_causal_mask(padding, q_length, kv_length, sliding_window=None, device=None):
    """transformers' causal mask, bool [batch or 1, 1, q_length, kv_length], for queries
    that are the last ``q_length`` of ``kv_length`` keys: a query sees the keys up to its
    own, the last ``sliding_window`` of them if given, those ``padding`` keeps (2D bool
    [batch, kv_length], or None)."""
    import torch

    device = padding.device if padding is not None else device
    i = torch.arange(q_length, device=device)[:, None] + (kv_length - q_length)
    j = torch.arange(kv_length, device=device)[None, :]
    seen = j <= i
    if sliding_window:
        seen &= j > i - int(sliding_window)
    seen = seen[None, None]
    if padding is not None:
        seen = seen & padding.to(torch.bool)[:, None, None, :]
    return seen


def unpad(padding, q_length):
    """The varlen form of a padded batch whose queries are the last ``q_length`` of the
    keys that ``padding`` (2D bool [batch, kv_len]) covers: (the queries' mask [batch,
    q_length], cu_seqlens_q, cu_seqlens_k (int32 [batch + 1]), max_seqlen_q,
    max_seqlen_k). ``t[mask]`` packs a [batch, len, ...] tensor in this order."""
    import torch

    padding = padding.to(torch.bool)
    queries = padding[:, padding.shape[1] - q_length:]
    lens = torch.stack([queries.sum(-1), padding.sum(-1)])  # [2, batch]
    cu = torch.nn.functional.pad(lens.cumsum(-1), (1, 0)).to(torch.int32)
    most = lens.max(-1).values.tolist() if lens.shape[1] else [0, 0]  # one read for both
    return queries, cu[0].contiguous(), cu[1].contiguous(), int(most[0]), int(most[1])


# --- the attention function ----------------------------------------------------------

class _Fa4gen:
    """What the attention function launches: fa4-gen's calls (tests put a reference in
    its place)."""

    dtypes = ("bfloat16", "float16")

    def usable(self, t):
        return t.is_cuda

    def dense(self, q, k, v, **kw):
        from . import flash_attn_func

        return flash_attn_func(q, k, v, **kw)

    def varlen(self, q, k, v, cu_q, cu_k, max_q, max_k, **kw):
        from . import flash_attn_varlen_func

        return flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_q, max_k, **kw)


_kernels = _Fa4gen()


def _refusal(torch, module, query, key, value, attention_mask, dropout, sinks, kwargs, min_queries):
    """Why fa4-gen does not run this call, or None."""
    if kwargs.get("output_attentions"):
        return "output_attentions"
    dtype = str(query.dtype).replace("torch.", "")
    if dtype not in _kernels.dtypes or key.dtype != query.dtype or value.dtype != query.dtype:
        return "dtype %s" % dtype
    if dropout:
        return "dropout"
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (query, key, value, sinks)):
        return "gradients (fa4-gen's kernels are forward only)"
    causal = kwargs.get("is_causal")
    if causal is None:
        causal = getattr(module, "is_causal", True)
    if not causal:
        return "not causal"
    if query.shape[2] < min_queries:
        return "fewer than %d queries a sequence" % min_queries
    if attention_mask is not None and (attention_mask.dim() != 2 or attention_mask.dtype != torch.bool):
        return "a mask that is not a padding mask"
    if not all(_kernels.usable(t) for t in (query, key, value)):
        return "tensors off CUDA"
    return None


def _eager(module):
    """The model's own eager attention (its modeling file's ``eager_attention_forward``)."""
    fn = getattr(sys.modules.get(type(module).__module__), "eager_attention_forward", None)
    if fn is None:
        raise NotImplementedError("%s's module has no eager_attention_forward to fall back to"
                                  % type(module).__name__)
    return fn


def _fall_back(torch, reason, fallback, module, query, key, value, attention_mask, given):
    """The call on the fallback, with the mask it expects: sdpa's boolean (or None where
    its is_causal does the same), eager's additive float."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    _count("fallbacks", reason)
    eager = fallback == "eager" or given.get("s_aux") is not None or given.get("sinks") is not None \
        or bool(given.get("softcap")) or bool(given.get("output_attentions"))
    fn = _eager(module) if eager else ALL_ATTENTION_FUNCTIONS["sdpa"]
    q_length, kv_length = query.shape[2], key.shape[2]
    mask = attention_mask
    causal = given.get("is_causal")
    if causal is None:
        causal = getattr(module, "is_causal", True)
    if mask is None or mask.dim() == 2:
        window = given.get("sliding_window")
        hides = bool(window) and kv_length > int(window)
        if not causal:
            mask = None if mask is None else mask.to(torch.bool)[:, None, None, :].expand(-1, 1, q_length, -1)
        elif mask is None and not hides and (q_length == 1 or (q_length == kv_length and not eager)):
            mask = None  # sdpa's is_causal (or nothing to hide from one query)
        else:
            mask = dense_causal_mask(mask, q_length, kv_length, window, device=query.device)
    if mask is not None and eager and mask.dtype == torch.bool:
        mask = torch.where(mask, torch.zeros((), dtype=query.dtype, device=mask.device),
                           torch.finfo(query.dtype).min)
    return fn(module, query, key, value, mask, **given)


def _make_attention(fallback, min_queries, cache):
    def fa4gen_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, sliding_window=None,
                         softcap=None, s_aux=None, **kwargs):
        """transformers' attention interface: query [batch, heads, q_len, d], key/value
        [batch, heads_kv, kv_len, d] in; (out [batch, q_len, heads, d_v], None) back."""
        import torch

        from . import ERR_UNSUPPORTED, Fa4genError

        given = dict(kwargs, scaling=scaling, dropout=dropout)
        for name, value_ in (("sliding_window", sliding_window), ("softcap", softcap), ("s_aux", s_aux)):
            if value_ is not None:
                given[name] = value_
        sinks = s_aux if s_aux is not None else kwargs.get("sinks")
        reason = _refusal(torch, module, query, key, value, attention_mask, dropout, sinks, kwargs, min_queries)
        keys = (key.shape[0], key.shape[2])
        if reason is None and attention_mask is not None and tuple(attention_mask.shape) != keys:
            reason = "a padding mask of shape %s for %d keys" % (tuple(attention_mask.shape), key.shape[2])
        if reason is not None:
            return _fall_back(torch, reason, fallback, module, query, key, value, attention_mask, given)
        q, k, v = query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)  # [batch, len, heads, d] views
        call = dict(softmax_scale=scaling, causal=True, window_size=flash_window(sliding_window),
                    softcap=float(softcap or 0.0), sinks=sinks, cache=cache)
        try:
            if attention_mask is None:
                out = _kernels.dense(q, k, v, **call)
            else:
                queries, cu_q, cu_k, max_q, max_k = unpad(attention_mask, q.shape[1])
                packed = _kernels.varlen(q[queries], k[attention_mask], v[attention_mask], cu_q, cu_k, max_q, max_k,
                                         **call)
                out = packed.new_zeros(q.shape[0], q.shape[1], packed.shape[-2], packed.shape[-1])
                out[queries] = packed
        except NotImplementedError as e:
            return _fall_back(torch, str(e).split(":")[0], fallback, module, query, key, value, attention_mask, given)
        except Fa4genError as e:
            if e.code != ERR_UNSUPPORTED:
                raise
            return _fall_back(torch, "unsupported: %s" % e, fallback, module, query, key, value, attention_mask,
                              given)
        _count("fa4gen", None)
        return out, None

    return fa4gen_attention


def register(name="fa4gen", fallback="sdpa", min_queries=64, cache=None):
    """Registers fa4-gen with transformers under ``name``, for ``attn_implementation=name``
    (``from_pretrained``, ``from_config``, ``model.set_attn_implementation``). ``fallback``:
    ``"sdpa"`` (the model's eager attention serves calls with sinks, softcap or
    ``output_attentions``, which sdpa does not compute) or ``"eager"``. ``min_queries``: calls
    with fewer queries a sequence (decode) go to the fallback, as ``fa4gen.routed``'s.
    ``cache``: a kernel cache folder (default: as ``fa4gen.KernelCache``). Returns ``name``."""
    try:
        import torch  # noqa: F401
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface
    except ImportError as e:
        raise ImportError("fa4gen.transformers.register() needs torch and Hugging Face transformers 5.x with "
                          "AttentionInterface and AttentionMaskInterface (pip install torch 'transformers>=5'): %s"
                          % e) from None
    if fallback not in ("sdpa", "eager"):
        raise ValueError("fallback=%r: 'sdpa' or 'eager'" % (fallback,))
    if min_queries < 1:
        raise ValueError("min_queries=%r: at least 1" % (min_queries,))
    AttentionInterface.register(name, _make_attention(fallback, int(min_queries), cache))
    AttentionMaskInterface.register(name, _mask_function)
    return name
