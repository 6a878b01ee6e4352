"""Model stores as the tools lay them out, in temporary folders, for the tests of the scan of your models
(models/scan/) and of the Your models tab: an Ollama store (manifests and blobs named by digest), an LM
Studio folder, llama.cpp's download cache, a Hugging Face hub cache; tiny GGUFs written with the gguf
package; and a digest of a folder tree, to hold every store byte for byte unchanged by a scan.

Test modules import the fixture by name (`from stores import machine`), as they do tests/tiny_gguf.py's.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
BYTES = [chr(c) for c in range(33, 127)] + [chr(c) for c in range(161, 256)]  # printable byte-level tokens
MERGES = ["Ġ t", "h e", "Ġt he", "i n"]
TARGET, DRAFT = "org/tiny-target", "org/tiny-draft"  # shelve()'s
BIG_FILE = 2 << 30  # past this a file is held by its size, time and first mebibyte (a 50 GB sparse file)


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """A machine of its own: HOME, the playground's cache and every store's variable point into tmp_path
    (no test ever walks the real home or stores). Returns the home folder; the stores go under it."""
    return own_machine(tmp_path, monkeypatch)


def own_machine(root: Path, patch) -> Path:
    """machine's work, for a fixture of any scope (`patch`: a pytest.MonkeyPatch)."""
    home = root / "home"
    home.mkdir()
    patch.setenv("HOME", str(home))
    patch.setenv("PLAYGROUND_CACHE", str(root / "cache"))
    patch.setenv("PLAYGROUND_USER_PAIRS", str(root / "cache" / "user-pairs.yaml"))
    patch.setenv("HF_HUB_CACHE", str(home / "hub"))
    patch.setenv("OLLAMA_MODELS", str(home / "ollama"))
    patch.setenv("LLAMA_CACHE", str(home / "llama.cpp"))
    for name in ("HF_HOME", "XDG_CACHE_HOME", "HUGGINGFACE_HUB_CACHE"):
        patch.delenv(name, raising=False)
    return home


def vocabulary(extra: int = 0, pad_to: int | None = None, prefix: str = "") -> list[str]:
    """A byte-level BPE vocabulary (Qwen's shape: bytes, merges, then the special tokens); `extra` tokens
    more, `prefix` to make another tokenizer, and llama.cpp's [PAD<id>] rows up to `pad_to`."""
    tokens = [prefix + t for t in BYTES] + [m.replace(" ", "") for m in MERGES]
    tokens += [f"tok{i}" for i in range(extra)] + SPECIAL
    return tokens + [f"[PAD{i}]" for i in range(len(tokens), pad_to or len(tokens))]


def write_gguf(path: Path, arch: str = "qwen2", tokens: list[str] | None = None, hidden: int = 64, layers: int = 2,
               context: int = 2048, general_type: str | None = None, extra: dict | None = None,
               tensors: bool = True) -> Path:
    """A small GGUF: the hyperparameters, a vocabulary, and float32 tensors of the model's shapes (the
    embedding as wide as the vocabulary, so a padded vocabulary pads the embedding too)."""
    import gguf
    import numpy as np

    tokens = vocabulary() if tokens is None else tokens
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(path.stem)
    if general_type:
        writer.add_type(general_type)
    writer.add_context_length(context)
    writer.add_embedding_length(hidden)
    writer.add_block_count(layers)
    writer.add_head_count(4)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.CONTROL if t in SPECIAL else gguf.TokenType.NORMAL for t in tokens])
    writer.add_token_merges(MERGES)
    writer.add_eos_token_id(tokens.index("<|im_end|>") if "<|im_end|>" in tokens else 0)
    for key, value in (extra or {}).items():
        writer.add_uint32(key, value) if isinstance(value, int) else writer.add_string(key, value)
    if tensors:
        writer.add_tensor("token_embd.weight", np.zeros((len(tokens), hidden), np.float32))
        for i in range(layers):
            writer.add_tensor(f"blk.{i}.attn_q.weight", np.zeros((hidden, hidden), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def link(source: Path, target: Path) -> Path:
    """`target` as a hard link to `source` (a symlink across file systems): stores hold the same bytes, never a copy."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        os.symlink(source, target)
    return target


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(8 << 20):
            h.update(chunk)
    return h.hexdigest()


def ollama(root: Path, name: str, gguf: Path, digest: str | None = None, registry: str = "registry.ollama.ai",
           namespace: str = "library") -> Path:
    """Ollama's layout: manifests/<registry>/<namespace>/<model>/<tag> naming blobs/sha256-<digest>, the GGUF
    linked there. Returns the blob."""
    model, tag = name.split(":")
    digest = digest or sha256(gguf)
    blob = root / "blobs" / f"sha256-{digest}"
    if not blob.exists():  # two tags of one model share their blob, as Ollama keeps them
        link(gguf, blob)
    manifest = root / "manifests" / registry / namespace / model / tag
    manifest.parent.mkdir(parents=True, exist_ok=True)
    layers = [{"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}",
               "size": gguf.stat().st_size},
              {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:" + "0" * 64, "size": 10}]
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": layers}))
    return blob


def llamacpp(root: Path, owner: str, repo: str, tag: str, gguf: Path) -> Path:
    """llama.cpp's cache: <owner>_<repo>_<file> and the manifest=<owner>=<repo>=<tag>.json naming it."""
    saved = link(gguf, root / f"{owner}_{repo}_{gguf.name}")
    (root / f"manifest={owner}={repo}={tag}.json").write_text(json.dumps({"ggufFile": {"rfilename": gguf.name}}))
    return saved


def hub(root: Path, repo_id: str, files: dict[str, Path], commit: str = "c0ffee" * 6 + "c0ff") -> Path:
    """The hub cache's layout: models--<org>--<name>/blobs/<sha256>, snapshots/<commit>/<file> linking to
    its blob, refs/main naming the commit. `files`: name in the repo -> a file to take the bytes of.
    Returns the snapshot folder."""
    repo = root / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / commit
    for name, source in files.items():
        blob = repo / "blobs" / sha256(source)
        if not blob.exists():
            link(source, blob)
        (snapshot / name).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(blob, (snapshot / name).parent), snapshot / name)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    return snapshot


def checkpoint(folder: Path, model, tokenizer) -> Path:
    """A transformers checkpoint written in float32: config, safetensors, tokenizer."""
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def tree(root: Path) -> dict:
    """Every entry below root, byte for byte: a link's target, a file's size, time and SHA-256 (a file over
    BIG_FILE: its first mebibyte's, beside its size and time), a folder's presence."""
    state = {}
    for folder, dirs, names in os.walk(root):
        for name in sorted(dirs + names):
            path = Path(folder) / name
            key = str(path.relative_to(root))
            if path.is_symlink():
                state[key] = ("link", os.readlink(path))
            elif path.is_dir():
                state[key] = ("dir",)
            else:
                stat = path.stat()
                with open(path, "rb") as f:
                    digest = sha256(path) if stat.st_size <= BIG_FILE else hashlib.sha256(f.read(1 << 20)).hexdigest()
                state[key] = ("file", stat.st_size, stat.st_mtime_ns, digest)
    return state


def shelve(home, made):
    """The tiny pair as float32 checkpoints in the hub cache, and an embedding model in Ollama's store."""
    from playground.models.tiny import tiny_pair

    target, draft, tokenizer = tiny_pair(seed=0)
    for repo, model in ((TARGET, target), (DRAFT, draft)):
        folder = checkpoint(made / repo.split("/")[1], model, tokenizer)
        hub(home / "hub", repo, {p.name: p for p in folder.iterdir()})
    ollama(home / "ollama", "embed:v1", write_gguf(made / "e.gguf", arch="bert", hidden=16))
