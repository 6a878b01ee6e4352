"""`python -m playground.measure.hardware.contexts`: auto's runner choice for a pair's models at each context bucket.

    python -m playground.measure.hardware.contexts [--pair NAME] [--contexts 256,1024,4096]

auto's choice is kept per role and context bucket (runners/choice.py): a step's attention reads every
filled entry, so the runner that leads at 128 entries need not lead at 2048. This measures it afresh
for each bucket asked, as the page's warm-up does before a race of that length (the target's plain
step and 4-row verification, the draft's plain step, each after half the bucket's entries), in a
folder of choices of its own (the cache's are left as they are), and prints each candidate's
milliseconds and what was kept.
"""

from __future__ import annotations

import sys

from playground.measure.hardware.common import command


def options(argv=None):
    p = command("contexts", __doc__)
    p.add_argument("--pair", default=None, help="a pair from models.yaml (default: the registry's default)")
    p.add_argument("--contexts", default="256,1024,4096", help="run lengths in entries, comma-separated")
    args = p.parse_args(argv)
    try:
        args.lengths = [int(x) for x in args.contexts.split(",")]
    except ValueError:
        p.error(f"--contexts: expected entries such as 256,1024, got {args.contexts!r}")
    if not args.lengths or min(args.lengths) < 1:
        p.error(f"--contexts: each must be at least 1, got {args.contexts!r}")
    return args


def main(argv=None) -> int:
    args = options(argv)
    from playground.config import RunConfig
    from playground.engine.runners.auto import choice_text, record
    from playground.engine.runners.choice import bucket_of
    from playground.measure.bench.cli import quiet_transformers
    from playground.measure.bench.machine import spare_a_core
    from playground.measure.hardware.gpu_auto import own_choices
    from playground.models.pair_cache import PairCache
    from playground.models.registry import load_registry

    quiet_transformers()
    registry = load_registry()
    spec = registry.pair(args.pair)
    run = RunConfig(pair=spec.name, draft_vocab=spec.draft_vocab)
    pair = PairCache(registry).get(spec.name, **run.loading())
    roles = [("target", pair.target.model, None, True), ("draft", pair.draft.model, run.draft_vocab or None, False)]
    with own_choices(smoke=False), spare_a_core():  # the threads the page's runs use
        for bucket in sorted({bucket_of(n) for n in args.lengths}):
            for role, model, rows, verifies in roles:
                choice = record(model, rows, verifies, bucket)
                print(f"runs up to {bucket} entries (timed after {choice['filled']}), {role}: {choice_text(choice)}",
                      flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
