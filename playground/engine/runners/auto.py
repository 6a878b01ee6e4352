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
"""

from __future__ import annotations

import time
from statistics import median

from playground.engine.runners.choice import recorded, remember

CONTEXT = 64  # tokens the cache holds when the steps are timed: a short prompt's
WARM, TIMED = 2, 9  # steps of each runner left out, then timed (alternating, so drifts hit both)
CANDIDATES = ("eager", "onnxruntime")


def record(model, rows: int | None = None) -> dict:
    """The recorded choice, or a new one: both runners' plain steps timed now, the faster kept."""
    import torch

    known = recorded(model, rows)
    if known is not None:
        return known
    step_ms = time_steps(model, rows)
    choice = {"runner": min(step_ms, key=step_ms.get), "step_ms": step_ms,
              "measured": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    remember(model, rows, torch.get_num_threads(), choice)
    if choice["runner"] != "onnxruntime":
        from playground.engine.runners.onnx_build import release

        release(model)
    return choice


def time_steps(model, rows: int | None = None) -> dict[str, float]:
    """Median milliseconds of one plain decoding step on each candidate, after a CONTEXT-token prompt:
    the same greedy tokens fed to both, a step of one alternating with the other's."""
    from playground.engine.kvcache import CachedModel

    vocab = rows or model.config.get_text_config().vocab_size
    tokens = [(7 * i + 3) % vocab for i in range(CONTEXT)]
    models = {name: CachedModel(model, head_rows=rows, runner=name) for name in CANDIDATES}
    nxt = {name: int(lm.logits_for(tokens, 1)[-1].argmax()) for name, lm in models.items()}
    tokens = tokens + [nxt["eager"]]
    times: dict[str, list[float]] = {name: [] for name in CANDIDATES}
    for _ in range(WARM + TIMED):
        for name, lm in models.items():
            start = time.perf_counter()
            logits = lm.logits_for(tokens, 1)
            times[name].append(time.perf_counter() - start)
        tokens = tokens + [int(logits[-1].argmax())]
    return {name: median(t[WARM:]) * 1000 for name, t in times.items()}
