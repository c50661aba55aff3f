"""fa4-gen's runtime from Python: FlashAttention's prefill calls on fa4-gen's kernels.

ctypes over the C ABI (``include/fa4gen.h``, ``libfa4_runtime.so``); nothing to build.
The library is found through ``FA4GEN_LIB`` (the file), beside this package (as the
wheel of ``scripts/build_wheel.py`` installs it), or in the repository's
``target/release`` and ``target/debug``; the kernel cache through ``FA4GEN_CACHE``, the
wheel's ``cache/``, or the repository's ``generated/`` (its cubins are built by
``fa4-gen build-cache``).

    import fa4gen
    out = fa4gen.flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k,
                                        max_seqlen_q, max_seqlen_k, causal=True)
    out, lse = fa4gen.flash_attn_func(q, k, v, causal=True, return_lse=True)
    out = fa4gen.flash_attn_func(q8, k8, v8, causal=True,          # torch.float8_e4m3fn: out in bf16
                                 q_descale=qd, k_descale=kd, v_descale=vd)  # f32 [batch, heads_kv]
    out = fa4gen.flash_attn_with_kvcache(q, k_cache, v_cache, page_table=page_table,
                                         cache_seqlens=cache_seqlens, cu_seqlens_q=cu_seqlens_q,
                                         max_seqlen_q=max_seqlen_q, causal=True)

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

__all__ = ["flash_attn_varlen_func", "flash_attn_func", "flash_attn_with_kvcache", "flash_attn_qkvpacked_func",
           "flash_attn_kvpacked_func", "flash_attn_varlen_qkvpacked_func", "flash_attn_varlen_kvpacked_func", "routed", "KernelCache", "Fa4genError", "version"]

OK, ERR_INVALID_ARGUMENT, ERR_CACHE, ERR_UNSUPPORTED, ERR_INTERNAL, ERR_CUDA = range(6)
_REASONS = {0: "tuned", 1: "nearest tuned bucket", 2: "default", 3: "borrowed", 4: "tuned ragged"}
_ARCHS = {"sm80": 80, "sm86": 86, "sm89": 89, "sm90": 90, "sm100": 100, "sm120": 120}
_HERE = Path(__file__).resolve().parent

# fa4gen_prefill_args: dtype, head_dim, head_dim_v, causal, then fa4gen_params (240
# bytes): 5 pointers, 12 strides, batch/seqlen_q/seqlen_k/heads_q/heads_kv,
# softmax_scale, scale_log2, window, softcap, sinks, cu_seqlens_q/k, seqused_k,
# page_table, LSE strides, page_table_batch_stride, page_size; then the split
# workspace and its bytes; then the e4m3 descales (f32 per sequence and KV head, 0 for
# 1.0) and their batch and head strides in floats (ignored for bf16/fp16).
_ARGS = struct.Struct("<4I5Q12q5iffiif5Q2q2i2Q3Q2q")
assert _ARGS.size == 16 + 240 + 16 + 40
_DTYPES = {"bf16": 0, "fp16": 1, "e4m3": 2, "fp8": 2, "float8_e4m3fn": 2}


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
    candidates += [_HERE / "libfa4_runtime.so"]
    candidates += [_HERE.parents[1] / "target" / p / "libfa4_runtime.so" for p in ("release", "debug")]
    for c in candidates:
        if c.is_file():
            return ctypes.CDLL(str(c))
    raise Fa4genError(ERR_CACHE, "libfa4_runtime.so not found (looked in: %s); build it with "
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
            raise Fa4genError(ERR_INTERNAL, "libfa4_runtime.so predates the split workspace this module passes: "
                              "the library and the Python module come from different fa4-gen versions")
        lib.fa4gen_split_workspace_bytes.argtypes = [ctypes.c_uint32]
        lib.fa4gen_split_workspace_bytes.restype = ctypes.c_uint64
        lib.fa4gen_prefill.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        lib.fa4gen_preload.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint32)]
        if lib.fa4gen_params_size() + 72 != _ARGS.size:
            raise Fa4genError(ERR_INTERNAL, "libfa4_runtime.so's fa4gen_params is %d bytes, this module packs %d: "
                              "the library and the Python module come from different fa4-gen versions"
                              % (lib.fa4gen_params_size(), _ARGS.size - 72))
        _lib = lib
    return _lib


def _check(code):
    if code != OK:
        raise Fa4genError(code, _library().fa4gen_last_error().decode())


def version():
    return _library().fa4gen_version().decode()


def _default_cache_dir():
    """FA4GEN_CACHE, else the cache an installed wheel carries, else the repository's."""
    bundled = _HERE / "cache"
    if os.environ.get("FA4GEN_CACHE"):
        return os.environ["FA4GEN_CACHE"]
    return str(bundled if (bundled / "manifest.json").is_file() else _HERE.parents[1] / "generated")


class KernelCache:
    """An open kernel cache (``FA4GEN_CACHE``, the wheel's, or the repository's ``generated/``).

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
               sinks=False, softcap=0.0, paged=False, head_dim_v=None, arch="sm90", max_seqlen_k=None,
               ragged=False):
        """The kernel for a problem, as flash_attn_varlen_func's arguments describe it:
        a finite ``window_size`` side means a local mask (one bounded on both sides, with
        ``causal`` its right side 0, is served by the bucket of its width, not of
        ``max_seqlen_q``), ``softcap > 0`` soft-capping,
        ``paged`` a block table; a window wider than ``max_seqlen_k`` (default
        ``max_seqlen_q``) is looked up as the causal or unmasked kernel that ``prefill``
        launches for it; ``ragged`` a varlen batch of several sequences (served its
        bucket's choice tuned on such batches, where the cache has one, as ``prefill``
        serves one). ``dtype``: "bf16", "fp16" or "e4m3" (FP8 inputs, bf16 output).
        Returns a dict: kernel id, cubin, launch parameters and why it was chosen.
        Raises Fa4genError naming what is unsupported."""
        local = any(w >= 0 for w in window_size)
        q = _Query(
            arch=_ARCHS.get(arch, 0),
            dtype=_DTYPES.get(dtype, 99),
            head_dim=head_dim,
            head_dim_v=head_dim if head_dim_v is None else head_dim_v,
            mask=2 if local else (1 if causal else 0),
            features=(1 if sinks else 0) | (2 if softcap > 0 else 0) | (4 if paged else 0)
            | (8 if ragged else 0),
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


def _e4m3(torch):
    """torch.float8_e4m3fn, or None in a torch without it."""
    return getattr(torch, "float8_e4m3fn", None)


def _dtype_code(torch, q, k, v):
    """0 bf16, 1 fp16, 2 e4m3 (fa4gen.h's dtype codes) for q, k and v of one dtype."""
    e4m3 = _e4m3(torch)
    codes = {torch.bfloat16: 0, torch.float16: 1}
    if e4m3 is not None:
        codes[e4m3] = 2
    if q.dtype not in codes:
        raise TypeError("q is %s: fa4-gen kernels take torch.bfloat16 or torch.float16, or torch.float8_e4m3fn "
                        "(FP8, with q/k/v_descale)" % q.dtype)
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            if e4m3 is not None and e4m3 in (q.dtype, k.dtype, v.dtype):
                raise TypeError("q, k and v are %s, %s and %s: fa4-gen takes all three in one 16-bit dtype, "
                                "all three in torch.float8_e4m3fn, or a bf16/fp16 q over e4m3 k and v (an FP8 KV "
                                "cache; q is quantised on the call)" % (q.dtype, k.dtype, v.dtype))
            raise TypeError("%s is %s and q is %s: q, k and v must share a dtype" % (name, t.dtype, q.dtype))
    return codes[q.dtype]


def _fp8_query(torch, q, k, v, cu_seqlens_q, descales):
    """A bf16/fp16 q beside e4m3 k and v (an FP8 KV cache under 16-bit activations, as
    vLLM and SGLang hold them), quantised to e4m3 here as those engines do before
    FlashAttention-3's FP8 call: divided by ``q_descale`` where given ([batch, heads_kv]
    f32, saturated at e4m3's 448), else by the power of two that brings each sequence's
    and KV head's largest |q| into (224, 448], which the call then passes as q_descale
    (a power of two scales exactly in q's own dtype, and e4m3 keeps the same relative
    precision at any scale). On the current stream, no host sync. Any other mix of dtypes
    is returned as it came, for _dtype_code to name."""
    e4m3 = _e4m3(torch)
    if e4m3 is None or q.dtype not in (torch.bfloat16, torch.float16) or k.dtype != e4m3 or v.dtype != e4m3:
        return q, descales
    packed = cu_seqlens_q is not None
    heads_q, heads_kv = q.shape[-2], k.shape[-2]
    if not q.is_cuda or q.dim() != (3 if packed else 4) or heads_kv == 0 or heads_q % heads_kv:
        return q, descales  # _attend's checks name the problem
    q_descale = descales[0]
    batch = cu_seqlens_q.numel() - 1 if packed else q.shape[0]
    if q_descale is not None:
        _descales(torch, [("q_descale", q_descale)], e4m3, batch, heads_kv, q.device)  # its checks
    # q as [..., heads_kv, group, d]: a KV head's query heads share its descale
    grouped = q.unflatten(-2, (heads_kv, heads_q // heads_kv))
    if packed:
        _index_tensor(torch, cu_seqlens_q, "cu_seqlens_q", q.device, batch + 1)
        # each row's sequence; rows past the last sequence (unread) get an extra one
        rows = torch.arange(q.shape[0], dtype=torch.int32, device=q.device)
        seq = torch.searchsorted(cu_seqlens_q[1:], rows, right=True).clamp_(max=batch).long()

    def per_row(t):  # a [batch, heads_kv] factor spread over grouped's rows
        if packed:
            return torch.cat([t, t.new_ones(1, heads_kv)])[seq][:, :, None, None]
        return t[:, None, :, None, None]

    if q_descale is None:
        if packed:
            row_max = torch.linalg.vector_norm(grouped, ord=float("inf"), dim=(2, 3)).float()
            amax = torch.zeros(batch + 1, heads_kv, device=q.device).scatter_reduce_(
                0, seq[:, None].expand(-1, heads_kv), row_max, "amax")[:batch]
        else:
            amax = torch.linalg.vector_norm(grouped, ord=float("inf"), dim=(1, 3, 4)).float()
        # fp16 holds 2^14 (the inverse); bf16 has f32's exponents
        least = 2.0 ** (-14 if q.dtype == torch.float16 else -100)
        q_descale = torch.exp2(torch.ceil(torch.log2(amax / 448.0))).clamp_min_(least)
        # two passes in q's dtype: the inverse is a power of two and every value lands within 448
        q8 = (grouped * per_row((1.0 / q_descale).to(q.dtype))).to(e4m3)
    else:
        q8 = grouped.float().div_(per_row(q_descale.float())).clamp_(-448.0, 448.0).to(e4m3)
    return q8.flatten(-3, -2), (q_descale, descales[1], descales[2])


def _descales(torch, given, dtype, batch, heads_kv, device):
    """FlashAttention-3's q/k/v_descale, f32 [batch, heads_kv] each (or None: 1.0), as
    the launch takes them: ((q, k, v pointers, batch stride, head stride), tensors to
    keep alive until the launch). The kernel reads one pair of strides for the three:
    descales whose strides differ are copied to contiguous ones (a few floats)."""
    given = [(name, t) for name, t in given if t is not None]
    if not given:
        return (0, 0, 0, 0, 0), ()
    if dtype != _e4m3(torch):
        raise ValueError("%s given with %s inputs: descales scale torch.float8_e4m3fn q, k and v; drop them for "
                         "16-bit inputs, or pass FP8 ones" % (" and ".join(name for name, _ in given), dtype))
    for name, t in given:
        _on_device(t, name, device)
        if t.dtype != torch.float32:
            raise ValueError("%s is %s: descales are torch.float32 (call .float())" % (name, t.dtype))
        if tuple(t.shape) != (batch, heads_kv):
            raise ValueError("%s has shape %s: FlashAttention-3's (batch, num_heads_kv) = (%d, %d) expected, one "
                             "factor per sequence and KV head (a per-tensor scale: .expand(%d, %d))"
                             % (name, tuple(t.shape), batch, heads_kv, batch, heads_kv))

    def strides(t):  # a dim of one entry has no stride to honour
        return tuple(0 if n == 1 else st for n, st in zip(t.shape, t.stride()))

    if len({strides(t) for _, t in given}) > 1:
        given = [(name, t.contiguous()) for name, t in given]
    tensors = dict(given)
    ptrs = [tensors[name].data_ptr() if name in tensors else 0 for name in ("q_descale", "k_descale", "v_descale")]
    return (*ptrs, *strides(given[0][1])), tuple(tensors.values())


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


def _unsupported(dropout_p, alibi_slopes):
    if dropout_p:
        raise NotImplementedError("dropout_p=%s: fa4-gen's prefill kernels have no dropout (inference only)" % dropout_p)
    if alibi_slopes is not None:
        raise NotImplementedError("alibi_slopes: fa4-gen's kernels have no ALiBi bias")


# Arguments of FlashAttention-3's calls (as sgl_kernel exports them) that change what is
# computed and that no fa4-gen kernel computes: each is refused by name, never ignored.
_REFUSED = {
    "k": "fa4-gen does not append keys to the cache: write them into k_cache first (as SGLang does "
         "before attention) and count them in cache_seqlens",
    "v": "fa4-gen does not append values to the cache: write them into v_cache first and count them "
         "in cache_seqlens",
    "qv": "fa4-gen's kernels have no second query operand (qv)",
    "rotary_cos": "fa4-gen's kernels do not apply rotary embeddings: rotate q and k before the call",
    "rotary_sin": "fa4-gen's kernels do not apply rotary embeddings: rotate q and k before the call",
    "rotary_seqlens": "fa4-gen's kernels do not apply rotary embeddings",
    "cache_leftpad": "fa4-gen's kernels read each sequence's keys from its first row: no left padding",
    "seqused_q": "fa4-gen's kernels take every query cu_seqlens_q gives a sequence: no seqused_q",
}


def _refuse(attention_chunk=0, sm_margin=0, **given):
    """NotImplementedError naming the first argument given whose work no kernel does."""
    for name, value in given.items():
        if value is not None:
            raise NotImplementedError("%s: %s" % (name, _REFUSED[name]))
    if attention_chunk:
        raise NotImplementedError("attention_chunk=%s: fa4-gen's masks are causal and sliding windows, not "
                                  "chunked attention" % attention_chunk)
    if sm_margin:
        raise NotImplementedError("sm_margin=%s: fa4-gen's persistent kernels size their grid to every SM"
                                  % sm_margin)


def _results(out, lse, return_lse, return_attn_probs):
    """What FlashAttention-2 returns: with ``return_attn_probs`` (its way to ask for the
    LSE) ``(out, lse, S_dmask)``, whose S_dmask is None without dropout, as here; with
    fa4-gen's ``return_lse`` ``(out, lse)``; else out."""
    if return_attn_probs:
        return out, lse, None
    return (out, lse) if return_lse else out


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


def _launch(torch, device, cache, fields, split=False, descale=(0, 0, 0, 0, 0)):
    """Packs the arguments and launches on the current stream of `device`; with `split`
    (dense batches, whose unmasked kernels may split their tail) it brings the stream's
    split workspace. `descale`: the e4m3 descale pointers and strides (_descales)."""
    def run():
        stream = _raw_stream(torch, device.index)
        ws = _split_workspace(torch, device, stream) if split else (0, 0)
        packed = _ARGS.pack(*fields, *ws, *descale)
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


def _attend(torch, q, k, v, cu_seqlens_q, max_seqlen_q, cu_seqlens_k, seqused_k, page_table, max_seqlen_k,
            causal, window_size, softcap, sinks, softmax_scale, out, cache, names=("block_table", "seqused_k"),
            descales=(None, None, None)):
    """One launch, every layout checked on the host first. q is dense [batch, seqlen_q,
    heads_q, d] or, with ``cu_seqlens_q``, packed [total_q, heads_q, d]. k and v are dense
    [batch, seqlen_k, heads_kv, d(_v)], packed [total_k, heads_kv, d(_v)] with
    ``cu_seqlens_k``, or with ``page_table`` pages [num_pages, page_size, heads_kv, d(_v)]
    (whose lengths come from ``seqused_k``, from ``cu_seqlens_k``, or are ``max_seqlen_k``);
    ``seqused_k`` caps each sequence's keys. Returns out (q's shape, d_v last) and the f32
    LSE: [batch, heads_q, seqlen_q] dense, [heads_q, total_q] packed. ``names``: what the
    caller calls the page table and seqused_k, for the errors. e4m3 q/k/v (``descales``:
    FlashAttention-3's q/k/v_descale, each None or f32 [batch, heads_kv]) give a bf16 out."""
    table_name, used_name = names
    q, descales = _fp8_query(torch, q, k, v, cu_seqlens_q, descales)
    dtype = _dtype_code(torch, q, k, v)
    fp8 = dtype == 2
    device = q.device
    if not q.is_cuda:
        raise ValueError("q is on %s: fa4-gen launches on CUDA devices" % device)
    for name, t in (("k", k), ("v", v)):
        _on_device(t, name, device)
    packed_q, paged = cu_seqlens_q is not None, page_table is not None
    if packed_q and q.dim() != 3:
        raise ValueError("q has shape %s: [total_q, heads_q, head_dim] expected" % (tuple(q.shape),))
    if not packed_q and q.dim() != 4:
        raise ValueError("q has shape %s: [batch, seqlen_q, heads_q, head_dim] expected" % (tuple(q.shape),))
    if paged and (k.dim() != 4 or v.dim() != 4):
        raise ValueError("with a page table, k and v are paged caches [num_pages, page_size, heads_kv, d]; "
                         "got k %s, v %s" % (tuple(k.shape), tuple(v.shape)))
    packed_k = not paged and cu_seqlens_k is not None
    if packed_k and (k.dim() != 3 or v.dim() != 3):
        raise ValueError("k and v are [total_k, heads_kv, d] (or pass block_table for paged caches); "
                         "got k %s, v %s" % (tuple(k.shape), tuple(v.shape)))
    if not paged and not packed_k and (k.dim() != 4 or v.dim() != 4):
        raise ValueError("k and v are [batch, seqlen_k, heads_kv, d]; got k %s, v %s"
                         % (tuple(k.shape), tuple(v.shape)))
    heads_q, head_dim = q.shape[-2], q.shape[-1]
    heads_kv, head_dim_v = k.shape[-2], v.shape[-1]
    if k.shape[-1] != head_dim:
        raise ValueError("q's head dim is %d and k's %d: they must match" % (head_dim, k.shape[-1]))
    if tuple(v.shape[:-1]) != tuple(k.shape[:-1]):
        raise ValueError("v has shape %s and k %s: they differ only in the last dim"
                         % (tuple(v.shape), tuple(k.shape)))
    for name, t in (("q", q), ("k", k), ("v", v)):
        _last_dim_contiguous(t, name)

    if packed_q:
        batch = cu_seqlens_q.numel() - 1
        if batch < 0:
            raise ValueError("cu_seqlens_q is empty: [batch + 1] prefix sums expected")
        cu_q = _index_tensor(torch, cu_seqlens_q, "cu_seqlens_q", device)
        seqlen_q, rows = int(max_seqlen_q), q.shape[0]
        q_strides = (0, q.stride(0), q.stride(1))
        out_shape, lse_shape = (rows, heads_q, head_dim_v), (heads_q, rows)
    else:
        batch, seqlen_q = q.shape[0], q.shape[1]
        cu_q, rows = 0, 0
        q_strides = (q.stride(0), q.stride(1), q.stride(2))
        out_shape, lse_shape = (batch, seqlen_q, heads_q, head_dim_v), (batch, heads_q, seqlen_q)

    cu_k, table, table_stride, page_size = 0, 0, 0, 0
    if paged:
        _on_device(page_table, table_name, device)
        if page_table.dtype != torch.int32 or page_table.dim() != 2 or page_table.shape[0] != batch \
                or (page_table.shape[1] > 1 and page_table.stride(1) != 1):
            raise ValueError("%s must be int32 [batch=%d, max_pages] with contiguous rows (got %s, shape %s)"
                             % (table_name, batch, page_table.dtype, tuple(page_table.shape)))
        if seqused_k is None and cu_seqlens_k is not None:
            _index_tensor(torch, cu_seqlens_k, "cu_seqlens_k", device, batch + 1)
            seqused_k = cu_seqlens_k[1:] - cu_seqlens_k[:-1]
        table, table_stride, page_size = page_table.data_ptr(), page_table.stride(0), k.shape[1]
        seqlen_k = int(max_seqlen_k)
        k_strides, v_strides = (k.stride(0), k.stride(1), k.stride(2)), (v.stride(0), v.stride(1), v.stride(2))
    elif packed_k:
        cu_k = _index_tensor(torch, cu_seqlens_k, "cu_seqlens_k", device, batch + 1)
        seqlen_k = int(max_seqlen_k)
        k_strides, v_strides = (0, k.stride(0), k.stride(1)), (0, v.stride(0), v.stride(1))
    else:
        if k.shape[0] < batch:
            raise ValueError("k and v hold %d sequences and the batch has %d" % (k.shape[0], batch))
        seqlen_k = k.shape[1] if max_seqlen_k is None else int(max_seqlen_k)
        k_strides, v_strides = (k.stride(0), k.stride(1), k.stride(2)), (v.stride(0), v.stride(1), v.stride(2))
    used_k = _index_tensor(torch, seqused_k, used_name, device, batch)
    descale, keep = _descales(torch, zip(("q_descale", "k_descale", "v_descale"), descales), q.dtype, batch,
                              heads_kv, device)

    out_dtype = torch.bfloat16 if fp8 else q.dtype  # e4m3 kernels write O in bf16
    if out is None:
        out = torch.empty(out_shape, dtype=out_dtype, device=device)
    elif tuple(out.shape) != out_shape or out.dtype != out_dtype:
        raise ValueError("out is %s %s: %s %s expected" % (out.dtype, tuple(out.shape), out_dtype, out_shape))
    else:
        _on_device(out, "out", device)
        _last_dim_contiguous(out, "out")
    out_strides = (0, out.stride(0), out.stride(1)) if packed_q else (out.stride(0), out.stride(1), out.stride(2))
    lse = torch.empty(lse_shape, dtype=torch.float32, device=device)
    lse_strides = (0, rows) if packed_q else (lse.stride(0), lse.stride(1))
    scale, left, right, cap, sinks, sinks_ptr = _scores(torch, sinks, heads_q, device, softmax_scale,
                                                        head_dim, window_size, softcap)
    # Only a dense batch over all its keys may split its last round by keys (fa4gen.h).
    dense = not (packed_q or paged or cu_k or used_k)
    _launch(torch, device, cache, (
        dtype, head_dim, head_dim_v, 1 if causal else 0,
        q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(),
        *q_strides, *k_strides, *v_strides, *out_strides,
        batch, seqlen_q, seqlen_k, heads_q, heads_kv,
        scale, 0.0, left, right, cap, sinks_ptr,
        cu_q, cu_k, used_k, table,
        *lse_strides, table_stride, page_size), split=dense and not causal, descale=descale)
    del keep  # the descales copied for the launch: freed in stream order, after the kernel
    return out, lse


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                           softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False,
                           block_table=None, *, sinks=None, seqused_k=None, return_lse=False, out=None,
                           cache=None, return_softmax_lse=False, seqused_q=None, qv=None, q_descale=None,
                           k_descale=None, v_descale=None, attention_chunk=0, num_splits=0, pack_gqa=None,
                           sm_margin=0, scheduler_metadata=None, ver=3):
    """FlashAttention's ``flash_attn_varlen_func`` on fa4-gen's kernels.

    q: [total_q, heads_q, d]; k, v: [total_k, heads_kv, d(_v)] packed by ``cu_seqlens_k``,
    or with ``block_table`` ([batch, max_pages] int32) the paged caches
    [num_pages, page_size, heads_kv, d(_v)] whose lengths come from ``seqused_k`` (SGLang's
    cache_seqlens) or, if not given, from ``cu_seqlens_k``. heads_q is a multiple of
    heads_kv (GQA/MQA). ``window_size`` as FlashAttention's (-1: unbounded; with causal the
    right side is 0), ``softcap`` 0 for none, ``sinks`` one logit per query head that joins
    the softmax denominator (gpt-oss). Returns out [total_q, heads_q, d_v], and with
    ``return_lse`` also the f32 LSE [heads_q, total_q] (``return_attn_probs``, as
    FlashAttention-2 without dropout: out, the LSE and None). The call is asynchronous on
    the current stream; cu_seqlens values are not read on the host.

    FP8: q, k and v in torch.float8_e4m3fn (all three, with or without ``block_table``) with
    FlashAttention-3's ``q_descale``, ``k_descale``, ``v_descale``: f32 [batch, heads_kv]
    (batch = the number of sequences; any strides; None: 1.0), the dequantised input
    being e4m3 value x descale of its sequence and KV head. out is then bf16, the LSE f32.
    A bf16/fp16 q beside e4m3 k and v (an FP8 KV cache under 16-bit activations) is
    quantised to e4m3 on the call, by ``q_descale`` if given, else per sequence and KV
    head by a power of two from its largest |q|.

    FlashAttention-3's keywords as sgl_kernel exports them are taken too:
    ``return_softmax_lse`` (``return_lse``), scheduling hints (``num_splits``,
    ``pack_gqa``, ``scheduler_metadata``, ``ver``) left to the tuned kernel, and the arguments whose work no
    kernel does (``seqused_q``, ``qv``, ``attention_chunk``, ``sm_margin``) refused by name.
    """
    import torch

    _unsupported(dropout_p, alibi_slopes)
    _refuse(seqused_q=seqused_q, qv=qv, attention_chunk=attention_chunk, sm_margin=sm_margin)
    return_lse = return_lse or return_softmax_lse
    if block_table is not None and seqused_k is None and cu_seqlens_k is None:
        raise ValueError("a paged call needs the key lengths: seqused_k or cu_seqlens_k")
    if block_table is None and cu_seqlens_k is None:
        raise ValueError("cu_seqlens_k is None: pass it, or block_table for paged caches")
    out, lse = _attend(torch, q, k, v, cu_seqlens_q, max_seqlen_q, cu_seqlens_k, seqused_k, block_table,
                       max_seqlen_k, causal, window_size, softcap, sinks, softmax_scale, out, cache,
                       descales=(q_descale, k_descale, v_descale))
    return _results(out, lse, return_lse, return_attn_probs)


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                    softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False, *,
                    sinks=None, return_lse=False, out=None, cache=None, return_softmax_lse=False, qv=None,
                    q_descale=None, k_descale=None, v_descale=None, attention_chunk=0, num_splits=0,
                    pack_gqa=None, sm_margin=0, scheduler_metadata=None, ver=3):
    """FlashAttention's ``flash_attn_func`` on fa4-gen's kernels: q [batch, seqlen_q,
    heads_q, d], k and v [batch, seqlen_k, heads_kv, d(_v)], any batch/token/head strides
    with the last dim contiguous. Returns out [batch, seqlen_q, heads_q, d_v], and with
    ``return_lse`` also the f32 LSE [batch, heads_q, seqlen_q] (``return_attn_probs``,
    FP8 inputs with their descales [batch, heads_kv] and FlashAttention-3's keywords as in
    ``flash_attn_varlen_func``)."""
    import torch

    _unsupported(dropout_p, alibi_slopes)
    _refuse(qv=qv, attention_chunk=attention_chunk, sm_margin=sm_margin)
    return_lse = return_lse or return_softmax_lse
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError("q, k, v are [batch, seqlen, heads, head_dim]; got q %s, k %s, v %s"
                         % (tuple(q.shape), tuple(k.shape), tuple(v.shape)))
    if k.shape[0] != q.shape[0] or v.shape[0] != q.shape[0]:
        raise ValueError("q has batch %d, k %d, v %d: they must match" % (q.shape[0], k.shape[0], v.shape[0]))
    out, lse = _attend(torch, q, k, v, None, None, None, None, None, None,
                       causal, window_size, softcap, sinks, softmax_scale, out, cache,
                       descales=(q_descale, k_descale, v_descale))
    return _results(out, lse, return_lse, return_attn_probs)


def _unpack(t, name, dim, parts, layout):
    """Views of a packed tensor's parts (no copy: the kernels take any strides)."""
    if t.dim() != dim or t.shape[dim - 3] != parts:
        raise ValueError("%s has shape %s: %s expected" % (name, tuple(t.shape), layout))
    index = (slice(None),) * (dim - 3)
    return [t[index + (i,)] for i in range(parts)]


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                              softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False, *,
                              sinks=None, return_lse=False, out=None, cache=None):
    """FlashAttention-2's ``flash_attn_qkvpacked_func``: qkv [batch, seqlen, 3, heads, d]
    (a fused QKV projection's output), read in place; otherwise ``flash_attn_func``."""
    q, k, v = _unpack(qkv, "qkv", 5, 3, "[batch, seqlen, 3, heads, head_dim]")
    return flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                           deterministic, return_attn_probs, sinks=sinks, return_lse=return_lse, out=out,
                           cache=cache)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                             softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False, *,
                             sinks=None, return_lse=False, out=None, cache=None):
    """FlashAttention-2's ``flash_attn_kvpacked_func``: kv [batch, seqlen_k, 2, heads_kv, d],
    read in place; otherwise ``flash_attn_func``."""
    k, v = _unpack(kv, "kv", 5, 2, "[batch, seqlen_k, 2, heads_kv, head_dim]")
    return flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                           deterministic, return_attn_probs, sinks=sinks, return_lse=return_lse, out=out,
                           cache=cache)


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0, softmax_scale=None, causal=False,
                                     window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                                     return_attn_probs=False, *, sinks=None, return_lse=False, out=None,
                                     cache=None):
    """FlashAttention-2's ``flash_attn_varlen_qkvpacked_func``: qkv [total, 3, heads, d]
    packed by ``cu_seqlens``, read in place; otherwise ``flash_attn_varlen_func``."""
    q, k, v = _unpack(qkv, "qkv", 4, 3, "[total, 3, heads, head_dim]")
    return flash_attn_varlen_func(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, dropout_p,
                                  softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                                  return_attn_probs, sinks=sinks, return_lse=return_lse, out=out, cache=cache)


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                                    softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                                    alibi_slopes=None, deterministic=False, return_attn_probs=False, *,
                                    sinks=None, return_lse=False, out=None, cache=None):
    """FlashAttention-2's ``flash_attn_varlen_kvpacked_func``: kv [total_k, 2, heads_kv, d]
    packed by ``cu_seqlens_k``, read in place; otherwise ``flash_attn_varlen_func``."""
    k, v = _unpack(kv, "kv", 4, 2, "[total_k, 2, heads_kv, head_dim]")
    return flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
                                  softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                                  return_attn_probs, sinks=sinks, return_lse=return_lse, out=out, cache=cache)


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, qv=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, page_table=None,
                            cu_seqlens_q=None, cu_seqlens_k_new=None, max_seqlen_q=None, rotary_seqlens=None,
                            q_descale=None, k_descale=None, v_descale=None, softmax_scale=None, causal=False,
                            window_size=(-1, -1), attention_chunk=0, softcap=0.0, rotary_interleaved=True,
                            scheduler_metadata=None, num_splits=0, pack_gqa=None, sm_margin=0,
                            return_softmax_lse=False, sinks=None, ver=3, *, block_table=None, out=None,
                            cache=None, max_seqlen_k=None):
    """FlashAttention-3's ``flash_attn_with_kvcache`` (as sgl_kernel exports it, the call
    SGLang's FA3 backend makes for extend) on fa4-gen's kernels, for prefill over a cache
    that already holds the new tokens' keys.

    q: [batch, seqlen_q, heads_q, d], or [total_q, heads_q, d] with ``cu_seqlens_q`` and
    ``max_seqlen_q``. k_cache, v_cache: [batch_cache, seqlen_cache, heads_kv, d(_v)] (rows
    picked by ``cache_batch_idx``, else the first ``batch``), or with ``page_table``
    ([batch, max_pages] int32; ``block_table`` is FlashAttention-2's name for it) pages
    [num_pages, page_size, heads_kv, d(_v)]. ``cache_seqlens`` (an int or [batch] int32)
    is each sequence's keys, new tokens included; without it every sequence has all the
    keys its cache row or page-table row holds. ``max_seqlen_k`` (SGLang's dispatcher
    passes it on some paths), the most keys of one sequence, bounds the keys read as the
    rows' width does without it; as in FlashAttention, a sequence with more keys is cut
    to it. The queries are each sequence's last
    tokens: causal and windows are aligned bottom-right. ``sinks``, ``softcap`` and
    ``window_size`` as in ``flash_attn_varlen_func``. Returns out (q's shape, d_v last) and
    with ``return_softmax_lse`` also the f32 LSE ([batch, heads_q, seqlen_q], or
    [heads_q, total_q] packed).

    ``cu_seqlens_k_new`` only describes ``k``/``v``, which are refused, so it is ignored;
    ``num_splits``, ``pack_gqa``, ``scheduler_metadata``, ``rotary_interleaved`` and
    ``ver`` are scheduling or version hints: the tuned kernel decides. Arguments whose
    work fa4-gen does not do (appending k/v, rotary, left padding, attention chunks, an
    SM margin) raise NotImplementedError naming them.

    FP8 (e4m3 q and caches, ``q/k/v_descale`` as in ``flash_attn_varlen_func``) over dense
    caches and over an e4m3 ``page_table`` or ``cache_batch_idx`` (SGLang's FP8 KV cache); a
    cache built without the paged e4m3 kernels raises Fa4genError naming that, which
    ``fa4gen.routed`` hands to its fallback.
    """
    import torch

    _refuse(k=k, v=v, qv=qv, rotary_cos=rotary_cos, rotary_sin=rotary_sin, rotary_seqlens=rotary_seqlens,
            cache_leftpad=cache_leftpad, attention_chunk=attention_chunk, sm_margin=sm_margin)
    if block_table is not None:
        if page_table is not None:
            raise ValueError("page_table and block_table name the same table: pass one of them")
        page_table = block_table
    if cu_seqlens_q is not None:
        if max_seqlen_q is None:
            raise ValueError("cu_seqlens_q needs max_seqlen_q, the most queries of one sequence")
        batch = cu_seqlens_q.numel() - 1
    elif q.dim() == 4:
        batch = q.shape[0]
    else:
        raise ValueError("q has shape %s: [batch, seqlen_q, heads_q, head_dim], or [total_q, heads_q, head_dim] "
                         "with cu_seqlens_q" % (tuple(q.shape),))
    if k_cache.dim() != 4 or v_cache.dim() != 4:
        raise ValueError("k_cache and v_cache are [batch_cache, seqlen_cache, heads_kv, d] or, with page_table, "
                         "[num_pages, page_size, heads_kv, d]; got %s and %s"
                         % (tuple(k_cache.shape), tuple(v_cache.shape)))
    if cache_batch_idx is not None:
        if page_table is not None:
            raise ValueError("cache_batch_idx picks rows of a dense cache; with page_table the table picks them: "
                             "pass one of them")
        _index_tensor(torch, cache_batch_idx, "cache_batch_idx", q.device, batch)
        # A dense cache read through cache_batch_idx is a paged one whose pages are whole
        # rows: the table has one page per sequence, the row cache_batch_idx[b].
        page_table = cache_batch_idx.view(batch, 1)
    keys = (page_table.shape[1] if page_table is not None and page_table.dim() == 2 else 1) * k_cache.shape[1]
    if isinstance(cache_seqlens, int):
        if cache_seqlens < 0:
            raise ValueError("cache_seqlens=%d: a number of keys is at least 0" % cache_seqlens)
        keys, cache_seqlens = min(keys, cache_seqlens), None  # every sequence the same: no tensor needed
    if max_seqlen_k is not None:
        if int(max_seqlen_k) < 0:
            raise ValueError("max_seqlen_k=%d: a number of keys is at least 0" % int(max_seqlen_k))
        keys = min(keys, int(max_seqlen_k))
    out, lse = _attend(torch, q, k_cache, v_cache, cu_seqlens_q, max_seqlen_q, None, cache_seqlens, page_table,
                       keys, causal, window_size, softcap, sinks, softmax_scale, out, cache,
                       names=("page_table" if cache_batch_idx is None else "cache_batch_idx", "cache_seqlens"),
                       descales=(q_descale, k_descale, v_descale))
    return (out, lse) if return_softmax_lse else out


from .route import routed  # noqa: E402  (it calls the functions above)
