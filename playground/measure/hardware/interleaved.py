"""`python -m playground.measure.hardware.interleaved`: every drafter and the plain run in turn on each prompt, repeat after repeat.

    python -m playground.measure.hardware.interleaved [--pair NAME] [--categories coding,summarization,rag]
        [--limit 2] [--drafters model:1,prompt_lookup:1,suffix:4,hybrid:1,hybrid:4] [--new-tokens 96]
        [--repeats 3] [--json out.json]

Issue 53, item 2 asks whether the hybrid is within 2 % of the best single drafter of each category. The
benchmark's sweep times each cell against its own plain run, cell after cell: on a 2-core machine whose speed
drifts by 5-10 % over minutes (the plain runs of one sweep ranged 22.3-24.7 tok/s), ratios between cells carry
that drift, five times the margin asked about. Here the plain run and every drafter run one after another on
the same prompt, each repeat in the same order, so a drift hits all alike: each drafter's speedup is the
median of its seconds over the plain run's median on that prompt, then the mean over a category's prompts.
A fresh drafter each run (the suffixes index no earlier run); greedy; seconds include the prefill, as a
user waits for them.
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict

from playground.measure.hardware.common import command

PLAIN = "plain"


def options(argv=None):
    p = command("interleaved", __doc__)
    p.add_argument("--pair", default=None, help="a pair from models.yaml (default: the registry's default)")
    p.add_argument("--categories", default="coding,summarization,rag", help="Spec-Bench categories")
    p.add_argument("--limit", type=int, default=2, help="prompts per category")
    p.add_argument("--drafters", default="model:1,prompt_lookup:1,suffix:4,hybrid:1,hybrid:4",
                   help="drafter:γ, comma-separated")
    p.add_argument("--new-tokens", type=int, default=96)
    p.add_argument("--repeats", type=int, default=3, help="timed rounds (one untimed round first)")
    p.add_argument("--json", help="also write every run's seconds here")
    args = p.parse_args(argv)
    try:
        args.cells = {cell: (cell.split(":")[0], int(cell.split(":")[1])) for cell in args.drafters.split(",")}
    except (IndexError, ValueError):
        p.error(f"--drafters: expected drafter:γ pairs such as model:1,suffix:4, got {args.drafters!r}")
    if args.limit < 1 or args.new_tokens < 1 or args.repeats < 1:
        p.error("--limit, --new-tokens and --repeats must each be at least 1")
    return args


def speedups(seconds: dict) -> dict[str, dict[str, float]]:
    """category -> cell -> the mean over its prompts of the plain run's median seconds over the cell's."""
    by = defaultdict(lambda: defaultdict(list))
    for (category, _), runs in seconds.items():
        for cell, times in runs.items():
            if cell != PLAIN:
                by[category][cell].append(statistics.median(runs[PLAIN]) / statistics.median(times))
    return {category: {cell: statistics.mean(x) for cell, x in cells.items()} for category, cells in by.items()}


def summary(speedups_by_category: dict[str, dict[str, float]]) -> list[str]:
    """A line a category: each cell's speedup, and the hybrid's best over the best single drafter's."""
    lines = []
    for category, cells in speedups_by_category.items():
        best = max((c for c in cells if not c.startswith("hybrid")), key=cells.get, default=None)
        said = ", ".join(f"{c} {x:.3f}×" for c, x in cells.items())
        hybrid = max((x for c, x in cells.items() if c.startswith("hybrid")), default=None)
        against = f"; the hybrid's best over {best}'s: {hybrid / cells[best]:.3f}" if best and hybrid else ""
        lines.append(f"  {category}: {said}{against}")
    return lines


def main(argv=None) -> int:
    args = options(argv)
    from dataclasses import replace

    from playground.config import DRAFTERS, RunConfig
    from playground.engine import factory
    from playground.measure.bench.cli import quiet_transformers
    from playground.measure.bench.prompts import load_prompts
    from playground.measure.bench.runs import engine_run
    from playground.models.pair_cache import PairCache
    from playground.models.registry import load_registry
    from playground.models.text import encode_prompt

    unknown = sorted({d for d, _ in args.cells.values()} - set(DRAFTERS))
    if unknown:
        print(f"--drafters: unknown {', '.join(unknown)}; expected one of {', '.join(DRAFTERS)}", file=sys.stderr)
        return 2
    quiet_transformers()
    registry = load_registry()
    spec = registry.pair(args.pair)
    plain = RunConfig(pair=spec.name, max_new_tokens=args.new_tokens, temperature=0.0, draft_vocab=spec.draft_vocab)
    pair = PairCache(registry).get(spec.name, **plain.loading())

    def run(cell: str, ids: list[int]) -> float:
        if cell == PLAIN:
            return engine_run(pair.target.model, ids, factory.spec_config(plain), None, pair.eos).seconds
        drafter, gamma = args.cells[cell]
        settings = replace(plain, drafter=drafter, gamma=gamma)
        made = factory.make_drafter(settings, factory.Models.of(pair, settings))
        return engine_run(pair.target.model, ids, factory.spec_config(settings), made, pair.eos).seconds

    seconds: dict = {}
    for prompt in load_prompts(categories=args.categories.split(","), limit=args.limit):
        ids = encode_prompt(pair.tokenizer, prompt.text)
        cells = [PLAIN, *args.cells]
        try:
            for cell in cells:  # untimed: sessions, auto's choices, the first compile of anything
                run(cell, ids)
        except ValueError as e:  # the engine's refusal of this prompt (one longer than the target's context)
            print(f"{prompt.category} #{prompt.id}: skipped: {e}", flush=True)
            continue
        runs = seconds[prompt.category, prompt.id] = {cell: [] for cell in cells}
        for _ in range(args.repeats):
            for cell in cells:
                runs[cell].append(run(cell, ids))
        print(f"{prompt.category} #{prompt.id}: " + ", ".join(f"{c} {statistics.median(t):.2f} s" for c, t in runs.items()),
              flush=True)
    print(f"\n{spec.name}, greedy, {args.new_tokens} tokens, {args.repeats} interleaved repeats; × the plain run")
    print("\n".join(summary(speedups(seconds))))
    if args.json:
        import json

        from playground.measure.bench.report import atomic_write

        atomic_write(args.json, json.dumps({f"{c}:{i}": runs for (c, i), runs in seconds.items()}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
