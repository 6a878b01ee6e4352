"""Runners: how a model's forward is executed under the CachedModel.

The CachedModel keeps the tokens and decides what to feed; a runner owns the KV cache and runs
the forward (the Runner protocol below). The engine never knows which runner it drives.

eager: transformers' DynamicCache, grown and cropped by tensor slicing (any full-attention model).
static: a StaticCache of fixed capacity; rollback moves an integer, the rejected entries stay in the
  buffer behind the mask; explicit position ids and a 4D mask as long as the cache, made on the device
  from one small copy a forward (the new rows' ids, positions and pattern).
compiled: the static runner with each fixed-shape step compiled once (torch.compile; CUDA graphs on
  a GPU) and shorter inputs padded up to the next shape.
llamacpp: llama.cpp's kernels on the GGUF file the model was loaded from (llama-cpp-python, an
  optional extra); its KV memory is the cache, rollback `llama_memory_seq_rm`, a tree's branches
  sequence ids.
onnxruntime: ONNX Runtime's kernels on a model built once from its GGUF or checkpoint (onnx_build.py); one
  preallocated cache buffer per layer bound as both past and present, rollback moves an integer;
  chains only (its attention takes no tree mask).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

from playground.config import AUTO_RUNNER, RUNNERS

if TYPE_CHECKING:  # torch is imported by the runners themselves, when one is made
    import torch

EAGER, STATIC, COMPILED, LLAMACPP, ONNXRUNTIME = "eager", "static", "compiled", "llamacpp", "onnxruntime"


@runtime_checkable
class Runner(Protocol):
    """What the CachedModel drives. A runner that cannot do something (a tree, a device, a
    model) raises a ValueError that says so by name."""

    name: str
    device: torch.device
    cache: object  # what holds the keys and values (a transformers Cache, llama.cpp's KV memory)
    length: int  # entries in the cache

    def reset(self) -> None: ...  # an empty cache

    def crop(self, n: int) -> None: ...  # keep the first n entries

    def move(self, prefix: int, picks: list[int]) -> None: ...  # entries `picks` to prefix, prefix + 1, ...

    def forward(
        self,
        new: list[int],
        positions: torch.Tensor | None,  # [n] position ids; None for a causal chain
        allowed: torch.Tensor | None,  # [n, length + n]: the entries each new token sees (every one
        # sees all `length` cached ones, as a chain's and a tree's do: static sends only the last n columns)
        keep: int,
    ) -> torch.Tensor: ...  # logits after the last `keep` of `new`: [keep, V]


CHAINS_ONLY = (ONNXRUNTIME,)  # runners whose attention takes no tree mask


def resolve(name: str, device, tree: bool = False, model=None, rows: int | None = None, context: int | None = None,
            role: str = "target") -> str:
    """The runner a name stands for on this device: auto is what measured fastest there for this model
    (runners/auto.py records it, runners/choice.py reads it; `rows`: the draft vocabulary its head is cut
    to) in this `role` ("target" or "draft") for a run of `context` entries (None: a short one), or the
    nearest measured (choice.nearest), else the table's AUTO_RUNNER; eager where that runner cannot serve
    the run (a tree on a chains-only runner; a model the onnxruntime runner has no file to build from, or
    onnxruntime not installed). On a GPU the candidates are eager and compiled, on a CPU eager and
    onnxruntime."""
    if name not in RUNNERS:
        raise ValueError(f"runner must be one of: {', '.join(RUNNERS)}, got {name!r}")
    if name != "auto":
        return name
    if model is not None:
        from playground.engine.runners.choice import device_kind

        device = device_kind(model)
    kind = AUTO_RUNNER.get(str(device).split(":")[0], EAGER)
    if kind in CHAINS_ONLY and tree:
        return EAGER
    if model is None:
        return kind
    from playground.engine.runners.choice import nearest

    if kind == ONNXRUNTIME:
        from playground.engine.runners.onnx_build import serves

        if not serves(model):
            return EAGER
    measured = nearest(model, rows, role, context)
    runner = measured["runner"] if measured else kind
    return EAGER if runner in CHAINS_ONLY and tree else runner


def compile_seconds(*models) -> float:
    """Seconds the first calls of each compiled shape took on these models (compile, and capture on
    a GPU), and its recording on every further cache: what per-token timings leave out, to be reported
    beside them. 0 for eager and static."""
    from playground.engine.runners.static import state_of

    return sum(sum(steps.seconds.values()) + sum(steps.again.values()) for m in models if m is not None
               for steps in [state_of(m).steps] if steps is not None)


def compile_failures(*models) -> list[str]:
    """Why each step shape of these models failed to compile or capture (it ran uncompiled): said beside
    the compile seconds, on the page and in the benchmark."""
    from playground.engine.runners.static import state_of

    return [why for m in models if m is not None for steps in [state_of(m).steps] if steps is not None
            for why in steps.failed.values()]


def make_runner(model, name: str = "auto", head=None, tree: bool = False) -> Runner:
    """A fresh runner (its own cache) for `model`; `head` maps hidden states to logits when the
    caller trims the output layer (None: the model's own head); `tree`: the run feeds token trees."""
    kind = resolve(name, model.device, tree, model, getattr(head, "rows", None))
    if kind == EAGER:
        from playground.engine.runners.eager import EagerRunner

        return EagerRunner(model, head)
    if kind == LLAMACPP:
        from playground.engine.runners.llamacpp import LlamaCppRunner

        return LlamaCppRunner(model, head)
    if kind == ONNXRUNTIME:
        from playground.engine.runners.onnxruntime import OnnxRuntimeRunner

        return OnnxRuntimeRunner(model, head)
    if kind == STATIC:
        from playground.engine.runners.static import StaticRunner

        return StaticRunner(model, head)
    from playground.engine.runners.compiled import CompiledRunner

    return CompiledRunner(model, head)


def module_of(model):
    """The torch module a runner computes with: a model handle (models/handle.py, which answers a run's
    questions from the model's files) makes its PyTorch model now; a module is itself."""
    make = vars(type(model)).get("module")
    return make(model) if make is not None else model


def is_handle(model) -> bool:
    """A model handle: its PyTorch form is made on first use (module_of), so asking it what only that
    form knows loads it."""
    return "module" in vars(type(model))


def doubled(size: int, n: int) -> int:
    """`size` doubled until it holds n: a cache grown this way is remade a few times a run, not at
    every step."""
    while size < n:
        size *= 2
    return size
