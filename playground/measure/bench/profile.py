"""`python -m playground.measure.bench.profile`: where the time of one generation goes.

Runs one prompt autoregressively and speculatively (after one untimed warm-up of each) and splits
each run's wall time with the engine's own events: target forwards (verify), draft forwards, and
the engine's overhead (sampling math, cache rollback, bookkeeping). Every time is the engine's:
the events' draft_s, verify_s and overhead_s, and a wall time read with its clock, which waits
for CUDA's queued work. The benchmark says how fast; this says why, without a sampling
profiler's noise.
"""

from __future__ import annotations

import argparse
import sys

from playground.models.registry import QUANTIZATIONS

PROMPT = "Write a Python function that merges two sorted lists into one sorted list, with a docstring and tests."


def options(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m playground.measure.bench.profile", description=__doc__.split("\n")[0])
    p.add_argument("--pair", default=None, help="a pair from models.yaml (default: the default pair)")
    p.add_argument("--prompt", default=PROMPT)
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--target-quantization", choices=QUANTIZATIONS, default=None)
    p.add_argument("--draft-quantization", choices=QUANTIZATIONS, default=None)
    p.add_argument("--tree", action="store_true", help="also profile a token tree from the same draft")
    from playground.measure.bench.flags import add_knob_flags  # knobs as the benchmark names them (defaults, ranges, help)

    add_knob_flags(p, ("gamma", "draft_vocab", "tree_budget", "tree_depth", "tree_branching", "tree_width"))
    return p.parse_args(argv)


def timed_run(target, ids, config, drafter, eos):
    """The run's events and its wall time, on the engine's clock (synchronised with the device)."""
    from playground.engine.generate import clock, generate

    start = clock(target.device)
    events = list(generate(target, ids, config, drafter, eos_token_ids=eos))
    return events, clock(target.device) - start


def breakdown(name: str, events, wall: float) -> str:
    from playground.engine.events import output_tokens

    verify, draft = sum(e.verify_s for e in events), sum(e.draft_s for e in events)
    overhead, drafted = sum(e.overhead_s for e in events), sum(len(e.drafts) for e in events)
    between = max(0.0, wall - sum(e.seconds for e in events))
    trees = [e.tree for e in events if e.tree is not None]
    if trees:  # a tree drafts one forward per depth, and verifies every node
        forwards, nodes = sum(t.draft_forwards for t in trees), sum(len(t.nodes) for t in trees)
        drafted_text = f"{forwards} forwards, one per depth, {draft / forwards * 1000:.0f} ms each"
        verified = f", {nodes / len(trees):.1f} nodes"
    else:
        drafted_text = f"{drafted} tokens" + (f", {draft / drafted * 1000:.0f} ms each" if drafted else "")
        verified = ""
    return (f"{name}: {len(output_tokens(events))} tokens in {wall:.2f} s, {len(events)} target calls\n"
            f"  verify   {verify:7.2f} s {verify / wall:6.1%}  ({verify / len(events) * 1000:.0f} ms a call{verified})\n"
            f"  draft    {draft:7.2f} s {draft / wall:6.1%}  ({drafted_text})\n"
            f"  overhead {overhead:7.3f} s {overhead / wall:6.1%}  (sampling math, cache rollback, bookkeeping)\n"
            f"  between  {between:7.3f} s {between / wall:6.1%}  (the loop between steps: output cut, events)")


def main(argv=None) -> int:
    from playground.engine import factory
    args = options(argv)
    from dataclasses import replace

    from playground.config import TREE, RunConfig
    from playground.engine.events import Tally, costs, summarize, tree_costs
    from playground.models.pair_cache import PairCache
    from playground.models.registry import load_registry
    from playground.models.text import encode_prompt
    from playground.measure.bench.flags import take_suggestions

    registry = load_registry()
    try:
        take_suggestions(args, registry.pair(args.pair))  # γ and the draft vocabulary (greedy always)
        run = RunConfig(gamma=args.gamma, max_new_tokens=args.max_new_tokens, draft_vocab=args.draft_vocab,
                        tree_budget=args.tree_budget, tree_depth=args.tree_depth,
                        tree_branching=args.tree_branching, tree_width=args.tree_width)
        config = factory.spec_config(run)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    pair = PairCache(registry).get(args.pair, target_quantization=args.target_quantization,
                                          draft_quantization=args.draft_quantization)
    target = pair.target.model
    ids = encode_prompt(pair.tokenizer, args.prompt)
    eos = pair.eos
    try:
        models = factory.Models.of(pair)
        drafters = [factory.make_drafter(run, models) for _ in range(2)]
        trees = [factory.make_drafter(replace(run, speculation=TREE), models) for _ in range(2)] if args.tree else []
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for drafter in (None, drafters[0], *trees[:1]):  # warm-up: first calls allocate and pick kernels
        timed_run(target, ids, config, drafter, eos)
    base, base_s = timed_run(target, ids, config, None, eos)
    spec, spec_s = timed_run(target, ids, config, drafters[1], eos)
    m = summarize(spec, baseline=base)
    print(breakdown("autoregressive", base, base_s))
    print(breakdown(f"speculative, gamma={args.gamma}", spec, spec_s))
    print(f"alpha={m.alpha:.2f}  tokens/call={m.mean_tokens_per_call:.2f}  c={m.c:.3f}  "
          f"predicted speedup={m.predicted_speedup:.2f}x  measured={base_s / spec_s:.2f}x")
    if trees:
        tree, tree_s = timed_run(target, ids, config, trees[1], eos)
        t = summarize(tree, baseline=base)
        per_depth = Tally(cost=tree_costs(tree), plain=costs(base)).c  # one draft forward is a whole depth
        print(breakdown(f"tree, budget={args.tree_budget} depth={args.tree_depth} "
                        f"branching={args.tree_branching} width={args.tree_width}", tree, tree_s))
        print(f"tokens/call={t.mean_tokens_per_call:.2f}  c per depth={per_depth:.3f}  "
              f"v(nodes)={t.verify_cost:.2f}  measured={base_s / tree_s:.2f}x over autoregressive, "
              f"{spec_s / tree_s:.2f}x over the chain")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
