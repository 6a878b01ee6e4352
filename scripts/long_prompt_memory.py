"""Issue 39's long-prompt figure: does a prompt of about 1,000 tokens leave the app's resident memory
within 150 MB of where it was? The default pair on the CPU default path (int4, runner auto), loaded and
warmed as the race does (PairCache, warmup.warm_up, the bench's warm-up), then a plain and a
speculative run of 32 tokens each on the long prompt through the bench's engine_run (the race's runs),
inside spare_a_core as the page runs them; the process's RSS read before, sampled during, and after.

    PLAYGROUND_CACHE=~/.cache/speculative-playground python scripts/long_prompt_memory.py [--json out/long-prompt.json]

Run it with the pair's builds in the cache (after a first race) and nothing else on the machine.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from playground.measure.bench.machine import resident_bytes  # noqa: E402

MB = 2**20
PARAGRAPH = ('def merge_sorted(a: list[int], b: list[int]) -> list[int]:\n'
             '    """Merge two sorted lists into one sorted list."""\n'
             '    out, i, j = [], 0, 0\n'
             '    while i < len(a) and j < len(b):\n'
             '        if a[i] <= b[j]:\n'
             '            out.append(a[i]); i += 1\n'
             '        else:\n'
             '            out.append(b[j]); j += 1\n'
             '    out.extend(a[i:]); out.extend(b[j:])\n'
             '    return out\n\n')
QUESTION = "Explain what this code does."


def rss_mb() -> float:
    gc.collect()
    return resident_bytes() / MB


def peak_during(call) -> float:
    """call()'s peak RSS in MB, sampled every 0.1 s."""
    peak, done = [0.0], threading.Event()

    def sample():
        while not done.wait(0.1):
            peak[0] = max(peak[0], resident_bytes() / MB)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        call()
    finally:
        done.set()
        sampler.join()
    return peak[0]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=1000, help="the long prompt's length at least")
    parser.add_argument("--json")
    args = parser.parse_args(argv)

    from playground.config import RunConfig
    from playground.engine import factory
    from playground.engine.runners.warmup import warm_up as build_warm_up
    from playground.measure.bench.machine import spare_a_core
    from playground.measure.bench.resident import mark
    from playground.measure.bench.runs import Setup, engine_run, warm_up
    from playground.models.pair_cache import PairCache
    from playground.models.registry import load_registry
    from playground.models.text import encode_prompt

    registry = load_registry()
    spec = registry.pair(None)  # the default pair
    settings = RunConfig(pair=spec.name, gamma=spec.gamma, draft_vocab=spec.draft_vocab,
                         temperature=spec.temperature, max_new_tokens=32)
    mark()
    pair = PairCache(registry).get(settings.pair, **settings.loading())
    copies = 1
    while len(encode_prompt(pair.tokenizer, PARAGRAPH * copies + QUESTION)) < args.tokens:
        copies += 1
    long_ids = encode_prompt(pair.tokenizer, PARAGRAPH * copies + QUESTION)
    short_ids = encode_prompt(pair.tokenizer, "Write a Python function that reverses a string.")
    config = factory.spec_config(settings)
    readings = {"prompt_tokens": len(long_ids)}
    with spare_a_core():
        draft = factory.Models.of(pair, settings).draft
        for _ in build_warm_up(pair.target.model, draft, settings, len(short_ids)):
            pass
        setup = Setup.of(pair, settings)
        warm_up(setup, short_ids, config, 1)
        engine_run(pair.target.model, short_ids, config, None, pair.eos)
        engine_run(pair.target.model, short_ids, config, setup.make_drafter(), pair.eos)
        readings["before_mb"] = rss_mb()
        readings["peak_plain_mb"] = peak_during(lambda: engine_run(pair.target.model, long_ids, config, None, pair.eos))
        readings["after_plain_mb"] = rss_mb()
        readings["peak_speculative_mb"] = peak_during(
            lambda: engine_run(pair.target.model, long_ids, config, setup.make_drafter(), pair.eos))
        readings["after_speculative_mb"] = rss_mb()
    readings["left_mb"] = readings["after_speculative_mb"] - readings["before_mb"]
    print(json.dumps({k: round(v, 1) for k, v in readings.items()}, indent=1))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(readings, indent=1) + "\n")


if __name__ == "__main__":
    main()
