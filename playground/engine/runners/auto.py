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

from playground.engine.runners import is_handle
from playground.engine.runners.choice import recorded, remember

CONTEXT = 64  # tokens the cache holds when the steps are timed: a short prompt's
WARM, TIMED = 2, 9  # steps of each candidate left out, then timed (alternating, so drifts hit each)
CANDIDATES = ("eager", "onnxruntime")
CUT_NOT_FREE = ("onnxruntime", "llamacpp")  # runners whose cut head is not cheaper by construction
CUT, FULL = "cut", "full"  # a draft's two heads: its draft vocabulary's first rows, and all of them


def record(model, rows: int | None = None) -> dict:
    """The recorded choice, or a new one: both runners' plain steps timed now, the faster kept."""
    import torch

    known = recorded(model, rows)
    if known is not None:
        return known
    step_ms = time_steps(model, {name: (name, rows) for name in CANDIDATES})
    choice = {"runner": min(step_ms, key=step_ms.get), "step_ms": step_ms,
              "measured": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    remember(model, rows, torch.get_num_threads(), choice)
    if choice["runner"] != "onnxruntime":
        from playground.engine.runners.onnx_build import release

        release(model)
    elif is_handle(model):  # the PyTorch model was made for eager's timing alone: not held for nothing
        model.release()
    return choice


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
    None for the whole head), after a CONTEXT-token prompt: the same greedy tokens fed to each, a
    step of each in turn."""
    from playground.engine.kvcache import CachedModel

    cuts = [rows for _, rows in candidates.values() if rows]
    vocab = min(cuts or [model.config.get_text_config().vocab_size])  # a prompt every head can have drafted
    tokens = [(7 * i + 3) % vocab for i in range(CONTEXT)]
    models = {name: CachedModel(model, head_rows=rows, runner=runner)
              for name, (runner, rows) in candidates.items()}
    nxt = {name: int(lm.logits_for(tokens, 1)[-1].argmax()) for name, lm in models.items()}
    tokens = tokens + [next(iter(nxt.values()))]
    times: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(WARM + TIMED):
        for name, lm in models.items():
            start = time.perf_counter()
            logits = lm.logits_for(tokens, 1)
            times[name].append(time.perf_counter() - start)
        tokens = tokens + [int(logits[-1].argmax())]
    return {name: median(t[WARM:]) * 1000 for name, t in times.items()}
