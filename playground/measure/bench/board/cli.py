"""`python -m playground.bench --drafters all` (or a list): the drafts board from the command line.

The same plan the page's Drafts tab makes (lineup.py), measured by the same two rounds (rounds.py),
printed as the leaderboard (table.py) and written as the benchmark's own JSON and CSV, with the map as
PNG (--png, which needs kaleido).
"""

from __future__ import annotations

import sys
from functools import partial

from playground.measure.bench import sweep
from playground.measure.bench.board import lineup
from playground.measure.bench.board.rounds import rounds
from playground.measure.bench.sweep import SettingError


def add_flags(parser) -> None:
    group = parser.add_argument_group("the drafts board (docs/benchmarks.md, 'The drafts board')")
    group.add_argument("--drafters", metavar="all|D1,D2,...",
                       help="measure every way of drafting for the pair's target side by side, each at its best "
                            f"γ (a probe at γ {lineup.PROBE_GAMMA}, then the formula's best γ for the measured "
                            "v(k)): 'all', or some of model, model:NAME (any model of models.yaml), "
                            "model@Q or model:NAME@Q (a draft in quantization Q), prompt_lookup, suffix, "
                            "recycling, self, hybrid, tree, suffix-tree, recycling-tree, hybrid-tree, self-tree")
    group.add_argument("--budget-minutes", type=float, metavar="MIN",
                       help="with --drafters: refuse to start when the board's least estimate is longer")


def make_plan(args, registry, spec, prompts, base) -> sweep.Plan:
    """The board's probe round from the flags; SettingError names the flag."""
    if args.sweep:
        raise SettingError("--drafters", "the board chooses its drafters and γ itself: drop --sweep")
    if args.tree:
        raise SettingError("--tree", "the board has tree entries of its own (tree, suffix-tree, recycling-tree, hybrid-tree, self-tree)")
    if args.budget_minutes is not None and args.budget_minutes <= 0:
        raise SettingError("--budget-minutes", f"expected a positive number of minutes, got {args.budget_minutes}")
    entries = lineup.entries(lineup.names_of(args.drafters, registry, spec), base, registry, spec)
    args.board_names = [e.name for e in entries]  # in measuring order, as plan.cells
    return lineup.plan_of(entries, base, prompts, repeats=args.repeats, warmup=args.warmup,
                         reference="transformers" in args.reference, llamacpp="llama.cpp" in args.reference,
                         ortgenai="onnxruntime-genai" in args.reference, command=args.command)


def curve_of(pair, runner: str) -> tuple[float, ...]:
    """The target's v(1..PROBE_GAMMA + 1) through `runner`, measured on the loaded pair."""
    from playground.measure.bench.verify_cost import measure_curve

    return measure_curve(pair.target.model, max_k=lineup.PROBE_GAMMA + 1, repeats=3, runner=runner).v


def run(args, plan: sweep.Plan, pair_of, config: dict) -> dict:
    """Estimate, check the budget, then both rounds with a progress bar; the report."""
    from tqdm import tqdm

    from playground.engine.runners import resolve
    from playground.measure.bench.verify_cost import measure_curve

    first = pair_of(plan.cells[0])
    runner = resolve(plan.cells[0].runner, first.target.device, False, first.target.model)
    step = measure_curve(first.target.model, max_k=1, repeats=2, runner=runner).step_s
    del first
    least, most = lineup.estimate_seconds(plan, step, sum(c.drafter == "self" for c in plan.cells))
    print(f"The board: {len(plan.cells)} drafters × {len(plan.prompts)} prompts; a plain step takes "
          f"{step * 1000:.0f} ms here, so about {least / 60:.0f}–{most / 60:.0f} min.", file=sys.stderr)
    if args.budget_minutes is not None and least > args.budget_minutes * 60:
        raise SettingError("--budget-minutes", f"the board needs at least about {least / 60:.0f} min here, more than "
                                               f"{args.budget_minutes:g}; choose fewer drafters or prompts")
    with tqdm(total=plan.total_runs, unit="run", file=sys.stderr, dynamic_ncols=True) as bar:
        def show(step: sweep.Progress) -> None:
            bar.total = step.total
            bar.update(step.done - bar.n)
            bar.set_postfix_str(step.what[:60])

        return sweep.run(plan, pair_of, config, show,
                         runs_of=partial(rounds, names=args.board_names, curve_of=curve_of))


def write_png(report: dict, path) -> None:
    """The speedup map as PNG (kaleido draws plotly figures)."""
    from playground.measure.bench.board.charts import board_map_figure
    from playground.measure.bench.report import atomic_write

    atomic_write(path, board_map_figure(report).to_image(format="png", width=1000, height=700))
