"""fa4-gen's runtime from Python: FlashAttention's prefill calls on fa4-gen's kernels.

ctypes over the C ABI (``include/fa4gen.h``, ``libfa4_gen.so``); nothing to build.
The library is found through ``FA4GEN_LIB`` (the file), beside this package, or in
the repository's ``target/release`` and ``target/debug``; the kernel cache through
``FA4GEN_CACHE`` or the repository's ``generated/`` (its cubins are built by
``fa4-gen build-cache``).

    import fa4gen
    out = fa4gen.flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k,
                                        max_seqlen_q, max_seqlen_k, causal=True)
    out, lse = fa4gen.flash_attn_func(q, k, v, causal=True, return_lse=True)

    fa4gen.KernelCache().select(head_dim=128, max_seqlen_q=4096, causal=True)
    # {'kernel': 'portable_sm90_bf16_d128_causal_...', 'reason': 'tuned', ...}

Kernels launch on the current CUDA stream of the tensors' device, asynchronously; the
arguments are checked on the host first (shapes, dtypes, strides, alignment), and a
problem no kernel covers raises ``Fa4genError`` naming it. torch is needed for the
launching functions only.
"""

import ctypes
import math
import os
import struct
import threading
from pathlib import Path

__all__ = ["flash_attn_varlen_func", "flash_attn_func", "KernelCache", "Fa4genError", "version"]

OK, ERR_INVALID_ARGUMENT, ERR_CACHE, ERR_UNSUPPORTED, ERR_INTERNAL, ERR_CUDA = range(6)
_REASONS = {0: "tuned", 1: "nearest tuned bucket", 2: "default", 3: "borrowed"}
_ARCHS = {"sm80": 80, "sm86": 86, "sm89": 89, "sm90": 90, "sm100": 100, "sm120": 120}
_HERE = Path(__file__).resolve().parent

# fa4gen_prefill_args: dtype, head_dim, head_dim_v, causal, then fa4gen_params (240
# bytes): 5 pointers, 12 strides, batch/seqlen_q/seqlen_k/heads_q/heads_kv,
# softmax_scale, scale_log2, window, softcap, sinks, cu_seqlens_q/k, seqused_k,
# page_table, LSE strides, page_table_batch_stride, page_size; then the split
# workspace and its bytes.
_ARGS = struct.Struct("<4I5Q12q5iffiif5Q2q2i2Q")
assert _ARGS.size == 16 + 240 + 16


class Fa4genError(RuntimeError):
    """A failed call; ``code`` is one of the FA4GEN_ERR_* codes of fa4gen.h."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


class _Query(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint32) for name in
                ("arch", "dtype", "head_dim", "head_dim_v", "mask", "features", "max_seqlen_q")] + [
        ("window_left", ctypes.c_int32), ("window_right", ctypes.c_int32), ("max_seqlen_k", ctypes.c_uint32)]


class _Selection(ctypes.Structure):
    _fields_ = [("kernel_id", ctypes.c_char * 128), ("cubin", ctypes.c_char * 256)] + [
        (name, ctypes.c_uint32) for name in
        ("threads", "block_m", "block_n", "smem_bytes", "pack_gqa", "registers", "reason", "bucket", "is_default")]


def _find_library():
    given = os.environ.get("FA4GEN_LIB")
    candidates = [Path(given)] if given else []
    candidates += [_HERE / "libfa4_gen.so"]
    candidates += [_HERE.parents[1] / "target" / p / "libfa4_gen.so" for p in ("release", "debug")]
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
        lib.fa4gen_params_size.restype = ctypes.c_uint32
        if not hasattr(lib, "fa4gen_split_workspace_bytes"):  # fa4gen_prefill_args without the workspace
            raise Fa4genError(ERR_INTERNAL, "libfa4_gen.so predates the split workspace this module passes: "
                              "the library and the Python module come from different fa4-gen versions")
        lib.fa4gen_split_workspace_bytes.argtypes = [ctypes.c_uint32]
        lib.fa4gen_split_workspace_bytes.restype = ctypes.c_uint64
        lib.fa4gen_prefill.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        lib.fa4gen_preload.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint32)]
        if lib.fa4gen_params_size() + 32 != _ARGS.size:
            raise Fa4genError(ERR_INTERNAL, "libfa4_gen.so's fa4gen_params is %d bytes, this module packs %d: "
                              "the library and the Python module come from different fa4-gen versions"
                              % (lib.fa4gen_params_size(), _ARGS.size - 32))
        _lib = lib
    return _lib


def _check(code):
    if code != OK:
        raise Fa4genError(code, _library().fa4gen_last_error().decode())


def version():
    return _library().fa4gen_version().decode()


def _default_cache_dir():
    return os.environ.get("FA4GEN_CACHE") or str(_HERE.parents[1] / "generated")


class KernelCache:
    """An open kernel cache (``FA4GEN_CACHE`` or the repository's ``generated/``).

    A cache launches on the device whose context is current at its first launch; use
    one per device (``flash_attn_varlen_func`` keeps one per device for you)."""

    def __init__(self, path=None):
        self.path = str(path or _default_cache_dir())
        self._handle = ctypes.c_void_p()
        _check(_library().fa4gen_cache_open(self.path.encode(), ctypes.byref(self._handle)))

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
               sinks=False, softcap=0.0, paged=False, head_dim_v=None, arch="sm90", max_seqlen_k=None):
        """The kernel for a problem, as flash_attn_varlen_func's arguments describe it:
        a finite ``window_size`` side means a local mask (one bounded on both sides, with
        ``causal`` its right side 0, is served by the bucket of its width, not of
        ``max_seqlen_q``), ``softcap > 0`` soft-capping,
        ``paged`` a block table; a window wider than ``max_seqlen_k`` (default
        ``max_seqlen_q``) is looked up as the causal or unmasked kernel that ``prefill``
        launches for it. Returns a dict: kernel id, cubin, launch parameters and
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
            window_left=int(window_size[0]),
            window_right=0 if causal else int(window_size[1]),  # causal bounds the right side
            max_seqlen_k=max_seqlen_q if max_seqlen_k is None else max_seqlen_k,
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

    def preload(self):
        """Loads every kernel of the current device's arch now; returns how many."""
        n = ctypes.c_uint32()
        _check(_library().fa4gen_preload(self._handle, ctypes.byref(n)))
        return n.value

    def _prefill(self, packed, stream):
        _check(_library().fa4gen_prefill(self._handle, packed, stream))


# One open cache per (folder, device); threads whose CUDA context was made current.
_caches = {}
_caches_lock = threading.Lock()
_thread = threading.local()


def _cache_for(device, path):
    key = (str(path or _default_cache_dir()), device.index)
    c = _caches.get(key)
    if c is None:
        with _caches_lock:
            c = _caches.get(key)
            if c is None:
                c = _caches[key] = KernelCache(key[0])
    return c


def _dtype_code(torch, q, k, v):
    codes = {torch.bfloat16: 0, torch.float16: 1}
    if q.dtype not in codes:
        raise TypeError("q is %s: fa4-gen kernels take torch.bfloat16 or torch.float16" % q.dtype)
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            raise TypeError("%s is %s and q is %s: q, k and v must share a dtype" % (name, t.dtype, q.dtype))
    return codes[q.dtype]


def _on_device(t, name, device):
    if not t.is_cuda or t.device != device:
        raise ValueError("%s is on %s, q on %s: every tensor must be on q's CUDA device" % (name, t.device, device))


def _last_dim_contiguous(t, name):
    if t.stride(-1) != 1:
        raise ValueError("%s's last dim has stride %d: it must be contiguous (call .contiguous())"
                         % (name, t.stride(-1)))


def _index_tensor(torch, t, name, device, length=None):
    if t is None:
        return 0
    _on_device(t, name, device)
    if t.dtype != torch.int32 or t.dim() != 1 or (t.numel() > 1 and t.stride(0) != 1):
        raise ValueError("%s must be a contiguous 1-D torch.int32 tensor (got %s, shape %s)"
                         % (name, t.dtype, tuple(t.shape)))
    if length is not None and t.numel() != length:
        raise ValueError("%s has %d entries, %d expected" % (name, t.numel(), length))
    return t.data_ptr()


def _unsupported(dropout_p, alibi_slopes, return_attn_probs, deterministic=False):
    if dropout_p:
        raise NotImplementedError("dropout_p=%s: fa4-gen's prefill kernels have no dropout (inference only)" % dropout_p)
    if alibi_slopes is not None:
        raise NotImplementedError("alibi_slopes: fa4-gen's kernels have no ALiBi bias")
    if return_attn_probs:
        raise NotImplementedError("return_attn_probs: fa4-gen never materialises P; use return_lse=True for the LSE")


def _scores(torch, sinks, heads_q, device, softmax_scale, head_dim, window_size, softcap):
    scale = 1.0 / math.sqrt(head_dim) if softmax_scale is None else float(softmax_scale)
    if len(window_size) != 2:
        raise ValueError("window_size is (left, right), got %r" % (window_size,))
    sinks_ptr = 0
    if sinks is not None:
        _on_device(sinks, "sinks", device)
        if sinks.dim() != 1 or sinks.numel() != heads_q:
            raise ValueError("sinks has shape %s: one logit per query head, [%d], expected"
                             % (tuple(sinks.shape), heads_q))
        sinks = sinks.to(torch.float32).contiguous()
        sinks_ptr = sinks.data_ptr()
    return scale, int(window_size[0]), int(window_size[1]), float(softcap or 0.0), sinks, sinks_ptr


def _raw_stream(torch, index):
    """The current stream's CUstream on device `index`, as an int."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # what Triton uses: no Stream object
    return raw(index) if raw is not None else torch.cuda.current_stream(index).cuda_stream


# Split workspaces (fa4gen.h), one per (device, stream): zeroed once, and every launch
# leaves them so; two streams never share one.
_workspaces = {}


def _split_workspace(torch, device, stream):
    """(pointer, bytes) of the split workspace of `stream` on `device`."""
    key = (device.index, stream)
    ws = _workspaces.get(key)
    if ws is None:
        sms = torch.cuda.get_device_properties(device).multi_processor_count
        ws = torch.zeros(int(_library().fa4gen_split_workspace_bytes(sms)), dtype=torch.uint8, device=device)
        _workspaces[key] = ws
    return ws.data_ptr(), ws.numel()


def _launch(torch, device, cache, fields, split=False):
    """Packs the arguments and launches on the current stream of `device`; with `split`
    (dense batches, whose unmasked kernels may split their tail) it brings the stream's
    split workspace."""
    def run():
        stream = _raw_stream(torch, device.index)
        ws = _split_workspace(torch, device, stream) if split else (0, 0)
        packed = _ARGS.pack(*fields, *ws)
        _cache_for(device, cache)._prefill(packed, stream)

    if torch.cuda.current_device() != device.index:
        with torch.cuda.device(device):
            run()
        return
    if getattr(_thread, "device", None) != device.index:
        # Makes the device's primary context current on this thread (cudaSetDevice does
        # since CUDA 12), which the runtime binds to on its first launch.
        torch.cuda.set_device(device)
        _thread.device = device.index
    run()


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                           softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False,
                           block_table=None, *, sinks=None, seqused_k=None, return_lse=False, out=None,
                           cache=None):
    """FlashAttention's ``flash_attn_varlen_func`` on fa4-gen's kernels.

    q: [total_q, heads_q, d]; k, v: [total_k, heads_kv, d(_v)] packed by ``cu_seqlens_k``,
    or with ``block_table`` ([batch, max_pages] int32) the paged caches
    [num_pages, page_size, heads_kv, d(_v)] whose lengths come from ``seqused_k`` (SGLang's
    cache_seqlens) or, if not given, from ``cu_seqlens_k``. heads_q is a multiple of
    heads_kv (GQA/MQA). ``window_size`` as FlashAttention's (-1: unbounded; with causal the
    right side is 0), ``softcap`` 0 for none, ``sinks`` one logit per query head that joins
    the softmax denominator (gpt-oss). Returns out [total_q, heads_q, d_v], and with
    ``return_lse`` also the f32 LSE [heads_q, total_q]. The call is asynchronous on the
    current stream; cu_seqlens values are not read on the host.
    """
    import torch

    _unsupported(dropout_p, alibi_slopes, return_attn_probs)
    dtype = _dtype_code(torch, q, k, v)
    device = q.device
    if not q.is_cuda:
        raise ValueError("q is on %s: fa4-gen launches on CUDA devices" % device)
    for name, t in (("k", k), ("v", v)):
        _on_device(t, name, device)
    if q.dim() != 3:
        raise ValueError("q has shape %s: [total_q, heads_q, head_dim] expected" % (tuple(q.shape),))
    total_q, heads_q, head_dim = q.shape
    paged = block_table is not None
    if paged:
        if k.dim() != 4 or v.dim() != 4:
            raise ValueError("with block_table, k and v are paged caches [num_pages, page_size, heads_kv, d]; "
                             "got k %s, v %s" % (tuple(k.shape), tuple(v.shape)))
        page_size = k.shape[1]
    elif k.dim() != 3 or v.dim() != 3:
        raise ValueError("k and v are [total_k, heads_kv, d] (or pass block_table for paged caches); "
                         "got k %s, v %s" % (tuple(k.shape), tuple(v.shape)))
    heads_kv, head_dim_v = k.shape[-2], v.shape[-1]
    if k.shape[-1] != head_dim:
        raise ValueError("q's head dim is %d and k's %d: they must match" % (head_dim, k.shape[-1]))
    if tuple(v.shape[:-1]) != tuple(k.shape[:-1]):
        raise ValueError("v has shape %s and k %s: they differ only in the last dim"
                         % (tuple(v.shape), tuple(k.shape)))
    for name, t in (("q", q), ("k", k), ("v", v)):
        _last_dim_contiguous(t, name)
    batch = cu_seqlens_q.numel() - 1
    if batch < 0:
        raise ValueError("cu_seqlens_q is empty: [batch + 1] prefix sums expected")
    cu_q = _index_tensor(torch, cu_seqlens_q, "cu_seqlens_q", device)
    if paged:
        _on_device(block_table, "block_table", device)
        if block_table.dtype != torch.int32 or block_table.dim() != 2 or block_table.shape[0] != batch \
                or (block_table.shape[1] > 1 and block_table.stride(1) != 1):
            raise ValueError("block_table must be int32 [batch=%d, max_pages] with contiguous rows (got %s, shape %s)"
                             % (batch, block_table.dtype, tuple(block_table.shape)))
        if seqused_k is None:
            if cu_seqlens_k is None:
                raise ValueError("a paged call needs the key lengths: seqused_k or cu_seqlens_k")
            _index_tensor(torch, cu_seqlens_k, "cu_seqlens_k", device, batch + 1)
            seqused_k = cu_seqlens_k[1:] - cu_seqlens_k[:-1]
        cu_k = 0
        k_batch, v_batch = k.stride(0), v.stride(0)
        (k_row, k_head), (v_row, v_head) = (k.stride(1), k.stride(2)), (v.stride(1), v.stride(2))
        table, table_stride = block_table.data_ptr(), block_table.stride(0)
    else:
        if cu_seqlens_k is None:
            raise ValueError("cu_seqlens_k is None: pass it, or block_table for paged caches")
        cu_k = _index_tensor(torch, cu_seqlens_k, "cu_seqlens_k", device, batch + 1)
        k_batch = v_batch = 0
        (k_row, k_head), (v_row, v_head) = (k.stride(0), k.stride(1)), (v.stride(0), v.stride(1))
        table, table_stride, page_size = 0, 0, 0
    used_k = _index_tensor(torch, seqused_k, "seqused_k", device, batch)
    if out is None:
        out = torch.empty((total_q, heads_q, head_dim_v), dtype=q.dtype, device=device)
    elif tuple(out.shape) != (total_q, heads_q, head_dim_v) or out.dtype != q.dtype:
        raise ValueError("out is %s %s: %s %s expected" % (out.dtype, tuple(out.shape), q.dtype,
                                                         (total_q, heads_q, head_dim_v)))
    else:
        _on_device(out, "out", device)
        _last_dim_contiguous(out, "out")
    lse = torch.empty((heads_q, total_q), dtype=torch.float32, device=device)
    scale, left, right, cap, sinks, sinks_ptr = _scores(torch, sinks, heads_q, device, softmax_scale,
                                                        head_dim, window_size, softcap)
    _launch(torch, device, cache, (
        dtype, head_dim, head_dim_v, 1 if causal else 0,
        q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(),
        0, q.stride(0), q.stride(1),
        k_batch, k_row, k_head,
        v_batch, v_row, v_head,
        0, out.stride(0), out.stride(1),
        batch, int(max_seqlen_q), int(max_seqlen_k), heads_q, heads_kv,
        scale, 0.0, left, right, cap, sinks_ptr,
        cu_q, cu_k, used_k, table,
        0, total_q, table_stride, page_size))
    return (out, lse) if return_lse else out


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                    softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False, *,
                    sinks=None, return_lse=False, out=None, cache=None):
    """FlashAttention's ``flash_attn_func`` on fa4-gen's kernels: q [batch, seqlen_q,
    heads_q, d], k and v [batch, seqlen_k, heads_kv, d(_v)], any batch/token/head strides
    with the last dim contiguous. Returns out [batch, seqlen_q, heads_q, d_v], and with
    ``return_lse`` also the f32 LSE [batch, heads_q, seqlen_q]."""
    import torch

    _unsupported(dropout_p, alibi_slopes, return_attn_probs)
    dtype = _dtype_code(torch, q, k, v)
    device = q.device
    if not q.is_cuda:
        raise ValueError("q is on %s: fa4-gen launches on CUDA devices" % device)
    for name, t in (("k", k), ("v", v)):
        _on_device(t, name, device)
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError("q, k, v are [batch, seqlen, heads, head_dim]; got q %s, k %s, v %s"
                         % (tuple(q.shape), tuple(k.shape), tuple(v.shape)))
    batch, seqlen_q, heads_q, head_dim = q.shape
    _, seqlen_k, heads_kv, head_dim_v = v.shape
    if k.shape[0] != batch or v.shape[0] != batch:
        raise ValueError("q has batch %d, k %d, v %d: they must match" % (batch, k.shape[0], v.shape[0]))
    if k.shape[-1] != head_dim:
        raise ValueError("q's head dim is %d and k's %d: they must match" % (head_dim, k.shape[-1]))
    if tuple(v.shape[:-1]) != tuple(k.shape[:-1]):
        raise ValueError("v has shape %s and k %s: they differ only in the last dim"
                         % (tuple(v.shape), tuple(k.shape)))
    for name, t in (("q", q), ("k", k), ("v", v)):
        _last_dim_contiguous(t, name)
    if out is None:
        out = torch.empty((batch, seqlen_q, heads_q, head_dim_v), dtype=q.dtype, device=device)
    elif tuple(out.shape) != (batch, seqlen_q, heads_q, head_dim_v) or out.dtype != q.dtype:
        raise ValueError("out is %s %s: %s %s expected" % (out.dtype, tuple(out.shape), q.dtype,
                                                         (batch, seqlen_q, heads_q, head_dim_v)))
    else:
        _on_device(out, "out", device)
        _last_dim_contiguous(out, "out")
    lse = torch.empty((batch, heads_q, seqlen_q), dtype=torch.float32, device=device)
    scale, left, right, cap, sinks, sinks_ptr = _scores(torch, sinks, heads_q, device, softmax_scale,
                                                        head_dim, window_size, softcap)
    _launch(torch, device, cache, (
        dtype, head_dim, head_dim_v, 1 if causal else 0,
        q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(),
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        out.stride(0), out.stride(1), out.stride(2),
        batch, seqlen_q, seqlen_k, heads_q, heads_kv,
        scale, 0.0, left, right, cap, sinks_ptr,
        0, 0, 0, 0,
        lse.stride(0), lse.stride(1), 0, 0), split=not causal)
    return (out, lse) if return_lse else out
