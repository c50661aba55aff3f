"""fa4-gen's runtime from Python: which kernel serves a prefill problem.

ctypes over the C ABI (``include/fa4gen.h``, ``libfa4_gen.so``); nothing to build.
The library is found through ``FA4GEN_LIB`` (the file), beside this package, or in
the repository's ``target/release`` and ``target/debug``.

    import fa4gen
    cache = fa4gen.KernelCache("generated")
    cache.select(head_dim=128, max_seqlen_q=4096, causal=True)
    # {'kernel': 'portable_sm90_bf16_d128_causal_...', 'threads': 128, ...}

Launching (a ``flash_attn_varlen_func`` mirror on torch tensors) is not here yet: the
library does not launch kernels yet.
"""

import ctypes
import os
from pathlib import Path

__all__ = ["KernelCache", "Fa4genError", "version"]

OK, ERR_INVALID_ARGUMENT, ERR_CACHE, ERR_UNSUPPORTED, ERR_INTERNAL = range(5)
_REASONS = {0: "tuned", 1: "nearest tuned bucket", 2: "default"}
_ARCHS = {"sm80": 80, "sm86": 86, "sm89": 89, "sm90": 90, "sm100": 100, "sm120": 120}


class Fa4genError(RuntimeError):
    """A failed call; ``code`` is one of the FA4GEN_ERR_* codes of fa4gen.h."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


class _Query(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint32) for name in
                ("arch", "dtype", "head_dim", "head_dim_v", "mask", "features", "max_seqlen_q")]


class _Selection(ctypes.Structure):
    _fields_ = [("kernel_id", ctypes.c_char * 128), ("cubin", ctypes.c_char * 256)] + [
        (name, ctypes.c_uint32) for name in
        ("threads", "block_m", "block_n", "smem_bytes", "pack_gqa", "registers", "reason", "bucket", "is_default")]


def _find_library():
    given = os.environ.get("FA4GEN_LIB")
    here = Path(__file__).resolve().parent
    candidates = [Path(given)] if given else []
    candidates += [here / "libfa4_gen.so"]
    candidates += [here.parents[1] / "target" / p / "libfa4_gen.so" for p in ("release", "debug")]
    for c in candidates:
        if c.is_file():
            return ctypes.CDLL(str(c))
    raise Fa4genError(ERR_CACHE, "libfa4_gen.so not found (looked in: %s); build it with "
                      "`cargo build --release` or point FA4GEN_LIB at it" % ", ".join(map(str, candidates)))


_lib = None


def _library():
    global _lib
    if _lib is None:
        lib = _find_library()
        lib.fa4gen_version.restype = ctypes.c_char_p
        lib.fa4gen_last_error.restype = ctypes.c_char_p
        lib.fa4gen_cache_open.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
        lib.fa4gen_cache_close.argtypes = [ctypes.c_void_p]
        lib.fa4gen_cache_close.restype = None
        lib.fa4gen_select.argtypes = [ctypes.c_void_p, ctypes.POINTER(_Query), ctypes.POINTER(_Selection)]
        _lib = lib
    return _lib


def _check(code):
    if code != OK:
        raise Fa4genError(code, _library().fa4gen_last_error().decode())


def version():
    return _library().fa4gen_version().decode()


class KernelCache:
    """An open kernel cache (``generated/`` by default)."""

    def __init__(self, path="generated"):
        self._handle = ctypes.c_void_p()
        _check(_library().fa4gen_cache_open(str(path).encode(), ctypes.byref(self._handle)))

    def close(self):
        if self._handle:
            _library().fa4gen_cache_close(self._handle)
            self._handle = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def select(self, head_dim, max_seqlen_q, dtype="bf16", causal=False, window_size=(-1, -1),
               sinks=False, softcap=0.0, paged=False, head_dim_v=None, arch="sm90"):
        """The kernel for a problem, as flash_attn_varlen_func's arguments describe it:
        a finite ``window_size`` side means a local mask, ``softcap > 0`` soft-capping,
        ``paged`` a block table. Returns a dict: kernel id, cubin, launch parameters and
        why it was chosen. Raises Fa4genError naming what is unsupported."""
        local = any(w >= 0 for w in window_size)
        q = _Query(
            arch=_ARCHS.get(arch, 0),
            dtype={"bf16": 0, "fp16": 1}.get(dtype, 99),
            head_dim=head_dim,
            head_dim_v=head_dim if head_dim_v is None else head_dim_v,
            mask=2 if local else (1 if causal else 0),
            features=(1 if sinks else 0) | (2 if softcap > 0 else 0) | (4 if paged else 0),
            max_seqlen_q=max_seqlen_q,
        )
        s = _Selection()
        _check(_library().fa4gen_select(self._handle, ctypes.byref(q), ctypes.byref(s)))
        return {
            "kernel": s.kernel_id.decode(),
            "cubin": s.cubin.decode(),
            "threads": s.threads,
            "block_m": s.block_m,
            "block_n": s.block_n,
            "smem_bytes": s.smem_bytes,
            "pack_gqa": bool(s.pack_gqa),
            "registers": s.registers,
            "reason": _REASONS[s.reason],
            "bucket": s.bucket,
            "is_default": bool(s.is_default),
        }
