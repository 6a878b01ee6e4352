"""What `auto` stands for, measured on this machine: each model's plain decoding step timed on each
candidate runner, and auto takes the faster. On a CPU, for a model ONNX Runtime can serve (int4 from
a checkpoint: onnx_build.serves), PyTorch's kernels (eager) against ONNX Runtime's. On a GPU, eager
against compiled (the static cache's step compiled, run as a CUDA graph): at batch 1 eager's step is
the launch of hundreds of small kernels, whatever the model's size (a 0.5B step cost 93 % of a 7B's
on an H200), which a graph replays in one launch; but a compile can fail, and what it makes is
another computation, so it is checked (below).

A candidate that raises (an op the compiler cannot trace, a bitsandbytes model the compiled runner
refuses, out of memory while a graph records) or whose first step differs from eager's on the same
tokens (another argmax at a margin over the tolerance, or a logit further than the tolerance: 1e-4 in
float32; in bf16 and float16 0.05 plus two units in the last place of the largest logit, a bf16 logit
of 20 being stored to 0.125) is dropped with its reason, recorded and shown; what it left half made
is not kept (compiled.run_step), and the run goes on the others.

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

from playground.engine.clock import clock

from playground.engine.runners import EAGER, is_handle
from playground.engine.runners.choice import device_kind, recorded, remember

CONTEXT = 64  # tokens the cache holds when the steps are timed: a short prompt's
WARM, TIMED = 2, 9  # steps of each candidate left out, then timed (alternating, so drifts hit each)
CANDIDATES = {"cpu": ("eager", "onnxruntime"), "cuda": ("eager", "compiled")}  # by device_kind
SAME_MATH = ("static", "compiled")  # eager's computation run another way: its first step must equal eager's
EXACT, ROUNDED = 1e-4, 0.05  # a first step's tolerance against eager's: float32, and bf16 / float16 (plus ulps)
CUT_NOT_FREE = ("onnxruntime", "llamacpp")  # runners whose cut head is not cheaper by construction
CUT, FULL = "cut", "full"  # a draft's two heads: its draft vocabulary's first rows, and all of them
TWIN, ITSELF = "random-weight twin", "the model"  # what eager's step ran on (a choice's "eager_timed_on")


def record(model, rows: int | None = None) -> dict:
    """The recorded choice, or a new one: each candidate's plain step timed now, the fastest kept. The
    choice names the runner, each candidate's step in milliseconds, the candidates dropped and why, and
    the seconds compiling took (outside every step's time)."""
    import torch

    known = recorded(model, rows)
    if known is not None:
        return known
    timed_on = TWIN if on_twin(model) else ITSELF
    compiled_before = compile_total(model)
    step_ms, dropped = time_steps(model, {name: (name, rows) for name in CANDIDATES[device_kind(model)]})
    choice = {"runner": min(step_ms, key=step_ms.get), "step_ms": step_ms, "eager_timed_on": timed_on,
              "measured": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    if dropped:
        choice["dropped"] = dropped
    if compile_total(model) > compiled_before:
        choice["compile_s"] = round(compile_total(model) - compiled_before, 2)
    remember(model, rows, torch.get_num_threads(), choice)
    let_go(model, rows, choice["runner"])
    return choice


def let_go(model, rows: int | None, kept: str) -> None:
    """What the candidates not kept hold is not held for nothing: ONNX Runtime's sessions, a model
    handle's PyTorch form, the compiled steps of this head and their CUDA graphs."""
    if kept != "onnxruntime":
        from playground.engine.runners.onnx_build import release

        release(model)
    elif is_handle(model):  # a PyTorch model made before the timing
        model.release()
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
    step_ms, _ = time_steps(model, {CUT: (runners[CUT], rows), FULL: (runners[FULL], None)})
    choice = {"head": CUT if step_ms[CUT] < step_ms[FULL] else FULL, "step_ms": step_ms,
              "runners": dict(runners), "rows": {CUT: rows, FULL: model.config.get_text_config().vocab_size},
              "measured": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    remember(model, rows, torch.get_num_threads(), choice, head_kind(runners[CUT]))
    if "onnxruntime" in runners.values():  # the head not kept holds a session of its own: both closed,
        from playground.engine.runners.onnx_build import release  # the kept one reopens from its cached build

        release(model)
    return choice


def time_steps(model, candidates: dict[str, tuple[str, int | None]]) -> tuple[dict[str, float], dict[str, str]]:
    """Median milliseconds of one plain decoding step of each candidate (name -> runner and head rows,
    None for the whole head), after a CONTEXT-token prompt: the same fixed tokens fed to each, a step
    of each in turn; and the candidates dropped, with why (see the module's docstring). Eager runs on
    the model's random-weight twin where on_twin says so; the twin is let go before this returns."""
    cuts = [rows for _, rows in candidates.values() if rows]
    vocab = min(cuts or [model.config.get_text_config().vocab_size])  # a prompt every head can have drafted
    tokens = [(7 * i + 3) % vocab for i in range(CONTEXT + WARM + TIMED)]
    twin = model.twin() if on_twin(model) and any(r == EAGER for r, _ in candidates.values()) else None
    models, dropped = started(model, twin, candidates, tokens[:CONTEXT])
    times: dict[str, list[float]] = {name: [] for name in models}
    for n in range(CONTEXT + 1, len(tokens) + 1):  # one new token a step
        firsts = {}
        for name, lm in list(models.items()):
            start = clock(lm.device)
            try:
                logits = lm.logits_for(tokens[:n], 1)
            except Exception as e:  # a compile or a graph's recording fails at the step's first call
                if candidates[name][0] == EAGER:
                    raise
                dropped[name] = f"its first step raised {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                del models[name], times[name]
                continue
            times[name].append(clock(lm.device) - start)
            firsts[name] = logits
        if n == CONTEXT + 1:
            for name, why in differing(firsts, candidates).items():
                dropped[name] = why
                del models[name], times[name]
    if twin is not None:
        del models, twin
        if not model.loaded:  # nothing made the real model meanwhile: this only hands the twin's memory back
            model.release()
    return {name: median(t[WARM:]) * 1000 for name, t in times.items()}, dropped


def started(model, twin, candidates: dict, prompt: list[int]) -> tuple[dict, dict[str, str]]:
    """Each candidate's cache model with the prompt read (untimed), and those that could not be made
    or read it, with why. Eager's failure is not a candidate's: it raises."""
    from playground.engine.kvcache import CachedModel

    models, dropped = {}, {}
    for name, (runner, rows) in candidates.items():
        try:
            lm = CachedModel(twin if twin is not None and runner == EAGER else model, head_rows=rows, runner=runner)
            lm.logits_for(prompt, 1)
            models[name] = lm
        except Exception as e:
            if runner == EAGER:
                raise
            dropped[name] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return models, dropped


def differing(firsts: dict, candidates: dict) -> dict[str, str]:
    """The candidates computing eager's math another way (SAME_MATH) whose first step's logits are not
    eager's on the same tokens, each with what differed; nothing when eager's step is not among them."""
    reference = next((firsts[name] for name, (runner, _) in candidates.items() if runner == EAGER
                      and name in firsts), None)
    if reference is None:
        return {}
    return {name: why for name, (runner, _) in candidates.items()
            if runner in SAME_MATH and name in firsts
            for why in [first_step_differs(reference, firsts[name])] if why}


def first_step_differs(eager, other) -> str | None:
    """Why `other`'s logits [1, V] are not eager's within the tolerance of their dtype, or None: a
    different argmax where eager's top two are further apart than the tolerance, or any logit further."""
    import torch

    dtype, eager, other = eager.dtype, eager.float()[-1], other.float()[-1]
    shown = torch.isfinite(eager)  # a cut head's rows past its cut are -inf in both
    if not torch.equal(shown, torch.isfinite(other)):
        return "its first step's logits are not finite where eager's are (or the other way)"
    eager, other = eager[shown], other[shown]
    tolerance = EXACT if dtype == torch.float32 else ROUNDED + 2 * torch.finfo(dtype).eps * float(eager.abs().max())
    delta = float((eager - other).abs().max())
    top = eager.topk(2).values
    if int(other.argmax()) != int(eager.argmax()) and float(top[0] - top[1]) > tolerance:
        return (f"its first step's argmax is token {int(other.argmax())}, eager's {int(eager.argmax())} "
                f"(eager's top two {float(top[0] - top[1]):.3g} apart)")
    if delta > tolerance:
        return f"its first step's logits differ from eager's by up to {delta:.3g} (tolerance {tolerance:.3g})"
    return None


def choice_text(choice: dict) -> str:
    """A runner choice in a few words, the kept runner first: "compiled: a plain step 4.1 ms against
    19.0 ms on eager; compiling took 38 s", and each candidate dropped with its reason."""
    ms = choice["step_ms"]
    others = [name for name in sorted(ms, key=ms.get) if name != choice["runner"]]
    said = f"{choice['runner']}: a plain step {ms[choice['runner']]:.1f} ms" + "".join(
        f"{' against' if i == 0 else ','} {ms[name]:.1f} ms on {name}" for i, name in enumerate(others))
    if choice.get("eager_timed_on") == TWIN:
        said += " (eager timed on a random-weight twin of its shapes)"
    if choice.get("compile_s"):
        said += f"; compiling took {choice['compile_s']:.0f} s, outside every step"
    for name, why in choice.get("dropped", {}).items():
        said += f"; {name} dropped: {why}"
    return said
