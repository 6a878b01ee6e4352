"""Faster than what? Every target quantization timed plainly and with speculation, in one run.

A speedup over the same target decoded plainly can hide that a quantized target alone is faster
still. `python -m playground.bench --target-quantizations none,nf4,int4-cpu ...` loads the pair
once per target quantization (one at a time, so memory holds one pair), times its plain and
speculative runs on the same prompts as usual, measures that target's v(k), and this module
folds the reports into one table: absolute tok/s of every plain configuration and every
speculative one, each speculative run against its own target's plain run and against the
fastest plain configuration, with α, c, v(γ+1) and greedy identity beside it.
"""

from __future__ import annotations

from playground.measure.bench.verify_cost import VerifyCurve


def plain_rate(report: dict) -> float:
    """The target's plain tok/s, pooled over every setting's baseline runs (the same prompts)."""
    tokens = sum(r["summary"].get("baseline_new_tokens", 0) for r in report["runs"])
    seconds = sum(p["baseline_seconds"] for r in report["runs"] for p in r["prompts"])
    return tokens / seconds if seconds else 0.0


def llamacpp_rate(reports: dict[str, dict]) -> float | None:
    """llama.cpp's own plain tok/s (--reference llama.cpp), pooled over every report: each timed the
    same GGUF file on the same prompts, whatever the target's quantization. None when not timed."""
    prompts = [p for rep in reports.values() for r in rep["runs"] for p in r["prompts"] if "llamacpp_seconds" in p]
    seconds = sum(p["llamacpp_seconds"] for p in prompts)
    return sum(p["llamacpp_new_tokens"] for p in prompts) / seconds if seconds else None


def comparison(reports: dict[str, dict], curves: dict[str, VerifyCurve]) -> dict:
    """reports: target quantization -> the bench report of that target; curves: its v(k)."""
    plain = [{"target_quantization": q, "tok_s": plain_rate(rep), "others_cpu_share":
              rep["environment"].get("others_cpu_share")} for q, rep in reports.items()]
    fastest = max(plain, key=lambda row: row["tok_s"]) if plain else None
    own = {row["target_quantization"]: row["tok_s"] for row in plain}
    best = fastest["tok_s"] if fastest else 0.0
    cpp = llamacpp_rate(reports)
    speculative = []
    for q, rep in reports.items():
        curve = curves.get(q)
        for run in rep["runs"]:
            s, settings = run["summary"], run["settings"]
            if not s.get("prompts"):
                continue
            gamma = settings["gamma"]
            speculative.append({
                "target_quantization": q,
                "draft_quantization": rep["models"]["draft"]["quantization"],
                "gamma": gamma,
                "adaptive": settings.get("adaptive", False),
                "tok_s": s["speculative_tok_s"],
                "over_own_plain": s["speculative_tok_s"] / own[q] if own[q] else 0.0,
                "over_fastest_plain": s["speculative_tok_s"] / best if best else 0.0,
                "over_llamacpp": s["speculative_tok_s"] / cpp if cpp else None,
                "alpha": s["alpha"],
                "c": s["c"],
                "verify_cost": s["verify_cost"],  # measured in the runs, at the mean gamma + 1
                "v_curve": curve.v[gamma] if curve and gamma < len(curve.v) else None,  # v(gamma + 1)
                "predicted_speedup": s["predicted_speedup"],
                "measured_over_predicted": s["measured_over_predicted"],
                "identical": s.get("identical"),
                "identical_prompts": s.get("identical_prompts"),
                "prompts": s["prompts"],
            })
    speculative.sort(key=lambda row: -row["tok_s"])
    return {
        "plain": sorted(plain, key=lambda row: -row["tok_s"]),
        "fastest_plain": fastest,
        "llamacpp_tok_s": cpp,  # llama.cpp's own plain decoding of the GGUF file, when --reference llama.cpp
        "speculative": speculative,
        "best_speculative": speculative[0] if speculative else None,
        "curves": {q: {"v": list(c.v), "step_s": c.step_s} for q, c in curves.items()},
    }


def format_comparison(table: dict) -> str:
    lines = ["Faster than what? plain runs (no speculation), fastest first:"]
    for row in table["plain"]:
        busy = row["others_cpu_share"]
        lines.append(f"  target {row['target_quantization']:<9} {row['tok_s']:7.2f} tok/s"
                     + (f"   (other processes used {busy:.0%} of the CPU)" if busy is not None else ""))
    if table.get("llamacpp_tok_s"):
        lines.append(f"  llama.cpp        {table['llamacpp_tok_s']:7.2f} tok/s   (its own plain decoding of the "
                     "GGUF file; x llama.cpp below is over it)")
    lines.append("speculative runs, fastest first (x own: over the same target plain; x fastest: over "
                 "the fastest plain run above):")
    lines.append(f"  {'target':<9} {'draft':<9} {'gamma':>5} {'tok/s':>7} {'x own':>6} {'x fastest':>9} "
                 f"{'alpha':>6} {'c':>6} {'v run':>6} {'v(g+1)':>6} {'pred':>6} {'meas/pred':>9} "
                 f"{'ident':>6}")
    for r in table["speculative"]:
        over_cpp = f"   {r['over_llamacpp']:.2f}x llama.cpp" if r.get("over_llamacpp") else ""
        v_curve = f"{r['v_curve']:.2f}" if r["v_curve"] is not None else "-"
        ident = "-" if r["identical_prompts"] is None else f"{r['identical_prompts']}/{r['prompts']}"
        gamma = f"{r['gamma']}{'+' if r['adaptive'] else ''}"
        lines.append(f"  {r['target_quantization']:<9} {r['draft_quantization']:<9} {gamma:>5} "
                     f"{r['tok_s']:7.2f} {r['over_own_plain']:5.2f}x {r['over_fastest_plain']:8.2f}x "
                     f"{r['alpha']:6.2f} {r['c']:6.3f} {r['verify_cost']:6.2f} {v_curve:>6} "
                     f"{r['predicted_speedup']:5.2f}x {r['measured_over_predicted']:9.2f} {ident:>6}{over_cpp}")
    for q, curve in table["curves"].items():
        step_ms = curve["step_s"] * 1000
        lines.append(f"  v(k) of target {q}, k = 1..{len(curve['v'])} (plain step {step_ms:.0f} ms): "
                     + " ".join(f"{x:.2f}" for x in curve["v"]))
    return "\n".join(lines)
