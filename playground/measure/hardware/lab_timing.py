"""Time the fast lab against the slow one on a real pair, once, from the command line:

    python -m playground.measure.hardware.lab_timing --pair default --draws 20000 --slow-draws 400

Prints the seconds each mode took (model loading excluded) and both significance figures on the
same prompt and settings. A measurement for the README, never a test assertion.
"""

from __future__ import annotations

import argparse
import os
import time

from playground.measure.hardware.common import command


def options(argv: list[str] | None = None) -> argparse.Namespace:
    parser = command("lab_timing", __doc__)
    parser.add_argument("--pair", default=None, help="registry pair (default: the registry's)")
    parser.add_argument("--prompt", default="Name one animal. Answer with a single word.")
    parser.add_argument("--draws", type=int, default=20_000, help="fast draws")
    parser.add_argument("--slow-draws", type=int, default=400, help="slow draws (0 skips the slow mode)")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    from playground.measure.bench.flags import add_knob_flags  # as the benchmark names them (choices, help)

    add_knob_flags(parser, ("target_quantization", "draft_quantization"))
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    from playground.engine import factory
    from playground.measure.teach.lab import fast_lab, losslessness_lab
    from playground.models.pair_cache import PairCache
    from playground.models.registry import load_registry
    from playground.models.text import encode_prompt

    args = options(argv)
    print(f"load average before loading: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs", flush=True)

    from playground.config import RunConfig

    run = RunConfig(pair=args.pair, gamma=1, max_new_tokens=1, temperature=args.temperature, seed=args.seed,
                    target_quantization=args.target_quantization, draft_quantization=args.draft_quantization)
    pair = PairCache(load_registry()).get(args.pair, **run.loading())
    ids = encode_prompt(pair.tokenizer, args.prompt)
    config = factory.spec_config(run)
    # The first forward after loading pays one-time costs (weights paged in, kernels chosen); the
    # fast mode runs twice so its cold and warm times are both visible.
    modes = [("fast (cold)", fast_lab, args.draws), ("fast", fast_lab, args.draws)] + ([("slow", losslessness_lab, args.slow_draws)] if args.slow_draws else [])
    for name, lab, draws in modes:
        marks: list[float] = []
        started = time.perf_counter()
        report = (lambda *_, marks=marks: marks.append(time.perf_counter())) if name.startswith("fast") else None
        result = lab(pair.target.model, factory.model_drafter(run, factory.Models.of(pair)), ids, config, draws, report)
        seconds = time.perf_counter() - started
        if marks:  # the first report comes after p and q (two forwards) and the first 100 draws
            print(f"{name}: p, q and the first 100 draws in {marks[0] - started:.1f} s, "
                  f"the other {draws - 100} draws and their statistics in {seconds - (marks[0] - started):.1f} s")
        fit, control = result.speculative_vs_p, result.direct_vs_p
        print(
            f"{name}: {draws} draws in {seconds:.1f} s ({seconds / draws * 1e3:.2f} ms a draw) | "
            f"speculative vs p: distance {fit.total_variation:.4f}, chi2 {fit.chi2:.1f} on {fit.dof} dof, "
            f"p-value {fit.p_value:.3g} | target alone vs p: distance {control.total_variation:.4f}, "
            f"p-value {control.p_value:.3g} | guesses kept {result.accepted / draws:.1%}",
            flush=True,
        )


if __name__ == "__main__":
    main()
