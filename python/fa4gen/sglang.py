"""SGLang's prefill on fa4-gen: the FlashAttention backend's calls, routed.

    python -m fa4gen.sglang --model-path meta-llama/Llama-3.1-8B-Instruct --attention-backend fa3 ...

starts SGLang's server (``sglang.launch_server``, every argument passed on) with the FA3
backend's two calls, ``flash_attn_with_kvcache`` (extend: prefill over the paged cache)
and ``flash_attn_varlen_func``, replaced by :func:`fa4gen.routed` ones: prefill runs on
fa4-gen's kernels; decode, speculative verification's few tokens and whatever fa4-gen
refuses (MLA's ``qv``, a head dim the cache lacks) run on the engine's own
call, each reason counted.

SGLang starts its schedulers with multiprocessing's "spawn", so a replacement made in the
launching process alone would not reach them. A spawned process imports the launching
process's main module again (as ``__mp_main__``); run as the main module, this one
routes the calls there too. In a script of your own (SGLang's ``Engine``), call
:func:`route_backend` at the top level of the main script, outside
``if __name__ == "__main__":``, for the same reason.
"""

import importlib
import runpy
import sys

from . import flash_attn_varlen_func, flash_attn_with_kvcache
from .route import routed

BACKEND = "sglang.srt.layers.attention.flashattention_backend"

# The names the backend module holds the FA3 calls under: module-level imports from
# sgl_kernel (to early 2026, and from April 2026 a dispatcher taking ``ver``), or aliases
# with ``_fa3`` beside FA4's (January to April 2026).
CALLS = {
    "flash_attn_with_kvcache": flash_attn_with_kvcache,
    "flash_attn_with_kvcache_fa3": flash_attn_with_kvcache,
    "flash_attn_varlen_func": flash_attn_varlen_func,
    "flash_attn_varlen_func_fa3": flash_attn_varlen_func,
}


def route_backend(min_queries=64, module=BACKEND):
    """Replaces the FA3 calls that SGLang's FlashAttention backend module holds with
    routed ones (once: a second call keeps the first's). Returns {name: routed call};
    each has ``.fallbacks``, the calls it handed back by reason. Raises ImportError
    without SGLang, and RuntimeError where the module holds none of the calls (an SGLang
    whose backend is laid out otherwise)."""
    backend = importlib.import_module(module) if isinstance(module, str) else module
    routes = {}
    for name, ours in CALLS.items():
        current = getattr(backend, name, None)
        if current is None:
            continue
        if not getattr(current, "fa4gen_routed", False):
            current = routed(current, min_queries=min_queries, ours=ours)
            current.fa4gen_routed = True
            setattr(backend, name, current)
        routes[name] = current
    if not routes:
        raise RuntimeError(
            "%s holds none of %s: this SGLang's FlashAttention backend calls FlashAttention some "
            "other way, so fa4-gen cannot route its prefill; wrap the call it makes with "
            "fa4gen.routed(call) yourself" % (backend.__name__, ", ".join(CALLS)))
    return routes


def fallbacks():
    """Calls each routed name handed to SGLang's own kernel, by reason ({} before routing
    or where nothing fell back), in this process."""
    backend = sys.modules.get(BACKEND)
    return {name: dict(call.fallbacks) for name, call in getattr(backend, "__dict__", {}).items()
            if getattr(call, "fa4gen_routed", False) and call.fallbacks}


def main(argv=None):
    """``sglang.launch_server``'s main with the backend routed; argv as it takes them."""
    argv = sys.argv[1:] if argv is None else argv
    sys.argv = ["sglang.launch_server", *argv]
    # Not run as __main__ in sys.modules: a spawned process must import this module, not
    # sglang.launch_server, as its main (and so route its calls).
    runpy.run_module("sglang.launch_server", run_name="__main__", alter_sys=False)


if __name__ in ("__main__", "__mp_main__"):
    route_backend()
if __name__ == "__main__":
    main()
