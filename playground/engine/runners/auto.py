"""What `auto` stands for on a CPU, measured on this machine: for a model ONNX Runtime can serve
(int4 from a checkpoint: onnx_build.serves), its plain decoding step timed on PyTorch's kernels
(eager) and on ONNX Runtime's, and auto takes the faster.

The two kernels rank differently on different CPUs: ONNX Runtime's MatMulNBits led PyTorch's int4
kernel by 1.4x on 2 AVX2 cores, and trailed it in one board run on a 2-core Xeon with AMX
(docs/benchmarks.md), so a table written on one machine cannot say it for the next. The plain step
decides, as it decides the quantization: a verification step runs on the same kernels.

Measured once per CPU, thread count, model (its build key) and library versions, a few seconds:
`record` times both runners through the cache model and writes the choice where resolve() reads it
(runners/choice.py, which needs neither the cache model nor a clock). With nothing recorded for the
threads a run uses, auto keeps the table's choice (config.AUTO_RUNNER).

A model kept as its files (a handle, models/handle.py) whose PyTorch model is not made yet has eager's
step timed on its random-weight twin: the same config, layer classes, shapes, int4 groups, packing
and int8 head, every value random (models/twin.py), made in seconds where the real one is
dequantized from the GGUF and quantized again (92 s for the 1.5B target, 42 s for the 0.5B draft on
2 cores), only to be let go when ONNX Runtime wins, as it usually does. That is sound because no part
of a plain step does work that hangs on the weights' values: the int4 and int8 kernels read every
packed byte and scale of every layer and multiply whatever they hold, the embedding is a lookup, and
attention, the norms and the cache run on shapes. The choice says so ("eager_timed_on"). A handle
already made, and any other model, is timed on itself; ONNX Runtime's step always runs its real
build. The tokens fed are a fixed sequence, the same for every candidate: a twin's argmax means
nothing, and a step's cost does not hang on which token it reads.

A draft's head is chosen the same way (`record_head`). A draft vocabulary (draft_vocab) cuts the
output layer to its first rows, which on PyTorch's runners reads fewer rows of the weight and is
cheaper by construction; on a runner that computes the head in its own kernels it may not be: ONNX
Runtime runs the cut head as another build, whose step measured slower than the whole head's on a
2-core EPYC (13.8-24.0 ms against 9.7-11.2, issue 38), and llama.cpp computes every row and masks
the rest. There the draft's plain step is timed cut and whole, and the cut is kept only where it is
faster: it drafts fewer of the target's tokens (its α is lower), so a tie goes to the whole head.
"""

from __future__ import annotations

import time
from statistics import median

from playground.engine.runners import EAGER, is_handle
from playground.engine.runners.choice import recorded, remember

CONTEXT = 64  # tokens the cache holds when the steps are timed: a short prompt's
WARM, TIMED = 2, 9  # steps of each candidate left out, then timed (alternating, so drifts hit each)
CANDIDATES = ("eager", "onnxruntime")
CUT_NOT_FREE = ("onnxruntime", "llamacpp")  # runners whose cut head is not cheaper by construction
CUT, FULL = "cut", "full"  # a draft's two heads: its draft vocabulary's first rows, and all of them
TWIN, ITSELF = "random-weight twin", "the model"  # what eager's step ran on (a choice's "eager_timed_on")


def record(model, rows: int | None = None) -> dict:
    """The recorded choice, or a new one: both runners' plain steps timed now, the faster kept."""
    import torch

    known = recorded(model, rows)
    if known is not None:
        return known
    timed_on = TWIN if on_twin(model) else ITSELF
    step_ms = time_steps(model, {name: (name, rows) for name in CANDIDATES})
    choice = {"runner": min(step_ms, key=step_ms.get), "step_ms": step_ms, "eager_timed_on": timed_on,
              "measured": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    remember(model, rows, torch.get_num_threads(), choice)
    if choice["runner"] != "onnxruntime":
        from playground.engine.runners.onnx_build import release

        release(model)
    elif is_handle(model):  # a PyTorch model made before the timing: not held for nothing
        model.release()
    return choice


def on_twin(model) -> bool:
    """Is eager's step timed on a random-weight twin? For a handle whose PyTorch model is not made."""
    return is_handle(model) and not model.loaded


def head_kind(runner: str) -> str:
    """The kind (runners/choice.py) of a draft's head choice on this runner: the cut's runner decides
    what a cut costs, so the choice holds for that runner only."""
    return f"draft head on {runner}"


def record_head(model, rows: int, runners: dict[str, str]) -> dict:
    """The recorded head choice for a draft cut to `rows`, or a new one: the draft's plain step timed
    now with the cut head (on runners[CUT]) and the whole one (on runners[FULL], the runner a run with
    the whole head resolves to), the cut kept only where it is faster. The choice names the head kept,
    each head's rows and runner, and its step in milliseconds."""
    import torch

    known = recorded(model, rows, head_kind(runners[CUT]))
    if known is not None:
        return known
    step_ms = time_steps(model, {CUT: (runners[CUT], rows), FULL: (runners[FULL], None)})
    choice = {"head": CUT if step_ms[CUT] < step_ms[FULL] else FULL, "step_ms": step_ms,
              "runners": dict(runners), "rows": {CUT: rows, FULL: model.config.get_text_config().vocab_size},
              "measured": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    remember(model, rows, torch.get_num_threads(), choice, head_kind(runners[CUT]))
    if "onnxruntime" in runners.values():  # the head not kept holds a session of its own: both closed,
        from playground.engine.runners.onnx_build import release  # the kept one reopens from its cached build

        release(model)
    return choice


def time_steps(model, candidates: dict[str, tuple[str, int | None]]) -> dict[str, float]:
    """Median milliseconds of one plain decoding step of each candidate (name -> runner and head rows,
    None for the whole head), after a CONTEXT-token prompt: the same fixed tokens fed to each, a step
    of each in turn. Eager runs on the model's random-weight twin where on_twin says so; the twin is
    let go before this returns."""
    from playground.engine.kvcache import CachedModel

    cuts = [rows for _, rows in candidates.values() if rows]
    vocab = min(cuts or [model.config.get_text_config().vocab_size])  # a prompt every head can have drafted
    tokens = [(7 * i + 3) % vocab for i in range(CONTEXT + WARM + TIMED)]
    twin = model.twin() if on_twin(model) and any(r == EAGER for r, _ in candidates.values()) else None
    models = {name: CachedModel(twin if twin is not None and runner == EAGER else model, head_rows=rows,
                                runner=runner) for name, (runner, rows) in candidates.items()}
    for lm in models.values():
        lm.logits_for(tokens[:CONTEXT], 1)  # the prompt read, untimed
    times: dict[str, list[float]] = {name: [] for name in candidates}
    for n in range(CONTEXT + 1, len(tokens) + 1):  # one new token a step
        for name, lm in models.items():
            start = time.perf_counter()
            lm.logits_for(tokens[:n], 1)
            times[name].append(time.perf_counter() - start)
    if twin is not None:
        del models, twin
        if not model.loaded:  # nothing made the real model meanwhile: this only hands the twin's memory back
            model.release()
    return {name: median(t[WARM:]) * 1000 for name, t in times.items()}
