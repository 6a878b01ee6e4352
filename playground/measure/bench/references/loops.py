"""What another engine's own loop adds to a benchmark record and summary, under its key (`ortgenai`,
`openvino`): its plain (and speculative) rates with and without the prefill, ours over its plain
loop, whether its greedy tokens equal our baseline's (a different runtime: reported, not assumed),
its acceptance pooled from its own counters, and the resident memory it added at its first call."""

from __future__ import annotations

from playground.measure.bench.totals import rate


def record_fields(runs: dict, key: str) -> dict:
    """One prompt's fields from the timed runs: ours (`baseline`, `speculative`), `key`, `key_speculative`."""
    base, spec, plain = runs["baseline"], runs["speculative"], runs[key]
    fields = {
        f"{key}_new_tokens": len(plain.tokens), f"{key}_seconds": plain.seconds, f"{key}_tok_s": plain.tok_s,
        **plain.decode_fields(key),
        f"{key}_identical": plain.tokens == base.tokens,
        f"{key}_resident_mb": plain.resident_bytes / 2**20,  # measured: what its first call added
        f"baseline_over_{key}": base.tok_s / plain.tok_s if plain.tok_s else 0.0,
        f"speculative_over_{key}": spec.tok_s / plain.tok_s if plain.tok_s else 0.0,
    }
    if f"{key}_speculative" in runs:
        theirs, name = runs[f"{key}_speculative"], f"{key}_speculative"
        fields.update({
            f"{name}_new_tokens": len(theirs.tokens), f"{name}_seconds": theirs.seconds, f"{name}_tok_s": theirs.tok_s,
            **theirs.decode_fields(name),
            f"{name}_identical": theirs.tokens == plain.tokens,
            f"{name}_resident_mb": theirs.resident_bytes / 2**20,
            f"{name}_stats": theirs.stats,
        })
    return fields


def summary_fields(records: list[dict], ours: dict, key: str, drafted: str, accepted: str) -> dict:
    """A group's summary: total-token rates with and without the prefill, identity counts, and the
    acceptance pooled over the prompts from its counters named `drafted` and `accepted`."""
    plain = rate(records, f"{key}_new_tokens", f"{key}_seconds")
    fields = {f"{key}_tok_s": plain, f"{key}_decode_tok_s": rate(records, f"{key}_decode_tokens", f"{key}_decode_seconds"),
              f"{key}_identical_prompts": sum(r[f"{key}_identical"] for r in records),
              f"{key}_resident_mb": max(r.get(f"{key}_resident_mb", 0) for r in records),
              f"baseline_over_{key}": ours["baseline_tok_s"] / plain if plain else 0.0,
              f"speculative_over_{key}": ours["speculative_tok_s"] / plain if plain else 0.0}
    name = f"{key}_speculative"
    if all(f"{name}_tok_s" in r for r in records):
        stats = [r[f"{name}_stats"] for r in records]
        proposed = sum(s.get(drafted, 0) for s in stats)
        fields[f"{name}_acceptance"] = sum(s.get(accepted, 0) for s in stats) / proposed if proposed else None
        fields.update({f"{name}_tok_s": rate(records, f"{name}_new_tokens", f"{name}_seconds"),
                       f"{name}_decode_tok_s": rate(records, f"{name}_decode_tokens", f"{name}_decode_seconds"),
                       f"{name}_identical_prompts": sum(r[f"{name}_identical"] for r in records),
                       f"{name}_resident_mb": max(r.get(f"{name}_resident_mb", 0) for r in records)})
    return fields
