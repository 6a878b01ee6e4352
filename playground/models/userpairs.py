"""Pairs kept from the scan of your models: written to user-pairs.yaml beside the cache (never the
repository's models.yaml), read back by the registry (registry.with_user_pairs) under names models.yaml
does not use.

Each model is kept by path and content digest: a GGUF's SHA-256 (the store's own name for it where the
store is content-addressed: Ollama's and the hub's blobs; else hashed once, remembered by path, size and
mtime), a checkpoint folder's a digest of its files' digests. Its size and mtime as kept tell, with a
stat, whether it went away or changed since; where its path is gone, a scan that finds the same digest
elsewhere (a store moved, a file renamed) says where it is now.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import asdict
from pathlib import Path

import yaml

from playground.models.cachefiles import exclusive, write_text_atomic
from playground.models.registry import Kept, ModelSpec, Registry, load_registry, parse_user, user_file

HEADER = ("# Pairs kept from the scan of your models (the page's \"Keep this pair\", or\n"
          "# `python -m playground.models pair TARGET DRAFT --name NAME`). models.yaml's schema; each model's\n"
          "# `kept` records its file as kept (path, size, mtime, SHA-256). Safe to edit or delete.\n")
GONE, CHANGED = "gone", "changed"


def digest(path: Path, known: str | None = None) -> str:
    """The model's content digest: `known` (its store names it so), a file's SHA-256 (hashed once and
    remembered, checkpoints.content_hash), a folder's over its files' names and digests."""
    from playground.models.checkpoints import content_hash
    from playground.models.scan.stores import blob_digest

    if known:
        return known
    path = Path(path)
    if not path.is_dir():
        return blob_digest(path) or content_hash(path)
    parts = [f"{p.name}:{blob_digest(p) or content_hash(p)}" for p in sorted(path.iterdir()) if p.is_file()]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def kept_record(model, known_digest: str | None = None) -> Kept:
    """What keeping a scanned model (scan.Model) records of its file now."""
    path = Path(model.path)
    stat = os.stat(path)
    return Kept(str(path), model.bytes, stat.st_mtime_ns, digest(path, known_digest or model.digest),
                f"{model.source} {model.name}", model.architecture)


def status(spec: ModelSpec) -> str:
    """'' for a model as it was kept (or not a kept one); 'gone: ...' or 'changed: ...' otherwise."""
    kept = spec.kept
    if kept is None:
        return ""
    try:
        stat = os.stat(kept.path)
    except OSError:
        return f"{GONE}: {kept.found} is no longer at {kept.path}"
    if Path(kept.path).is_dir():
        return ""  # a folder's size and mtime say little; its digest is what the scan compares
    if (stat.st_size, stat.st_mtime_ns) != (kept.bytes, kept.mtime_ns):
        return f"{CHANGED}: {kept.found} is not the file it was when kept (size or time differ)"
    return ""


def moved(spec: ModelSpec, models) -> object | None:
    """A scanned model (scan.Model) with the kept model's digest, for a kept model whose path is gone:
    where it is now. Only models of the same size are hashed."""
    kept = spec.kept
    if kept is None or os.path.exists(kept.path):
        return None
    for model in models:
        if model.usable and model.bytes == kept.bytes and digest(Path(model.path), model.digest) == kept.sha256:
            return model
    return None


def relocated(registry: Registry, models) -> Registry:
    """The registry with each kept model gone from its path loaded from where `models` (a scan's) hold
    the same digest: a store moved, a file renamed. Others as they are."""
    from dataclasses import replace

    from playground.models.registry import Source

    moves = {name: found for name, spec in registry.models.items() if (found := moved(spec, models)) is not None}
    if not moves:
        return registry
    models = {name: replace(registry.models[name], sources=(Source("local", found.path),),
                            kept=replace(registry.models[name].kept, path=found.path,
                                         mtime_ns=os.stat(found.path).st_mtime_ns, found=f"{found.source} {found.name}"))
              for name, found in moves.items()}
    return replace(registry, models={**registry.models, **models})


def found_again(registry: Registry, dirs=()) -> Registry:
    """`relocated` over a scan of the stores and `dirs`, made only where a kept model is gone from its path."""
    if not any(spec.kept and not os.path.exists(spec.kept.path) for spec in registry.models.values()):
        return registry
    from playground.models.scan import listing, stores

    return relocated(registry, listing.scan(stores.locations(dirs)).models)


def keep(name: str, target, draft, knobs: dict, description: str, *, quantization: str | None = None,
         dtype: str | None = None, config: str | None = None) -> Path:
    """Save a pair of scanned models (scan.Model) as `name` in user-pairs.yaml, with its suggested knobs
    (pairing.suggested_knobs) and each model's file recorded (hashed once where its store does not name
    it by its digest). ValueError naming the field for a name models.yaml holds, a model that does not
    load, or a file of the user's that cannot be read (never written over). Replaces a kept pair of the
    same name; returns the file."""
    base = load_registry(config, user=False)
    name = checked_name(base, name, target, draft)
    path = user_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    entries = pair_entries(base, name, target, draft, {"description": description, **knobs}, (quantization, dtype),
                           kept=True)
    with exclusive(path.parent):
        data = read_raw(path)
        data["models"].update(entries["models"])
        data["pairs"].update(entries["pairs"])
        parse_user(data, path)  # checked as the registry will read it, before anything is written
        write_text_atomic(path, HEADER + yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    return path


def picked(name: str, target, draft, knobs: dict, description: str, *, config: str | None = None):
    """(models, pair) of a pair picked from the scan to race, not kept: the registry's specs, as keep
    would write them but without records (nothing hashed, nothing written)."""
    base = load_registry(config, user=False)
    name = checked_name(base, name, target, draft)
    entries = pair_entries(base, name, target, draft, {"description": description, **knobs}, (None, None),
                           kept=False)
    models, pairs = parse_user(entries, user_file())
    return models, pairs[name]


def checked_name(base: Registry, name: str, target, draft) -> str:
    name = (name or "").strip()
    if not name:
        raise ValueError("name: give the pair a name")
    if name in base.pairs:
        raise ValueError(f"name: {name!r} is the name of a pair in {base.where}; choose another")
    for role, model in (("target", target), ("draft", draft)):
        if not model.usable:
            raise ValueError(f"{role}: {model.name} does not load here: {model.why}")
    return name


def load_as(model) -> tuple[str, str]:
    """(quantization, dtype) a scanned model loads with: as models.yaml's own GGUFs, auto (int4 on a CPU,
    bf16 on a GPU); a model published in float32 (a test's tiny model, a GGUF written all-F32) in float32,
    unquantized, as published."""
    return ("none", "float32") if model.quantization in ("float32", "F32") else ("auto", "auto")


def pair_entries(base: Registry, name: str, target, draft, fields: dict, load: tuple, kept: bool) -> dict:
    """The file's entries for a pair: its two models (loaded as `load`, (quantization, dtype), each None for
    the model's own) and the pair with its `fields` (description and knobs)."""
    models = dict(model_entry(base, model, *load, kept) for model in (target, draft))
    (target_name, _), (draft_name, _) = models.items()
    return {"models": models, "pairs": {name: {"target": target_name, "draft": draft_name, **fields}}}


def model_entry(base: Registry, model, quantization: str | None, dtype: str | None, kept: bool) -> tuple[str, dict]:
    """(name, entry) of a scanned model in the file: the scan's name (with " (kept)" where models.yaml holds
    that name), its file as a local source, how it loads, and, kept, its record."""
    name = model.name if model.name not in base.models else f"{model.name} (kept)"
    own = load_as(model)
    quantization, dtype = quantization or own[0], dtype or own[1]
    size = f"{model.parameters / 1e9:.1f}B parameters, " if model.parameters else ""
    entry = {"description": f"{model.name} from {model.source} ({size}{model.quantization}, {model.format})",
             "sources": [{"local": model.path}], "quantization": quantization, "dtype": dtype}
    if kept:
        entry["kept"] = asdict(kept_record(model))
    return name, entry


def read_raw(path: Path) -> dict:
    """The file's mappings as written; ValueError for one that is there but not a YAML mapping (it is
    the user's: never written over)."""
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except FileNotFoundError:
        data = {}
    except (OSError, yaml.YAMLError) as e:
        raise ValueError(f"{path.name} cannot be read ({e}); fix or remove it, then keep the pair again") from None
    if not isinstance(data, dict) or not all(isinstance(data.get(k) or {}, dict) for k in ("models", "pairs")):
        raise ValueError(f"{path.name} is not a mapping of models and pairs; fix or remove it, then keep the pair again")
    return {"models": dict(data.get("models") or {}), "pairs": dict(data.get("pairs") or {})}


def forget(name: str) -> bool:
    """Remove a kept pair (its models stay for other pairs); False when there is none of that name."""
    path = user_file()
    if not path.is_file():
        return False
    with exclusive(path.parent):
        data = read_raw(path)
        if data["pairs"].pop(name, None) is None:
            return False
        used = {m for p in data["pairs"].values() for m in (p.get("target"), p.get("draft"))}
        data["models"] = {n: m for n, m in data["models"].items() if n in used}
        write_text_atomic(path, HEADER + yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    return True
