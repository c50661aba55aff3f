"""fa4-gen where it has a kernel, the engine's own attention everywhere else.

A serving engine keeps FlashAttention-3 (sgl_kernel's, say) for decode and for what
fa4-gen does not compute, and sends prefill to fa4-gen:

    from sgl_kernel.flash_attn import flash_attn_varlen_func, flash_attn_with_kvcache
    varlen = fa4gen.routed(flash_attn_varlen_func)
    with_kvcache = fa4gen.routed(flash_attn_with_kvcache)

SGLang's FlashAttention backend module holds the two calls as module globals, which is
where ``fa4gen.sglang`` puts the routed ones.
"""

import functools
import inspect
import threading

from . import (ERR_UNSUPPORTED, Fa4genError, flash_attn_func, flash_attn_varlen_func,
               flash_attn_with_kvcache)

_OURS = {f.__name__: f for f in (flash_attn_varlen_func, flash_attn_with_kvcache, flash_attn_func)}


def _queries(named):
    """The most queries one sequence of the call has: max_seqlen_q for packed queries,
    else q's sequence dim ([batch, seqlen_q, heads, d])."""
    if named.get("max_seqlen_q") is not None:
        return int(named["max_seqlen_q"])
    q = named["q"]
    return q.shape[1] if q.dim() == 4 else q.shape[0]


def routed(fallback, min_queries=64, ours=None):
    """A drop-in for ``fallback``, a FlashAttention-3 call (``flash_attn_varlen_func``,
    ``flash_attn_with_kvcache`` or ``flash_attn_func``, picked by its name unless ``ours``
    says), that runs fa4-gen's kernel for prefill and ``fallback`` for the rest:

    - calls whose longest sequence has fewer than ``min_queries`` queries (decode, and
      speculative verification's few tokens): fa4-gen's tiles hold 64 or 128 query rows;
    - calls fa4-gen does not compute (NotImplementedError: paged FP8 caches, rotary,
      appended k/v ...; an argument fa4-gen's call does not take, unless it is None or
      ``fallback``'s default; Fa4genError ERR_UNSUPPORTED: a head dim or feature no cubin of
      the cache serves).

    Arguments are matched to ``fallback``'s signature (a dispatcher's ``*args`` to
    FlashAttention-3's), so positional calls keep their meaning. Each reason for falling back is counted in ``routed_fn.fallbacks`` (reason ->
    calls). Other errors (bad shapes, a broken cache, CUDA errors) are raised: the
    fallback would not compute those calls either, or they are fa4-gen's to report."""
    ours = ours or _OURS.get(getattr(fallback, "__name__", ""))
    if ours is None:
        raise ValueError("routed(%r): name the fa4-gen call it stands for with ours=" % (fallback,))
    signature = inspect.signature(fallback)
    known = inspect.signature(ours).parameters
    if any(p.kind == p.VAR_POSITIONAL for p in signature.parameters.values()):
        # A dispatcher (f(*args, ver=3, **kwargs), as SGLang's): its positions are those
        # of the FlashAttention-3 call it passes them on to.
        signature = _fa3_signature(ours.__name__, known)
    fallbacks = {}
    lock = threading.Lock()

    def fall_back(reason, args, kwargs):
        with lock:
            fallbacks[reason] = fallbacks.get(reason, 0) + 1
        return fallback(*args, **kwargs)

    @functools.wraps(fallback)
    def call(*args, **kwargs):
        named = signature.bind(*args, **kwargs).arguments
        extra = named.pop(next((n for n, p in signature.parameters.items() if p.kind == p.VAR_KEYWORD), ""), {})
        named.update(extra)
        if _queries(named) < min_queries:
            return fall_back("fewer than %d queries a sequence" % min_queries, args, kwargs)
        # Arguments newer engines pass that fa4-gen's call does not take: left out where
        # they ask for nothing (None, or the fallback's own default), else the call is
        # the fallback's.
        for name in [n for n in named if n not in known]:
            if not _asks_nothing(named[name], signature.parameters.get(name)):
                return fall_back("argument '%s'" % name, args, kwargs)
            del named[name]
        try:
            return ours(**named)
        except NotImplementedError as e:
            return fall_back(str(e).split(":")[0], args, kwargs)
        except Fa4genError as e:
            if e.code != ERR_UNSUPPORTED:
                raise
            return fall_back("unsupported: %s" % e, args, kwargs)

    call.fallbacks = fallbacks
    return call


# FlashAttention-3's positional parameters where they differ from fa4-gen's call of the
# same name (which takes FlashAttention-2's order).
_FA3_POSITIONS = {
    "flash_attn_varlen_func": ("q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k",
                               "seqused_q", "seqused_k", "softmax_scale", "causal"),
    "flash_attn_func": ("q", "k", "v", "softmax_scale", "causal"),
}


def _fa3_signature(name, known):
    """The signature FlashAttention-3's call `name` binds arguments by: its positional
    parameters, then any keyword."""
    P = inspect.Parameter
    positions = _FA3_POSITIONS.get(name) or [n for n, p in known.items() if p.kind == P.POSITIONAL_OR_KEYWORD]
    return inspect.Signature([P(n, P.POSITIONAL_OR_KEYWORD, default=None) for n in positions]
                             + [P("kwargs", P.VAR_KEYWORD)])


def _asks_nothing(value, parameter):
    """Whether an argument fa4-gen's call lacks may be left out: None, or the value the
    fallback takes when it is not passed."""
    if value is None:
        return True
    default = getattr(parameter, "default", inspect.Parameter.empty)
    try:
        return default is not inspect.Parameter.empty and bool(value == default)
    except Exception:  # a tensor, say: compared elementwise, so never a default
        return False
