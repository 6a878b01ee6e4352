"""onnxruntime-genai's model builder as a child process that reads a quantized GGUF (onnx_build.py runs it).

The builder (0.18) reads a GGUF through `loaders/gguf.py`, which takes each tensor's data as it lies in
the file (`torch.tensor(tensor.data)`) and reshapes it: right for F32 and F16, wrong for a model pack's
Q4_K and Q6_K blocks. `read_quantized_tensors` gives that loader a reader whose other tensors come back
dequantized by the `gguf` package's own `gguf.quants.dequantize` (every type it knows: Q4_0 … Q8_0,
the K-quants, BF16), one tensor at a time as the loader reads it; then the builder's own main runs with
this process's arguments, unchanged:

    python -m playground.engine.runners.gguf_builder -m <config and tokenizer folder> -i <file.gguf> \
        -o <out> -p int4 -e cpu [--extra_options ...]

The dequantized weights are handed over in float16, unless the build keeps float32 weights (`-p fp32`).
The builder casts each weight to its own dtype one at a time when it serializes the graph
(`make_initializer(..., to=io_dtype)`, a lazy tensor), and float16 → float32 is exact, so an int4
build quantizes the float16 values. Those round the dequantized ones by at most 2^-11 of their size,
finer than the bfloat16 checkpoint a build otherwise reads (2^-8) and far below int4's step (about 1/8
of a block's largest weight). A tensor past float16's range stays float32.

Memory, the 1.5B target's child (peak RSS): the loader as it is holds every weight dequantized until
the graph is written (3.1 GB in float16), and the builder's own int4 pass made a float32 copy of the
whole graph before it quantized: 13.4 GB. Two changes take it to 2.2 GB and write the same bytes
(tests/engine/test_gguf_build.py): each matrix comes to the loader as a GGUFWeight, read only where a
value is needed (gguf_weights.py), and the int4 pass quantizes one weight at a time, the embedding and
head a slice of rows at a time (nbits.py). What is left is the int4 weights made so far and one slice's
float32 copies the quantizer makes.
"""

from __future__ import annotations

import argparse
import importlib
import mmap
import runpy
import sys
from pathlib import Path

import numpy as np

from playground.engine.runners.gguf_weights import GGUFWeight, LoaderTorch, as_float, float_shape

BUILDER = "onnxruntime_genai.models.builder"
PACKAGE = "onnxruntime_genai.models"
# The child's peak (/usr/bin/time's maximum RSS), measured on the default pair: 2.23 GB for the 1.5B
# target's 1.10 GB file, 1.36 GB for the 0.5B draft's 0.49 GB. About 0.6 GB of libraries and 1.6 bytes
# per byte of the file (the int4 weights made so far, and a slice's float32 copies).
PEAK_BASE, PEAK_PER_BYTE = 0.6e9, 1.6


def main(argv: list[str], ours: bool = True) -> None:
    """The builder's main on `argv`. `ours`: weights dequantized where the builder reads them
    (gguf_weights.py) and its int4 pass one weight at a time (nbits.py); otherwise the model is
    dequantized whole as the loader reads it and quantized by the builder's own pass (what the two
    save: the module's docstring)."""
    read_quantized_tensors(weight_dtype(argv), lazy=ours)
    if ours:
        from playground.engine.runners import nbits

        nbits.install(builder_modules("builders.base"))
    sys.argv = [BUILDER, *argv]
    runpy.run_module(BUILDER, run_name="__main__", alter_sys=True)


def peak_bytes(gguf: Path) -> int:
    """The resident bytes this child peaks at for an int4 build of `gguf` (PEAK_BASE, PEAK_PER_BYTE)."""
    return int(PEAK_BASE + PEAK_PER_BYTE * gguf.stat().st_size)


def weight_dtype(argv: list[str]):
    """float32 for a build that keeps float32 weights, float16 otherwise (why: the module's docstring)."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("-p", "--precision")
    precision = parser.parse_known_args(argv)[0].precision
    return np.float32 if precision == "fp32" else np.float16


def builder_modules(name: str) -> list:
    """The builder's module `name` (e.g. "loaders.gguf") under both names it is imported by, to patch
    each: the builder puts its own folder on sys.path and imports `name`, while the package's own
    modules (and ours) import it by the package path."""
    importlib.import_module(PACKAGE)  # puts the builder's folder on sys.path (its imports need it)
    return [importlib.import_module(name), importlib.import_module(f"{PACKAGE}.{name}")]


def read_quantized_tensors(dtype, lazy: bool = True) -> None:
    """Point the builder's GGUF loader at a reader that dequantizes (the patch this module exists for)."""
    for module in builder_modules("loaders.gguf"):
        module.GGUFReader = dequantizing_reader(dtype, lazy)
        if lazy:  # its copy of each tensor it reads keeps a GGUFWeight unread
            module.torch = LoaderTorch()


def dequantizing_reader(dtype, lazy: bool = False):
    from gguf.gguf_reader import GGUFReader

    class DequantizingReader(GGUFReader):
        """gguf's reader, each tensor's `data` given as floats, its file read through a plain array.

        The reader slices its np.memmap once per item of every metadata array, the 151k-token
        vocabulary and merges included, and each memmap slice runs numpy's Python-level memmap hooks:
        18 s of a draft's build. A plain ndarray view of the same mapping gives the same bytes at
        C speed (the fields and tensors compared equal, 3x faster)."""

        def __init__(self, path, *args, **kwargs):
            super().__init__(path, *args, **kwargs)
            self.tensors = [FloatTensor(tensor, dtype, self.forget_pages, lazy) for tensor in self.tensors]

        @property
        def data(self):
            return self._plain

        @data.setter
        def data(self, value):  # the reader's own np.memmap, viewed as a plain array (its base keeps it open)
            self._mapping = getattr(value, "_mmap", None)
            self._plain = value.view(np.ndarray) if isinstance(value, np.memmap) else value

        def forget_pages(self) -> None:
            """Drop the file's pages read so far from this process's resident memory. They are clean
            pages of a read-only mapping, still in the page cache and read again on a touch, but
            counted in the child's RSS until dropped: the whole GGUF (1.1 GB for the 1.5B) beside the
            float16 weights made from it."""
            if self._mapping is not None and hasattr(mmap, "MADV_DONTNEED"):
                self._mapping.madvise(mmap.MADV_DONTNEED)

    return DequantizingReader


class FloatTensor:
    """A reader's tensor whose `data` is its values as floats, not kept here: the loader keeps what it
    reads, so the model is held once, not twice. `lazy`: a matrix comes as a GGUFWeight, read where
    the builder reads it; otherwise dequantized each time `data` is read. Anything else (name, shape,
    type) is the tensor's own."""

    def __init__(self, tensor, dtype, read=lambda: None, lazy: bool = False):
        self.tensor, self.dtype, self.read, self.lazy = tensor, dtype, read, lazy  # read(): its bytes are read

    def __getattr__(self, name):
        return getattr(self.tensor, name)

    @property
    def data(self):
        if self.lazy and len(float_shape(self.tensor)) == 2:
            return GGUFWeight(self.tensor, self.dtype, self.read)
        values = as_float(self.tensor, self.dtype)
        if values.base is None:  # dequantized into memory of its own: the file's bytes are done with
            self.read()
        return values


if __name__ == "__main__":
    main(sys.argv[1:])
