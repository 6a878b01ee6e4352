"""The benchmark's printed summary: one line per setting and category, the losses included."""

from __future__ import annotations

from playground.measure.bench.report import cell, label, varying

COLUMNS = (  # (summary key, header, width, format)
    ("prompts", "n", 4, "{:d}"),
    ("baseline_tok_s", "AR tok/s", 9, "{:.2f}"),
    ("speculative_tok_s", "spec tok/s", 10, "{:.2f}"),
    ("speedup", "speedup", 8, "{:.2f}x"),
    ("decode_speedup_total", "dec spd", 7, "{:.2f}x"),  # decode-only: speculation leaves the prefill as it is
    ("losing_prompts", "lost", 5, "{:d}"),
    ("alpha", "alpha", 6, "{:.2f}"),
    ("mean_accepted_tokens", "tok/call", 8, "{:.2f}"),
    ("c", "c", 6, "{:.3f}"),
    ("predicted_speedup", "predicted", 9, "{:.2f}x"),
    ("verify_cost", "verify", 7, "{:.2f}"),
    ("acceptance_by_position", "α by position", 15, "positions"),
    ("speculative_weights_mb", "MB cnt", 6, "{:.0f}"),  # counted: weights and the drafter's (engine/memory.py)
    ("speculative_resident_mb", "MB rss", 6, "{:.0f}"),  # measured: the process's growth (resident.py)
    ("hf_generate_tok_s", "HF tok/s", 9, "{:.2f}"),
    ("hf_assisted_speedup", "HF spd", 7, "{:.2f}x"),
    ("identical_prompts", "ident", 5, "{}"),
    ("tree_tok_s", "tree tok/s", 10, "{:.2f}"),
    ("tree_speedup", "tree spd", 8, "{:.2f}x"),
    ("tree_over_chain", "tree/chain", 10, "{:.2f}x"),
    ("tree_mean_accepted_tokens", "tree tok/call", 13, "{:.2f}"),
    ("tree_nodes", "nodes", 6, "{:.1f}"),
    ("tree_verify_cost", "v(nodes)", 8, "{:.2f}"),
    ("tree_c_depth", "c/depth", 7, "{:.3f}"),
    ("tree_identical", "tree ident", 10, "{}"),
    ("compile_s", "compile s", 9, "{:.1f}"),  # the compiled runner's first calls, outside every timing
)


def format_report(report: dict) -> str:
    used = [c for c in COLUMNS if any(c[0] in run["summary"] for run in report["runs"])]
    keys = varying(report["runs"])
    labels = [run_label(run["settings"], keys) for run in report["runs"]]
    width = max([28, *map(len, labels)])
    header = f"{'setting':<{width}} {'category':<15} " + " ".join(f"{h:>{w}}" for _, h, w, _ in used)
    lines = [header, "-" * len(header)]
    for run, name in zip(report["runs"], labels):
        for category, summary in {**run["categories"], "all": run["summary"]}.items():
            cells = " ".join(f"{shown(summary.get(key), fmt):>{w}}" for key, _, w, fmt in used)
            lines.append(f"{name:<{width}} {category[:15]:<15} {cells}")
        for skipped in run.get("skipped", []):
            lines.append(f"  skipped {skipped['id']} ({skipped['category']}): {skipped['reason']}")
        for why in run["summary"].get("compile_failed", []):
            lines.append(f"  could not compile ({why}): that shape ran uncompiled, and auto runs the model on eager "
                         "from the next load")
    lines.append("speedup: median over prompts of spec tok/s / AR tok/s; tok/s include prefill; dec spd: the "
                 "same over decoding only (after each run's first token), all prompts pooled; verify: one "
                 "verification forward / one decoding step; α by position: the first three drafts' acceptance; "
                 "MB cnt (counted): the target's weights (in torch and in its runner) and what the drafter holds "
                 "(a runner's KV buffers not counted); MB rss (measured): what this process's resident memory "
                 "grew by since before its first model loaded, read at the run's end (both runs' models, other "
                 "engines' loops taken out)")
    if any("compile_s" in run["summary"] for run in report["runs"]):
        lines.append("compile s: seconds the compiled runner's first call of each step shape took in this "
                     "setting's warm-up (compiling, capturing on a GPU), kept out of every tok/s")
    if any("tree_tok_s" in run["summary"] for run in report["runs"]):
        lines.append("tree/chain: median over prompts of tree tok/s / chain tok/s; nodes: per tree; "
                     "v(nodes): one tree verification / one decoding step; c/depth: one draft forward "
                     "(a whole depth) / one decoding step")
    lines += faster_than_what(report, lambda settings: run_label(settings, keys))
    return "\n".join(lines)


def shown(value, fmt: str) -> str:
    """A cell; "positions" writes α by position as .84/.60/.39 (the first three)."""
    if fmt == "positions":
        return "/".join(f"{a:.2f}".lstrip("0") for a in value[:3]) if value else "-"
    return cell(value, fmt)


def run_label(s: dict, keys: list[str]) -> str:
    """γ, T, top-k and top-p, the confidence cut when on, then whatever else varies between runs."""
    name = f"{label(s, [])} k={s['top_k']} p={s['top_p']}"
    name += f" conf={s['min_confidence']}" if s.get("min_confidence") else ""
    rest = [k for k in keys if k not in ("gamma", "temperature", "top_k", "top_p", "min_confidence", "adaptive")]
    return " ".join([name, *(f"{k}={s.get(k)}" for k in rest)])


def faster_than_what(report: dict, label) -> list[str]:
    """For each setting timed beside another engine's own loop (llama.cpp, onnxruntime-genai): every
    plain and speculative decoding, fastest first, with prefill and decode-only, each over the first
    reference's plain loop. label(settings) names a setting."""
    timed = {"llamacpp_tok_s", "ortgenai_tok_s", "openvino_tok_s"}
    runs = [run for run in report["runs"] if timed & set(run["summary"])]
    if not runs:
        return []
    lines = ["Faster than what? all prompts, tok/s with prefill, then decode-only (after the first token); "
             "x ref: over the first plain reference row's tok/s with prefill"]
    for run in runs:
        s, runner = run["summary"], run["settings"].get("runner")
        rows = reference_rows(s) + [
            (f"ours plain, runner {runner}", s["baseline_tok_s"], s.get("baseline_decode_tok_s"), None),
            (f"ours speculative, runner {runner}", s["speculative_tok_s"], s.get("speculative_decode_tok_s"),
             s.get("identical_prompts"))]
        if "tree_tok_s" in s:
            rows.append((f"ours tree, runner {runner}", s["tree_tok_s"], None, None))
        if "hf_generate_tok_s" in s:
            rows += [("transformers generate()", s["hf_generate_tok_s"], None, None),
                     ("transformers assisted", s["hf_assisted_tok_s"], None, None)]
        ref = rows[0][1]
        lines.append(f"  {label(run['settings'])} (ref: {rows[0][0]}):")
        for what, tok_s, decode, same in sorted(rows, key=lambda row: -row[1]):
            decoding = f"{decode:8.2f} decoding" if decode else " " * 17
            ident = "" if same is None else f"  same tokens as our plain on {same}/{s['prompts']}"
            lines.append(f"    {what:<44} {tok_s:8.2f} tok/s {decoding} {tok_s / ref if ref else 0:6.2f}x ref{ident}")
    if any(run["settings"]["temperature"] != 0 for run in runs):
        lines.append("  (T > 0: llama.cpp samples with its own sampler and RNG, top-k/top-p before the temperature)")
    return lines


def reference_rows(s: dict) -> list[tuple]:
    """(what, tok/s, decode-only tok/s, identical prompts) of each other engine's own loop in a summary."""
    rows = []
    for key, engine, loop in LOOPS:
        if f"{key}_tok_s" in s:
            rows.append((f"{engine} plain ({loop})", s[f"{key}_tok_s"], s.get(f"{key}_decode_tok_s"),
                         s.get(f"{key}_identical_prompts")))
        name = f"{key}_speculative"
        if f"{name}_tok_s" in s:
            accepted = s.get(f"{name}_acceptance")
            accepts = f", accepts {accepted:.2f}" if accepted else ""
            what = f"{engine} speculative ({loop}{accepts})"
            rows.append((what, s[f"{name}_tok_s"], s.get(f"{name}_decode_tok_s"), None))
    return rows


LOOPS = (  # each other engine's own loop: its summary key, the engine, what of it runs
    ("llamacpp", "llama.cpp", "its own decode loop"),
    ("ortgenai", "onnxruntime-genai", "its own loop"),
    ("openvino", "OpenVINO GenAI", "its LLMPipeline"),
)

