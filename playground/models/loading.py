"""Load the models a registry names: pick a source, get a local checkpoint, apply device, dtype and
quantization, and keep the last pair warm.

Every source ends as a local transformers checkpoint before loading, because bitsandbytes only
quantizes while loading a checkpoint: transformers refuses to combine a GGUF file with it. So a
GGUF (local, from the hub, or from a model pack) is dequantized once into a cached safetensors
checkpoint, and every later load takes seconds and can be quantized any way.

torch and transformers are imported inside functions, so importing this module stays cheap.
"""

from __future__ import annotations

import gc
import threading
import warnings
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from playground.models.checkpoints import hub_checkpoint, local_checkpoint, pack_checkpoint
from playground.config import AUTO_QUANTIZATION
from playground.models import gguf_file
from playground.models.registry import DEVICES, DTYPES, QUANTIZATIONS, ModelSpec, PairSpec, Registry, Source

BITSANDBYTES = ("nf4", "int8")  # quantized while loading a checkpoint; the others after (cpu_quant.py)

Progress = Callable[[str, "float | None"], None]  # (message, fraction done or None)
TINY_SEED = 0  # the tiny pair is the same random models everywhere, so tests and demos agree


@dataclass
class LoadedModel:
    name: str  # the registry's model name
    model: object  # a transformers causal LM, in eval mode, on `device`
    tokenizer: object
    spec: ModelSpec
    device: str  # "cpu" or "cuda" (resolved from auto)
    dtype: str  # float32 | bfloat16 | float16 (resolved from auto; the compute dtype when quantized)
    quantization: str  # none | nf4 | int8 | int8-cpu | int4-cpu (resolved from auto)
    footprint_bytes: int  # model.get_memory_footprint(): parameters and buffers
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
               device: str | None = None, progress: Progress | None = None) -> LoadedModel:
    """Load `spec` from the first of its sources that works. Arguments override the spec.

    Settings are checked before any source is touched, so a bad setting downloads nothing.
    """
    report = reporter(progress)
    quantization = check_setting("quantization", spec.quantization if quantization is None else quantization,
                                 QUANTIZATIONS, spec.name)
    device = resolve_device(check_setting("device", device or spec.device, DEVICES, spec.name), spec.name)
    dtype = resolve_dtype(check_setting("dtype", dtype or spec.dtype, DTYPES, spec.name), device)
    quantization = AUTO_QUANTIZATION[device] if quantization == "auto" else quantization
    if quantization in BITSANDBYTES:
        bitsandbytes_config(quantization, dtype, spec.name)  # fail now if bitsandbytes is missing
    elif quantization != "none" and device != "cpu":
        raise ValueError(f"quantization {quantization!r} for model {spec.name!r} runs on PyTorch's CPU "
                         f"kernels; on {device} use nf4 or int8 (bitsandbytes) or none")
    failures = []
    for source in spec.sources:
        try:
            model, tokenizer = load_from(source, spec, device, dtype, quantization, report)
        except Exception as e:  # this source failed: say why, then try the next
            failures.append(f"  - {source}: {e}")
            report(f"{spec.name}: source {source} failed, trying the next", None)
            continue
        report(f"{spec.name}: loaded from {source}", 1.0)
        return LoadedModel(spec.name, model, tokenizer, spec, device, dtype, quantization,
                           int(model.get_memory_footprint()), source)
    raise RuntimeError(no_source_message(spec, failures))


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


def resolve_dtype(dtype: str, device: str) -> str:
    """auto: bfloat16, except float16 on CUDA GPUs without bf16.

    bf16 keeps float32's range (no overflow surprises) at half the bytes; decoding one token at a
    time is bound by reading weights, so half the bytes is most of the speed. PyTorch runs bf16 on
    every CPU (natively with AVX512-BF16/AMX, emulated otherwise), while CPU float16 is slow.
    """
    import torch

    if dtype != "auto":
        return dtype
    if device == "cuda" and not torch.cuda.is_bf16_supported():
        return "float16"
    return "bfloat16"


def bitsandbytes_config(quantization: str, dtype: str, name: str):
    """BitsAndBytesConfig for nf4 (4-bit, computing in `dtype`) or int8 (LLM.int8)."""
    try:
        import bitsandbytes  # noqa: F401  (transformers needs it at load; check here for a clear message)
    except Exception as e:
        raise RuntimeError(
            f"quantization {quantization!r} for model {name!r} needs bitsandbytes, which failed to import "
            f"({type(e).__name__}: {e}); install it (pip install -r requirements.txt) or use "
            "quantization none"
        ) from e
    import torch
    from transformers import BitsAndBytesConfig

    if quantization == "nf4":
        return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                  bnb_4bit_compute_dtype=getattr(torch, dtype))
    # LLM.int8 computes in float16 and warns about the cast on every matmul; once is plenty.
    warnings.filterwarnings("ignore", message="MatMul8bitLt: inputs will be cast")
    return BitsAndBytesConfig(load_in_8bit=True)


def load_from(source: Source, spec: ModelSpec, device, dtype, quantization, report):
    """(model, tokenizer) from one source; raises if this source cannot provide them."""
    from transformers import AutoTokenizer

    if source.kind == "tiny":
        return load_tiny(source.ref, device, dtype, quantization, spec.name)
    if source.kind == "hub":
        path = hub_checkpoint(source, spec, report)
    elif source.kind == "local":
        path = local_checkpoint(Path(source.ref), report)
    else:
        path = pack_checkpoint(source.ref, report)
    report(f"{spec.name}: loading ({dtype}, quantization {quantization}, {device})", None)
    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=spec.trust_remote_code)
    model = load_weights(path, device, dtype, quantization, spec)
    model.checkpoint_dir = lambda: path  # the onnxruntime runner builds its model from it
    locate = gguf_file.locator(source, report)
    if locate is not None:  # the llamacpp runner runs this file itself
        gguf_file.record(model, locate)
    return model, tokenizer


def load_weights(path: Path, device, dtype, quantization, spec: ModelSpec):
    import torch
    from transformers import AutoModelForCausalLM

    kwargs = {"dtype": getattr(torch, dtype), "trust_remote_code": spec.trust_remote_code}
    if quantization in BITSANDBYTES:  # bitsandbytes quantizes while the weights load, on the target device
        kwargs.update(quantization_config=bitsandbytes_config(quantization, dtype, spec.name),
                      device_map={"": device})
    model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    if quantization not in BITSANDBYTES:
        model.to(device)
    return after_loading(model.eval(), quantization)


def after_loading(model, quantization: str):
    """The CPU weight-only quantizations replace the linear layers of the loaded model."""
    if quantization not in BITSANDBYTES and quantization != "none":
        from playground.models.cpu_quant import quantize_for_cpu

        quantize_for_cpu(model, quantization)
    return model


def load_tiny(role: str, device, dtype, quantization, name):
    """The tiny random pair's target or draft, built in process. Quantizing goes through a
    throwaway checkpoint, since bitsandbytes quantizes only while loading one."""
    import tempfile

    import torch

    from playground.models.tiny import tiny_pair

    target, draft, tokenizer = tiny_pair(TINY_SEED)
    model = target if role == "target" else draft
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
    draft_spec = draft_model_spec(registry, spec, draft)
    target = load_model(registry.model(spec.target), quantization=target_quantization, dtype=dtype,
                        device=device, progress=lambda m, f: report(f"target {m}", f))

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


class Cancelled(BaseException):
    """Raised from a progress callback to abandon a load (a BaseException, so no `except Exception`
    on the way mistakes it for a failed source and tries the next one)."""


class PairCache:
    """Loads pairs on demand; keeps the last `keep` pairs warm; switching frees the previous one.

    Memory is freed only when nobody else holds the pair: callers should not keep a LoadedPair
    (or its models) beyond the run that uses it. One that must (a paused step-through run)
    registers with `hold`, and is told to let go when the pair is evicted. So at most `keep` pairs
    are resident, whoever uses them. Thread-safe, since UI handlers run in threads.
    """

    def __init__(self, registry: Registry, keep: int = 1):
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise ValueError(f"keep: expected an integer of at least 1, got {keep!r}")
        self.registry = registry
        self.keep = keep
        self.pairs: OrderedDict[tuple, LoadedPair] = OrderedDict()  # least recently used first
        self.lock = threading.RLock()
        self.holders: dict[int, list] = {}  # id(pair) -> weak references to release callbacks

    def get(self, name: str | None = None, *, draft: str | None = None, target_quantization: str | None = None,
            draft_quantization: str | None = None, dtype: str | None = None, device: str | None = None,
            progress: Progress | None = None, with_draft: bool = True) -> LoadedPair:
        """The pair, loaded or kept; its draft loaded now when `with_draft` (a run whose drafter
        runs it), else left for its first use."""
        spec = self.registry.pair(name)
        draft_spec = draft_model_spec(self.registry, spec, draft)
        knobs = {
            "draft": draft_spec.name,
            "target_quantization": target_quantization or self.registry.model(spec.target).quantization,
            "draft_quantization": draft_quantization or draft_spec.quantization,
            "dtype": dtype,
            "device": device,
        }
        key = (spec.name, *knobs.values())
        with self.lock:
            if key in self.pairs:
                self.pairs.move_to_end(key)
                pair = self.pairs[key]
                if with_draft:
                    pair.load_draft(progress)
                return pair
            self.evict(self.keep - 1)  # free memory before loading the next pair, not after
            try:
                pair = load_pair(self.registry, spec, progress=progress, **knobs)
                if with_draft:
                    pair.load_draft(progress)
            except BaseException:  # failed or cancelled half-way: give back what was loaded
                free_memory()
                raise
            self.pairs[key] = pair
            return pair

    def hold(self, pair: LoadedPair, release: Callable[[], None]) -> None:
        """Call `release` when `pair` is evicted, so a user that keeps it between jobs (a paused
        run) drops its references and the memory really comes back. Held weakly: an abandoned
        holder does not stay alive for this."""
        ref = weakref.WeakMethod(release) if hasattr(release, "__self__") else weakref.ref(release)
        with self.lock:
            if any(p is pair for p in self.pairs.values()):
                self.holders.setdefault(id(pair), []).append(ref)
            else:  # already evicted (or never cached): let go at once
                release()

    def resident(self) -> list[str]:
        """Names of the pairs the cache holds."""
        with self.lock:
            return [key[0] for key in self.pairs]

    def clear(self) -> None:
        with self.lock:
            self.evict(0)

    def evict(self, leave: int) -> None:
        """Drop least recently used pairs until `leave` remain, and give their memory back."""
        if len(self.pairs) <= leave:
            return
        while len(self.pairs) > leave:
            _, pair = self.pairs.popitem(last=False)
            for ref in self.holders.pop(id(pair), []):
                if (release := ref()) is not None:
                    release()
            del pair
        free_memory()


def free_memory() -> None:
    """Collect dropped models and hand freed memory back to the OS (and to CUDA)."""
    gc.collect()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)  # glibc keeps freed heap pages unless asked
    except (OSError, AttributeError):
        pass
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def reporter(progress: Progress | None) -> Progress:
    """Progress goes to the caller's callback (the UI); tqdm bars cover the console."""
    return progress or (lambda message, fraction: None)
