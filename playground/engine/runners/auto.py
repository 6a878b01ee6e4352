"""What `auto` stands for on a CPU, measured on this machine: for a model ONNX Runtime can serve
(int4 from a checkpoint: onnx_build.serves), its plain decoding step timed on PyTorch's kernels
(eager) and on ONNX Runtime's, and auto takes the faster.

The two kernels rank differently on different CPUs: ONNX Runtime's MatMulNBits led PyTorch's int4
kernel by 1.4x on 2 AVX2 cores, and trailed it in one board run on a 2-core Xeon with AMX
(docs/benchmarks.md), so a table written on one machine cannot say it for the next. The plain step
decides, as it decides the quantization: a verification step runs on the same kernels.

Measured once per CPU, thread count, model (its build key) and library versions, a few seconds, and
kept in the cache (runner-choice.json, replaced whole): `record` measures and writes, and `recorded`
is what resolve() reads, from memory after the first read. With nothing recorded for the threads a
run uses, auto keeps the table's choice (config.AUTO_RUNNER).
"""

from __future__ import annotations

import json
import platform
import time
import weakref
from statistics import median

from playground.config import cache_dir, write_text_atomic

CONTEXT = 64  # tokens the cache holds when the steps are timed: a short prompt's
WARM, TIMED = 2, 9  # steps of each runner left out, then timed (alternating, so drifts hit both)
CANDIDATES = ("eager", "onnxruntime")

# model -> {(rows, threads): its choice, or None}: the file read once per model and thread count, since
# resolve() asks at every runner made and a key hashes the checkpoint's small files (10 ms for Qwen's tokenizer)
SEEN: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def cpu_name() -> str:
    """The CPU's marketing name (/proc/cpuinfo on Linux; platform's guess elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def choice_file():
    return cache_dir() / "runner-choice.json"


def key_of(model, rows: int | None, threads: int) -> str:
    """What a measured choice holds for: this CPU and thread count, this model's build, the libraries."""
    from importlib.metadata import version

    from playground.engine.runners.onnx_build import build_key, builder_options, checkpoint_of, precision_of

    checkpoint, precision = checkpoint_of(model), precision_of(model)
    build = build_key(checkpoint, precision, builder_options(checkpoint, precision, rows), rows)[:16]
    return " | ".join([cpu_name(), f"{threads} threads", f"{checkpoint.name} {precision} {build}",
                       f"onnxruntime {version('onnxruntime')}", f"torch {version('torch')}"])


def read_all() -> dict:
    """Every recorded choice; an unreadable file counts as none (it is rewritten whole at the next record)."""
    try:
        return json.loads(choice_file().read_text())
    except (OSError, ValueError):
        return {}


def recorded(model, rows: int | None = None) -> dict | None:
    """The choice measured for this model at the threads torch runs on now, or None."""
    import torch

    threads = torch.get_num_threads()
    mine = SEEN.setdefault(model, {})
    if (rows, threads) not in mine:
        mine[(rows, threads)] = read_all().get(key_of(model, rows, threads))
    return mine[(rows, threads)]


def record(model, rows: int | None = None) -> dict:
    """The recorded choice, or a new one: both runners' plain steps timed now, the faster kept."""
    import torch

    known = recorded(model, rows)
    if known is not None:
        return known
    step_ms = time_steps(model, rows)
    choice = {"runner": min(step_ms, key=step_ms.get), "step_ms": step_ms,
              "measured": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    threads = torch.get_num_threads()
    write_all({**read_all(), key_of(model, rows, threads): choice})
    SEEN.setdefault(model, {})[(rows, threads)] = choice
    if choice["runner"] != "onnxruntime":
        from playground.engine.runners.onnx_build import release

        release(model)
    return choice


def write_all(choices: dict) -> None:
    """The file replaced whole: a reader never sees half of it."""
    path = choice_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(choices, indent=1) + "\n")


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
