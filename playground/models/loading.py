"""Load the models a registry names: pick a source, get a local checkpoint, apply device, dtype and
quantization, for one model or a pair. Keeping the last pair warm between jobs is pair_cache.py's.

On a CPU in int4 a GGUF of a pack or a local file is kept as its files (models/handle.py): ONNX
Runtime builds from the GGUF itself, and the PyTorch model is made from it in memory only when
something computes with PyTorch. Every other source ends as a local transformers checkpoint before
loading, because bitsandbytes only quantizes while loading a checkpoint: transformers refuses to
combine a GGUF file with it. So there a GGUF (local, from the hub, or from a model pack) is
dequantized once into a cached safetensors checkpoint, and every later load takes seconds and can be
quantized any way.

torch and transformers are imported inside functions, so importing this module stays cheap.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from playground.models.checkpoints import content_hash, hub_checkpoint, local_checkpoint, pack_checkpoint
from playground.models.fits import DoesNotFit, check_fits
from playground.models.handle import free_memory
from playground.config import AUTO_QUANTIZATION, BITSANDBYTES  # BITSANDBYTES: quantized while loading a checkpoint
from playground.models import gguf_file
from playground.models.precision import (bitsandbytes_config, model_family, quiet_bitsandbytes,  # noqa: F401
                                         require_bitsandbytes, resolve_dtype)
from playground.models.registry import DEVICES, DTYPES, QUANTIZATIONS, ModelSpec, PairSpec, Registry, Source

Progress = Callable[[str, "float | None"], None]  # (message, fraction done or None)
TINY_SEED = 0  # the tiny pair is the same random models everywhere, so tests and demos agree
# The context a model is checked to fit on a GPU at load (fits.py): a long prompt and a long answer.
# A pair stays loaded across runs, whose lengths the load does not know; a run longer than this
# grows its cache past what was checked.
FIT_CONTEXT = 4096


@dataclass
class LoadedModel:
    name: str  # the registry's model name
    model: object  # a transformers causal LM in eval mode on `device`, or a ModelHandle that makes one on first use
    tokenizer: object
    spec: ModelSpec
    device: str  # "cpu" or "cuda" (resolved from auto)
    dtype: str  # float32 | bfloat16 | float16 (resolved from auto; the compute dtype when quantized)
    quantization: str  # none | nf4 | int8 | int8-cpu | int4-cpu (resolved from auto)
    footprint_bytes: int  # parameters and buffers as loaded (footprint: a handle's is its GGUF's size)
    source: Source | None = None  # the source the weights came from (the first that worked)


class LoadedPair:
    """A pair's target, loaded, and its draft (the pair's, or the model the run's `draft` knob
    names), loaded on first use: prompt lookup, suffix decoding and token recycling never run it,
    so a run of theirs holds the target alone. Thread-safe, as UI handlers run in threads."""

    def __init__(self, name: str, spec: PairSpec, target: LoadedModel, draft_spec: ModelSpec,
                 load_draft: Callable[[Progress | None], LoadedModel]):
        self.name, self.spec, self.target, self.draft_spec = name, spec, target, draft_spec
        self.tokenizer = target.tokenizer
        self.loader = load_draft  # progress -> the draft, with the pair's quantization, dtype and device
        self.loaded: LoadedModel | None = None
        self.shares_tokenizer: bool | None = None
        self.lock = threading.Lock()

    @property
    def draft(self) -> LoadedModel:
        return self.load_draft()

    @property
    def draft_loaded(self) -> bool:
        return self.loaded is not None

    def load_draft(self, progress: Progress | None = None) -> LoadedModel:
        """The draft, loaded now if it is not yet (with progress, when the caller shows it)."""
        from playground.models.text import tokenizer_differences

        with self.lock:
            if self.loaded is None:
                try:
                    draft = self.loader(progress)
                except BaseException:  # failed or cancelled half-way: give back what was loaded
                    free_memory()
                    raise
                self.shares_tokenizer = not tokenizer_differences(self.tokenizer, draft.tokenizer)
                self.loaded = draft
                free_memory()  # what loading and quantizing dropped goes back to the system
            return self.loaded

    @property
    def same_tokenizer(self) -> bool:
        """False: the draft drafts across tokenizers (draft.tokenizer is its own). Loads the draft."""
        self.load_draft()
        return self.shares_tokenizer

    @property
    def eos(self) -> tuple[int, ...]:
        """The target's end-of-turn ids. The target's alone: the output is the target's, and the
        stop set must not change with whether the draft happens to be loaded."""
        from playground.models.text import eos_ids

        return eos_ids(self.tokenizer, self.target.model)

    @property
    def random_weights(self) -> bool:
        draft_tiny = (self.loaded.source.kind == "tiny" if self.loaded is not None and self.loaded.source
                      else self.draft_spec.sources[0].kind == "tiny")
        return self.spec.random_weights or draft_tiny or (self.target.source is not None
                                                          and self.target.source.kind == "tiny")


# ---- one model -------------------------------------------------------------------------------


def load_model(spec: ModelSpec, *, quantization: str | None = None, dtype: str | None = None,
               device: str | None = None, progress: Progress | None = None,
               context: int = FIT_CONTEXT) -> LoadedModel:
    """Load `spec` from the first of its sources that works. Arguments override the spec.

    Settings are checked before any source is touched, so a bad setting downloads nothing. On CUDA the
    weights and a KV cache of `context` tokens are checked against the card's free memory before
    they load (fits.py): a model that would not fit is refused with what would.
    """
    report = reporter(progress)
    quantization = check_setting("quantization", spec.quantization if quantization is None else quantization,
                                 QUANTIZATIONS, spec.name)
    device = resolve_device(check_setting("device", device or spec.device, DEVICES, spec.name), spec.name)
    dtype = check_setting("dtype", dtype or spec.dtype, DTYPES, spec.name)  # auto: resolved per source (its family)
    quantization = AUTO_QUANTIZATION[device] if quantization == "auto" else quantization
    if quantization in BITSANDBYTES:
        require_bitsandbytes(quantization, spec.name)  # fail now, before any download
    elif quantization != "none" and device != "cpu":
        raise ValueError(f"quantization {quantization!r} for model {spec.name!r} runs on PyTorch's CPU "
                         f"kernels; on {device} use nf4 or int8 (bitsandbytes) or none")
    failures = []
    for source in spec.sources:
        try:
            model, tokenizer = load_from(source, spec, device, dtype, quantization, report, context)
        except DoesNotFit:  # no other source makes the model smaller
            raise
        except Exception as e:  # this source failed: say why, then try the next
            failures.append(f"  - {source}: {e}")
            report(f"{spec.name}: source {source} failed, trying the next", None)
            continue
        report(f"{spec.name}: loaded from {source}", 1.0)
        return LoadedModel(spec.name, model, tokenizer, spec, device, str(model.dtype).removeprefix("torch."),
                           quantization, footprint(model), source)
    raise RuntimeError(no_source_message(spec, failures))


def footprint(model) -> int:
    """Parameters and buffers; a model kept as its files (a handle), its GGUF's bytes: the weights as
    its runners hold them (ONNX Runtime's int4 build, llama.cpp's mapping) are about that size."""
    from playground.models.handle import ModelHandle

    if isinstance(model, ModelHandle) and not model.loaded:
        return model.gguf_file().stat().st_size
    return int(model.get_memory_footprint())


def no_source_message(spec: ModelSpec, failures: list[str]) -> str:
    hint = ("it is on the hub only: connect to the hub (and log in for gated repos), or add a `local:` "
            "source with a downloaded copy" if spec.needs_hub else
            "fix the first reason above (network, disk space), or add a `local:` source in models.yaml")
    reasons = "\n".join(failures)
    return f"could not load model {spec.name!r} from any of its sources:\n{reasons}\nTo fix: {hint}."


def check_setting(field: str, value, allowed, name: str) -> str:
    if value not in allowed:
        raise ValueError(f"{field} for model {name!r}: expected one of {', '.join(allowed)}, got {value!r}")
    return value


def resolve_device(device: str, name: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(
            f"device for model {name!r}: 'cuda' was requested but torch sees no CUDA device (torch "
            f"{torch.__version__}, CUDA build: {torch.version.cuda or 'none'}); use device auto or cpu"
        )
    return device


def load_from(source: Source, spec: ModelSpec, device, dtype, quantization, report, context: int = FIT_CONTEXT):
    """(model, tokenizer) from one source; raises if this source cannot provide them."""
    from transformers import AutoTokenizer

    if source.kind == "tiny":
        return load_tiny(source.ref, device, dtype, quantization, spec.name, report)
    if reads_its_file(source, device, quantization):
        return gguf_handle(source, spec, dtype, quantization, report)
    if source.kind == "hub":
        path = hub_checkpoint(source, spec, report)
    elif source.kind == "local":
        path = local_checkpoint(Path(source.ref), report)
    else:
        path = pack_checkpoint(source.ref, report)
    dtype = resolve_dtype(dtype, device, model_family(path), quantization, report, spec.name)
    if device == "cuda":
        check_fits(spec.name, path, dtype, quantization, context)
    report(f"{spec.name}: loading ({dtype}, quantization {quantization}, {device})", None)
    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=spec.trust_remote_code)
    model = load_weights(path, device, dtype, quantization, spec)
    model.checkpoint_dir = lambda: path  # the onnxruntime runner builds its model from it
    locate = gguf_file.locator(source, report)
    if locate is not None:  # the llamacpp runner runs this file itself
        record_gguf(model, locate)
    return model, tokenizer


def record_gguf(model, locate) -> None:
    """The model's GGUF file (the llamacpp runner runs it, the onnxruntime runner builds from it) and
    its SHA-256 as this layer knows it (checkpoints.content_hash: an Ollama blob's name, a pack's
    verified marker, else a hash made once), which keys the onnxruntime build: the engine reads no
    GGUF to hash it, and a model reached by another path to the same bytes finds the same build."""
    gguf_file.record(model, locate)
    model.gguf_sha256 = lambda: content_hash(locate())


def reads_its_file(source: Source, device: str, quantization: str) -> bool:
    """Is the model kept as its files (a ModelHandle), its PyTorch form made on first use? On a CPU in
    int4 from a GGUF of a pack or a local file: ONNX Runtime (auto's usual choice there) builds from
    that file and never computes with PyTorch. A hub GGUF keeps the checkpoint path (its file is
    fetched with the checkpoint), and so does every other case, whose runners compute with PyTorch."""
    gguf = source.kind == "pack" or (source.kind == "local" and gguf_file.is_gguf(Path(source.ref)))
    return gguf and device == "cpu" and quantization == "int4-cpu"


def gguf_handle(source: Source, spec: ModelSpec, dtype: str, quantization: str, report):
    """(handle, tokenizer) of a GGUF source: its metadata folder read now (once per GGUF), the PyTorch
    model made from the GGUF in memory, no checkpoint written, when something computes with it."""
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    from playground.models.checkpoints import SourceError, dequantized_model, gguf_metadata
    from playground.models.handle import ModelHandle

    locate = gguf_file.locator(source, report)
    try:
        gguf = locate()
    except RuntimeError as e:  # the pack could not be fetched: the next source is tried
        raise SourceError(str(e)) from e
    if not gguf.is_file():
        raise SourceError(f"{gguf} does not exist")
    meta = gguf_metadata(gguf, report)
    dtype = resolve_dtype(dtype, "cpu", model_family(meta), quantization, report, spec.name)

    def make():
        report(f"{spec.name}: making its PyTorch model from {gguf.name} ({dtype}, quantization {quantization})", None)
        model = after_loading(dequantized_model(gguf, dtype, AutoConfig.from_pretrained(meta)).eval(), quantization)
        free_memory()  # the dequantized float weights the int4 layers replaced
        return model

    handle = ModelHandle(spec.name, AutoConfig.from_pretrained(meta), GenerationConfig.from_pretrained(meta),
                         "cpu", dtype, quantization, make)
    handle.metadata_dir = lambda: meta
    record_gguf(handle, locate)
    return handle, AutoTokenizer.from_pretrained(meta, trust_remote_code=spec.trust_remote_code)


def load_weights(path: Path, device, dtype, quantization, spec: ModelSpec):
    import torch
    from transformers import AutoModelForCausalLM

    kwargs = {"dtype": getattr(torch, dtype), "trust_remote_code": spec.trust_remote_code}
    if quantization in BITSANDBYTES:  # bitsandbytes quantizes while the weights load, on the target device
        kwargs.update(quantization_config=bitsandbytes_config(quantization, dtype, spec.name))
    if quantization in BITSANDBYTES or device != "cpu":  # each tensor read straight onto the device: a
        kwargs.update(device_map={"": device})  # GPU load never holds the whole model in host RAM first
    model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    if "device_map" not in kwargs:
        model.to(device)
    if quantization == "int8":
        quiet_bitsandbytes(model)
    return after_loading(model.eval(), quantization)


def after_loading(model, quantization: str):
    """The CPU weight-only quantizations replace the linear layers of the loaded model."""
    if quantization not in BITSANDBYTES and quantization != "none":
        from playground.models.cpu_quant import quantize_for_cpu

        quantize_for_cpu(model, quantization)
    return model


def load_tiny(role: str, device, dtype, quantization, name, report: Progress | None = None):
    """The tiny random pair's target or draft, built in process. Quantizing goes through a
    throwaway checkpoint, since bitsandbytes quantizes only while loading one."""
    import tempfile

    import torch

    from playground.models.tiny import tiny_pair

    target, draft, tokenizer = tiny_pair(TINY_SEED)
    model = target if role == "target" else draft
    dtype = resolve_dtype(dtype, device, model.config.model_type, quantization, report, name)
    if quantization not in BITSANDBYTES:
        model = model.to(device=device, dtype=getattr(torch, dtype)).eval()
        gguf_file.record(model, gguf_file.written_locator(model, tokenizer))  # written in float32 when asked
        model.checkpoint_dir = written_checkpoint(model, tokenizer)
        return after_loading(model, quantization), tokenizer
    with tempfile.TemporaryDirectory(prefix="tiny-") as tmp:
        model.save_pretrained(tmp)
        spec = ModelSpec(name, (Source("local", tmp),))
        return load_weights(Path(tmp), device, dtype, quantization, spec), tokenizer


def written_checkpoint(model, tokenizer):
    """The in-process model saved as a checkpoint now, as loaded (before a CPU quantization replaces
    its linear layers), into a folder removed with the model: what the onnxruntime runner builds from."""
    import shutil
    import tempfile
    import weakref

    folder = Path(tempfile.mkdtemp(prefix="checkpoint-"))  # the prefix onnx_build reads as in-process
    weakref.finalize(model, shutil.rmtree, str(folder), True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)

    def locate() -> Path:
        return folder

    locate.written = True  # an in-process model's: `auto` leaves such a model on eager (engine/runners)
    return locate


# ---- pairs -----------------------------------------------------------------------------------


def load_pair(registry: Registry, spec: PairSpec, *, draft: str | None = None, target_quantization=None,
              draft_quantization=None, dtype=None, device=None, progress: Progress | None = None) -> LoadedPair:
    """Load a pair's target; its draft (the pair's, or the model `draft` names) loads on first use or
    by `load_draft`. A draft that does not share the target's tokenizer drafts across tokenizers."""
    report = reporter(progress)
    target = load_model(registry.model(spec.target), quantization=target_quantization, dtype=dtype,
                        device=device, progress=lambda m, f: report(f"target {m}", f))
    return pair_with(registry, spec, target, draft=draft, draft_quantization=draft_quantization, dtype=dtype,
                     device=device)


def pair_with(registry: Registry, spec: PairSpec, target: LoadedModel, *, draft: str | None = None,
              draft_quantization=None, dtype=None, device=None) -> LoadedPair:
    """The pair on a target already loaded (load_pair's, or another draft's pair's: the pair cache shares
    it), its draft to load on first use."""
    draft_spec = draft_model_spec(registry, spec, draft)

    def load_draft(progress: Progress | None) -> LoadedModel:
        said = reporter(progress)
        return load_model(draft_spec, quantization=draft_quantization, dtype=dtype,
                          device=device, progress=lambda m, f: said(f"draft {m}", f))

    return LoadedPair(spec.name, spec, target, draft_spec, load_draft)


def draft_model_spec(registry: Registry, spec: PairSpec, draft: str | None) -> ModelSpec:
    """The draft's model: the pair's, or the one the `draft` knob names (a model of the registry)."""
    if not draft:
        return registry.model(spec.draft)
    if draft not in registry.models:
        from playground.config import KnobError

        raise KnobError("draft", f"draft must be a model in {registry.where} ({', '.join(registry.models)}), "
                                 f"got {draft!r}")
    return registry.model(draft)


def reporter(progress: Progress | None) -> Progress:
    """Progress goes to the caller's callback (the UI); tqdm bars cover the console."""
    return progress or (lambda message, fraction: None)
