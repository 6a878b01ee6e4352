"""`python -m playground.models scan` and `pair`: the scan of your models as a table (and JSON), and a
pair of them kept by their scanned names (models/cli.py wires the commands).

    python -m playground.models scan [--models-dir DIR]... [--json FILE]
    python -m playground.models pair TARGET DRAFT --name NAME [--models-dir DIR]...
"""

from __future__ import annotations

import json
import sys

from playground.config import write_text_atomic
from playground.models.scan import listing, pairing, stores
from playground.models.scan.listing import count, size, tokenizer_groups

COLUMNS = (("name", 34), ("source", 9), ("format", 10), ("arch", 9), ("params", 7), ("quant", 8),
           ("size", 8), ("context", 7), ("vocab", 7), ("tokenizer", 13))


def run_scan(args, out=None) -> int:
    out = out or sys.stdout
    found = listing.scan(stores.locations(args.models_dir or ()))
    print(where(found), file=out)
    print(table(found.models), file=out)
    usable = found.usable()
    print(f"\n{len(found.models)} models, {len(usable)} usable here; pair two with "
          "`python -m playground.models pair TARGET DRAFT --name NAME`", file=out)
    if args.json:
        write_text_atomic(args.json, json.dumps([m.json() for m in found.models], indent=1) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


def where(found: listing.Scan) -> str:
    lines = ["looked in:"]
    for store in found.stores:
        held = sum(1 for m in found.models if m.path.startswith(str(store.root)))
        there = f"{held} found" if store.exists else "not there"
        lines.append(f"  {store.source:<10} {store.root}  ({store.said}; {there})")
    return "\n".join(lines)


def table(models) -> str:
    groups = tokenizer_groups(models)
    rows = [[m.name, m.source, m.format or "-", m.architecture or "-", count(m.parameters), m.quantization or "-",
             size(m.bytes), count(m.context), count(m.vocab), groups.get(m.tokenizer, "-")] for m in models]
    head = "".join(f"{title:<{width + 1}}" for title, width in COLUMNS) + "usable / why not"
    lines = [head, "-" * len(head)]
    for model, row in zip(models, rows):
        cells = "".join(f"{fit(str(cell), width):<{width + 1}}" for cell, (_, width) in zip(row, COLUMNS))
        lines.append(cells + ("yes" if model.usable else f"no: {model.why}"))
    return "\n".join(lines)


def fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def run_pair(registry, args, out=None) -> int:
    """Keep TARGET drafted by DRAFT (scanned names) as NAME, with its class and estimate said."""
    out = out or sys.stdout
    from playground.engine.memory import build_peak
    from playground.engine.estimate import estimate
    from playground.models.userpairs import keep

    found = listing.scan(stores.locations(args.models_dir or ()))
    target, draft = found.named(args.target), found.named(args.draft)
    memory = pairing.Memory.now(build_peak=lambda m: build_peak(m.path, m.architecture) if m.format == "gguf" else None)
    chosen = pairing.pairing(target, draft, registry, memory)
    if not chosen.usable:
        raise ValueError(f"{draft.name} cannot draft for {target.name}: {chosen.why}")
    knobs = pairing.suggested_knobs(chosen, registry, draft)
    description = args.description or f"{target.name} drafted by {draft.name} ({chosen.verdict}; kept from the scan)"
    path = keep(args.name, target, draft, knobs, description, quantization=args.quantization, dtype=args.dtype,
                config=args.config)
    print(f"kept pair {args.name!r} in {path}: {target.name} <- {draft.name}, {chosen.verdict}: {chosen.why}", file=out)
    print(f"  knobs: {', '.join(f'{k} {v}' for k, v in knobs.items())}", file=out)
    print(f"  {estimate(chosen.alpha, chosen.alpha_said, chosen.c).line()}", file=out)
    print(f"race it: python -m playground.bench --pair {args.name!r}, or python app.py --pair {args.name!r}", file=out)
    return 0
