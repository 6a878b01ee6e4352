"""What `auto` stands for, measured on this machine: each model's decoding step timed on each candidate
runner (runners/timing.py), and auto takes the fastest. On a CPU, for a model ONNX Runtime can serve
(int4 from a checkpoint: onnx_build.serves), PyTorch's kernels (eager) against ONNX Runtime's, and
llama.cpp's on the model's own GGUF where the llama.cpp extra is installed (on a 2-core EPYC its
kernels led both: issue 48). On a GPU, eager against compiled (the static cache's step compiled, run
as a CUDA graph): at batch 1 eager's step is the launch of hundreds of small kernels, whatever the
model's size (a 0.5B step cost 93 % of a 7B's on an H200), which a graph replays in one launch; but a
compile can fail, and what it makes is another computation, so it is checked (below).

For a pair's target the race runs two kinds of forward on one runner: the plain run's one-token steps
and the speculative run's verifications. Its VERIFY_ROWS-row verification is timed beside its plain
step, and the runner kept is the one whose two together cost least; a draft runs plain steps only.

A candidate that raises (an op the compiler cannot trace, a bitsandbytes model the compiled runner
refuses, out of memory while a graph records) or whose first step differs from eager's on the same
tokens (another argmax at a margin over the tolerance, or a logit further than the tolerance: 1e-4 in
float32; in bf16 and float16 0.05 plus two units in the last place of the largest logit, a bf16 logit
of 20 being stored to 0.125) is dropped with its reason, recorded and shown; what it left half made
is not kept (compiled.run_step), and the run goes on the others.

The kernels rank differently on different CPUs: ONNX Runtime's MatMulNBits led PyTorch's int4 kernel
by 1.4x on 2 AVX2 cores, and trailed it in one board run on a 2-core Xeon with AMX
(docs/benchmarks.md), so a table written on one machine cannot say it for the next.

Measured once per CPU and thread count (a GPU: per card), model and library versions, a few seconds
(on a GPU, plus the compile): `record` times the runners through the cache model and writes the choice
where resolve() reads it (runners/choice.py, which needs neither the cache model nor a clock). With
nothing recorded, auto keeps the table's choice (config.AUTO_RUNNER).

A model kept as its files (a handle, models/handle.py) whose PyTorch model is not made yet has eager's
step timed on its random-weight twin: the same config, layer classes, shapes, int4 groups, packing
and int8 head, every value random (models/twin.py), made in seconds where the real one is
dequantized from the GGUF and quantized again (92 s for the 1.5B target, 42 s for the 0.5B draft on
2 cores), only to be let go when ONNX Runtime wins, as it usually does. That is sound because no part
of a plain step does work that hangs on the weights' values: the int4 and int8 kernels read every
packed byte and scale of every layer and multiply whatever they hold, the embedding is a lookup, and
attention, the norms and the cache run on shapes. The choice says so ("eager_timed_on"). A handle
already made, and any other model, is timed on itself; ONNX Runtime's and llama.cpp's steps always run
their real files.

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

from playground.engine.runners import is_handle
from playground.engine.runners.choice import (DRAFT, RUNNER, TARGET, bucket_of, device_kind, recorded, remember,
                                              timed_fill)
from playground.engine.runners.timing import ITSELF, TWIN, Timed, first_step_differs, on_twin, time_steps  # noqa: F401

CANDIDATES = {"cpu": ("eager", "onnxruntime"), "cuda": ("eager", "compiled")}  # by device_kind (and see candidates)
VERIFY_ROWS = 4  # a target's verification as timed beside its plain step: γ 3's, the default pair's
CUT_NOT_FREE = ("onnxruntime", "llamacpp")  # runners whose cut head is not cheaper by construction
CUT, FULL = "cut", "full"  # a draft's two heads: its draft vocabulary's first rows, and all of them


def record(model, rows: int | None = None, verifies: bool = False, context: int | None = None) -> dict:
    """The recorded choice, or a new one: each candidate's plain step timed now, the fastest kept; for a
    model that `verifies` (a pair's target), its VERIFY_ROWS-row verification timed too, and the runner
    kept is the one whose plain step and verification together are the fastest (a race runs both: the
    plain run's steps and the speculative run's verifications). Timed and kept for a run of `context`
    entries (its bucket: choice.bucket_of; None, a short run), with the cache filled as such a run's is
    halfway (choice.timed_fill), and for the model's role (a target apart from a draft). The choice
    names the runner, each candidate's step (and verification) in milliseconds, the entries they were
    timed after, the candidates dropped and why, and the seconds compiling took (outside every step's)."""
    import torch

    role = TARGET if verifies else DRAFT
    known = recorded(model, rows, RUNNER, role, context)
    if known is not None:
        return known
    timed_on = TWIN if on_twin(model) else ITSELF
    compiled_before = compile_total(model)
    filled = timed_fill(bucket_of(context))
    timed = time_steps(model, {name: (name, rows) for name in candidates(model)}, VERIFY_ROWS if verifies else 0,
                       filled)
    score = {name: ms + timed.verify_ms.get(name, 0.0) for name, ms in timed.step_ms.items()}
    choice = {"runner": min(score, key=score.get), "step_ms": timed.step_ms, "eager_timed_on": timed_on,
              "role": role, "filled": filled, "measured": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    if timed.verify_ms:
        choice["verify_ms"] = timed.verify_ms
    if timed.dropped:
        choice["dropped"] = timed.dropped
    if compile_total(model) > compiled_before:
        choice["compile_s"] = round(compile_total(model) - compiled_before, 2)
    remember(model, rows, torch.get_num_threads(), choice, RUNNER, role, context)
    let_go(model, rows, choice["runner"])
    return choice


def let_go(model, rows: int | None, kept: str) -> None:
    """What the candidates not kept hold is not held for nothing: ONNX Runtime's sessions, a model
    handle's PyTorch form, the compiled steps of this head and their CUDA graphs."""
    if kept != "onnxruntime":
        from playground.engine.runners.onnx_build import release

        release(model)
    if kept in ("onnxruntime", "llamacpp") and is_handle(model):  # a PyTorch model made before the timing:
        model.release()  # the kept runner computes on its own files
    if kept != "compiled" and not is_handle(model):
        from playground.engine.runners.static import state_of

        steps = state_of(model).steps or {}
        for key in [key for key in steps if key[2] == rows]:  # (rows a step, capacity, head rows)
            del steps[key]
            steps.seconds.pop(key, None)


def compile_total(model) -> float:
    """Seconds the model's compiled steps took to compile so far (0 when it has none)."""
    from playground.engine.runners import compile_seconds

    return 0.0 if is_handle(model) and not model.loaded else compile_seconds(model)


def candidates(model) -> tuple[str, ...]:
    """The runners auto times for this model: on a GPU eager and compiled; on a CPU eager and
    onnxruntime, and llamacpp where its extra is installed and the model came from a GGUF (its own
    quantization, llama.cpp's kernels: on some CPUs they lead both)."""
    import importlib.util

    kind = device_kind(model)
    if kind == "cpu" and importlib.util.find_spec("llama_cpp") is not None:
        from playground.engine.runners.onnx_build import reads_gguf

        if reads_gguf(model):
            return CANDIDATES[kind] + ("llamacpp",)
    return CANDIDATES[kind]


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
    step_ms = time_steps(model, {CUT: (runners[CUT], rows), FULL: (runners[FULL], None)}).step_ms
    choice = {"head": CUT if step_ms[CUT] < step_ms[FULL] else FULL, "step_ms": step_ms,
              "runners": dict(runners), "rows": {CUT: rows, FULL: model.config.get_text_config().vocab_size},
              "measured": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    remember(model, rows, torch.get_num_threads(), choice, head_kind(runners[CUT]))
    if "onnxruntime" in runners.values():  # the head not kept holds a session of its own: both closed,
        from playground.engine.runners.onnx_build import release  # the kept one reopens from its cached build

        release(model)
    return choice


def choice_text(choice: dict) -> str:
    """A runner choice in a few words, the kept runner first: "compiled: a plain step 4.1 ms against
    19.0 ms on eager; compiling took 38 s", and each candidate dropped with its reason."""
    ms, verify = choice["step_ms"], choice.get("verify_ms", {})

    def cost(name: str) -> str:
        return f"{ms[name]:.1f} ms" + (f" (a {VERIFY_ROWS}-row verification {verify[name]:.1f})" if name in verify else "")

    others = [name for name in sorted(ms, key=ms.get) if name != choice["runner"]]
    said = f"{choice['runner']}: a plain step {cost(choice['runner'])}" + "".join(
        f"{' against' if i == 0 else ','} {cost(name)} on {name}" for i, name in enumerate(others))
    if choice.get("eager_timed_on") == TWIN:
        said += " (eager timed on a random-weight twin of its shapes)"
    if choice.get("compile_s"):
        said += f"; compiling took {choice['compile_s']:.0f} s, outside every step"
    for name, why in choice.get("dropped", {}).items():
        said += f"; {name} dropped: {why}"
    return said
