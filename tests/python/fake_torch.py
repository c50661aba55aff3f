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
        """A broadcast view: the new and the widened dims have stride 0."""
        lead = len(shape) - self.dim()
        strides = [0] * lead + [0 if n != m else st for n, m, st in zip(shape[lead:], self.shape, self._strides)]
        return Tensor(shape, self.dtype, self.device, strides, self._address)

    def view(self, *shape):
        if not self.is_contiguous():
            raise RuntimeError("view of a non-contiguous tensor")
        return Tensor(shape, self.dtype, self.device, address=self._address)

    def __getitem__(self, index):
        """Basic indexing: slices and integers over the leading dims, as views."""
        index = index if isinstance(index, tuple) else (index,)
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


def empty(shape, dtype=float32, device="cuda:0"):
    return Tensor(shape, dtype, device)


def zeros(shape, dtype=float32, device="cuda:0"):
    return Tensor((shape,) if isinstance(shape, int) else shape, dtype, device)


def full(shape, value, dtype=float32, device="cuda:0"):
    t = Tensor(shape, dtype, device)
    t.fill_value = value
    return t


def install():
    module = sys.modules[__name__]
    module.cuda = types.SimpleNamespace(current_device=lambda: 0)
    sys.modules["torch"] = module
    return module
