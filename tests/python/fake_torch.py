"""Just enough of torch's surface for fa4gen's host-side argument handling, without a GPU.

Tensors here have shapes, strides, dtypes, a device and an address, and no values: the
checks fa4gen runs before a launch read nothing else. `install()` puts this module in
`sys.modules["torch"]`, so `import torch` inside fa4gen's calls finds it.
"""

import sys
import types


class dtype:
    def __init__(self, name, itemsize):
        self.name, self.itemsize = name, itemsize

    def __repr__(self):
        return "torch." + self.name


bfloat16, float16, float32 = dtype("bfloat16", 2), dtype("float16", 2), dtype("float32", 4)
int32, int64, uint8 = dtype("int32", 4), dtype("int64", 8), dtype("uint8", 1)
float8_e4m3fn = dtype("float8_e4m3fn", 1)


class device:
    def __init__(self, spec="cuda:0", index=None):
        if isinstance(spec, device):
            spec, index = spec.type, spec.index
        kind, _, idx = str(spec).partition(":")
        self.type = kind
        self.index = index if index is not None else (int(idx) if idx else (0 if kind == "cuda" else None))

    def __eq__(self, other):
        other = other if isinstance(other, device) else device(other)
        return (self.type, self.index) == (other.type, other.index)

    def __hash__(self):
        return hash((self.type, self.index))

    def __str__(self):
        return self.type if self.index is None else "%s:%d" % (self.type, self.index)

    __repr__ = __str__


_next_address = [1 << 32]


def _allocate(nbytes):
    """A fresh 256-byte aligned address, as the caching allocator hands out."""
    addr = _next_address[0]
    _next_address[0] += (nbytes + 511) // 256 * 256
    return addr


def _contiguous_strides(shape):
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


class Tensor:
    def __init__(self, shape, dtype_, dev="cuda:0", strides=None, address=None):
        self.shape = tuple(int(n) for n in shape)
        self.dtype = dtype_
        self.device = device(dev)
        self._strides = tuple(strides) if strides is not None else _contiguous_strides(self.shape)
        self._address = address if address is not None else _allocate(self.numel() * dtype_.itemsize)

    @property
    def is_cuda(self):
        return self.device.type == "cuda"

    def dim(self):
        return len(self.shape)

    def numel(self):
        n = 1
        for s in self.shape:
            n *= s
        return n

    def stride(self, i=None):
        return self._strides if i is None else self._strides[i]

    def data_ptr(self):
        return self._address

    def is_contiguous(self):
        return all(st == c for n, st, c in zip(self.shape, self._strides, _contiguous_strides(self.shape))
                   if n > 1)

    def contiguous(self):
        return self if self.is_contiguous() else Tensor(self.shape, self.dtype, self.device)

    def to(self, dtype_):
        return self if dtype_ is self.dtype else Tensor(self.shape, dtype_, self.device)

    def expand(self, *shape):
        """A broadcast view: the new and the widened dims have stride 0 (-1 keeps a dim)."""
        lead = len(shape) - self.dim()
        shape = shape[:lead] + tuple(m if n == -1 else n for n, m in zip(shape[lead:], self.shape))
        strides = [0] * lead + [0 if n != m else st for n, m, st in zip(shape[lead:], self.shape, self._strides)]
        return Tensor(shape, self.dtype, self.device, strides, self._address)

    # Shape-level arithmetic (no values): results broadcast as torch's do, a tensor
    # operand's dtype promoting a 16-bit one to f32, a Python number keeping the dtype.
    def _binary(self, other):
        if not isinstance(other, Tensor):
            return Tensor(self.shape, self.dtype, self.device)
        dtype_ = self.dtype if self.dtype is other.dtype else float32
        return Tensor(_broadcast(self.shape, other.shape), dtype_, self.device)

    __mul__ = __truediv__ = __rtruediv__ = __rmul__ = _binary

    def _inplace(self, *args, **kwargs):
        return self

    div_ = clamp_ = clamp_min_ = scatter_reduce_ = _inplace

    def float(self):
        return self.to(float32)

    def long(self):
        return self.to(int64)

    def new_ones(self, *shape):
        return Tensor(shape, self.dtype, self.device)

    def unflatten(self, dim, sizes):
        dim %= self.dim()
        return Tensor(self.shape[:dim] + tuple(sizes) + self.shape[dim + 1:], self.dtype, self.device)

    def flatten(self, start, end):
        start, end = start % self.dim(), end % self.dim()
        n = 1
        for s in self.shape[start:end + 1]:
            n *= s
        return Tensor(self.shape[:start] + (n,) + self.shape[end + 1:], self.dtype, self.device)

    def view(self, *shape):
        if not self.is_contiguous():
            raise RuntimeError("view of a non-contiguous tensor")
        return Tensor(shape, self.dtype, self.device, address=self._address)

    def __getitem__(self, index):
        """Basic indexing: slices and integers over the leading dims, as views; None adds
        a dim (shape only); a tensor picks rows of dim 0 (a fresh tensor, as torch's)."""
        index = index if isinstance(index, tuple) else (index,)
        if isinstance(index[0], Tensor):
            return Tensor(index[0].shape + self.shape[1:], self.dtype, self.device)[(slice(None),) + index[1:]]
        if None in index:
            shape, at = list(self.shape), 0
            for i in index:
                if i is None:
                    shape.insert(at, 1)
                at += 1
            return Tensor(shape, self.dtype, self.device)
        shape, strides, address = [], [], self._address
        for dim, (n, st) in enumerate(zip(self.shape, self._strides)):
            i = index[dim] if dim < len(index) else slice(None)
            if isinstance(i, int):
                address += (i % n) * st * self.dtype.itemsize
                continue
            start, stop, step = i.indices(n)
            address += start * st * self.dtype.itemsize
            shape.append(max(0, (stop - start + step - 1) // step))
            strides.append(st * step)
        return Tensor(shape, self.dtype, self.device, strides, address)

    def __sub__(self, other):
        return Tensor(self.shape, self.dtype, self.device)

    def __repr__(self):
        return "Tensor(shape=%s, dtype=%s, strides=%s)" % (self.shape, self.dtype, self._strides)


def _broadcast(a, b):
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    if any(x != y and 1 not in (x, y) for x, y in zip(a, b)):
        raise RuntimeError("shapes %s and %s do not broadcast" % (a, b))
    return tuple(max(x, y) if 1 in (x, y) else x for x, y in zip(a, b))


def empty(shape, dtype=float32, device="cuda:0"):
    return Tensor(shape, dtype, device)


def zeros(*shape, dtype=float32, device="cuda:0"):
    shape = shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape
    return Tensor(shape, dtype, device)


def arange(n, dtype=int64, device="cuda:0"):
    return Tensor((n,), dtype, device)


def searchsorted(sorted_sequence, values, right=False):
    return Tensor(values.shape, int64, values.device)


def cat(tensors, dim=0):
    first = tensors[0]
    n = sum(t.shape[dim] for t in tensors)
    return Tensor(first.shape[:dim] + (n,) + first.shape[dim + 1:], first.dtype, first.device)


def _same(x):
    return Tensor(x.shape, x.dtype, x.device)


exp2 = ceil = log2 = _same


def _vector_norm(x, ord=2, dim=None):
    dims = {d % x.dim() for d in dim}
    return Tensor([n for i, n in enumerate(x.shape) if i not in dims], x.dtype, x.device)


linalg = types.SimpleNamespace(vector_norm=_vector_norm)


def full(shape, value, dtype=float32, device="cuda:0"):
    t = Tensor(shape, dtype, device)
    t.fill_value = value
    return t


def install():
    module = sys.modules[__name__]
    module.cuda = types.SimpleNamespace(current_device=lambda: 0)
    sys.modules["torch"] = module
    return module
