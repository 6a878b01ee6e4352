"""`python -m playground.measure.hardware.draft_rows`: the draft's step as a run pays it, against the step timed alone.

    python -m playground.measure.hardware.draft_rows [--pair NAME] [--gamma 1] [--draft-vocab N]
                                                [--new-tokens 96] [--repeats 20] [--json out.json]

Issue 53, item 3: the default pair's draft cost c 0.39-0.45 of a plain target step inside runs and 0.29
timed alone. This times, on the pair as the app loads it and through the runners auto picks, the draft's
forward over one row and over two (sampling.draft_cost: a call's first draft forward reads two rows, the
last drafted token and the bonus, after a call that accepted all γ) and the target's plain step, alone
(measure_curve's medians), then one greedy run at γ with each draft forward timed where it runs (the
drafter's runner, wrapped for this run only). It prints c over one row, over two, c in the run, and
what draft_cost forecasts from the first two at the run's α, so the gap between alone and in a run is
split into the rows a run reads and whatever is left.
"""

from __future__ import annotations

import statistics
import sys
import time

from playground.measure.hardware.common import command

PROMPT = "Write a Python function that parses a CSV file into a list of dictionaries, with type hints and a docstring."


def options(argv=None):
    p = command("draft_rows", __doc__)
    p.add_argument("--pair", default=None, help="a pair from models.yaml (default: the registry's default)")
    p.add_argument("--gamma", type=int, default=1, help="the run's γ (default 1)")
    p.add_argument("--draft-vocab", type=int, default=None, help="the draft's head rows (default: the pair's)")
    p.add_argument("--new-tokens", type=int, default=96)
    p.add_argument("--repeats", type=int, default=20, help="timed rounds of each step alone")
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args(argv)
    if args.gamma < 1 or args.new_tokens < 2 or args.repeats < 1:
        p.error("--gamma, --new-tokens and --repeats must be at least 1, 2 and 1")
    return args


def main(argv=None) -> int:
    args = options(argv)
    from playground.config import RunConfig
    from playground.engine import factory
    from playground.engine.events import summarize
    from playground.engine.generate import generate
    from playground.engine.sampling import draft_cost
    from playground.measure.bench.cli import quiet_transformers
    from playground.measure.bench.verify_cost import measure_curve
    from playground.models.pair_cache import PairCache
    from playground.models.registry import load_registry
    from playground.models.text import encode_prompt

    quiet_transformers()
    registry = load_registry()
    spec = registry.pair(args.pair)
    vocab = spec.draft_vocab if args.draft_vocab is None else args.draft_vocab
    run = RunConfig(pair=spec.name, gamma=args.gamma, max_new_tokens=args.new_tokens, temperature=0.0,
                    draft_vocab=vocab)
    pair = PairCache(registry).get(spec.name, **run.loading())
    ids = encode_prompt(pair.tokenizer, PROMPT)
    drafter = factory.make_drafter(run, factory.Models.of(pair, run))
    list(generate(pair.target.model, ids, factory.spec_config(run), drafter))  # warm: sessions, auto's choice
    target = measure_curve(pair.target.model, 1, args.repeats, runner=run.runner)
    draft = measure_curve(pair.draft.model, 2, args.repeats, runner=run.runner, head_rows=vocab or None)
    one, two = draft.c_over(target.step_s)

    timed, forward = [], drafter.lm.runner.forward

    def spanned(new, *rest, **kw):  # this run only: each draft forward, timed where it runs
        start = time.perf_counter()
        out = forward(new, *rest, **kw)
        timed.append((len(new), time.perf_counter() - start))
        return out

    drafter.lm.runner.forward = spanned
    events = list(generate(pair.target.model, ids, factory.spec_config(run), drafter))
    alpha = summarize(events).alpha
    steady = timed[1:]  # the first reads the prompt
    in_run = statistics.mean(s for _, s in steady) / target.step_s  # a mean, as draft_cost is an expectation
    report = {"pair": spec.name, "gamma": args.gamma, "draft_vocab": vocab, "alpha": alpha,
              "target_step_ms": target.step_s * 1000, "draft_one_row_ms": draft.step_s * 1000,
              "draft_two_rows_ms": draft.step_s * draft.v[1] * 1000, "c_one_row": one, "c_two_rows": two,
              "c_in_run": in_run, "two_row_share": sum(n == 2 for n, _ in steady) / len(steady),
              "c_forecast": draft_cost((one, two), alpha, args.gamma) / args.gamma}
    print(f"{spec.name}, γ {args.gamma}, draft vocabulary {vocab or 'whole'}, α {alpha:.2f} in the run")
    print(f"  target plain step alone {report['target_step_ms']:.1f} ms; draft alone: one row "
          f"{report['draft_one_row_ms']:.1f} ms (c {one:.3f}), two rows {report['draft_two_rows_ms']:.1f} ms (c {two:.3f})")
    print(f"  in the run: {report['two_row_share']:.0%} of draft forwards read two rows; mean forward c {in_run:.3f}")
    print(f"  draft_cost's forecast from one and two rows at the run's α: c {report['c_forecast']:.3f} "
          f"({report['c_forecast'] / in_run - 1:+.1%} against the run; one row alone {one / in_run - 1:+.1%})")
    if args.json:
        import json

        from playground.measure.bench.report import atomic_write

        atomic_write(args.json, json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
