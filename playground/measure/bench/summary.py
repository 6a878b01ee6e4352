"""Aggregate per-prompt records into a summary, overall and per category.

Choices, so a reader can check them:
- rates (tok/s) are total-token rates: all new tokens / all seconds, so long outputs weigh more,
  as they do for a user waiting on them; `*_decode_tok_s` the same after each run's first token
  (the prefill left out: speculation shortens decoding only);
- ratios (speedup, transformers' assisted speedup) are medians of the per-prompt ratios, robust
  to one odd prompt; the ratio of total rates is given beside as `speedup_total`;
- alpha, acceptance, tokens per call, c and v are pooled over every step of every prompt (the
  engine's one pooling, events.pooled, over each record's raw sums), then put into the engine's one
  formula (docs/design.md) for `predicted_speedup`, which charges verification its measured cost
  v(gamma + 1) (`verify_cost`); `paper_predicted_speedup` is the paper's v = 1.
"""

from __future__ import annotations

from statistics import median

from playground.engine.events import Costs, Tally, by_position, pooled
from playground.engine.sampling import expected_speedup
from playground.measure.bench.references import llamacpp as reference_llamacpp
from playground.measure.bench.references import onnxruntime_genai as reference_ortgenai
from playground.measure.bench.references import openvino as reference_openvino
from playground.measure.bench.totals import rate, total


def summarize_records(records: list[dict]) -> dict:
    """The summary of a group of per-prompt records (all from one setting)."""
    if not records:
        return {"prompts": 0}
    summary = {"prompts": len(records), **rate_summary(records), **speculation_summary(records),
               **identity_summary(records)}
    if "hf_generate_tok_s" in records[0]:
        summary.update(reference_summary(records, summary))
    if "tree_tok_s" in records[0]:
        summary.update(tree_summary(records))
    if "llamacpp_tok_s" in records[0]:
        summary.update(reference_llamacpp.summary_fields(records, summary))
    if "ortgenai_tok_s" in records[0]:
        summary.update(reference_ortgenai.summary_fields(records, summary))
    if "openvino_tok_s" in records[0]:
        summary.update(reference_openvino.summary_fields(records, summary))
    return summary


def by_category(records: list[dict], summarize=None) -> dict[str, dict]:
    """Each category's summary, in first-seen order (summarize: summarize_records unless a caller,
    like the served benchmark, has records of its own kind)."""
    summarize = summarize or summarize_records
    categories = list(dict.fromkeys(r["category"] for r in records))
    return {c: summarize([r for r in records if r["category"] == c]) for c in categories}


def rate_summary(records) -> dict:
    base = rate(records, "baseline_new_tokens", "baseline_seconds")
    spec = rate(records, "new_tokens", "speculative_seconds")
    speedups = [r["speedup"] for r in records]
    return {
        "new_tokens": total(records, "new_tokens"),
        "baseline_new_tokens": total(records, "baseline_new_tokens"),
        "baseline_tok_s": base,
        "speculative_tok_s": spec,
        "speedup": median(speedups),
        "speedup_total": spec / base if base else 0.0,
        "speedup_min": min(speedups),
        "speedup_max": max(speedups),
        "losing_prompts": sum(s < 1 for s in speedups),  # where speculation made it slower: shown, not hidden
        **decode_summary(records),
        **memory_summary(records),
    }


def memory_summary(records) -> dict:
    """The most memory any prompt's run held: the weights counted (with the drafter's caches and
    tables) and the process's resident growth measured (runs.memory_fields); None where no prompt has it."""
    if "speculative_weights_mb" not in records[0]:
        return {}
    most = lambda key: max((r[key] for r in records if r.get(key) is not None), default=None)
    return {f"{k}_{what}_mb": most(f"{k}_{what}_mb")
            for k in ("baseline", "speculative") for what in ("weights", "resident")}


def decode_summary(records) -> dict:
    """Decode-only rates (records from before they were timed give none)."""
    if "baseline_decode_tokens" not in records[0]:
        return {}
    base = rate(records, "baseline_decode_tokens", "baseline_decode_seconds")
    spec = rate(records, "speculative_decode_tokens", "speculative_decode_seconds")
    return {"baseline_decode_tok_s": base, "speculative_decode_tok_s": spec,
            "decode_speedup_total": spec / base if base else 0.0}


def record_tally(record: dict) -> Tally:
    """The raw sums of one bench record (runs.speculation_fields) as the engine's tally."""
    return Tally(record["accepted"], record["tested"],
                 Costs(record["cost_drafted"], record["draft_seconds"], record["cost_calls"], record["verify_seconds"]),
                 baseline_costs(record))


def baseline_costs(record: dict) -> Costs:
    """The baseline's decoding calls of one record: the plain step every cost is counted in."""
    return Costs(calls=record["cost_baseline_calls"], verify_s=record["baseline_call_seconds"])


def speculation_summary(records) -> dict:
    drafted, accepted, calls = (total(records, k) for k in ("drafted", "accepted", "target_calls"))
    t = pooled(record_tally(r) for r in records)
    mean_gamma = drafted / calls if calls else 0.0
    # v: seconds of one verification forward (gamma + 1 tokens) over one plain decoding step: the
    # paper's formula assumes 1; the generalised one charges what was measured, v(gamma + 1)
    predicted = expected_speedup(t.alpha, mean_gamma, t.c, t.verify_cost) if drafted else 1.0
    measured = rate_summary(records)["speedup_total"]
    with_prefill = with_prefill_speedup(records, predicted)
    return {
        "acceptance_rate": accepted / drafted if drafted else 0.0,
        "mean_accepted_tokens": total(records, "new_tokens") / calls if calls else 0.0,
        "alpha": t.alpha,
        "mean_gamma": mean_gamma,
        "c": t.c,
        "predicted_speedup": predicted,
        "paper_predicted_speedup": expected_speedup(t.alpha, mean_gamma, t.c) if drafted else 1.0,
        "measured_over_predicted": measured / predicted if predicted else 0.0,
        **({"predicted_speedup_with_prefill": with_prefill} if with_prefill is not None else {}),
        "verify_cost": t.verify_cost or 0.0,
        **position_summary(records),
    }


def with_prefill_speedup(records, decoding: float) -> float | None:
    """The formula's speedup of a whole run, prompt reading included: the formula speaks of decoding
    only, so the plain run's decoding (seconds D) is divided by its speedup, and each run keeps the
    prefill it measured (the plain run's P; the speculative run's, which a draft model lengthens by
    reading the prompt too): (P + D) / (P_speculative + D / speedup). What a with-prefill
    measurement, such as the Race's, is to be held to. None for records from before decoding was
    timed apart."""
    if "baseline_decode_seconds" not in records[0] or decoding <= 0:
        return None
    decode = total(records, "baseline_decode_seconds")
    prefill = total(records, "baseline_seconds") - decode
    spec_prefill = total(records, "speculative_seconds") - total(records, "speculative_decode_seconds")
    return (prefill + decode) / (spec_prefill + decode / decoding) if spec_prefill + decode > 0 else None


def position_summary(records) -> dict:
    """α by draft position, pooled over every step of every prompt (records from before it was kept give none)."""
    if "position_drafted" not in records[0]:
        return {}
    width = max(len(r["position_drafted"]) for r in records)
    drafted, accepted = ([sum(r[key][i] for r in records if i < len(r[key])) for i in range(width)]
                         for key in ("position_drafted", "position_accepted"))
    return {"acceptance_by_position": by_position(drafted, accepted)}


def identity_summary(records) -> dict:
    flags = [r["identical"] for r in records if r["identical"] is not None]
    if not flags:
        return {"identical": None, "identical_prompts": None}
    return {"identical": all(flags), "identical_prompts": sum(flags)}


def reference_summary(records, ours: dict) -> dict:
    gen = rate(records, "hf_generate_new_tokens", "hf_generate_seconds")
    assisted = rate(records, "hf_assisted_new_tokens", "hf_assisted_seconds")
    hf_speedup = median(r["hf_assisted_speedup"] for r in records)
    flags = [r["hf_generate_identical"] for r in records if r["hf_generate_identical"] is not None]
    return {
        "hf_generate_tok_s": gen,
        "hf_assisted_tok_s": assisted,
        "hf_assisted_speedup": hf_speedup,
        "hf_assisted_speedup_total": assisted / gen if gen else 0.0,
        "baseline_over_hf_generate": ours["baseline_tok_s"] / gen if gen else 0.0,
        "speedup_over_hf_assisted": ours["speedup"] / hf_speedup if hf_speedup else 0.0,
        "hf_generate_identical": all(flags) if flags else None,
    }


def tree_summary(records) -> dict:
    """The tree beside the chain: medians of per-prompt ratios, pooled costs. v(nodes) is one tree
    verification over one plain decoding step; c_depth one draft forward (a whole depth of the
    tree) over that same step."""
    tree = rate(records, "tree_new_tokens", "tree_seconds")
    calls, cost_calls = total(records, "tree_target_calls"), total(records, "tree_cost_calls")
    forwards = total(records, "tree_draft_forwards")
    t = pooled(tree_tally(r) for r in records)
    flags = [r["tree_identical"] for r in records if r["tree_identical"] is not None]
    return {
        "tree_tok_s": tree,
        "tree_speedup": median(r["tree_speedup"] for r in records),
        "tree_over_chain": median(r["tree_over_chain"] for r in records),
        "tree_mean_accepted_tokens": total(records, "tree_new_tokens") / calls if calls else 0.0,
        "tree_nodes": total(records, "tree_nodes") / cost_calls if cost_calls else 0.0,
        "tree_depths": forwards / cost_calls if cost_calls else 0.0,
        "tree_verify_cost": t.verify_cost or 0.0,
        "tree_c_depth": t.c,
        "tree_identical": all(flags) if flags else None,
    }


def tree_tally(record: dict) -> Tally:
    """A record's tree costs as a tally: a tree drafts one forward per depth, so c counts per depth."""
    return Tally(cost=Costs(record["tree_draft_forwards"], record["tree_draft_seconds"], record["tree_cost_calls"],
                            record["tree_verify_seconds"]), plain=baseline_costs(record))
