"""The stats panel: the race's numbers beside the formula's, as HTML (pure, no Gradio)."""

from __future__ import annotations

import html

from playground.engine.events import RunMetrics, summarize
from playground.app.race.frames import RaceFrame
from playground.app.shared import identity

CSS = """
.stats table { border-collapse: collapse; font-size: 13px; font-variant-numeric: tabular-nums; width: 100%; }
.stats td, .stats th { padding: 2px 8px; text-align: right;
  border-bottom: 1px solid var(--border-color-primary); }
.stats td:first-child, .stats th:first-child { text-align: left; }
.stats .big { font-size: 22px; font-weight: 700; }
.stats .hint { color: var(--body-text-color-subdued); font-size: 12px; }
.stats .badge { display: inline-block; padding: 2px 8px; border-radius: 10px; font-size: 12px;
  margin: 4px 0; }
.stats .badge.same { background: rgba(34, 160, 70, .18); color: #137333; }
.stats .badge.diff { background: rgba(220, 40, 40, .18); color: #b42318; }
.stats .badge.info { background: rgba(140, 140, 140, .16); }
.stats .warn { color: #b42318; font-size: 13px; margin: 4px 0; }
""" + identity.CSS


def placeholder() -> str:
    return '<div class="stats"><span class="hint">The numbers appear here when the race starts.</span></div>'


def stats_placeholder(pays) -> str:
    """The panel before the race's first frame, where the draft cannot pay here (measure/teach/verdict.py)."""
    return f'<div class="stats">{cannot_pay(pays)}<span class="hint">The race starts…</span></div>'


def cannot_pay(pays) -> str:
    """The verdict's sentence where it is shown: the formula, at α and the c and v(k) measured here, forecasts
    no gain at any γ; and what the same measurements favour."""
    if pays is None or not pays.shown:
        return ""
    return f'<p class="warn" id="cannot-pay">⚠ {html.escape(pays.text)}</p>'


def stats_html(frame: RaceFrame, curve=None, chain_c: float | None = None, budget_note: str | None = None,
               pays=None) -> str:
    """The panel; with a tree race's measured v(k) `curve` (and the draft's one-row c), a warning
    when the curve predicts the tree loses to the chain, and `budget_note` when the tree's budget
    came from that curve rather than the knob's default; `pays`: whether the draft can pay here, said
    before the race began (cannot_pay)."""
    a = summarize(frame.baseline.events)
    s = summarize(frame.speculative.events, baseline=frame.baseline.events)
    speedup = s.tok_s / a.tok_s if a.tok_s and s.tok_s else None
    shown = f"{speedup:.2f}×" if speedup else "–"
    rows = [
        ("tokens", a.new_tokens, s.new_tokens),
        ("target calls", a.target_calls, s.target_calls),
        ("compute seconds", f"{a.seconds:.2f}", f"{s.seconds:.2f}"),
        ("tokens / second", f"{a.tok_s:.1f}", f"{s.tok_s:.1f}"),
        # a second model's weights show here; a runner's own buffers (llama.cpp, ONNX Runtime) do not
        ("weights MB (counted)", *(f"{mb:,.1f}" for mb in frame.weights_mb)),
    ]
    table = "".join(f"<tr><td>{k}</td><td>{x}</td><td>{y}</td></tr>" for k, x, y in rows) + resident_row(frame)
    return (
        '<div class="stats">'
        f'<div><span class="big">{shown}</span> measured speedup '
        f'<span class="hint">(speculative tok/s ÷ autoregressive tok/s{"" if frame.done or frame.checking else ", so far"})'
        "</span></div>"
        f"{cannot_pay(pays)}{badge(frame)}{budget_line(budget_note)}{tree_warning(frame, curve, chain_c)}"
        f"<table><tr><th></th><th>autoregressive</th><th>speculative</th></tr>{table}</table>"
        f"{compiled(frame)}{reach(frame)}{theory(s)}</div>"
    )


def resident_row(frame: RaceFrame) -> str:
    """The measured figure across both columns: one process runs both, so it cannot be split between them."""
    shown = "–" if frame.resident_mb is None else f"{frame.resident_mb:,.1f}"
    when = "at the race's end" if frame.done or frame.checking else "at its start"
    hint = (f"what this process's resident memory (psutil) grew by since before its first model loaded, {when}: "
            "both runs' models, their runners' buffers, the allocator's free lists")
    return (f'<tr><td>resident MB (measured)</td><td colspan="2" title="{html.escape(hint)}">{shown} '
            '<span class="hint">(this process, both runs)</span></td></tr>')


def reach(frame: RaceFrame) -> str:
    """For a draft with another tokenizer: how much of the target's vocabulary it can propose at all."""
    if frame.coverage is None:
        return ""
    return (f'<p class="hint">This draft has another tokenizer: it can propose {frame.coverage:.0%} of the target\'s '
            "tokens (those both vocabularies hold). Greedy, its text is re-encoded in the target's tokens; "
            "sampled, it drafts only among the shared ones.</p>")


def compiled(frame: RaceFrame) -> str:
    """The compiled runner's compile seconds, beside the timings: never inside them, never out of sight."""
    failed = "".join(f'<p class="hint">Could not compile {html.escape(why)}: that shape ran uncompiled, and auto '
                     "runs the model on eager from the next load.</p>" for why in frame.compile_failed)
    if not frame.compile_s:
        return failed
    return (f'<p class="hint">+ {frame.compile_s:.1f} s compiling this pair\'s step shapes (runner compiled), '
            "once per pair and session before the first run: in neither run's compute seconds.</p>" + failed)


def budget_line(note: str | None) -> str:
    """Where the tree's budget came from, when the measured curve chose it (race/tab.at_cheap_budget)."""
    return "" if note is None else f'<p class="hint" id="tree-budget">{html.escape(note[0].upper() + note[1:])}.</p>'


def tree_warning(frame: RaceFrame, curve, chain_c: float | None) -> str:
    """measure/tree_budget's warning line, from the measured curve and this race's tree so far."""
    from playground.measure.teach.tree_budget import race_warning

    if curve is None:
        return ""
    text = race_warning(frame.speculative.events, frame.baseline.events, curve.v, frame.settings, chain_c)
    return "" if text is None else f'<p class="warn" id="tree-warning">⚠ {html.escape(text[0].upper() + text[1:])}.</p>'


def theory(s: RunMetrics) -> str:
    """α, c and what the formula predicts from them, so the measured number can be checked."""
    if not s.drafted:
        return (
            '<p class="hint">No drafts yet (prompt lookup drafts only when the text repeats an earlier '
            "n-gram).</p>"
        )
    items = [
        ("α (acceptance rate)", f"{s.alpha:.2f}", "share of tested draft tokens the target kept"),
        ("tokens per target call", f"{s.mean_tokens_per_call:.2f}", f"mean γ drafted {s.mean_gamma:.1f}"),
        ("c (cost ratio)", f"{s.c:.2f}", "one draft forward ÷ one plain target step, measured"),
        ("verification cost", f"{s.verify_cost:.2f}" if s.verify_cost else "–",
         "one check of γ+1 tokens ÷ one plain target step (the formula assumes 1)"),
        ("predicted speedup", f"{s.predicted_speedup:.2f}×",
         f"(1 − α^(γ+1)) / ((1 − α)(γc + v)), v = {s.predicted_v:.2f}; the paper's v = 1 gives "
         f"{s.paper_speedup:.2f}×"),
    ]
    rows = "".join(
        f'<tr><td>{k}</td><td>{v}</td><td class="hint">{html.escape(h)}</td></tr>' for k, v, h in items
    )
    return f"<table>{rows}</table>"


def badge(frame: RaceFrame) -> str:
    """Greedy decoding must give the same text with and without speculation: say whether it did."""
    settings = frame.settings
    if not settings.greedy:
        return (
            f'<span class="badge info">sampled (temperature {settings.temperature:g}): '
            "the texts differ by chance; "
            "both follow the target's distribution</span>"
        )
    a, s = frame.baseline.tokens, frame.speculative.tokens
    n = min(len(a), len(s))
    first = next((i for i in range(n) if a[i] != s[i]), None)
    if first is not None:
        return (
            '<span class="badge diff">✗ greedy: speculative text differs from the baseline '
            f"at token {first + 1}</span>{evidence(frame)}"
        )
    if frame.done and len(a) == len(s):
        return (
            f'<span class="badge same">✓ greedy: speculative text identical to the baseline ({n} tokens)'
            "</span>"
        )
    if frame.done or frame.checking:
        return f'<span class="badge diff">✗ greedy: same first {n} tokens, but lengths differ</span>{evidence(frame)}'
    return f'<span class="badge same">✓ greedy: identical so far ({n} tokens)</span>'


def evidence(frame: RaceFrame) -> str:
    """What the benchmark measures at a first divergence (app/shared/identity.py), once the race has
    rerun both runs with detail; until then, that it will."""
    if frame.divergence is not None:
        return identity.evidence_html(frame.divergence, lambda t: frame.labels.get(t, f"#{t}"), frame.precision)
    return ('<p class="hint">The target\'s top-2 logit margin at that token is measured when the race ends '
            "(both runs rerun untimed, with detail): a near-tie, or a bug.</p>")
