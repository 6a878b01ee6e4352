"""Where the models people already have are kept, and what each store holds, named as its tool names it.

Each store is looked for where its tool puts it (its variable first, then its defaults):

- the Hugging Face cache: $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub ($XDG_CACHE_HOME
  for ~/.cache): each repo's snapshot that refs/main names, a checkpoint (config.json) or GGUF files;
- Ollama: $OLLAMA_MODELS, else ~/.ollama/models and /usr/share/ollama/.ollama/models: each manifest under
  manifests/<registry>/<namespace>/<model>/<tag> names its model layer's blob, blobs/sha256-<digest>;
- LM Studio: ~/.lmstudio/models and ~/.cache/lm-studio/models, as <publisher>/<repo>/<file>;
- llama.cpp's download cache: $LLAMA_CACHE, else ~/.cache/llama.cpp;
- any folder named with --models-dir.

Walking only lists and stats: nothing here opens a weight file beyond its first four bytes (a GGUF is
known by its magic, since an Ollama blob has no suffix), and nothing is ever written. What is broken
before any header is read (a manifest that is not JSON or names a missing blob, a dangling link, a split
GGUF's missing first part) is found with its reason, so the scan lists it instead of failing.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from playground.models.scan.gguf_header import is_gguf

HUB, OLLAMA, LMSTUDIO, LLAMACPP, FOLDER = "hub cache", "ollama", "lm studio", "llama.cpp", "folder"
OLLAMA_MODEL = "application/vnd.ollama.image.model"
OLLAMA_REGISTRY = "registry.ollama.ai"
SPLIT = re.compile(r"^(?P<stem>.+)-(?P<part>\d{5})-of-(?P<count>\d{5})\.gguf$")
HEX64 = re.compile(r"^[0-9a-f]{64}$")
# files a folder walk never opens: what sits beside models and is surely not one
NOT_MODELS = (".json", ".txt", ".md", ".py", ".yaml", ".yml", ".safetensors", ".bin", ".pt", ".pth", ".onnx",
              ".model", ".tiktoken", ".lock", ".etag", ".png", ".jpg", ".jpeg", ".gif", ".html", ".incomplete",
              ".partial", ".part", ".log", ".csv", ".zip", ".tar", ".gz", ".sha256")
MAX_DEPTH = 6  # folder levels below a store's root: a models folder is shallow; a home folder is not walked whole
MAX_FILES = 20_000  # entries a folder walk looks at before it says it stopped


@dataclass(frozen=True)
class Store:
    source: str  # HUB | OLLAMA | LMSTUDIO | LLAMACPP | FOLDER
    root: Path
    said: str  # where the location came from: a variable, a default, or --models-dir

    @property
    def exists(self) -> bool:
        return self.root.is_dir()


@dataclass(frozen=True)
class Found:
    """One model a store holds, before its metadata is read."""

    name: str  # as its tool names it
    source: str
    path: Path  # what loads: a GGUF file or a checkpoint folder (for a problem: what was looked at)
    format: str  # "gguf" | "checkpoint" | "" (found broken)
    digest: str | None = None  # the sha256 the store names the file by (Ollama's and the hub's blobs)
    problem: str = ""


def locations(dirs=(), env=None, home: Path | None = None) -> list[Store]:
    """Every place looked in, in this order; those that do not exist are kept (the scan says so)."""
    env = os.environ if env is None else env
    home = Path(home or Path.home())
    cache = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else home / ".cache"
    found = [hub_store(env, cache)]
    if env.get("OLLAMA_MODELS"):
        found.append(Store(OLLAMA, Path(env["OLLAMA_MODELS"]).expanduser(), "$OLLAMA_MODELS"))
    else:
        found += [Store(OLLAMA, home / ".ollama" / "models", "default"),
                  Store(OLLAMA, Path("/usr/share/ollama/.ollama/models"), "default (Linux service)")]
    found += [Store(LMSTUDIO, home / ".lmstudio" / "models", "default"),
              Store(LMSTUDIO, cache / "lm-studio" / "models", "default (older LM Studio)")]
    if env.get("LLAMA_CACHE"):
        found.append(Store(LLAMACPP, Path(env["LLAMA_CACHE"]).expanduser(), "$LLAMA_CACHE"))
    else:
        mac = sys.platform == "darwin"
        found.append(Store(LLAMACPP, home / "Library" / "Caches" / "llama.cpp" if mac else cache / "llama.cpp",
                           "default"))
    found += [Store(FOLDER, Path(d).expanduser(), "--models-dir") for d in dirs]
    return list({(s.source, s.root): s for s in found}.values())  # a folder named twice is walked once


def hub_store(env, cache: Path) -> Store:
    if env.get("HF_HUB_CACHE"):
        return Store(HUB, Path(env["HF_HUB_CACHE"]).expanduser(), "$HF_HUB_CACHE")
    if env.get("HF_HOME"):
        return Store(HUB, Path(env["HF_HOME"]).expanduser() / "hub", "$HF_HOME/hub")
    return Store(HUB, cache / "huggingface" / "hub", "default")


def walk(store: Store) -> list[Found]:
    """What the store holds; nothing when it does not exist."""
    if not store.exists:
        return []
    if store.source == HUB:
        return hub_models(store)
    if store.source == OLLAMA:
        return ollama_models(store)
    named = llamacpp_names(store.root) if store.source == LLAMACPP else {}
    return hub_models(store) + folder_models(store, named)


# ---- the Hugging Face cache -------------------------------------------------------------------


def hub_models(store: Store) -> list[Found]:
    found = []
    for repo in sorted(store.root.glob("models--*")):
        name = repo.name.removeprefix("models--").replace("--", "/")
        ref = repo / "refs" / "main"
        try:
            commit = ref.read_text().strip()
        except OSError:
            found.append(Found(name, store.source, repo, "", problem="no refs/main: which snapshot is current is "
                                                                      "unknown (downloaded at a revision only?)"))
            continue
        snapshot = repo / "snapshots" / commit
        if not snapshot.is_dir():
            found.append(Found(name, store.source, snapshot, "", problem=f"refs/main names snapshot {commit[:12]}, "
                                                                         "which is not there"))
            continue
        if (snapshot / "config.json").is_file():
            found.append(Found(name, store.source, snapshot, "checkpoint"))
        for entry in files(snapshot):
            found += gguf_found(f"{name}/{entry.relative_to(snapshot).as_posix()}", store.source, entry)
    return found


def blob_digest(path: Path) -> str | None:
    """The sha256 a content-addressed store names the file by: the hub's blobs/<sha256> a snapshot links
    to, Ollama's blobs/sha256-<digest>."""
    real = Path(os.path.realpath(path))
    name = real.name.removeprefix("sha256-")
    return name if HEX64.match(name) and real.parent.name == "blobs" else None


# ---- Ollama -----------------------------------------------------------------------------------


def ollama_models(store: Store) -> list[Found]:
    found = []
    manifests = store.root / "manifests"
    for manifest in sorted(p for p in manifests.rglob("*") if p.is_file() or p.is_symlink()) if manifests.is_dir() else []:
        name = ollama_name(manifest.relative_to(manifests).parts)
        found.append(ollama_model(store, manifest, name))
    return found


def ollama_name(parts: tuple[str, ...]) -> str:
    """qwen2.5-coder:7b for the official library, namespace/model:tag or registry/namespace/model:tag otherwise."""
    if len(parts) != 4:
        return "/".join(parts)
    registry, namespace, model, tag = parts
    if registry == OLLAMA_REGISTRY:
        return f"{model}:{tag}" if namespace == "library" else f"{namespace}/{model}:{tag}"
    return f"{registry}/{namespace}/{model}:{tag}"


def ollama_model(store: Store, manifest: Path, name: str) -> Found:
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
        layers = [layer for layer in data["layers"] if layer.get("mediaType") == OLLAMA_MODEL]
    except (OSError, UnicodeDecodeError) as e:
        return Found(name, store.source, manifest, "", problem=f"its manifest cannot be read ({e})")
    except ValueError as e:
        return Found(name, store.source, manifest, "", problem=f"its manifest is not JSON ({e})")
    except (KeyError, TypeError, AttributeError):
        return Found(name, store.source, manifest, "", problem="its manifest lists no layers")
    if not layers:
        return Found(name, store.source, manifest, "", problem=f"its manifest has no {OLLAMA_MODEL} layer")
    digest = str(layers[0].get("digest", ""))
    blob = store.root / "blobs" / digest.replace(":", "-")
    if not digest.startswith("sha256:") or not blob.is_file():
        return Found(name, store.source, blob, "", problem=f"its manifest names blob {digest or '(none)'}, "
                                                           "which is missing from blobs/")
    return Found(name, store.source, blob, "gguf", digest=digest.removeprefix("sha256:"))


# ---- folders: LM Studio, llama.cpp's cache, --models-dir ------------------------------------------


def folder_models(store: Store, named: dict[str, str]) -> list[Found]:
    """GGUF files (by magic) and checkpoint folders (config.json) below the root, named by their path
    under it (LM Studio's publisher/repo/file) or, in llama.cpp's cache, by its manifests. A split GGUF
    is one entry, its first part's (whose header says it is split); later parts are not entries."""
    found, firsts, later = [], set(), {}
    entries = files(store.root)
    for entry in entries:
        if entry.name == "config.json":
            folder = entry.parent
            name = relative_name(store.root, folder) if folder != store.root else folder.name
            found.append(Found(name, store.source, folder, "checkpoint"))
            continue
        split = SPLIT.match(entry.name)
        if split:
            key = (entry.parent, split["stem"], split["count"])
            if split["part"] != "00001":
                later.setdefault(key, entry)
                continue
            firsts.add(key)
        found += gguf_found(named.get(entry.name) or relative_name(store.root, entry), store.source, entry)
    for (folder, stem, count), entry in later.items():
        if (folder, stem, count) not in firsts:
            name = relative_name(store.root, folder / f"{stem}-00001-of-{count}")
            found.append(Found(name, store.source, entry, "", problem=f"split GGUF in {int(count)} parts whose "
                                                                      "first part (00001) is missing"))
    if len(entries) >= MAX_FILES:
        found.append(Found(store.root.name, store.source, store.root, "", problem=f"stopped after {MAX_FILES:,} "
                           "files: name the folder that holds the models with --models-dir"))
    return found


def files(root: Path) -> list[Path]:
    """Files below root (links too, dangling ones included), MAX_DEPTH deep, at most MAX_FILES, hidden
    folders and the hub's layout (walked as the hub's) left out. A checkpoint folder is not walked
    into: it gives its config.json and any GGUF beside it."""
    out = []
    for folder, dirs, names in os.walk(root, followlinks=True):
        here = Path(folder)
        if "config.json" in names:
            dirs[:] = []
            out += [here / "config.json", *(here / n for n in sorted(names) if n.endswith(".gguf"))]
            continue
        deep = len(here.relative_to(root).parts) >= MAX_DEPTH
        dirs[:] = [] if deep else sorted(d for d in dirs if not d.startswith(".")
                                         and not (here == root and d.startswith("models--")))
        out += [here / n for n in sorted(names)]
        if len(out) >= MAX_FILES:
            return out[:MAX_FILES]
    return out


def gguf_found(name: str, source: str, path: Path) -> list[Found]:
    """The file as a GGUF to read, a broken link with its reason, or nothing (not a model file)."""
    name = name.removesuffix(".gguf")
    if path.is_symlink() and not path.exists():
        if path.suffix == ".gguf" or not path.suffix:
            return [Found(name, source, path, "", problem=f"dangling symlink to {os.readlink(path)}")]
        return []
    if path.suffix == ".gguf" or (path.suffix.lower() not in NOT_MODELS and is_gguf(path)):
        return [Found(name, source, path, "gguf", digest=blob_digest(path))]
    return []


def relative_name(root: Path, path: Path) -> str:
    return path.relative_to(root).as_posix().removesuffix(".gguf")


def llamacpp_names(root: Path) -> dict[str, str]:
    """llama.cpp's manifests (manifest=<owner>=<repo>=<tag>.json) name the file each download saved, as
    <owner>_<repo>_<file>: the file -> owner/repo:tag, the name `llama-server -hf` took."""
    named = {}
    for manifest in root.glob("manifest=*.json"):
        parts = manifest.stem.split("=")
        try:
            data = json.loads(manifest.read_text(encoding="utf-8"))
            file = data["ggufFile"]["rfilename"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if len(parts) == 4:
            _, owner, repo, tag = parts
            named[f"{owner}_{repo}_{Path(file).name}"] = f"{owner}/{repo}:{tag}"
    return named
