"""`python -m playground.measure.hardware.gpu_runners`: the app's race, identity and the runners on one GPU.

Random weights of real shapes (Qwen2.5-1.5B, the default pair's target; Qwen2-0.5B, its draft's
shape; Qwen2-7B), each check written to the JSON as soon as it ends, in this order, what matters most
first, with its compile seconds ("compile_s": compiling and recording step shapes, what every timing
leaves out) and the peak GPU memory so far:

1. app: the race as the app runs it, twice, from a cold start (gpu_app.py): auto's choice for the
   pair's target (its plain step and its verification timed together) and draft, the page's warm-up,
   then the race (the plain and speculative runs of the target at once, each in a cache of its own),
   every forward on one model thread as the app's; each race's speedup, and the graphs recorded inside
   its timed steps (none should be: a first race slower than the second was the sign of them).
2. identity: the same pair in float32; greedy chain and tree through each runner equal eager
   autoregressive decoding token for token.
3. steps: per shape and runner, the plain step (one token after a 128-token prefix) and v(k) for
   k = 1..max_k, with the first call's extra time (compile and CUDA-graph capture) beside it, never
   inside; then c = draft step / target step per runner for the 1.5B and 7B targets with the 0.5B
   draft, and the formula's forecast at an assumed α (--alpha, 0.8: an assumption stated in the
   JSON), at its best γ, against the fastest plain step of any runner ("faster than what?").
4. syncs: the host's waits on the GPU per engine step (torch's sync debug mode, counted: syncs.py),
   for the plain step, the greedy chain and the sampled chain on each runner.
5. fallback: auto's fallback on two planted failures (a compile that raises, and a compiled step whose
   logits are not eager's): eager kept, the reason recorded, nothing half compiled left (gpu_auto.py).
6. contexts: auto's choice for the pair's target at a short run's context bucket and at --long-context's
   (its plain step and verification after half the bucket's entries): whether the runner that leads on
   launches at 128 entries still leads where attention reads thousands (runners/choice.py).
(asked by name only: engine, the benchmark's path: autoregressive and chain alternated per runner, and
the oracle (the target's own greedy output as a free draft) against plain decoding; quantized, the
target loaded in nf4 and int8 through the app's loader, which needs bitsandbytes.)

The budget: the whole call within --budget-s (480 s: 8 minutes on a cold card, whose compile cache is
empty and whose every 24-28-layer step shape compiles for tens of seconds). A check, or a row of one,
whose compiles and running would end past it is skipped before it starts, and says so and why
(gpu_budget.py). The 1.5B target is built once (the pair's, its embeddings scaled) and serves app,
steps, syncs and fallback, so a shape one compiled is not compiled again; every check's forwards run
on the one model thread the app check uses, so no graph is recorded twice for another thread.

    python -m playground.measure.hardware.gpu_runners --json out/gpu_runners.json   # within 8 minutes, cold
    python -m playground.measure.hardware.gpu_runners --cpu-smoke                    # tiny shapes on the CPU
"""

from __future__ import annotations

import argparse
import time

from playground.measure.hardware import gpu_app, gpu_auto, gpu_bench
from playground.measure.hardware.common import (free, gpu_command, pair_models, parse, prompts, random_model,
                                                run_checks)
from playground.measure.hardware.gpu_budget import Budget, guarded, new_shapes

RUNNERS = ("eager", "static", "compiled")
# budget_s: the whole call; row_s: what a row takes beside its compiles (timed steps, a generation or two)
FULL = dict(device="cuda", shapes=("1.5b", "0.5b", "7b"), pair_shape="1.5b", draft_layers=4, max_k=5,
            prompts=2, prompt_tokens=128, max_new_tokens=64, repeats=2, budget_s=480.0, row_s=15.0, long_context=4096,
            quantizations=(("nf4", "bfloat16"), ("int8", "bfloat16"), ("int8", "float16")))
SMOKE = dict(device="cpu", shapes=("tiny", "tiny-draft"), pair_shape="tiny", draft_layers=1, max_k=5,
             prompts=1, prompt_tokens=40, max_new_tokens=12, repeats=1, budget_s=3600.0, row_s=5.0, long_context=1024,
             quantizations=(("nf4", "float32"), ("int8", "float32")))
PAIRS = {"1.5b": "0.5b", "7b": "0.5b", "tiny": "tiny-draft"}  # target shape -> draft shape for c
DEFAULT_CHECKS = "app,identity,steps,syncs,fallback,contexts"


def options(argv=None) -> argparse.Namespace:
    p = gpu_command("gpu_runners", __doc__)
    p.add_argument("--runners", help="runners to time, in order (default eager,compiled on a GPU, where "
                   "static launches what eager does; all three on the CPU); identity checks all three")
    p.add_argument("--checks", default=DEFAULT_CHECKS,
                   help=f"which checks to run (default {DEFAULT_CHECKS}; also engine, and quantized, which "
                   "needs bitsandbytes); they run in the order above")
    p.add_argument("--gamma", type=int, default=3, help="chain lookahead (default 3, the default pair's: "
                   "its verification is the 4-row step auto times)")
    p.add_argument("--alpha", type=float, default=0.8,
                   help="assumed acceptance rate for the forecasts (default 0.8)")
    p.add_argument("--embed-std", type=float, default=0.3,
                   help="std of the random embeddings: larger makes the early-exit draft agree more")
    p.add_argument("--long-context", type=int, help="the long run's entries the contexts check times auto's "
                   "choice for (default 4096; smoke 1024)")
    p.add_argument("--budget-s", type=float,
                   help="seconds the whole call may take (default 480; smoke 3600): what would end past it "
                   "is skipped, and says why")
    args = parse(p, argv, FULL, SMOKE)
    args.runners = tuple(r for r in (args.runners or ("eager,static,compiled" if args.cpu_smoke else
                                                      "eager,compiled")).split(",") if r)
    if not args.runners or any(r not in RUNNERS for r in args.runners):
        p.error(f"argument --runners: expected a comma-separated list of {', '.join(RUNNERS)}")
    unknown = set(args.checks.split(",")) - {name for name, _ in CHECKS}
    if unknown:
        p.error(f"argument --checks: unknown {', '.join(sorted(unknown))}; expected some of "
                f"{', '.join(name for name, _ in CHECKS)}")
    args.started = time.monotonic()
    return args


def held(args) -> dict:
    """What the checks share that the report leaves out (its args keep numbers, text and tuples only)."""
    return vars(args).setdefault("held", {})


def budget_of(args) -> Budget:
    return held(args).setdefault("budget", Budget(args.budget_s, args.row_s, args.started))


def dtype_of(args, exact: bool = False):
    import torch

    return torch.float32 if exact or args.cpu_smoke else torch.bfloat16


PAIR_USERS = ("app", "steps", "syncs", "fallback", "contexts", "engine")  # the checks that share the bf16 pair


def shared_pair(args, check: str):
    """The bf16 pair the checks of PAIR_USERS share (built by the first, let go by the last of them that
    runs), so the shapes one compiled and recorded are not compiled again."""
    pair = held(args).pop("pair", None) or pair_models(args.pair_shape, dtype_of(args), args.device, args)
    chosen = args.checks.split(",")
    if check != [name for name, _ in CHECKS if name in chosen and name in PAIR_USERS][-1]:
        held(args)["pair"] = pair
    return pair


def compile_seconds(*models) -> float:
    """Seconds compiling and recording step shapes took on these models so far (runners.compile_seconds)."""
    from playground.engine.runners import compile_seconds as seconds

    return round(float(seconds(*models)), 2)  # a float even where nothing compiled (the report says 0.0)


# ---- 1. app: the race as the app runs it (gpu_app.py) ---------------------------------------------


def app(args) -> dict:
    return gpu_app.app(args, shared_pair(args, "app"), held(args)["thread"], budget_of(args))


# ---- 2. identity: float32, greedy, every runner against eager AR ------------------------------


def identity(args) -> dict:
    from playground.config import RunConfig
    from playground.engine import factory
    from playground.engine.events import output_tokens
    from playground.engine.generate import generate

    budget = budget_of(args)
    target, draft = pair_models(args.pair_shape, dtype_of(args, exact=True), args.device, args)
    ids = prompts(target.config.vocab_size, args)[0]
    plain = RunConfig(max_new_tokens=args.max_new_tokens, runner="eager")
    expected = output_tokens(list(generate(target, ids, factory.spec_config(plain))))
    out = {}
    for runner in RUNNERS:
        for speculation in ("chain", "tree"):
            run = RunConfig(gamma=args.gamma, max_new_tokens=args.max_new_tokens, runner=runner,
                            speculation=speculation, tree_budget=15, tree_depth=4)
            out[f"{runner} {speculation}"] = budget.skip(compiles(run, target, draft)) or \
                guarded(identical, target, draft, ids, run, expected)
            budget.learn(target, draft)
    out["compile_s"] = compile_seconds(target, draft)
    del target, draft
    free()
    return out


def identical(target, draft, ids, run, expected: list[int]) -> dict:
    """One run's greedy output against eager autoregressive decoding's."""
    from playground.engine import factory
    from playground.engine.events import output_tokens
    from playground.engine.generate import generate

    got = output_tokens(list(generate(target, ids, factory.spec_config(run),
                                      factory.make_drafter(run, factory.Models(target, draft)))))
    return {"identical": got == expected, "tokens": len(got)}


def compiles(run, target, draft) -> list[tuple[object, int]]:
    """The step shapes a run will compile, by model: on the compiled runner, those of its shapes
    (warmup.run_shapes) the model has not compiled yet; none on the other runners."""
    from playground.engine.runners.warmup import DRAFT, TARGET, run_shapes

    if run.runner != "compiled":
        return []
    shapes = run_shapes(run)
    return [(target, new_shapes(target, shapes[TARGET]))] + \
        ([(draft, new_shapes(draft, shapes[DRAFT]))] if draft is not None else [])


# ---- 3. steps: plain step, v(k) and c per runner ---------------------------------------------


def steps(args) -> dict:
    budget, out, spent = budget_of(args), {}, 0.0
    for shape in args.shapes:
        if shape != args.pair_shape and budget.skip():  # not even an eager row fits: the model is not built
            out[shape] = {runner: budget.skip() for runner in args.runners}
            continue
        model = shared_pair(args, "steps")[0] if shape == args.pair_shape else \
            random_model(shape, dtype_of(args), args.device, args.seed)
        before, out[shape] = compile_seconds(model), {}
        max_k = 2 if shape in PAIRS.values() else args.max_k  # a draft: c needs one row, a chain two
        for runner in args.runners:
            shapes = new_shapes(model, range(1, max_k + 1)) if runner == "compiled" else 0
            out[shape][runner] = budget.skip([(model, shapes)]) or guarded(curve_row, model, runner, max_k)
            budget.learn(model)
        spent += compile_seconds(model) - before
        del model
        free()
    out["predicted"] = predictions(out, args)
    out["compile_s"] = round(spent, 2)
    return out


def curve_row(model, runner: str, max_k: int) -> dict:
    """v(1..max_k) and the plain step through one runner. The first call compiles (and captures)
    every shape it meets; the second, on the same shapes, is the one reported."""
    from playground.measure.bench.verify_cost import measure_curve

    started, compiled_before = time.monotonic(), compile_seconds(model)
    measure_curve(model, max_k=max_k, repeats=1, runner=runner)
    first_s = time.monotonic() - started
    started = time.monotonic()
    curve = measure_curve(model, max_k=max_k, repeats=5, runner=runner)
    again_s = time.monotonic() - started
    return {"step_ms": round(1000 * curve.step_s, 3), "v": [round(x, 3) for x in curve.v],
            "first_call_s": round(first_s, 2), "warm_call_s": round(again_s, 2),
            "compile_s": round(compile_seconds(model) - compiled_before, 2)}  # this row's, not the model's


def predictions(rows: dict, args) -> dict:
    """c and the formula's speedup (measured v) per target shape and runner at the assumed α, at the
    best γ the measured curve allows (sampling.best_gamma), on the same runner and against the fastest
    plain step of any runner: the run a user would make instead."""
    from playground.engine.sampling import best_gamma, expected_speedup

    out = {"assumed_alpha": args.alpha}
    for target, draft in PAIRS.items():
        for runner in args.runners:
            t, d = rows.get(target, {}).get(runner), rows.get(draft, {}).get(runner)
            if not isinstance(t, dict) or not isinstance(d, dict) or "error" in t or "error" in d:
                continue
            c = d["step_ms"] / t["step_ms"]
            best = min(r["step_ms"] for r in rows[target].values() if isinstance(r, dict) and "step_ms" in r)
            gamma = best_gamma(args.alpha, c, max_gamma=len(t["v"]) - 1, v=t["v"])
            speedup = expected_speedup(args.alpha, gamma, c, t["v"])
            out[f"{target}+{draft} {runner}"] = {
                "c": round(c, 3), "gamma": gamma, "v_gamma_plus_1": t["v"][gamma],
                "speedup_same_runner": round(speedup, 3),
                "speedup_vs_fastest_plain": round(speedup * best / t["step_ms"], 3)}
    return out


# ---- 4. syncs: the host's waits on the GPU per step --------------------------------------------


def syncs(args) -> dict:
    """Waits per step of plain decoding, the greedy chain and the sampled chain, per runner."""
    from playground.config import RunConfig
    from playground.measure.hardware.syncs import method_waits

    target, draft = shared_pair(args, "syncs")
    budget, before = budget_of(args), compile_seconds(target, draft)
    ids = prompts(target.config.vocab_size, args)[0]
    out = {}
    for runner in args.runners:
        for label, knobs in (("plain", None), ("greedy chain", {}), ("sampled chain", {"temperature": 1.0})):
            run = RunConfig(gamma=args.gamma, max_new_tokens=args.max_new_tokens, runner=runner,
                            **(knobs or {}))
            drafting = draft if knobs is not None else None
            out[f"{runner} {label}"] = budget.skip(compiles(run, target, drafting)) or \
                guarded(method_waits, target, drafting, ids, run)
            budget.learn(target, draft)
    out["compile_s"] = round(compile_seconds(target, draft) - before, 2)
    del target, draft
    free()
    return out


# ---- 5. fallback: auto on planted failures (gpu_auto.py); asked by name: engine, quantized (gpu_bench.py)


def fallback(args) -> dict:
    return gpu_auto.fallback(args, shared_pair(args, "fallback")[1], budget_of(args))


def contexts(args) -> dict:
    """auto's choice for the pair's target at a short run's bucket and a long one's, measured afresh (in a
    folder of choices of the check's own): each candidate's step and verification, and the runner kept."""
    from playground.engine.runners.choice import bucket_of

    target, budget, out = shared_pair(args, "contexts")[0], budget_of(args), {}
    before = compile_seconds(target)
    with gpu_auto.own_choices(args.cpu_smoke):
        for length, new in ((args.prompt_tokens + args.max_new_tokens, 0), (args.long_context, 2)):
            shapes = [(target, new)] if "compiled" in args.runners else []  # the long one's capacity: 1 and 4 rows anew
            out[f"up to {bucket_of(length)} entries"] = budget.skip(shapes) or guarded(
                gpu_auto.timed_choice, target, None, True, length)
            budget.learn(target)
    out["compile_s"] = round(compile_seconds(target) - before, 2)
    return out


def engine(args) -> dict:
    return gpu_bench.engine(args, shared_pair(args, "engine"), budget_of(args))


def quantized(args) -> dict:
    return gpu_bench.quantized(args, budget_of(args), dtype_of(args))


CHECKS = (("app", app), ("identity", identity), ("steps", steps), ("syncs", syncs), ("fallback", fallback),
          ("contexts", contexts), ("engine", engine), ("quantized", quantized))


def on_thread(name: str, check):
    """A check run with its forwards on the model thread: the app check hands each step over itself, as
    the app's handlers do; the others run there whole, so no graph is recorded again for another thread."""
    if name == "app":
        return check
    return lambda args: held(args)["thread"].run(args.device, check, args)


def main(argv=None) -> int:
    from playground.engine.model_thread import ModelThread

    args = options(argv)
    thread = held(args)["thread"] = ModelThread(always=args.cpu_smoke)  # the smoke run hands over too
    try:
        return run_checks("gpu_runners", [(name, on_thread(name, check)) for name, check in CHECKS], args,
                          skip=lambda name: budget_of(args).skip())
    finally:
        thread.close()


if __name__ == "__main__":
    raise SystemExit(main())
