"""c inside a run against c alone, and what decides it (issue 38): the default pair's greedy runs on the
first 4 coding prompts of Spec-Bench, alternating arms in one process, medians over the prompts.

Arms: the engine's own tensor work on one torch thread where every forward runs on ONNX Runtime's pool
(as generate.step does now) or on torch's two (as before: `--arms threads`); the draft's head cut to the
pair's 65,536 ids or whole (`--arms head`). c alone is the drafter's own cached model decoding the plain
run's continuation one forward at a time, over one plain target step of that run.

    python scripts/threads_ab.py --arms threads,head --gamma 3

Nothing else may run meanwhile: both sides are timings.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gamma", type=int, default=3)
    parser.add_argument("--arms", default="threads,head", help="comma-separated: threads, head")
    parser.add_argument("--rounds", type=int, default=2, help="times each pair of arms alternates")
    args = parser.parse_args(argv)

    from playground.config import RunConfig
    from playground.engine import factory
    from playground.engine import generate as engine
    from playground.engine.events import tally
    from playground.measure.bench.prompts import load_prompts
    from playground.models.pair_cache import PairCache
    from playground.models.registry import load_registry
    from playground.models.text import encode_prompt

    run = RunConfig(gamma=args.gamma, max_new_tokens=96, temperature=0.0, draft_vocab=65536)
    pair = PairCache(load_registry()).get(None, **run.loading())
    models = factory.Models.of(pair, run)
    drafters = {"cut": factory.make_drafter(run, models),
                "full": factory.make_drafter(replace(run, draft_vocab=0), models)}
    prompts = [encode_prompt(pair.tokenizer, p.text) for p in load_prompts(categories=["coding"], limit=4)]
    config, eos = factory.spec_config(run), tuple(pair.eos)
    own_pools = engine.outside_torch

    def measure(drafter, one_thread: bool) -> str:
        engine.outside_torch = own_pools if one_thread else (lambda lm, drafter: False)
        rows = []
        for ids in prompts:
            base = list(engine.generate(pair.target.model, ids, config, None, eos_token_ids=eos))
            spec = list(engine.generate(pair.target.model, ids, config, drafter, eos_token_ids=eos))
            alone = draft_alone(drafter, ids, [t for e in base for t in e.emitted])
            t = tally(spec, base)
            rows.append((t.alpha, t.c, alone / step_s(base), rate(spec) / rate(base), t.verify_cost))
        engine.outside_torch = own_pools
        a, c_in, c_alone, speedup, v = (statistics.median(r[i] for r in rows) for i in range(5))
        return (f"α {a:.2f}  c in run {c_in:.2f}  c alone {c_alone:.2f}  v(γ+1) {v:.2f}  "
                f"decoding {speedup:.2f}× our plain")

    measure(drafters["cut"], True)  # warm-up
    arms = args.arms.split(",")
    for _ in range(args.rounds):
        if "threads" in arms:
            for one in (False, True):
                print(f"torch threads {'1' if one else 'as set'}, cut head: {measure(drafters['cut'], one)}", flush=True)
        if "head" in arms:
            for head in ("cut", "full"):
                print(f"head {head}, one torch thread: {measure(drafters[head], True)}", flush=True)


def draft_alone(drafter, ids: list[int], continuation: list[int]) -> float:
    """The drafter's cached model decoding `continuation` one token a forward: its median step, alone."""
    lm, seconds = drafter.lm, []
    lm.reset()
    lm.logits_for(ids, keep=1)
    for i in range(len(continuation)):
        started = time.perf_counter()
        lm.logits_for(ids + continuation[: i + 1], keep=1)
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds)


def step_s(events) -> float:
    steady = [e for e in events if not e.prompt_tokens]
    return sum(e.verify_s for e in steady) / len(steady)


def rate(events) -> float:
    steady = [e for e in events if not e.prompt_tokens]
    return sum(len(e.emitted) for e in steady) / sum(e.seconds for e in steady)


if __name__ == "__main__":
    main()
