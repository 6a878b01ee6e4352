"""What the drafts board shows, as pure functions of its report (rounds.py writes it): the
leaderboard, the winner per category, the fastest plain configuration each is measured against,
the speedup map's grid, where a drafter cannot pay, and which tokens each drafter caught.

Speedups are against the *fastest* plain decoding measured in the same run (ours on the fastest
runner, or a reference engine's own loop when one was timed): a drafter that only beats a slow
runner's plain decoding is no win for the user.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median

from playground.config import DRAFTER_LABELS, TREE
from playground.measure.bench.board.lineup import QUANTIZED
from playground.engine.sampling import expected_speedup, expected_tokens_per_call, verify_cost

REFERENCES = {"llamacpp": "llama.cpp's own loop", "ortgenai": "onnxruntime-genai's own loop"}


def final_runs(report: dict) -> list[dict]:
    """Each board entry's last measurement (its best γ's), in the board's order."""
    last: dict[str, dict] = {}
    for run in report["runs"]:
        if "board" in run:
            name = run["board"]["entry"]
            if name not in last or run["board"]["round"] >= last[name]["board"]["round"]:
                last[name] = run
    return list(last.values())


@dataclass(frozen=True)
class Plain:
    """A plain decoding the board compares with: what it is, its rates (medians over the board's
    cells), and for ours the runner whose cells measured it."""

    name: str
    tok_s: float
    decode_tok_s: float | None
    runner: str | None = None


def probe_runs(report: dict) -> list[dict]:
    """The probe round's runs: every entry measured once, in one pass, which the plain rates are taken from."""
    return [r for r in report["runs"] if "board" in r and r["board"]["round"] == 1]


def summary_of(run: dict, category: str | None) -> dict | None:
    s = run["summary"] if category is None else run["categories"].get(category)
    return s if s and s.get("prompts") else None


def plains(runs: list[dict], category: str | None = None) -> list[Plain]:
    """Every plain decoding the board measured. Each cell times its own plain run beside its
    speculative one, so a machine that slows down over a long board slows both alike; across cells
    it does not. So a runner's plain rate is the median over its cells, and a reference engine's
    (timed beside one cell) is its ratio to that cell's plain run times that median."""
    by_runner: dict[str, list[tuple[float, float | None]]] = {}
    for run in runs:
        if (s := summary_of(run, category)) is not None:
            by_runner.setdefault(run.get("runner", "?"), []).append((s["baseline_tok_s"], s.get("baseline_decode_tok_s")))
    medians = {r: (median(t for t, _ in rates), median(d for _, d in rates) if all(d for _, d in rates) else None)
               for r, rates in by_runner.items()}
    found = [Plain(f"ours, plain, {r} runner", t, d, r) for r, (t, d) in medians.items()]
    for run in runs:
        s = summary_of(run, category)
        for key, label in REFERENCES.items():
            if s is not None and s.get(f"{key}_tok_s") and s["baseline_tok_s"]:
                t, d = medians[run.get("runner", "?")]
                decode = s.get(f"{key}_decode_tok_s")
                found.append(Plain(label, s[f"{key}_tok_s"] / s["baseline_tok_s"] * t,
                                   decode / s["baseline_decode_tok_s"] * d if decode and d and
                                   s.get("baseline_decode_tok_s") else None))
    return found


def fastest_plain(runs: list[dict], category: str | None = None) -> Plain:
    """The fastest plain decoding the board measured (ours on a runner, or a reference's own loop)."""
    return max(plains(runs, category), key=lambda p: p.tok_s, default=Plain("none", 0.0, None))


def over_fastest(run: dict, runs: list[dict], category: str | None = None, decode: bool = False) -> float | None:
    """A cell's speed over the fastest plain decoding: its own side-by-side speedup (drift-proof),
    times its runner's plain rate over the fastest plain rate (medians over the probe's cells, `runs`)."""
    s, found = summary_of(run, category), plains(runs, category)
    own = next((p for p in found if p.runner == run.get("runner", "?")), None)
    best = max(found, key=lambda p: p.decode_tok_s or 0.0) if decode else max(found, key=lambda p: p.tok_s)
    if s is None or own is None:
        return None
    if decode:
        if not (s.get("decode_speedup_total") and own.decode_tok_s and best.decode_tok_s):
            return None
        return s["decode_speedup_total"] * own.decode_tok_s / best.decode_tok_s
    return s["speedup_total"] * own.tok_s / best.tok_s if best.tok_s else 0.0


def label(run: dict) -> str:
    """An entry as a reader knows it: what drafts, and with which model."""
    s, name = run["settings"], run["board"]["entry"]
    what = DRAFTER_LABELS.get(s["drafter"], s["drafter"])
    if s.get("speculation") == TREE:
        what += ", a tree"
    name, _, quantization = name.partition(QUANTIZED)
    if ":" in name:
        what += f" ({name.split(':', 1)[1]}{', whole vocabulary' if not s.get('draft_vocab') else ''})"
    if quantization:
        what += f", {quantization}"
    return what


def leaderboard(report: dict) -> list[dict]:
    """One row per entry, fastest first (over_fastest), each against the fastest plain decoding measured."""
    runs, every = final_runs(report), probe_runs(report)
    plain = fastest_plain(every)
    rows = []
    for run in runs:
        s, mark = run["summary"], run["board"]
        if not s.get("prompts"):
            continue
        own = next(p.tok_s for p in plains(every) if p.runner == run.get("runner", "?"))
        rows.append({
            "entry": mark["entry"], "what": label(run), "runner": run.get("runner"),
            "gamma": run["settings"]["tree_depth" if run["settings"].get("speculation") == TREE else "gamma"],
            "alpha": s["alpha"], "alpha_by_position": s.get("acceptance_by_position", []), "c": s["c"],
            "verify_cost": s["verify_cost"], "tokens_per_call": s["mean_accepted_tokens"],
            # counted (engine/memory.py) and measured (resident.py: the process's growth, all rows' models)
            "weights_mb": s.get("speculative_weights_mb"), "resident_mb": s.get("speculative_resident_mb"),
            "tok_s": s["speculative_tok_s"],
            "decode_tok_s": s.get("speculative_decode_tok_s"),
            "over_own_plain": s["speedup_total"],
            "over_fastest": over_fastest(run, every),
            "decode_over_fastest": over_fastest(run, every, decode=True),
            "predicted": s["predicted_speedup"],
            # on the scale of over_fastest (prefill included): the formula with the plain run's prefill kept
            "predicted_over_fastest": (s.get("predicted_speedup_with_prefill") or s["predicted_speedup"]) * own
                                      / plain.tok_s if plain.tok_s else 0.0,
            "identical": f"{s['identical_prompts']}/{s['prompts']}" if s.get("identical_prompts") is not None else "",
            "round": mark["round"], "forecast": mark.get("forecast", {}),
        })
    return sorted(rows, key=lambda r: -r["over_fastest"])


def winners(report: dict) -> list[dict]:
    """Per category: the entry furthest over the fastest plain decoding, or plain decoding where none beats it."""
    runs, every = final_runs(report), probe_runs(report)
    categories = list(dict.fromkeys(c for run in runs for c in run["categories"]))
    out = []
    for category in categories:
        plain = fastest_plain(every, category)
        rated = [(x, run) for run in runs if (x := over_fastest(run, every, category)) is not None]
        ratio, best = max(rated, key=lambda x: x[0], default=(0.0, None))
        wins = best is not None and ratio > 1
        out.append({"category": category, "winner": best["board"]["entry"] if wins else "plain decoding",
                    "over_fastest": ratio, "fastest_plain": plain.name})
    return out


# -- the speedup map --------------------------------------------------------------------------------


def map_curve(report: dict) -> tuple[float, ...]:
    """The v(k) the map is drawn for: the curve of the runner most chains ran on."""
    curves = [tuple(r["board"]["v"]) for r in final_runs(report) if r["board"].get("v")]
    return max(set(curves), key=curves.count) if curves else (1.0, 1.0)


def best_at(alpha: float, c: float, v) -> tuple[float, int]:
    """The formula's best speedup at (α, c) over the γ the curve covers, and that γ."""
    gammas = range(1, len(v))
    return max(((expected_speedup(alpha, g, c, v), g) for g in gammas), key=lambda x: (x[0], -x[1]))


def speedup_grid(v, alphas: list[float], cs: list[float]) -> tuple[list[list[float]], list[list[int]]]:
    """The map's contour values and best γ: rows are c, columns α."""
    cells = [[best_at(a, c, v) for a in alphas] for c in cs]
    return [[s for s, _ in row] for row in cells], [[g for _, g in row] for row in cells]


def break_even_c(alpha: float, v) -> float:
    """The largest c at which drafting with acceptance α still pays (speedup 1) at its best γ;
    0 or less: at this α no drafter pays, whatever it costs."""
    return max((expected_tokens_per_call(alpha, g) - verify_cost(v, g + 1)) / g for g in range(1, len(v)))


def cannot_pay(report: dict) -> list[str]:
    """One sentence per entry the map says cannot pay on this machine (its c too high for its α)."""
    v, said = map_curve(report), []
    for row in leaderboard(report):
        limit = break_even_c(row["alpha"], v)
        if row["c"] > limit:
            need = (f"it would need c below {limit:.2f}" if limit > 0
                    else "no draft cost is low enough, since verifying its guesses costs more than they bring")
            said.append(f"{row['entry']} cannot pay on this machine: at α {row['alpha']:.2f} and c {row['c']:.2f}, "
                        f"{need}.")
    return said


# -- coverage -----------------------------------------------------------------------------------------


def coverage(report: dict, prompt_id) -> tuple[list[int], dict[str, list[bool]]]:
    """The target's tokens for one prompt and, per entry, which of them its drafts supplied. The
    row is a greedy run that reproduced plain decoding (every such run has the same tokens); an
    entry whose run diverged is marked up to its divergence only."""
    records = {r["board"]["entry"]: rec for r in final_runs(report) for rec in r["prompts"]
               if rec["id"] == prompt_id and "from_draft" in rec}
    if not records:
        return [], {}
    row = next((rec["output_tokens"] for rec in records.values() if rec.get("identical")),
               next(iter(records.values()))["output_tokens"])
    marks = {}
    for name, rec in records.items():
        same = [a == b for a, b in zip(rec["output_tokens"], row)]
        cut = same.index(False) if False in same else len(same)
        marks[name] = [i < cut and rec["from_draft"][i] == "1" for i in range(len(row))]
    return row, marks


# -- the console ----------------------------------------------------------------------------------------


def format_board(report: dict) -> str:
    """The leaderboard, the winners and the sentences, as the CLI prints them."""
    rows, plain = leaderboard(report), fastest_plain(probe_runs(report))
    head = (f"{'entry':<32} {'γ':>2} {'α':>5} {'α by position':<20} {'c':>6} {'v':>5} {'tok/call':>8} "
            f"{'tok/s':>7} {'dec tok/s':>9} {'× fastest':>9} {'dec ×':>6} {'predicted':>9} {'MB cnt':>6} "
            f"{'MB rss':>6} same")
    lines = [f"The drafts board: against the fastest plain decoding, {plain.name} ({plain.tok_s:.2f} tok/s"
             + (f", {plain.decode_tok_s:.2f} decoding only" if plain.decode_tok_s else "")
             + "; medians over the probe's cells), each drafter's own side-by-side speedup rescaled to it", head]
    for r in rows:
        positions = "/".join(f"{a:.2f}" for a in r["alpha_by_position"][:4])
        decode = f"{r['decode_tok_s']:.2f}" if r["decode_tok_s"] is not None else "-"
        decode_x = f"{r['decode_over_fastest']:.2f}×" if r["decode_over_fastest"] is not None else "-"
        counted, measured = (f"{r[k]:.0f}" if r[k] is not None else "-" for k in ("weights_mb", "resident_mb"))
        lines.append(f"{r['entry'][:32]:<32} {r['gamma']:>2} {r['alpha']:>5.2f} {positions:<20} {r['c']:>6.3f} "
                     f"{r['verify_cost']:>5.2f} {r['tokens_per_call']:>8.2f} {r['tok_s']:>7.2f} {decode:>9} "
                     f"{r['over_fastest']:>8.2f}× {decode_x:>6} {r['predicted_over_fastest']:>8.2f}× "
                     f"{counted:>6} {measured:>6} "
                     f"{r['identical']}")
    lines.append("MB cnt (counted): the target's weights and what the drafter holds; MB rss (measured): what this "
                 "process's resident memory grew by since before its first model loaded, at the entry's last run "
                 "(one process holds every entry's models)")
    lines.append("Winner per category: " + "; ".join(f"{w['category']}: {w['winner']} ({w['over_fastest']:.2f}×)"
                                                     for w in winners(report)))
    lines += cannot_pay(report)
    return "\n".join(lines)
