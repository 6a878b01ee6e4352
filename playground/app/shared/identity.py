"""Greedy identity as the page shows it: where a greedy speculative text left the plain one, the
evidence the benchmark measures (measure/bench/divergence.py): each run's token there, the target's
top two with their probabilities, the top-2 logit margin, and the verdict. Pure HTML (no Gradio);
the Race's stats panel and the Lesson's third step both show it.
"""

from __future__ import annotations

import html
from collections.abc import Callable

from playground.measure.bench.divergence import NEAR_TIE, Divergence

CSS = """
.evidence { font-size: 13px; margin: 4px 0 8px; }
.evidence table { border-collapse: collapse; font-variant-numeric: tabular-nums; margin: 4px 0; }
.evidence td, .evidence th { padding: 2px 8px; text-align: right; border-bottom: 1px solid var(--border-color-primary); }
.evidence td:first-child, .evidence th:first-child { text-align: left; }
.evidence code { font-size: 12.5px; }
.evidence .id { color: var(--body-text-color-subdued); }
.evidence .tie { color: #137333; }
.evidence .bug { color: #b42318; font-weight: 700; }
"""


def exact(loaded) -> bool:
    """Whether a loaded model (models/loading.LoadedModel) runs in float32 unquantized: there a greedy
    speculative run must reproduce the plain one token for token, and no margin excuses a divergence."""
    return loaded.dtype == "float32" and loaded.quantization == "none"


def precision(loaded) -> str:
    """How the model computes, in words: its dtype, and its quantization where it has one."""
    return loaded.dtype if loaded.quantization == "none" else f"{loaded.dtype}, quantization {loaded.quantization}"


def evidence_html(d: Divergence, label: Callable[[int], str], how: str) -> str:
    """The first divergence and its evidence; `label(token)` shows a token's text, `how` is precision()'s."""
    rows = "".join(side_row(name, side, label) for name, side in
                   (("plain run: a one-token step", d.plain), ("speculative run: a verification forward", d.speculative)))
    head = (f"<p>First difference at token {d.position + 1}: the plain run {wrote(label, d.plain.token)}, "
            f"the speculative run {wrote(label, d.speculative.token)}.</p>")
    table = ("<table><tr><th>the target's top two there</th><th>first</th><th>second</th><th>margin (logits)</th>"
             f"</tr>{rows}</table>")
    return f'<div class="evidence" id="divergence">{head}{table}{verdict_html(d, how)}</div>'


def side_row(name: str, side, label) -> str:
    if not side.top:
        return f'<tr><td>{name}</td><td colspan="3">not measured (its rerun ended before this token)</td></tr>'
    cells = "".join(f"<td>{token(label, t)} {p:.3f}</td>" for t, p in side.top[:2])
    cells += "<td></td>" * (2 - len(side.top[:2]))
    margin = "–" if side.margin is None else f"{side.margin:.3f}"
    return f"<tr><td>{name}</td>{cells}<td>{margin}</td></tr>"


def wrote(label, t: int | None) -> str:
    return "had ended" if t is None else f"wrote {token(label, t)}"


def token(label, t: int) -> str:
    """A token's text and its id (two byte pieces can show alike)."""
    return f'<code>{html.escape(label(t))}</code> <small class="id">#{t}</small>'


def verdict_html(d: Divergence, how: str) -> str:
    """The verdict: a bug in float32 whatever the margin; else a near-tie below NEAR_TIE, a bug above it."""
    margins = [m for m in (d.plain.margin, d.speculative.margin) if m is not None]
    widest = f"{max(margins):.3f}" if margins else None
    if d.exact:
        return (f'<p class="bug">✗ A bug: the target runs in {html.escape(how)}, where greedy speculation must '
                "reproduce the plain run token for token, whatever the margin"
                f"{f' ({widest} logits here)' if widest else ''}.</p>")
    if d.near_tie is None:
        return (f'<p class="bug">? No margin measured: the reruns with detail ended before token {d.position + 1}, '
                "so this divergence is not explained.</p>")
    if d.near_tie:
        return (f'<p class="tie">A near-tie: the margin is below {NEAR_TIE:g} logit in both runs (the benchmark\'s '
                f"threshold; at most {widest} here), and a forward over several rows rounds such a tie the other "
                f"way in {html.escape(how)}. The text is still the target's, up to that rounding.</p>")
    by_design = (" unless the quantization makes a several-row forward another function (bitsandbytes' int8 picks "
                 "its outlier columns over the forward's rows, so its 5-row verification is not its 1-row step)"
                 if "int8" in how else "")
    return (f'<p class="bug">✗ Not a near-tie: a margin of {widest} logits (the benchmark calls a near-tie below '
            f"{NEAR_TIE:g}) is a clear winner passed over, more than rounding in {html.escape(how)} explains: "
            f"a bug{by_design}.</p>")
