"""Aggregate per-prompt records into a summary, overall and per category.

Choices, so a reader can check them:
- rates (tok/s) are total-token rates: all new tokens / all seconds, so long outputs weigh more,
  as they do for a user waiting on them;
- ratios (speedup, transformers' assisted speedup) are medians of the per-prompt ratios, robust
  to one odd prompt; the ratio of total rates is given beside as `speedup_total`;
- alpha, acceptance, tokens per call and c are pooled over every step of every prompt, then put
  into DESIGN.md's generalised formula for `predicted_speedup`, which charges verification its
  measured cost v(gamma + 1) (`verify_cost`); `paper_predicted_speedup` is the paper's v = 1.
"""

from __future__ import annotations

from statistics import median

from playground.engine.sampling import expected_speedup, expected_tokens_per_call


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
    return summary


def by_category(records: list[dict]) -> dict[str, dict]:
    categories = list(dict.fromkeys(r["category"] for r in records))
    return {c: summarize_records([r for r in records if r["category"] == c]) for c in categories}


def total(records, key) -> float:
    return sum(r[key] for r in records)


def rate(records, tokens_key, seconds_key) -> float:
    seconds = total(records, seconds_key)
    return total(records, tokens_key) / seconds if seconds else 0.0


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
    }


def speculation_summary(records) -> dict:
    drafted, accepted, tested = (total(records, k) for k in ("drafted", "accepted", "tested"))
    calls = total(records, "target_calls")
    cost_calls, cost_drafted = total(records, "cost_calls"), total(records, "cost_drafted")
    cost_base_calls = total(records, "cost_baseline_calls")
    alpha = accepted / tested if tested else 0.0
    mean_gamma = drafted / calls if calls else 0.0
    target_call_s = total(records, "verify_seconds") / cost_calls if cost_calls else 0.0
    draft_token_s = total(records, "draft_seconds") / cost_drafted if cost_drafted else 0.0
    decode_call_s = total(records, "baseline_call_seconds") / cost_base_calls if cost_base_calls else 0.0
    # DESIGN.md's c: one draft forward over one plain target forward (the baseline's step)
    step_s = decode_call_s or target_call_s
    c = draft_token_s / step_s if step_s else 0.0
    # seconds of one verification forward (gamma + 1 tokens) over one plain decoding step: the
    # paper's formula assumes 1; the generalised one charges what was measured, v(gamma + 1)
    verify = target_call_s / decode_call_s if decode_call_s else 0.0
    tokens_per_call = expected_tokens_per_call(alpha, mean_gamma)
    predicted = tokens_per_call / (mean_gamma * c + (verify or 1.0)) if drafted else 1.0
    measured = rate_summary(records)["speedup_total"]
    return {
        "acceptance_rate": accepted / drafted if drafted else 0.0,
        "mean_accepted_tokens": total(records, "new_tokens") / calls if calls else 0.0,
        "alpha": alpha,
        "mean_gamma": mean_gamma,
        "c": c,
        "predicted_speedup": predicted,
        "paper_predicted_speedup": expected_speedup(alpha, mean_gamma, c) if drafted else 1.0,
        "measured_over_predicted": measured / predicted if predicted else 0.0,
        "verify_cost": verify,
    }


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
    base_calls = total(records, "cost_baseline_calls")
    step_s = total(records, "baseline_call_seconds") / base_calls if base_calls else 0.0
    verify_s = total(records, "tree_verify_seconds") / cost_calls if cost_calls else 0.0
    depth_s = total(records, "tree_draft_seconds") / forwards if forwards else 0.0
    flags = [r["tree_identical"] for r in records if r["tree_identical"] is not None]
    return {
        "tree_tok_s": tree,
        "tree_speedup": median(r["tree_speedup"] for r in records),
        "tree_over_chain": median(r["tree_over_chain"] for r in records),
        "tree_mean_accepted_tokens": total(records, "tree_new_tokens") / calls if calls else 0.0,
        "tree_nodes": total(records, "tree_nodes") / cost_calls if cost_calls else 0.0,
        "tree_depths": forwards / cost_calls if cost_calls else 0.0,
        "tree_verify_cost": verify_s / step_s if step_s else 0.0,
        "tree_c_depth": depth_s / step_s if step_s else 0.0,
        "tree_identical": all(flags) if flags else None,
    }
