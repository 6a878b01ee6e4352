"""A GGUF's weights as the builder's child hands them to onnxruntime-genai's builder: dequantized only
where they are read (gguf_builder.py uses it).

The builder's loader reads every tensor of the file into a torch tensor before it makes the graph, and
the graph's initializers stay lazy views of those tensors until the int4 pass quantizes them, one at a
time (nbits.py). So the child held the whole model in float16 for the whole build: 3.1 GB for the 1.5B
target, the biggest part of its peak. A `GGUFWeight` is a torch tensor with no data of its own: its
shape and dtype are the dequantized weight's, and it keeps the file's blocks (a view of the mapped file).
The views the loader and builder take of a weight (`.T`, a reshape to its own shape, row slices, the
loader's copy: LoaderTorch) stay `GGUFWeight`s; anything that reads values (a cast, a concatenation,
any other op) gets them dequantized right then, as `as_float` gives them, in memory of the reader's
own. A row slice dequantizes only its rows (a GGUF quantizes each row on its own), so the int4 pass
reads the 151,936-row embedding a slice at a time.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.utils._pytree import tree_map

aten = torch.ops.aten
RESHAPES = (aten.view.default, aten._unsafe_view.default, aten._reshape_alias.default, aten.reshape.default)


def as_float(tensor, dtype, rows: slice | None = None) -> np.ndarray:
    """A reader tensor's values (its `rows`, or all): F32 and F16 as they lie in the file, any other type
    dequantized by the `gguf` package, in `dtype` unless a value lies past its range (kept float32)."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    data = tensor.data if rows is None else tensor.data[rows]
    if tensor.tensor_type in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
        return data
    values = dequantize(data, tensor.tensor_type)  # float32, [rows, columns]
    if values.size and max(values.max(), -values.min()) > np.finfo(dtype).max:
        return values
    return values.astype(dtype)


def float_shape(tensor) -> tuple[int, ...]:
    """The shape of a reader tensor's values once dequantized (its `data` is blocks of bytes)."""
    from gguf import GGMLQuantizationType
    from gguf.quants import quant_shape_from_byte_shape

    if tensor.tensor_type in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
        return tuple(tensor.data.shape)
    return tuple(quant_shape_from_byte_shape(tensor.data.shape, tensor.tensor_type))


class GGUFWeight(torch.Tensor):
    """A 2-D weight of the file, `rows` of it, transposed or not, read when an op needs its values.
    `read()` is called after each reading (the reader drops the file's pages it touched)."""

    @staticmethod
    def __new__(cls, tensor, dtype, read=lambda: None, rows: range | None = None, transposed: bool = False):
        shape = float_shape(tensor)
        rows = range(shape[0]) if rows is None else rows
        shape = (len(rows), shape[1])
        made = torch.Tensor._make_wrapper_subclass(cls, shape[::-1] if transposed else shape,
                                                    dtype=torch.from_numpy(np.empty(0, dtype)).dtype)
        made.tensor, made.float_dtype, made.read, made.rows, made.transposed = tensor, dtype, read, rows, transposed
        return made

    def __repr__(self):
        return f"GGUFWeight({self.tensor.name}, rows {self.rows.start}:{self.rows.stop}, {tuple(self.shape)})"

    def dequantized(self) -> torch.Tensor:
        """The weight's values, dequantized into memory of their own."""
        found = as_float(self.tensor, self.float_dtype, slice(self.rows.start, self.rows.stop))
        values = torch.from_numpy(np.array(found) if found.base is not None else found)
        self.read()
        return values.T if self.transposed else values

    def numpy(self, *, force: bool = False) -> np.ndarray:  # torch's refuses a subclass
        return self.dequantized().numpy()

    def __array__(self, dtype=None, copy=None):
        return self.numpy() if dtype is None else self.numpy().astype(dtype)

    def with_fields(self, **change) -> GGUFWeight:
        """The same weight, another of its views (its rows, transposed or not)."""
        fields = {"rows": self.rows, "transposed": self.transposed, **change}
        return GGUFWeight(self.tensor, self.float_dtype, self.read, **fields)

    def sliced(self, dim: int, start, end, step) -> GGUFWeight | None:
        """A row slice as a weight of its own; None for any other slice (it reads values)."""
        size = self.shape[dim]
        start, end, _ = slice(start, end).indices(size)
        if (start, end, step) == (0, size, 1):
            return self.with_fields()
        if step != 1 or dim != (1 if self.transposed else 0):
            return None
        return self.with_fields(rows=self.rows[start:end])

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        weight = args[0] if args and isinstance(args[0], GGUFWeight) else None
        if weight is not None:
            if func is aten.t.default or (func is aten.permute.default and list(args[1]) == [1, 0]):
                return weight.with_fields(transposed=not weight.transposed)
            if func in RESHAPES and tuple(args[1]) == tuple(weight.shape):
                return weight.with_fields()  # a new object: torch refuses a view that is its own base
            if func is aten.slice.Tensor:
                found = weight.sliced(*(list(args[1:]) + [0, None, None, 1][len(args) - 1:]))
                if found is not None:
                    return found
        values = tree_map(lambda a: a.dequantized() if isinstance(a, GGUFWeight) else a, (args, kwargs))
        return func(*values[0], **values[1])


class LoaderTorch:
    """torch as the builder's GGUF loader sees it (gguf_builder.py sets it as the loader's `torch`): the
    loader copies each tensor it reads (`torch.tensor(tensor.data)`), and the copy of a GGUFWeight is
    the weight itself, unread. Anything else is torch's own. (A copy in torch detaches, and a detached
    weight must have values: ONNX IR's writer reads a tensor's memory through `detach()`.)"""

    def __getattr__(self, name):
        return getattr(torch, name)

    @staticmethod
    def tensor(data, *args, **kwargs):
        if isinstance(data, GGUFWeight) and not args and not kwargs:
            return data
        return torch.tensor(data, *args, **kwargs)
