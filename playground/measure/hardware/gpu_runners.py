"""`python -m playground.measure.hardware.gpu_runners`: the runners (eager, static, compiled) and auto on one GPU, no download.

Random weights of real shapes (Qwen2.5-1.5B, the default pair's target; Qwen2-0.5B, its draft's
shape; Qwen2-7B), each check written to the JSON as soon as it ends, in this order (the most wanted
first: past the call's budget what is left is skipped and said so), with the peak GPU memory so far:

1. steps: per shape and runner, the plain step (one token after a 200-token prefix) and v(k) for
   k = 1..max_k, with the first call's extra time (compile and CUDA-graph capture) beside it, never
   inside; then c = draft step / target step per runner for the 1.5B and 7B targets with the 0.5B
   draft, and the formula's forecast at an assumed α (--alpha, 0.8: an assumption stated in the
   JSON), at its best γ, against the fastest plain step of any runner ("faster than what?").
2. auto: what auto chooses for the pair's target and its early-exit draft on this card
   (runners/auto.record: eager against compiled, timed), and its fallback on two planted failures
   (a compile that raises, and a compiled step whose logits are not eager's): eager kept, the reason
   recorded, nothing half compiled left.
3. syncs: the host's waits on the GPU per engine step (torch's sync debug mode, counted: syncs.py),
   for the plain step, the greedy chain and the sampled chain on each runner.
4. engine: the 1.5B-shaped target and an early-exit draft (its first layers, embeddings and head)
   in bf16, per runner: the app's warm-up (compiled: every shape compiled and its CUDA graph
   recorded), then the user's first race and a second one, timed (recording left in the first race
   would show as a first slower than the second); then autoregressive and chain, alternated, and the
   oracle (the target's own recorded greedy output as a free draft) against plain decoding; every
   speedup also over the fastest autoregressive run of any runner.
5. identity: the same pair in float32; greedy chain and tree through each runner equal eager
   autoregressive decoding token for token.
(quantized, asked by name only: the target loaded in nf4 and int8 through the app's loader; it
needs bitsandbytes, which a bare card's image may lack.)

The 1.5B target is built once (the pair's, its embeddings scaled) and serves steps, auto, syncs and
engine, so the shapes compiled for its steps are compiled once.

    python -m playground.measure.hardware.gpu_runners --json out/gpu_runners.json   # one H200: within 6 minutes
    python -m playground.measure.hardware.gpu_runners --cpu-smoke                    # tiny shapes on the CPU
"""

from __future__ import annotations

import argparse
import tempfile
import time

from playground.measure.hardware import gpu_auto
from playground.measure.hardware.common import (free, gpu_command, pair_models, parse, pooled_row, prompts,
                                                random_model, run_checks, save_for_loader)
from playground.measure.hardware.syncs import counting, per_step, summary

RUNNERS = ("eager", "static", "compiled")
# budget_s: a check's row that would start past it is skipped, so one started just before it (a
# compile of the 7B shape, under a minute) still ends the command within 6 minutes on an H200
FULL = dict(device="cuda", shapes=("7b", "0.5b", "1.5b"), pair_shape="1.5b", draft_layers=4, max_k=5,
            prompts=2, prompt_tokens=128, max_new_tokens=64, repeats=2, budget_s=240,
            quantizations=(("nf4", "bfloat16"), ("int8", "bfloat16"), ("int8", "float16")))
SMOKE = dict(device="cpu", shapes=("tiny", "tiny-draft"), pair_shape="tiny", draft_layers=1, max_k=5,
             prompts=1, prompt_tokens=40, max_new_tokens=12, repeats=1, budget_s=3600,
             quantizations=(("nf4", "float32"), ("int8", "float32")))
SKIPPED = "skipped: over the call's budget"
PAIRS = {"1.5b": "0.5b", "7b": "0.5b", "tiny": "tiny-draft"}  # target shape -> draft shape for c


def options(argv=None) -> argparse.Namespace:
    p = gpu_command("gpu_runners", __doc__)
    p.add_argument("--runners", help="runners to time, in order (default eager,compiled on a GPU, where "
                   "static launches what eager does; all three on the CPU); identity checks all three")
    p.add_argument("--checks", default="steps,auto,syncs,engine,identity",
                   help="which checks to run, in order (also: quantized, which needs bitsandbytes)")
    p.add_argument("--gamma", type=int, default=4, help="chain lookahead (default 4)")
    p.add_argument("--alpha", type=float, default=0.8,
                   help="assumed acceptance rate for the forecasts (default 0.8)")
    p.add_argument("--embed-std", type=float, default=0.3,
                   help="std of the random embeddings: larger makes the early-exit draft agree more")
    args = parse(p, argv, FULL, SMOKE)
    args.runners = tuple(r for r in (args.runners or ("eager,static,compiled" if args.cpu_smoke else
                                                      "eager,compiled")).split(",") if r)
    if not args.runners or any(r not in RUNNERS for r in args.runners):
        p.error(f"argument --runners: expected a comma-separated list of {', '.join(RUNNERS)}")
    args.started = time.monotonic()
    return args


def guarded(row, *args) -> dict:
    """One row of a check, or what it raised: a runner that fails on this card is a finding, and the
    rows after it (the other runners, the other shapes) still run."""
    import traceback

    try:
        return row(*args)
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-3000:]}


def over_budget(args) -> bool:
    """Past the call's budget: what is left is skipped (and said so) rather than cut off."""
    return time.monotonic() - args.started > args.budget_s


def dtype_of(args, exact: bool = False):
    import torch

    return torch.float32 if exact or args.cpu_smoke else torch.bfloat16


PAIR_USERS = ("steps", "auto", "syncs", "engine")  # the checks that share the bf16 pair


def shared_pair(args, check: str):
    """The bf16 pair the steps, auto, syncs and engine checks share (built by the first, let go by the
    last of them that runs), so the shapes one compiled and recorded are not compiled again."""
    held = vars(args).setdefault("held", {})  # a dict: the report's args keep numbers, text and tuples only
    pair = held.pop("pair", None) or pair_models(args.pair_shape, dtype_of(args), args.device, args)
    chosen = args.checks.split(",")
    if check != [name for name, _ in CHECKS if name in chosen and name in PAIR_USERS][-1]:
        held["pair"] = pair
    return pair


# ---- 1. steps: plain step, v(k) and c per runner ---------------------------------------------


def steps(args) -> dict:
    out = {}
    for shape in args.shapes:
        pair = shape == args.pair_shape
        model = shared_pair(args, "steps")[0] if pair else random_model(shape, dtype_of(args), args.device, args.seed)
        out[shape] = {}
        for runner in args.runners:
            max_k = 2 if shape in PAIRS.values() else args.max_k  # a draft: c needs one row, a chain two
            out[shape][runner] = SKIPPED if over_budget(args) else \
                guarded(curve_row, model, runner, max_k)
        del model
        free()
    out["predicted"] = predictions(out, args)
    return out


def curve_row(model, runner: str, max_k: int) -> dict:
    """v(1..max_k) and the plain step through one runner. The first call compiles (and captures)
    every shape it meets; the second, on the same shapes, is the one reported."""
    from playground.measure.bench.verify_cost import measure_curve

    started = time.monotonic()
    measure_curve(model, max_k=max_k, repeats=1, runner=runner)
    first_s = time.monotonic() - started
    started = time.monotonic()
    curve = measure_curve(model, max_k=max_k, repeats=5, runner=runner)
    again_s = time.monotonic() - started
    return {"step_ms": round(1000 * curve.step_s, 3), "v": [round(x, 3) for x in curve.v],
            "first_call_s": round(first_s, 2), "warm_call_s": round(again_s, 2),
            "compile_s": compile_seconds(model)}


def compile_seconds(*models) -> float:
    """Seconds the compiled runner's first call of each shape took on these models (compile and capture)."""
    from playground.engine.runners.compiled import steps_of

    return round(sum(sum(steps_of(m).seconds.values()) for m in models), 2)


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


# ---- 2. auto: its choice on this card and its fallback (gpu_auto.py) -----------------------------


def auto(args) -> dict:
    return gpu_auto.auto(args, shared_pair(args, "auto"), lambda: over_budget(args), SKIPPED)


# ---- 3. syncs: the host's waits on the GPU per step --------------------------------------------


def syncs(args) -> dict:
    """Waits per step of plain decoding, the greedy chain and the sampled chain, per runner."""
    target, draft = shared_pair(args, "syncs")
    ids = prompts(target.config.vocab_size, args)[0]
    out = {}
    for runner in args.runners:
        for label, knobs in (("plain", None), ("greedy chain", {}), ("sampled chain", {"temperature": 1.0})):
            out[f"{runner} {label}"] = SKIPPED if over_budget(args) else \
                guarded(sync_row, target, draft if knobs is not None else None, ids, runner, knobs or {}, args)
    del target, draft
    free()
    return out


def sync_row(target, draft, ids, runner: str, knobs: dict, args) -> dict:
    """One method's waits per step, after a short run of it (compiled: its shapes compiled and recorded)."""
    from dataclasses import replace

    from playground.config import RunConfig
    from playground.engine import factory
    from playground.engine.generate import generate

    run = RunConfig(gamma=args.gamma, max_new_tokens=args.max_new_tokens, runner=runner, **knobs)
    config = factory.spec_config(run)
    drafter = None if draft is None else factory.make_drafter(run, factory.Models(target, draft))
    list(generate(target, ids, replace(config, max_new_tokens=8), drafter))  # warm: nothing counted
    with counting(target.device) as count:
        counts = per_step(generate(target, ids, config, drafter), count)
    return {**summary(counts), "gamma": args.gamma if draft is not None else 0,
            "counts": "CUDA syncs" if target.device.type == "cuda" else "host reads (CPU stand-in)"}


# ---- 4. engine: AR and chain per runner, alternated --------------------------------------------


def engine(args) -> dict:
    target, draft = shared_pair(args, "engine")
    rows = {}
    for runner in args.runners:
        rows[runner] = SKIPPED if over_budget(args) else \
            guarded(engine_row, target, draft, runner, args)
    timed = [r for r in rows.values() if isinstance(r, dict) and "error" not in r]
    if timed:
        fastest = max(r["baseline_tok_s"] for r in timed)
        for r in timed:
            r["chain_vs_fastest_plain"] = round(r["chain_tok_s"] / fastest, 3)
            r["oracle_vs_fastest_plain"] = round(r["oracle_tok_s"] / fastest, 3)
    del target, draft
    free()
    return rows


def engine_row(target, draft, runner: str, args) -> dict:
    from playground.config import RunConfig
    from playground.engine import factory
    from playground.measure.bench.runs import Setup, measure_prompt
    from playground.measure.bench.verify_cost import measure_curve

    run = RunConfig(gamma=args.gamma, max_new_tokens=args.max_new_tokens, runner=runner)
    setup, config = Setup(target, draft, run, eos=()), factory.spec_config(run)
    ids_list = prompts(target.config.vocab_size, args)
    first = first_races(target, draft, run, setup, config, ids_list[0])
    records = [measure_prompt(setup, ids, config, args.repeats) for ids in ids_list]
    row = pooled_row(records, measure_curve(target, max_k=args.gamma + 1, runner=runner).v,
                     f"{args.pair_shape} {runner}", tree=False)
    return {**row, **oracle_fields(target, ids_list[0], config, args), **first,
            "compile_s_so_far": compile_seconds(target, draft)}


def first_races(target, draft, run, setup, config, ids) -> dict:
    """The app's warm-up after a pair loads (the compiled runner: each shape compiled, its CUDA graph
    recorded and replayed), then the user's first race and a second on the same prompt: a graph still
    recorded inside the first would make it the slower by the recording's time."""
    from playground.engine.runners.warmup import warm_up
    from playground.measure.bench.runs import measure_prompt

    started = time.monotonic()
    list(warm_up(target, draft, run, len(ids)))
    warm_up_s = time.monotonic() - started
    first, second = (measure_prompt(setup, ids, config, 1) for _ in range(2))
    seconds = [r["baseline_seconds"] + r["speculative_seconds"] for r in (first, second)]
    return {"warm_up_s": round(warm_up_s, 2), "first_race_s": round(seconds[0], 3),
            "second_race_s": round(seconds[1], 3), "first_race_over_second": round(seconds[0] / seconds[1], 3)}


def oracle_fields(target, ids, config, args) -> dict:
    """A free drafter (the target's own recorded greedy output) against plain decoding, both through
    this runner and alternated: what verification alone allows on this device."""
    import statistics

    from playground.engine.events import output_tokens
    from playground.engine.generate import clock, generate
    from playground.measure.hardware.oracle import OracleDrafter, converge_oracle, greedy_continuation

    recording = greedy_continuation(target, ids, config.max_new_tokens)
    recording, _ = converge_oracle(target, ids, recording, config.gamma)

    def tok_s(drafter) -> tuple[float, int]:
        started = clock(target.device)
        events = list(generate(target, ids, config, drafter))
        return len(output_tokens(events)) / (clock(target.device) - started), len(events)

    plain, oracle = [], []
    for _ in range(max(args.repeats, 3)):
        plain.append(tok_s(None)[0])
        oracle.append(tok_s(OracleDrafter(list(ids) + recording)))
    speed = statistics.median(x for x, _ in oracle)
    return {"oracle_tok_s": speed, "oracle_speedup": speed / statistics.median(plain),
            "oracle_tokens_per_call": len(recording) / oracle[-1][1]}


# ---- 5. identity: float32, greedy, every runner against eager AR ------------------------------


def identity(args) -> dict:
    from playground.config import RunConfig
    from playground.engine import factory
    from playground.engine.events import output_tokens
    from playground.engine.generate import generate

    target, draft = pair_models(args.pair_shape, dtype_of(args, exact=True), args.device, args)
    ids = prompts(target.config.vocab_size, args)[0]
    plain = RunConfig(max_new_tokens=args.max_new_tokens, runner="eager")
    expected = output_tokens(list(generate(target, ids, factory.spec_config(plain))))
    out = {}
    for runner in RUNNERS:
        for speculation in ("chain", "tree"):
            if over_budget(args):
                out[f"{runner} {speculation}"] = SKIPPED
                continue
            run = RunConfig(gamma=args.gamma, max_new_tokens=args.max_new_tokens, runner=runner,
                            speculation=speculation, tree_budget=15, tree_depth=4)
            got = output_tokens(list(generate(target, ids, factory.spec_config(run),
                                              factory.make_drafter(run, factory.Models(target, draft)))))
            out[f"{runner} {speculation}"] = {"identical": got == expected, "tokens": len(got)}
    del target, draft
    free()
    return out


# ---- 6. quantized: nf4 and int8 through the app's loader -----------------------------------------


def quantized(args) -> dict:
    """The pair's target saved, then loaded in each quantization (and compute dtype) as the app loads
    it; the bf16 early-exit draft drafts for it."""
    target, draft = pair_models(args.pair_shape, dtype_of(args), args.device, args)
    ids_list = prompts(target.config.vocab_size, args)
    out = {}
    with tempfile.TemporaryDirectory(prefix="gpu-runners-") as tmp:
        save_for_loader(target, tmp)
        del target
        free()
        for quantization, dtype in args.quantizations:
            out[f"{quantization} {dtype}"] = SKIPPED if over_budget(args) else \
                quantized_row(tmp, quantization, dtype, draft, ids_list, args)
    del draft
    free()
    return out


def quantized_row(path: str, quantization: str, dtype: str, draft, ids_list, args) -> dict:
    """Load time and footprint, v(k), AR and chain on eager, waits per step, and the compiled runner's word."""
    from playground.config import RunConfig
    from playground.engine import factory
    from playground.measure.bench.runs import Setup, measure_prompt
    from playground.measure.bench.verify_cost import measure_curve
    from playground.models.loading import load_model
    from playground.models.registry import ModelSpec, Source

    started = time.monotonic()
    loaded = load_model(ModelSpec("random-target", (Source("local", path),)), quantization=quantization,
                        dtype=dtype, device=args.device)
    load_s, model = time.monotonic() - started, loaded.model
    run = RunConfig(gamma=args.gamma, max_new_tokens=args.max_new_tokens, runner="eager")
    setup, config = Setup(model, draft, run, eos=()), factory.spec_config(run)
    measure_prompt(setup, ids_list[0], config, 1)  # warm
    records = [measure_prompt(setup, ids, config, args.repeats) for ids in ids_list]
    row = pooled_row(records, measure_curve(model, max_k=args.gamma + 1).v, f"{quantization} {dtype}", tree=False)
    waits = {label: sync_row(model, d, ids_list[0], "eager", {}, args) for label, d in (("plain", None), ("chain", draft))}
    return {**row, "load_s": round(load_s, 2), "footprint_mb": round(loaded.footprint_bytes / 2**20, 1),
            "dtype": loaded.dtype, "syncs_per_step": waits, "compiled_runner": compiled_says(model)}


def compiled_says(model) -> str:
    """The compiled runner on a bitsandbytes model: refused by name (issue 41), or, should that change, accepted."""
    from playground.engine.kvcache import CachedModel

    try:
        CachedModel(model, runner="compiled")
    except ValueError as e:
        return f"refused: {e}"
    return "accepted"


CHECKS = (("steps", steps), ("auto", auto), ("syncs", syncs), ("engine", engine), ("identity", identity),
          ("quantized", quantized))


def main(argv=None) -> int:
    return run_checks("gpu_runners", CHECKS, options(argv))


if __name__ == "__main__":
    raise SystemExit(main())
