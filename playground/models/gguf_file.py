"""The GGUF file behind a loaded model, for the llamacpp runner (engine/runners/llamacpp.py).

Every GGUF source records it on the model as `model.gguf_file`, a callable that returns the file's
path: a model pack's file is fetched again only if it was removed after conversion (so loading
stays offline), a local or hub file is where it lies. The tiny random pair has no file, so one is
written from its weights in float32 when it loads (`write_gguf`; a few hundred kB): llama.cpp then computes what PyTorch does, and
the tests can hold the llamacpp runner to eager's logits and greedy tokens.
"""

from __future__ import annotations

import shutil
import tempfile
import weakref
from pathlib import Path


def record(model, locate) -> None:
    """Remember how to find the model's GGUF file (locate() -> Path), for a runner that asks."""
    model.gguf_file = locate


def locator(source, report):
    """How to find the GGUF file a source (registry.Source) loads from; None when it has none."""
    if source.kind == "pack":
        from playground.config import cache_dir
        from playground.models.modelpack import fetch_pack, load_catalog

        return lambda: fetch_pack(load_catalog()[source.ref], cache_dir() / "packs", progress=report)
    if source.kind == "local" and is_gguf(Path(source.ref)):
        return lambda: named(Path(source.ref))
    if source.kind == "hub" and source.gguf_file:
        def hub() -> Path:
            from huggingface_hub import hf_hub_download

            return Path(hf_hub_download(repo_id=source.ref, revision=source.revision, filename=source.gguf_file,
                                        local_files_only=True))  # loading fetched it already
        return hub
    return None


def is_gguf(path: Path) -> bool:
    """A GGUF is known by its magic bytes, not its name: an Ollama blob (blobs/sha256-<digest>) has no suffix."""
    from playground.models.scan.gguf_header import is_gguf as begins_with_magic

    return path.is_file() and begins_with_magic(path)


def named(path: Path) -> Path:
    """The GGUF under a name ending in .gguf, which transformers' and ONNX Runtime's builders look for: the
    file itself, or for a file named otherwise (an Ollama blob) a link to it in the cache (gguf-names/),
    made once. The store is only read: the link lives in the playground's cache."""
    import hashlib
    import os

    from playground.config import cache_dir

    if path.suffix == ".gguf":
        return path
    real = path.resolve()
    link = cache_dir() / "gguf-names" / hashlib.sha1(str(real).encode()).hexdigest()[:12] / f"{path.name}.gguf"
    if not (link.is_symlink() and link.resolve() == real):
        link.parent.mkdir(parents=True, exist_ok=True)
        tmp = link.with_name(f".{link.name}.tmp-{os.getpid()}")
        tmp.unlink(missing_ok=True)
        os.symlink(real, tmp)
        os.replace(tmp, link)  # atomic: a reader sees the old link or the new one
    return link


def written_locator(model, tokenizer):
    """A float32 GGUF of an in-process model, written now (its weights as loaded, before any CPU
    quantization replaces its linear layers) into a folder removed with the model."""
    folder = tempfile.mkdtemp(prefix="gguf-")
    weakref.finalize(model, shutil.rmtree, folder, True)
    path = write_gguf(model, tokenizer, Path(folder) / "model.gguf")
    return lambda: path


def write_gguf(model, tokenizer, path: Path) -> Path:
    """A Qwen2 (or Llama-shaped) causal LM as an F32 GGUF that llama.cpp loads: its hyperparameters,
    the tokenizer's vocabulary as a byte-level BPE with one token merge (the runner feeds token ids, so
    llama.cpp never tokenizes), and every tensor under gguf's own name map."""
    import gguf
    import numpy as np

    config = model.config.get_text_config()
    if config.model_type != "qwen2":
        raise ValueError(f"writing a GGUF file needs a qwen2 model, got {config.model_type}")
    rope = (getattr(config, "rope_parameters", None) or {}).get("rope_theta") or getattr(config, "rope_theta", 10000.0)
    writer = gguf.GGUFWriter(str(path), "qwen2")
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_freq_base(float(rope))
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    if [i for _, i in vocab] != list(range(config.vocab_size)):
        raise ValueError("writing a GGUF file needs a tokenizer whose ids are 0..vocab_size-1")
    special = set(tokenizer.all_special_tokens)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list([t for t, _ in vocab])
    writer.add_token_types([gguf.TokenType.CONTROL if t in special else gguf.TokenType.NORMAL for t, _ in vocab])
    writer.add_token_merges([f"{vocab[0][0]} {vocab[1][0]}"])  # llama.cpp refuses a BPE vocabulary without merges
    writer.add_eos_token_id(config.eos_token_id)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN2, config.num_hidden_layers)
    for name, tensor in model.state_dict().items():
        mapped = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if mapped is None:
            raise ValueError(f"writing a GGUF file: no GGUF name for {name}")
        writer.add_tensor(mapped, tensor.detach().float().cpu().numpy().astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
