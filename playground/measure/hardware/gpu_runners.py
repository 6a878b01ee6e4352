"""`python -m playground.measure.hardware.gpu_runners`: the runners (eager, static, compiled) on one GPU, no download.

Random weights of real shapes (Qwen2.5-1.5B, the default pair's target; Qwen2-0.5B, its draft's
shape; Qwen2-7B), each check written to the JSON as soon as it ends:

1. steps: per shape and runner, the plain step (one token after a 200-token prefix) and v(k) for
   k = 1..max_k, with the first call's extra time (compile and CUDA-graph capture) beside it, never
   inside; then c = draft step / target step per runner for the 1.5B and 7B targets with the 0.5B
   draft, and the formula's speedup at an assumed α (--alpha: the default pair's CPU runs, an
   assumption stated in the JSON).
2. engine: the 1.5B-shaped target and an early-exit draft (its first layers, embeddings and head)
   in bf16, autoregressive and chain per runner, alternated, and the oracle (the target's own
   recorded greedy output as a free draft) against plain decoding; every speedup also over the
   fastest autoregressive run of any runner ("faster than what?").
3. identity: the same pair in float32; greedy chain and tree through each runner equal eager
   autoregressive decoding token for token.

    python -m playground.measure.hardware.gpu_runners --json out/gpu_runners.json   # one H200: within 8 minutes
    python -m playground.measure.hardware.gpu_runners --cpu-smoke                    # tiny shapes on the CPU
"""

from __future__ import annotations

import argparse
import time

from playground.measure.hardware.common import (free, gpu_command, pair_models, parse, pooled_row, prompts,
                                                random_model, run_checks)

RUNNERS = ("eager", "static", "compiled")
FULL = dict(device="cuda", shapes=("1.5b", "0.5b", "7b"), pair_shape="1.5b", draft_layers=4, max_k=5,
            prompts=2, prompt_tokens=128, max_new_tokens=64, repeats=2, budget_s=420)
SMOKE = dict(device="cpu", shapes=("tiny", "tiny-draft"), pair_shape="tiny", draft_layers=1, max_k=5,
             prompts=1, prompt_tokens=40, max_new_tokens=12, repeats=1, budget_s=3600)
PAIRS = {"1.5b": "0.5b", "7b": "0.5b", "tiny": "tiny-draft"}  # target shape -> draft shape for c


def options(argv=None) -> argparse.Namespace:
    p = gpu_command("gpu_runners", __doc__)
    p.add_argument("--runners", help="runners to time, in order (default eager,compiled on a GPU, where "
                   "static launches what eager does; all three on the CPU); identity checks all three")
    p.add_argument("--checks", default="steps,engine,identity", help="which checks to run, in order")
    p.add_argument("--gamma", type=int, default=4, help="chain lookahead (default 4)")
    p.add_argument("--alpha", type=float, default=0.85,
                   help="assumed acceptance rate for the predicted speedups (default 0.85)")
    p.add_argument("--embed-std", type=float, default=0.3,
                   help="std of the random embeddings: larger makes the early-exit draft agree more")
    args = parse(p, argv, FULL, SMOKE)
    args.runners = tuple(r for r in (args.runners or ("eager,static,compiled" if args.cpu_smoke else
                                                      "eager,compiled")).split(",") if r)
    if not args.runners or any(r not in RUNNERS for r in args.runners):
        p.error(f"argument --runners: expected a comma-separated list of {', '.join(RUNNERS)}")
    args.started = time.monotonic()
    return args


def over_budget(args) -> bool:
    """Past the call's budget: what is left is skipped (and said so) rather than cut off."""
    return time.monotonic() - args.started > args.budget_s


def dtype_of(args, exact: bool = False):
    import torch

    return torch.float32 if exact or args.cpu_smoke else torch.bfloat16


# ---- 1. steps: plain step, v(k) and c per runner ---------------------------------------------


def steps(args) -> dict:
    out = {}
    for shape in args.shapes:
        model = random_model(shape, dtype_of(args), args.device, args.seed)
        out[shape] = {}
        for runner in args.runners:
            max_k = 2 if shape in PAIRS.values() else args.max_k  # a draft: c needs one row, a chain two
            out[shape][runner] = "skipped: over the call's budget" if over_budget(args) else \
                curve_row(model, runner, max_k)
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
    """c and the formula's speedup (measured v(γ+1)) per target shape and runner, at the assumed α."""
    from playground.engine.sampling import expected_speedup

    out = {"assumed_alpha": args.alpha, "gamma": args.gamma}
    for target, draft in PAIRS.items():
        for runner in args.runners:
            t, d = rows.get(target, {}).get(runner), rows.get(draft, {}).get(runner)
            if not isinstance(t, dict) or not isinstance(d, dict):
                continue
            c = d["step_ms"] / t["step_ms"]
            # against the fastest plain step of any runner: the run a user would make instead
            best = min(r["step_ms"] for r in rows[target].values() if isinstance(r, dict))
            speedup = expected_speedup(args.alpha, args.gamma, c, t["v"])
            out[f"{target}+{draft} {runner}"] = {
                "c": round(c, 3), "v_gamma_plus_1": t["v"][min(args.gamma, len(t["v"]) - 1)],
                "speedup_same_runner": round(speedup, 3),
                "speedup_vs_fastest_plain": round(speedup * best / t["step_ms"], 3)}
    return out


# ---- 2. engine: AR and chain per runner, alternated --------------------------------------------


def engine(args) -> dict:
    target, draft = pair_models(args.pair_shape, dtype_of(args), args.device, args)
    rows = {}
    for runner in args.runners:
        rows[runner] = "skipped: over the call's budget" if over_budget(args) else \
            engine_row(target, draft, runner, args)
    timed = [r for r in rows.values() if isinstance(r, dict)]
    if timed:
        fastest = max(r["baseline_tok_s"] for r in timed)
        for r in timed:
            r["chain_vs_fastest_plain"] = round(r["chain_tok_s"] / fastest, 3)
            r["oracle_vs_fastest_plain"] = round(r["oracle_tok_s"] / fastest, 3)
    del target, draft
    free()
    return rows


def engine_row(target, draft, runner: str, args) -> dict:
    from dataclasses import replace

    from playground.config import RunConfig
    from playground.engine import factory
    from playground.measure.bench.runs import Setup, measure_prompt
    from playground.measure.bench.verify_cost import measure_curve

    run = RunConfig(gamma=args.gamma, max_new_tokens=args.max_new_tokens, runner=runner)
    setup, config = Setup(target, draft, run, eos=()), factory.spec_config(run)
    ids_list = prompts(target.config.vocab_size, args)
    started = time.monotonic()
    measure_prompt(setup, ids_list[0], replace(config, max_new_tokens=16), 1)  # compile, capture, warm
    warm_s = time.monotonic() - started
    records = [measure_prompt(setup, ids, config, args.repeats) for ids in ids_list]
    row = pooled_row(records, measure_curve(target, max_k=args.gamma + 1, runner=runner).v,
                     f"{args.pair_shape} {runner}", tree=False)
    return {**row, **oracle_fields(target, ids_list[0], config, args), "warm_up_s": round(warm_s, 2),
            "compile_s_so_far": compile_seconds(target, draft)}


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


# ---- 3. identity: float32, greedy, every runner against eager AR ------------------------------


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
                out[f"{runner} {speculation}"] = "skipped: over the call's budget"
                continue
            run = RunConfig(gamma=args.gamma, max_new_tokens=args.max_new_tokens, runner=runner,
                            speculation=speculation, tree_budget=15, tree_depth=4)
            got = output_tokens(list(generate(target, ids, factory.spec_config(run),
                                              factory.make_drafter(run, factory.Models(target, draft)))))
            out[f"{runner} {speculation}"] = {"identical": got == expected, "tokens": len(got)}
    del target, draft
    free()
    return out


CHECKS = (("steps", steps), ("engine", engine), ("identity", identity))


def main(argv=None) -> int:
    return run_checks("gpu_runners", CHECKS, options(argv))


if __name__ == "__main__":
    raise SystemExit(main())
