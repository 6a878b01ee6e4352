"""What a model's ONNX build reads, asked of the model as models/ recorded it (onnx_build.py builds it).

An int4 build of a model loaded from a GGUF file (a model pack, a local or hub .gguf, an Ollama blob)
reads that file, with the small folder of the model's config and tokenizer beside it
(`model.metadata_dir()`, else the checkpoint's), and its key holds the GGUF's SHA-256 as the model's
loader knows it (`digest_of`: models/loading records `gguf_sha256`), so a 1 GB file is hashed once per
machine. Anything else reads the checkpoint the model was loaded from. Nothing here opens a file: each
answer is a locator the loader recorded, or the handle's own fields (a model kept as its files is
never made into its PyTorch form to be asked).
"""

from __future__ import annotations

from pathlib import Path

from playground.engine.runners import is_handle


def serves(model) -> bool:
    """Is this runner auto's choice for the model: loaded in int4 on the CPU (int4-cpu, which auto
    quantization picks there) from a file on disk (a GGUF or a checkpoint), and onnxruntime-genai
    installed? Its build is int4 too, so auto changes the kernels and not the precision the user chose;
    a model kept in bf16 or float32 stays on PyTorch unless runner onnxruntime is asked for by name. A
    model built in process (the tiny random pair) also stays: there speed means nothing, and a build
    per test would cost seconds. So does an architecture the builder has not exported here (BUILT)."""
    import importlib.util

    said = told_quantization(model)
    if said is None:  # a loaded model: models/cpu_quant's int4-cpu replaced its linear layers
        said = "int4-cpu" if any(type(m).__name__ == "Int4Linear" for m in model.modules()) else None
    on_disk_file = reads_gguf(model) or on_disk(model, "checkpoint_dir")
    return (model.device.type == "cpu" and said == "int4-cpu" and on_disk_file
            and model.config.get_text_config().model_type in BUILT
            and importlib.util.find_spec("onnxruntime_genai") is not None)


# Architectures onnxruntime-genai 0.18's builder exported and the runner matched eager on here: Qwen2
# (the default pair), Llama (SmolLM2). Its Gemma 3 export fails on transformers 5's per-layer-type
# rope_parameters (KeyError 'rope_type'), so a Gemma draft stays on PyTorch under auto.
BUILT = ("qwen2", "llama")


def gguf_of(model) -> Path | None:
    """The GGUF the model was loaded from (models/gguf_file records it), or None."""
    return Path(model.gguf_file()) if reads_gguf(model) else None


def digest_of(model) -> str | None:
    """The SHA-256 of the model's GGUF as its loader knows it (models/loading records it: an Ollama
    blob's name, a pack's verified marker, a hash made once), or None: onnx_cache hashes the file."""
    digest = getattr(model, "gguf_sha256", None)
    return digest() if digest is not None and reads_gguf(model) else None


def reads_gguf(model) -> bool:
    """Was the model loaded from a GGUF file? Not the tiny pair, whose GGUF is written in process from its
    weights (its checkpoint is too, and marked: its builds read that). Asked without locating the file
    (a pack's locator fetches it again when it was removed)."""
    in_process = getattr(getattr(model, "checkpoint_dir", None), "written", False)
    return on_disk(model, "gguf_file") and not in_process


def on_disk(model, attribute: str) -> bool:
    """Does the model record this locator (a callable -> a path) for a file it was loaded from, not
    one written in process (models/loading marks those `written`)?"""
    locate = getattr(model, attribute, None)
    return locate is not None and not getattr(locate, "written", False)


def metadata_of(model) -> Path:
    """The folder with the model's config.json, tokenizer and generation config that a GGUF build reads
    beside the GGUF: the small one made from the GGUF when the model records it, else its checkpoint."""
    locate = getattr(model, "metadata_dir", None) or getattr(model, "checkpoint_dir", None)
    if locate is None:
        raise ValueError(f"runner onnxruntime builds from {model.gguf_file().name} with the model's config "
                         f"and tokenizer beside it; this {type(model).__name__} records no folder of them")
    return Path(locate())


def checkpoint_of(model) -> Path:
    locate = getattr(model, "checkpoint_dir", None)  # models/loading records it: a callable -> the folder
    if locate is None:
        raise ValueError("runner onnxruntime builds its model from the checkpoint the model was loaded "
                         f"from; this {type(model).__name__} has none recorded (a bitsandbytes-quantized "
                         "tiny model is one): use another runner or quantization")
    return Path(locate())


def told_quantization(model) -> str | None:
    """The CPU quantization a model kept as its files (models/handle.py) gives its PyTorch form, read
    from the handle itself: asking it for its modules would make that form. None for a loaded model."""
    return model.quantization if is_handle(model) else None


def float32():
    import torch  # here, not at import: nothing heavy loads with the engine

    return torch.float32
