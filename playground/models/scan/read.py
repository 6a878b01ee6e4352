"""What a model file or folder says about itself, read from its metadata only: a GGUF's header, a
checkpoint's config.json, tokenizer files and safetensors headers. Never the weights.

`read_gguf` and `read_checkpoint` return the fields the scan caches (their facts, which do not depend
on this machine); `verdict` then says whether this machine's loaders take the model, from lists the
installed transformers and gguf give (`Loaders`, kept in the scan's cache per version).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

from playground.models.scan import gguf_header, vocab

CAUSAL = "causal LM"
# GGUF architectures whose models embed text rather than continue it (a pooling_type key says so too)
EMBEDDING_ARCHITECTURES = ("bert", "nomic-bert", "nomic-bert-moe", "jina-bert-v2", "jina-bert-v3", "t5encoder",
                           "neo-bert", "modern-bert")
# GGUF's names for architectures transformers' GGUF reader knows under another (its own renaming)
TRANSFORMERS_NAMES = {"qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe", "gpt-oss": "gpt_oss",
                      "minimax-m2": "minimax_m2", "t5encoder": "t5"}
PLAIN_TYPES = ("F32", "F16", "BF16", "F64")
WEIGHT_SUFFIXES = (".safetensors", ".bin")


def read_gguf(path: Path) -> dict:
    """A GGUF's facts; raises NotGGUF, BadGGUF or OSError for a file that is not one or is damaged."""
    header = gguf_header.read_header(path)
    arch = header.architecture
    tokens = vocab.from_gguf(header.metadata)
    size = Path(path).stat().st_size
    fields = {
        "format": "gguf",
        "architecture": arch,
        "parameters": sum(t.elements for t in header.tensors) or None,
        "quantization": gguf_header.file_type(header),
        "context": header.get(f"{arch}.context_length"),
        "vocab": tokens.size if tokens else header.get(f"{arch}.vocab_size"),
        "tokenizer": tokens.fingerprint if tokens else None,
        "kind": gguf_kind(header),
        "types": sorted({gguf_header.type_name(t.type) for t in header.tensors}),
        "problem": "",
    }
    count = header.get("split.count", 1)
    if isinstance(count, int) and count > 1:
        part = header.get("split.no", 0) + 1
        fields["problem"] = (f"split GGUF (part {part} of {count}): the loaders read one file; join the parts with "
                             "llama.cpp's `llama-gguf-split --merge`")
    elif missing := gguf_header.missing_bytes(header, size):
        fields["problem"] = f"truncated: its tensors need {missing:,} bytes more than the file's {size:,}"
    return fields


def gguf_kind(header: gguf_header.Header) -> str:
    arch, kind = header.architecture, header.get("general.type", "model")
    if kind == "mmproj" or arch == "clip":
        return "vision projector"
    if kind == "adapter":
        return "LoRA adapter"
    if kind == "imatrix":
        return "importance matrix"
    if not header.tensors:
        return "vocabulary file"
    if arch in EMBEDDING_ARCHITECTURES or f"{arch}.pooling_type" in header.metadata:
        return "embedding model"
    if arch == "t5":
        return "encoder-decoder"
    return CAUSAL


def read_checkpoint(folder: Path) -> dict:
    """A transformers checkpoint's facts: config.json, its tokenizer files, its safetensors headers."""
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    if not isinstance(config, dict):
        raise ValueError("config.json is not a JSON object")
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    tokens = vocab.from_folder(folder)
    weights = sorted(p for p in folder.iterdir() if p.suffix in WEIGHT_SUFFIXES and p.is_file())
    quantized = (config.get("quantization_config") or {}).get("quant_method")
    fields = {
        "format": "checkpoint",
        "architecture": str(config.get("model_type", "")),
        "architectures": config.get("architectures") or [],
        "parameters": safetensors_parameters(folder),
        "quantization": quantized or str(text.get("torch_dtype") or config.get("dtype") or "unknown"),
        "context": text.get("max_position_embeddings"),
        "vocab": tokens.size if tokens else text.get("vocab_size"),
        "tokenizer": tokens.fingerprint if tokens else None,
        "kind": "",  # decided against the installed transformers' causal LM types (verdict)
        "types": [],
        "problem": "",
    }
    if not weights:
        fields["problem"] = "no weights: config.json but no *.safetensors or *.bin file"
    elif not (tokens or any((folder / n).is_file() for n in ("tokenizer.model", "spiece.model"))):
        fields["problem"] = "no tokenizer files (tokenizer.json, vocab.json or tokenizer.model)"
    elif quantized:
        fields["problem"] = (f"quantized by {quantized}: the loaders here quantize plain weights themselves "
                             "(its GGUF, or the unquantized checkpoint, loads)")
    return fields


def safetensors_parameters(folder: Path) -> int | None:
    """Elements of every tensor, from the safetensors headers (None without safetensors files)."""
    from playground.models.fits import tensor_shapes

    try:
        shapes = tensor_shapes(folder)
    except (OSError, ValueError, KeyError, struct.error):
        return None
    total = 0
    for _, shape in shapes:
        count = 1
        for size in shape:
            count *= size
        total += count
    return total


@dataclass(frozen=True)
class Loaders:
    """What this machine's libraries load: the GGUF architectures transformers' GGUF reader knows, the
    ggml types gguf dequantizes, and the model types transformers makes a causal LM of."""

    gguf_architectures: tuple[str, ...]
    gguf_types: tuple[str, ...]
    causal_types: tuple[str, ...]

    @classmethod
    def installed(cls, causal: bool = True) -> Loaders:
        """Asked of the libraries (seconds: transformers' model mapping imports torch). `causal` False
        leaves the causal LM types out where no checkpoint needs them."""
        import gguf.quants
        from transformers.integrations.ggml import GGUF_CONFIG_MAPPING

        archs = tuple(sorted(k for k in GGUF_CONFIG_MAPPING if k not in ("general", "tokenizer")))
        types = tuple(sorted({t.name for t in gguf.quants._type_traits} | set(PLAIN_TYPES)))
        if not causal:
            return cls(archs, types, ())
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

        return cls(archs, types, tuple(sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)))


def verdict(fields: dict, loaders: Loaders) -> tuple[str, bool, str]:
    """(kind, usable, why) of a model's facts on this machine's loaders."""
    arch, kind = fields["architecture"], fields["kind"]
    if fields["format"] == "checkpoint":
        kind = CAUSAL if arch in loaders.causal_types else "not a causal LM"
    if fields["problem"]:
        return kind, False, fields["problem"]
    if kind != CAUSAL:
        if fields["format"] == "checkpoint":
            named = ", ".join(fields["architectures"]) or "no architectures named"
            return kind, False, f"not a causal LM: transformers here has none for model type {arch!r} ({named})"
        return kind, False, f"not a causal LM: {'an' if kind[0] in 'aeiou' else 'a'} {kind}"
    if fields["format"] == "gguf":
        if TRANSFORMERS_NAMES.get(arch, arch) not in loaders.gguf_architectures:
            return kind, False, (f"no loader here for GGUF architecture {arch!r} (transformers reads "
                                 f"{', '.join(loaders.gguf_architectures)})")
        unread = [t for t in fields["types"] if t not in loaders.gguf_types]
        if unread:
            return kind, False, f"no loader here for its tensor type {', '.join(unread)} (gguf cannot dequantize it)"
        if not fields["tokenizer"]:
            return kind, False, "no vocabulary in its metadata (tokenizer.ggml.tokens)"
    return kind, True, ""
