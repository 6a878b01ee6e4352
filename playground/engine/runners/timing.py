"""Timing a model's decoding step on each candidate runner, for auto (runners/auto.py): the same fixed
tokens fed to each, a step of each in turn, so a drift of the machine hits every candidate alike.

The tokens fed are a fixed sequence, the same for every candidate: a twin's argmax means nothing, and
a step's cost does not hang on which token it reads. Where a handle's PyTorch model is not made, eager
runs on its random-weight twin (see runners/auto.py's docstring); every other candidate on the model.

Each candidate's forwards are timed as a run makes them: torch held to one thread where the runner
computes on its own pool (as_in_a_run).

A candidate that raises (when it is made, reads the prompt, or takes its first step, where a compile
runs) is dropped with its reason; so is one computing eager's math another way (SAME_MATH) whose first
step's logits are not eager's on the same tokens (first_step_differs). Eager's own failure raises.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import median

from playground.engine.clock import clock
from playground.engine.runners import EAGER, is_handle

CONTEXT = 128  # entries the cache holds when the steps are timed, unless asked (choice.timed_fill): a short run's
WARM, TIMED = 2, 9  # steps of each candidate left out, then timed (alternating, so drifts hit each)
SAME_MATH = ("static", "compiled")  # eager's computation run another way: its first step must equal eager's
# a first step's tolerance against eager's: float32's, EXACT plus RELATIVE of the largest logit (inductor's
# fused float32 math and the masked attention kernel sum in another order: on 151,936 logits of magnitude
# 20-40 they differ from eager's by 1e-4 to 1e-3, over a flat 1e-4); bf16's and float16's, ROUNDED plus
# two units in the last place of the largest logit
EXACT, RELATIVE, ROUNDED = 1e-4, 1e-4, 0.05
TOP = 5  # the likeliest tokens of eager's step that must keep their order where their margins exceed the tolerance
TWIN, ITSELF = "random-weight twin", "the model"  # what eager's step ran on (a choice's "eager_timed_on")


@dataclass(frozen=True)
class Timed:
    """Median milliseconds by candidate: a plain step, and (where asked) a verification; the dropped."""

    step_ms: dict[str, float]
    dropped: dict[str, str] = field(default_factory=dict)
    verify_ms: dict[str, float] = field(default_factory=dict)


def on_twin(model) -> bool:
    """Is eager's step timed on a random-weight twin? For a handle whose PyTorch model is not made."""
    return is_handle(model) and not model.loaded


def time_steps(model, candidates: dict[str, tuple[str, int | None]], verify_rows: int = 0,
               context: int = CONTEXT) -> Timed:
    """Median milliseconds of one plain decoding step of each candidate (name -> runner and head rows,
    None for the whole head), after a `context`-token prompt (as long as the model's context allows),
    and the candidates dropped, with why; with `verify_rows`, also of one forward over that many new
    tokens after the prompt (a verification). The twin, where one is made, is let go before this returns."""
    cuts = [rows for _, rows in candidates.values() if rows]
    vocab = min(cuts or [model.config.get_text_config().vocab_size])  # a prompt every head can have drafted
    context = fitting(model, context, WARM + TIMED + verify_rows)
    tokens = [(7 * i + 3) % vocab for i in range(context + WARM + TIMED)]
    twin = model.twin() if on_twin(model) and any(r == EAGER for r, _ in candidates.values()) else None
    models, dropped = started(model, twin, candidates, tokens[:context])
    times: dict[str, list[float]] = {name: [] for name in models}
    for n in range(context + 1, len(tokens) + 1):  # one new token a step
        firsts = {}
        for name, lm in list(models.items()):
            start = clock(lm.device)
            try:
                with as_in_a_run(lm):
                    logits = lm.logits_for(tokens[:n], 1)
            except Exception as e:  # a compile or a graph's recording fails at the step's first call
                if candidates[name][0] == EAGER:
                    raise
                dropped[name] = f"its first step raised {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                del models[name], times[name]
                continue
            times[name].append(clock(lm.device) - start)
            firsts[name] = logits
            if failed_compiling(lm):  # the compiled runner ran the step uncompiled: not what it stands for
                dropped[name] = failed_compiling(lm)
                del models[name], times[name], firsts[name]
        if n == context + 1:
            for name, why in differing(firsts, candidates).items():
                dropped[name] = why
                del models[name], times[name]
    verify_ms = verifications(models, candidates, tokens, context, verify_rows, dropped) if verify_rows else {}
    times = {name: t for name, t in times.items() if name in models}  # a verification may drop one too
    if twin is not None:
        del models, twin
        if not model.loaded:  # nothing made the real model meanwhile: this only hands the twin's memory back
            model.release()
    return Timed({name: median(t[WARM:]) * 1000 for name, t in times.items()}, dropped, verify_ms)


def fitting(model, prefix: int, after: int) -> int:
    """`prefix` entries, or fewer where the model's context cannot hold them and `after` more."""
    limit = getattr(model.config.get_text_config(), "max_position_embeddings", None)
    return max(1, min(prefix, limit - after)) if limit else prefix


def verifications(models: dict, candidates: dict, tokens: list[int], context: int, rows: int,
                  dropped: dict) -> dict[str, float]:
    """Median milliseconds of a forward over `rows` new tokens after the `context`-token prompt, each
    candidate in turn (the cache rolled back to the prompt before each), the first of each left out.
    A candidate whose verification raises or fails to compile (a shape of its own) is dropped from
    `models` into `dropped` with why, as a failing first step is; eager's failure raises."""
    times: dict[str, list[float]] = {name: [] for name in models}
    for _ in range(1 + TIMED):
        for name, lm in list(models.items()):
            start = clock(lm.device)
            try:
                with as_in_a_run(lm):
                    lm.logits_for(tokens[: context + rows], rows)
            except Exception as e:
                if candidates[name][0] == EAGER:
                    raise
                dropped[name] = f"its {rows}-row verification raised {type(e).__name__}: " + \
                    (str(e).splitlines()[0] if str(e) else "")
                del models[name], times[name]
                continue
            times[name].append(clock(lm.device) - start)
            if failed_compiling(lm):
                dropped[name] = failed_compiling(lm)
                del models[name], times[name]
    return {name: median(t[1:]) * 1000 for name, t in times.items()}


def failed_compiling(lm) -> str | None:
    """Why a shape of the model failed to compile on the compiled runner (it then runs the step uncompiled,
    which is not what the candidate stands for), or None."""
    failed = getattr(getattr(lm.runner, "steps", None), "failed", None)
    return f"compiling failed: {next(iter(failed.values()))}" if failed else None


def as_in_a_run(lm):
    """Torch's threads as a run of this runner holds them (generate.outside_torch): one, where the
    forward runs on its own pool (ONNX Runtime's, llama.cpp's). Timed at torch's two, a cut head's pad
    after ONNX Runtime's run woke torch's OpenMP workers against ORT's spinning ones: the default draft's
    cut step measured 23 ms against 15 whole, and 14-16 ms against 16-19 at one thread, as runs take it."""
    from playground.engine.generate import OWN_POOLS, torch_threads

    return torch_threads(1 if lm.runner.name in OWN_POOLS else None)


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
    """Why `other`'s logits [1, V] are not eager's within the tolerance of their dtype, or None: the top
    tokens in another order where eager's margins between them exceed the tolerance (the argmax first),
    or any logit further than the tolerance, which scales with the largest logit (`tolerance`)."""
    import torch

    dtype, eager, other = eager.dtype, eager.float()[-1], other.float()[-1]
    shown = torch.isfinite(eager)  # a cut head's rows past its cut are -inf in both
    if not torch.equal(shown, torch.isfinite(other)):
        return "its first step's logits are not finite where eager's are (or the other way)"
    eager, other = eager[shown], other[shown]
    allowed = tolerance(dtype, float(eager.abs().max()))
    first, theirs = int(eager.argmax()), int(other.argmax())
    if theirs != first and float(eager[first] - eager[theirs]) > 2 * allowed:
        return (f"its first step's argmax is token {theirs}, eager's {first} "
                f"({float(eager[first] - eager[theirs]):.3g} apart in eager's)")
    top = eager.topk(min(TOP + 1, eager.numel()))
    for rank in range(top.indices.numel() - 1):  # each of eager's top tokens against the next
        margin = float(top.values[rank] - top.values[rank + 1])
        mine, next_ = int(top.indices[rank]), int(top.indices[rank + 1])
        if margin > 2 * allowed and float(other[mine]) <= float(other[next_]):
            return f"its first step ranks eager's token {next_} over token {mine} ({margin:.3g} apart in eager's)"
    delta = float((eager - other).abs().max())
    if delta > allowed:
        return f"its first step's logits differ from eager's by up to {delta:.3g} (tolerance {allowed:.3g})"
    return None


def tolerance(dtype, largest: float) -> float:
    """How far a first step's logit may be from eager's, by dtype and the largest logit's magnitude."""
    import torch

    if dtype == torch.float32:
        return EXACT + RELATIVE * largest
    return ROUNDED + 2 * torch.finfo(dtype).eps * largest
