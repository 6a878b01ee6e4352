"""A GGUF file's header, read without its tensors: metadata, tensor names, shapes and types.

The layout is GGUF's documented one (ggml's docs/gguf.md): the magic `GGUF`, a version, the tensor
count and the key-value count, then each key-value pair, then each tensor's name, shape, type and
offset; the data follows, aligned. Read here front to back from an ordinary buffered file, each read
bounded, so a 50 GB model costs the few megabytes of its header (most of it the vocabulary and merges)
and a truncated or corrupt file fails at the byte where it stops making sense. gguf's own GGUFReader is
not used: it maps the whole file, makes a numpy view of every tensor and a numpy object per vocabulary
entry, and on a file shorter than its tensors it fails with numpy's words, not the file's. Its
constants (value types, quantization block sizes, file types) are used.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

MAGIC = b"GGUF"
BUFFER = 1 << 20
# Bounds past which a header is corrupt rather than big: a chat template is tens of kilobytes, the
# largest vocabularies and merge lists a few hundred thousand entries, a model a few thousand tensors.
MAX_STRING = 16 << 20
MAX_ARRAY = 1 << 24
MAX_PAIRS = 1 << 16
MAX_TENSORS = 1 << 20
MAX_DIMS = 8

SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
STRING, ARRAY = 8, 9


class NotGGUF(ValueError):
    """The file does not begin with GGUF's magic bytes."""


class BadGGUF(ValueError):
    """A GGUF header that stops or stops making sense; the message says where."""


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple[int, ...]  # GGUF's order: the fastest-moving dimension first
    type: int  # ggml's quantization type
    offset: int  # from the start of the data section

    @property
    def elements(self) -> int:
        count = 1
        for size in self.shape:
            count *= size
        return count


@dataclass(frozen=True)
class Header:
    version: int
    metadata: dict  # key -> value (arrays as lists)
    tensors: tuple[Tensor, ...]
    data_start: int  # the aligned offset where tensor data begins

    def get(self, key: str, default=None):
        return self.metadata.get(key, default)

    @property
    def architecture(self) -> str:
        return str(self.get("general.architecture", ""))


def is_gguf(path: Path) -> bool:
    """Does the file begin with GGUF's magic? (an Ollama blob has no suffix; a .gguf name proves nothing)"""
    try:
        with open(path, "rb") as f:
            return f.read(4) == MAGIC
    except OSError:
        return False


def read_header(path: Path) -> Header:
    """The header of the GGUF at `path`; NotGGUF or BadGGUF (saying where) when it is not one or is damaged."""
    with open(path, "rb", buffering=BUFFER) as f:
        reader = Reader(f, Path(path).stat().st_size)
        magic = f.read(4)
        if magic != MAGIC:
            raise NotGGUF(f"not a GGUF file: it begins with {magic!r}, not {MAGIC!r}")
        version = reader.scalar("I")
        if version not in (2, 3):
            raise BadGGUF(f"GGUF version {version} (this reader knows 2 and 3; a big-endian file reads as a huge number)")
        tensors, pairs = reader.scalar("Q"), reader.scalar("Q")
        reader.bounded("key-value pairs", pairs, MAX_PAIRS)
        reader.bounded("tensors", tensors, MAX_TENSORS)
        metadata = {}
        for _ in range(pairs):
            key = reader.string()
            metadata[key] = reader.value(reader.scalar("I"), key)
        infos = tuple(reader.tensor() for _ in range(tensors))
        alignment = metadata.get("general.alignment", 32)
        if not isinstance(alignment, int) or alignment <= 0:
            raise BadGGUF(f"general.alignment is {alignment!r}, not a positive integer")
        start = -(-f.tell() // alignment) * alignment
    return Header(version, metadata, infos, start)


class Reader:
    """Little-endian reads off a file, each checked against the bytes left, so a truncated header
    fails naming the offset instead of reading garbage."""

    def __init__(self, f, size: int):
        self.f, self.size = f, size

    def take(self, n: int) -> bytes:
        at = self.f.tell()
        data = self.f.read(n)
        if len(data) != n:
            raise BadGGUF(f"truncated: the header stops at byte {at + len(data):,} of {self.size:,} "
                          f"(it needed {n} more bytes there)")
        return data

    def scalar(self, code: str):
        return struct.unpack("<" + code, self.take(struct.calcsize(code)))[0]

    def bounded(self, what: str, count: int, most: int) -> None:
        if count > most:
            raise BadGGUF(f"{count:,} {what} at byte {self.f.tell():,}: more than any real file holds ({most:,})")

    def string(self) -> str:
        length = self.scalar("Q")
        self.bounded("bytes in a string", length, MAX_STRING)
        return self.take(length).decode("utf-8", errors="replace")

    def value(self, kind: int, key: str):
        if kind in SCALARS:
            return self.scalar(SCALARS[kind])
        if kind == STRING:
            return self.string()
        if kind == ARRAY:
            inner, count = self.scalar("I"), self.scalar("Q")
            self.bounded(f"entries in {key}", count, MAX_ARRAY)
            if inner in SCALARS:  # one read for the whole array (a vocabulary's scores and types)
                code = SCALARS[inner]
                return list(struct.unpack(f"<{count}{code}", self.take(count * struct.calcsize(code))))
            return [self.value(inner, key) for _ in range(count)]
        raise BadGGUF(f"{key}: unknown value type {kind} at byte {self.f.tell():,}")

    def tensor(self) -> Tensor:
        name = self.string()
        dims = self.scalar("I")
        self.bounded(f"dimensions of {name}", dims, MAX_DIMS)
        shape = tuple(self.scalar("Q") for _ in range(dims))
        return Tensor(name, shape, self.scalar("I"), self.scalar("Q"))


def data_bytes(tensor: Tensor) -> int | None:
    """The bytes a tensor's data takes (ggml's block size and bytes per block); None for a type unknown here."""
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    try:
        block, size = GGML_QUANT_SIZES[GGMLQuantizationType(tensor.type)]
    except (ValueError, KeyError):
        return None
    return tensor.elements // block * size


def missing_bytes(header: Header, file_bytes: int) -> int:
    """How many bytes the file lacks for its tensors' data (0: whole). Types unknown here are skipped."""
    ends = [header.data_start + t.offset + n for t in header.tensors if (n := data_bytes(t)) is not None]
    return max(0, max(ends, default=header.data_start) - file_bytes)


def type_name(kind: int) -> str:
    from gguf.constants import GGMLQuantizationType

    try:
        return GGMLQuantizationType(kind).name
    except ValueError:
        return f"type {kind}"


def file_type(header: Header) -> str:
    """The quantization people name the file by (general.file_type: Q4_K_M, F16, ...), else the type most
    of its weights are stored in."""
    from collections import Counter

    from gguf.constants import LlamaFileType

    said = header.get("general.file_type")
    if isinstance(said, int):
        try:
            return LlamaFileType(said).name.removeprefix("MOSTLY_").removeprefix("ALL_")
        except ValueError:
            pass
    counts = Counter()
    for t in header.tensors:
        counts[t.type] += t.elements
    return type_name(counts.most_common(1)[0][0]) if counts else "unknown"
