"""The GPU runners script's checks asked by name only (measure/hardware/gpu_runners.py): the benchmark's
own path on the card, and quantized targets through the app's loader.

engine: per runner, the benchmark's warm-up and then autoregressive and chain decoding alternated over
the prompts (measure_prompt: one run after the other, each stepping in the cache the one before let go,
as the benchmark times them; the app's race, both runs at once, is the app check's), and the oracle
(the target's own recorded greedy output as a free draft) against plain decoding; every speedup also
over the fastest autoregressive run of any runner.
quantized: the pair's target saved, then loaded in nf4 and int8 (and a compute dtype) as the app loads
it, with the bf16 early-exit draft drafting for it; it needs bitsandbytes, which a bare card's image
may lack.
"""

from __future__ import annotations

import tempfile
import time

from playground.measure.hardware.common import free, pair_models, pooled_row, prompts, save_for_loader
from playground.measure.hardware.gpu_budget import guarded, new_shapes


def engine(args, pair, budget) -> dict:
    from playground.engine.runners import compile_seconds

    target, draft = pair
    before, rows = compile_seconds(target, draft), {}
    for runner in args.runners:
        compiling = runner == "compiled"  # the target's 1 to γ + 1 rows (run and v(k)), the draft's 1 and 2
        shapes = [(target, new_shapes(target, range(1, args.gamma + 2)) if compiling else 0),
                  (draft, new_shapes(draft, (1, 2)) if compiling else 0)]
        rows[runner] = budget.skip(shapes) or \
            guarded(engine_row, target, draft, runner, args)
        budget.learn(target, draft)
    timed = [r for r in rows.values() if isinstance(r, dict) and "error" not in r]
    if timed:
        fastest = max(r["baseline_tok_s"] for r in timed)
        for r in timed:
            r["chain_vs_fastest_plain"] = round(r["chain_tok_s"] / fastest, 3)
            r["oracle_vs_fastest_plain"] = round(r["oracle_tok_s"] / fastest, 3)
    rows["compile_s"] = round(compile_seconds(target, draft) - before, 2)
    del target, draft, pair
    free()
    return rows


def run_of(args, runner: str):
    from playground.config import RunConfig

    return RunConfig(gamma=args.gamma, max_new_tokens=args.max_new_tokens, runner=runner)


def engine_row(target, draft, runner: str, args) -> dict:
    from playground.engine import factory
    from playground.measure.bench.runs import Setup, measure_prompt, warm_up
    from playground.measure.bench.verify_cost import measure_curve

    run = run_of(args, runner)
    setup, config = Setup(target, draft, run, eos=()), factory.spec_config(run)
    ids_list = prompts(target.config.vocab_size, args)
    warm_up(setup, ids_list[0], config, 1)  # the benchmark's (sweep.py): its shapes compiled, untimed
    records = [measure_prompt(setup, ids, config, args.repeats) for ids in ids_list]
    row = pooled_row(records, measure_curve(target, max_k=args.gamma + 1, runner=runner).v,
                     f"{args.pair_shape} {runner}", tree=False)
    return {**row, **oracle_fields(target, ids_list[0], config, args)}


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


def quantized(args, budget, dtype) -> dict:
    """The pair's target saved, then loaded in each quantization (and compute dtype) as the app loads
    it; the bf16 early-exit draft drafts for it. Eager only (the compiled runner refuses these): nothing
    compiles."""
    target, draft = pair_models(args.pair_shape, dtype, args.device, args)
    ids_list = prompts(target.config.vocab_size, args)
    out = {}
    with tempfile.TemporaryDirectory(prefix="gpu-runners-") as tmp:
        save_for_loader(target, tmp)
        del target
        free()
        for quantization, compute in args.quantizations:
            out[f"{quantization} {compute}"] = budget.skip() or \
                guarded(quantized_row, tmp, quantization, compute, draft, ids_list, args)
    out["compile_s"] = 0.0
    del draft
    free()
    return out


def quantized_row(path: str, quantization: str, dtype: str, draft, ids_list, args) -> dict:
    """Load time and footprint, v(k), AR and chain on eager, waits per step, the compiled runner's word."""
    from playground.engine import factory
    from playground.measure.bench.runs import Setup, measure_prompt
    from playground.measure.bench.verify_cost import measure_curve
    from playground.measure.hardware.syncs import method_waits
    from playground.models.loading import load_model
    from playground.models.registry import ModelSpec, Source

    started = time.monotonic()
    loaded = load_model(ModelSpec("random-target", (Source("local", path),)), quantization=quantization,
                        dtype=dtype, device=args.device)
    load_s, model = time.monotonic() - started, loaded.model
    run = run_of(args, "eager")
    setup, config = Setup(model, draft, run, eos=()), factory.spec_config(run)
    measure_prompt(setup, ids_list[0], config, 1)  # warm
    records = [measure_prompt(setup, ids, config, args.repeats) for ids in ids_list]
    row = pooled_row(records, measure_curve(model, max_k=args.gamma + 1).v, f"{quantization} {dtype}",
                     tree=False)
    waits = {label: method_waits(model, d, ids_list[0], run)
             for label, d in (("plain", None), ("chain", draft))}
    return {**row, "load_s": round(load_s, 2), "footprint_mb": round(loaded.footprint_bytes / 2**20, 1),
            "dtype": loaded.dtype, "syncs_per_step": waits, "compiled_runner": compiled_says(model)}


def compiled_says(model) -> str:
    """The compiled runner on a bitsandbytes model: refused by name (issue 41), or, should that change,
    accepted."""
    from playground.engine.kvcache import CachedModel

    try:
        CachedModel(model, runner="compiled")
    except ValueError as e:
        return f"refused: {e}"
    return "accepted"
