"""Runners: how a model's forward is executed under the CachedModel.

The CachedModel keeps the tokens and decides what to feed; a runner owns the KV cache and runs
the forward. The engine never knows which runner it drives. One small protocol:

    length                      entries in the cache
    reset()                     an empty cache
    crop(n)                     keep the first n entries
    move(prefix, picks)         copy entries `picks` into place after the first `prefix` (a tree's kept path)
    forward(new, positions, allowed, keep) -> logits [keep, V]
                                `positions` [n] and `allowed` [n, length + n] are None for a causal chain

eager: transformers' DynamicCache, grown and cropped by tensor slicing (any full-attention model).
static: a StaticCache of fixed capacity; rollback moves an integer, the rejected entries stay in the
  buffer behind the mask; explicit position ids and a 4D mask as long as the cache.
compiled: the static runner with each fixed-shape step compiled once (torch.compile; CUDA graphs on
  a GPU) and shorter inputs padded up to the next shape.
llamacpp: llama.cpp's kernels on the GGUF file the model was loaded from (llama-cpp-python, an
  optional extra); its KV memory is the cache, rollback `llama_memory_seq_rm`, a tree's branches
  sequence ids.
"""

from __future__ import annotations

from playground.config import AUTO_RUNNER, RUNNERS

EAGER, STATIC, COMPILED, LLAMACPP = "eager", "static", "compiled", "llamacpp"


def resolve(name: str, device) -> str:
    """The runner a name stands for on this device: auto is what measured fastest there."""
    if name not in RUNNERS:
        raise ValueError(f"runner must be one of: {', '.join(RUNNERS)}, got {name!r}")
    return AUTO_RUNNER.get(str(device).split(":")[0], EAGER) if name == "auto" else name


def compile_seconds(*models) -> float:
    """Seconds the first call of each compiled shape took on these models (compile, and capture on
    a GPU): what per-token timings leave out, to be reported beside them. 0 for eager and static."""
    from playground.engine.runners.static import state_of

    return sum(sum(steps.seconds.values()) for m in models if m is not None
               for steps in [state_of(m).steps] if steps is not None)


def make_runner(model, name: str = "auto", head=None):
    """A fresh runner (its own cache) for `model`; `head` maps hidden states to logits when the
    caller trims the output layer (None: the model's own head)."""
    kind = resolve(name, model.device)
    if kind == EAGER:
        from playground.engine.runners.eager import EagerRunner

        return EagerRunner(model, head)
    if kind == LLAMACPP:
        from playground.engine.runners.llamacpp import LlamaCppRunner

        return LlamaCppRunner(model, head)
    if kind == STATIC:
        from playground.engine.runners.static import StaticRunner

        return StaticRunner(model, head)
    from playground.engine.runners.compiled import CompiledRunner

    return CompiledRunner(model, head)
