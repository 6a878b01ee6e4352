"""The scan: every model the stores hold, with what its metadata says and whether this machine loads
it, each unusable one with its reason. Reads stores only: it lists, stats and reads headers, and writes
nothing but its own cache (in the playground's cache folder).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from playground.models.scan import read
from playground.models.scan import stores as store_kinds
from playground.models.scan.cache import ScanCache, stamp
from playground.models.scan.gguf_header import BadGGUF, NotGGUF

Progress = Callable[[str, "float | None"], None]


@dataclass(frozen=True)
class Model:
    """One model found, as `scan --json` writes it (one object per model)."""

    name: str  # as its tool names it (Ollama's qwen2.5-coder:7b, LM Studio's publisher/repo/file, the hub id)
    source: str  # which store: hub cache, ollama, lm studio, llama.cpp, folder
    path: str  # the GGUF file or checkpoint folder that loads (for a broken entry, what was looked at)
    format: str = ""  # gguf | checkpoint ("" when unreadable)
    architecture: str = ""  # general.architecture, or config.json's model_type
    parameters: int | None = None  # elements of every tensor, from the header
    quantization: str = ""  # the GGUF's file type (Q4_K_M, F16, ...), or the checkpoint's dtype
    bytes: int = 0  # on disk
    context: int | None = None  # tokens the model was trained to attend over
    vocab: int | None = None  # tokens of its tokenizer (not the rows its embedding is padded to)
    tokenizer: str | None = None  # fingerprint of vocabulary, merges and special ids (scan/vocab.py)
    kind: str = ""  # causal LM, embedding model, vision projector, ...
    usable: bool = False  # loads here as a causal LM
    why: str = ""  # why not, when not
    digest: str | None = None  # the sha256 the store names its file by, where it does

    def json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Scan:
    models: tuple[Model, ...]
    stores: tuple[store_kinds.Store, ...]  # where it looked, present or not

    def named(self, name: str) -> Model:
        for model in self.models:
            if model.name == name:
                return model
        raise ValueError(f"no model named {name!r} in the scan; found: {', '.join(m.name for m in self.models) or 'none'}")

    def usable(self) -> list[Model]:
        return [m for m in self.models if m.usable]


def scan(stores: list[store_kinds.Store], cache: ScanCache | None = None, progress: Progress | None = None) -> Scan:
    """Walk the stores, read each model's metadata (from the cache when its file is unchanged), judge it
    against this machine's loaders. A first scan reports each file it reads (tqdm and `progress`)."""
    from tqdm.auto import tqdm

    report = progress or (lambda message, fraction: None)
    cache = cache or ScanCache()
    found = [f for store in stores for f in store_kinds.walk(store)]
    facts, todo = {}, {}  # by path: two tags of one Ollama model share a blob, read once
    for f in found:
        if f.problem or f.path in facts or f.path in todo:
            continue
        try:
            now = stamp(f.path, f.format)
        except OSError as e:
            facts[f.path] = broken(f"it went away while being listed ({e.strerror or e})")
            continue
        known = cache.get(f.path, f.format, now)
        if known is None:
            todo[f.path] = (f, now)
        else:
            facts[f.path] = known
    for i, (f, now) in enumerate(tqdm(list(todo.values()), desc="scan", unit="model", disable=not todo)):
        report(f"reading {f.name}'s metadata ({i + 1} of {len(todo)})", i / len(todo))
        facts[f.path] = read_one(f)
        if "transient" not in facts[f.path]:
            cache.put(f.path, now, facts[f.path])
    loaders = cache.loaders(causal=any(f.format == "checkpoint" and f.path in facts for f in found))
    models = [model_of(f, None if f.problem else facts.get(f.path), loaders) for f in found]
    cache.save()
    report(f"{len(models)} models found", 1.0)
    return Scan(tuple(unique_names(models)), tuple(stores))


def read_one(found: store_kinds.Found) -> dict:
    """The model's fields, or the reason its file cannot be read (a broken file is cached as such: its
    stamp changes when it is replaced)."""
    try:
        return read.read_gguf(found.path) if found.format == "gguf" else read.read_checkpoint(found.path)
    except NotGGUF as e:
        return broken(str(e))
    except BadGGUF as e:
        return broken(f"not a readable GGUF: {e}")
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        return broken(f"its config.json cannot be read ({type(e).__name__}: {e})")
    except OSError as e:
        return {**broken(f"cannot be read ({e.strerror or e})"), "transient": True}


def broken(why: str) -> dict:
    return {"format": "", "problem": why}


def model_of(found: store_kinds.Found, fields: dict | None, loaders: read.Loaders) -> Model:
    base = Model(found.name, found.source, str(found.path), found.format, digest=found.digest)
    if fields is None:
        return replace(base, why=found.problem)
    size = disk_bytes(found.path)
    if not fields.get("format"):
        return replace(base, format="", bytes=size, why=fields["problem"])
    kind, usable, why = read.verdict(fields, loaders)
    return replace(base, architecture=fields["architecture"], parameters=fields["parameters"],
                   quantization=fields["quantization"], bytes=size, context=fields["context"], vocab=fields["vocab"],
                   tokenizer=fields["tokenizer"], kind=kind, usable=usable, why=why)


def disk_bytes(path: Path) -> int:
    """A file's size; a folder's files' (through links, as a snapshot's point at blobs)."""
    try:
        if path.is_dir():
            return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
        return path.stat().st_size
    except OSError:
        return 0


def unique_names(models: list[Model]) -> list[Model]:
    """Names as the tools give them; one found in two stores gets its store after it (name@store), and
    then a number, so each names one model on the command line."""
    counts = Counter(m.name for m in models)
    out, seen = [], Counter()
    for m in models:
        name = m.name if counts[m.name] == 1 else f"{m.name}@{m.source.replace(' ', '-')}"
        seen[name] += 1
        out.append(replace(m, name=name if seen[name] == 1 else f"{name}#{seen[name]}"))
    return out


# ---- how the table shows a count or a size (the command line and the page alike) ----


def count(n) -> str:
    """2.1B, 152k, 8.2k: parameters, context and vocabulary at a glance."""
    if not n:
        return "-"
    for unit, scale in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}" if n < 10 * scale else f"{n / scale:.0f}{unit}"
    return str(n)


def size(n: int) -> str:
    """0.49 GB, 98.4 MB, 12.0 kB, 11 B: bytes on disk at a glance."""
    if n >= 1e8:
        return f"{n / 1e9:.2f} GB"
    if n >= 1e5:
        return f"{n / 1e6:.1f} MB"
    if n >= 1e3:
        return f"{n / 1e3:.1f} kB"
    return f"{n} B" if n else "-"


def tokenizer_groups(models) -> dict[str, str]:
    """A letter per distinct tokenizer (A, B, ...), in the order the scan lists them, and its fingerprint's
    first digits: models with the same letter draft each other's ids directly."""
    groups = {}
    for m in models:
        if m.tokenizer and m.tokenizer not in groups:
            groups[m.tokenizer] = f"{letter(len(groups))} ({m.tokenizer[:8]})"
    return groups


def letter(i: int) -> str:
    return chr(ord("A") + i) if i < 26 else f"Z{i - 25}"
