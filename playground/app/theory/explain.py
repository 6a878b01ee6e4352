"""Theory against measurement, in words: the γ the formula recommends from the measured α, c and
v, and what each of them means. The measuring itself is measure/teach/theory.py's.

Pure functions; no Gradio.
"""

from __future__ import annotations

import html

from playground.config import KNOBS
from playground.engine.sampling import best_gamma, expected_speedup, gamma_ceiling, sloped_speedup
from playground.measure.teach.points import Point, Pooled

MAX_GAMMA = KNOBS["gamma"].high  # the recommended γ is one a run may take: any the γ knob allows


CSS = """
.theory { font-size: 14px; line-height: 1.45; }
.theory .big { font-size: 20px; font-weight: 700; }
.theory table { border-collapse: collapse; margin: 6px 0; font-size: 13px; }
.theory td { padding: 3px 8px; vertical-align: top; border: none;
  border-bottom: 1px solid var(--border-color-primary); }
.theory table { border: none; }
.theory td.v { font-weight: 700; font-variant-numeric: tabular-nums; white-space: nowrap; }
.theory .hint { color: var(--body-text-color-subdued); font-size: 12.5px; }
.theory code { font-size: 12.5px; }
"""

FORMULA = "speedup = (1 − α^(γ+1)) / ((1 − α)(γc + v(γ+1)))"
ASSUMPTIONS = (
    "The numerator is the expected number of tokens one target call yields; the denominator is what a step "
    "costs, counted in plain target steps: γ draft steps at c each, plus one target pass over "
    "γ + 1 tokens, v(γ+1). The paper takes v = 1 (true where a pass waits on reading the weights, not on arithmetic); "
    "here v is measured. The formula also assumes that every guess is kept with the same chance α, "
    "independently of the others, and that nothing else costs time."
)


def recommended(pooled: Pooled | None, curve=None) -> int | None:
    """The γ the formula recommends: charged the measured v(γ+1) when the curve is known (then
    only γ whose verification was measured), else the paper's v = 1."""
    if pooled is None:
        return None
    return best_gamma(pooled.alpha, pooled.c, MAX_GAMMA, v=None if curve is None else curve.v)


def adjusted_best(pooled: Pooled) -> int:
    return max(
        range(MAX_GAMMA + 1), key=lambda g: sloped_speedup(pooled.alpha, g, pooled.c, pooled.verify_slope)
    )


def explain_html(points: list[Point], pooled: Pooled | None, what: str, curve=None) -> str:
    """The panel beside the curve: the recommended γ, then α, c and v in plain words."""
    if pooled is None:
        return (
            f'<div class="theory"><p class="big">No measurement yet for {html.escape(what)}.</p>'
            "<p>Press <b>Measure α and c now</b> (a short run with and without speculation), run the "
            "Sweep tab, or race in the Race tab. The grey curves show the shape for a few made-up α.</p>"
            f"{formula_block()}</div>"
        )
    best = recommended(pooled, curve)
    gain = expected_speedup(pooled.alpha, best, pooled.c, None if curve is None else curve.v)
    rows = [
        (
            "α",
            f"{pooled.alpha:.2f}",
            (
                "acceptance rate: the share of the draft's guesses the target keeps. "
                "Each guess survives with probability min(1, p/q), so α is high when the two models agree."
            ),
        ),
        (
            "c",
            f"{pooled.c:.2f}",
            (
                "cost ratio: one draft step costs this fraction of one plain target step, "
                "as timed here. Prompt lookup drafts almost for free (c ≈ 0)."
            ),
        ),
    ]
    timed = [p for p in points if p.verify_cost > 0]
    if curve is not None:
        rows.append(curve_row(curve))
    elif timed:
        rows.append(verify_row(timed, pooled))
    table = "".join(
        f'<tr><td>{k}</td><td class="v">{v_}</td><td>{html.escape(t)}</td></tr>' for k, v_, t in rows
    )
    adjusted = ""
    if curve is not None:
        paper = best_gamma(pooled.alpha, pooled.c, MAX_GAMMA)
        ceiling = gamma_ceiling(pooled.c, curve.v, MAX_GAMMA)
        adjusted = (
            f'<p class="hint">Charged the measured v(γ+1) below. With the paper\'s v = 1 the formula would '
            f"pick γ = {paper} (expected {expected_speedup(pooled.alpha, paper, pooled.c):.2f}×).</p>"
            f'<p class="hint">Adaptive γ: set <b>γ max = {ceiling}</b>. Past it even a draft the target '
            f"accepts whole brings fewer tokens per second than a shorter one, at this c and v(k)"
            f"{' (the longest γ measured)' if ceiling == curve.max_gamma else ''}.</p>"
        )
    elif pooled.verify_slope > 0:
        g = adjusted_best(pooled)
        s = sloped_speedup(pooled.alpha, g, pooled.c, pooled.verify_slope)
        adjusted = (
            f'<p class="hint">With this machine\'s verification cost the best γ is {g} '
            f"(expected {s:.2f}×).</p>"
        )
    return (
        f'<div class="theory"><p><span class="big">Recommended γ = {best}</span> '
        f"(expected {gain:.2f}× by the formula{' with the measured v' if curve is not None else ''})</p>"
        f"{adjusted}"
        f"<table>{table}</table>"
        f'<p class="hint">From {pooled.points} measured run{"s" if pooled.points != 1 else ""} of '
        f"{html.escape(what)} in this session.</p>{formula_block()}</div>"
    )


def verify_row(timed: list[Point], pooled: Pooled) -> tuple[str, str, str]:
    """v in words: whether this machine meets the formula's assumption that a check costs one step."""
    gammas = sorted({p.gamma for p in timed})
    low, high = min(p.verify_cost for p in timed), max(p.verify_cost for p in timed)
    shown = f"{low:.2f}×" if high - low < 0.005 else f"{low:.2f}–{high:.2f}×"
    where = f"γ = {gammas[0]}" if len(gammas) == 1 else f"γ = {gammas[0]}…{gammas[-1]}"
    if pooled.verify_slope > 0.02:
        text = (
            f"verification cost: checking γ + 1 tokens in one target pass took {shown} a plain step "
            "here. The formula assumes 1; the dashed curve uses the measured growth "
            f"(about 1 + {pooled.verify_slope:.2f}γ), "
            "which is why the dots sit below the formula."
        )
    else:
        text = (
            "verification cost: checking γ + 1 tokens in one target pass costs about one plain step here, as "
            "the formula assumes. The rest of the gap between dots and curve is time the formula leaves out: "
            "reading the prompt, sampling, and rolling the caches back after a rejection."
        )
    return "v", f"{shown} ({where})", text


def curve_row(curve) -> tuple[str, str, str]:
    """v(k) in words: the measured cost of verifying k tokens, and where it jumps."""
    shown = " ".join(f"{x:.2f}" for x in curve.v[1:])
    jumps = [k + 1 for k in range(1, len(curve.v)) if curve.v[k] - curve.v[k - 1] > 0.15]
    where = (
        f" It jumps at k = {', '.join(map(str, jumps))}: a kernel that works on blocks of rows, or "
        "arithmetic that no longer hides behind reading the weights."
        if jumps else " It stays near 1: reading the weights, not the arithmetic, sets the time."
    )
    text = (
        "verification cost v(k): one target pass over k tokens ÷ one plain step "
        f"({curve.step_s * 1000:.0f} ms), "
        f"measured on this machine for k = 2…{len(curve.v)}.{where}"
    )
    return "v(k)", shown, text


def formula_block() -> str:
    return f'<p><code>{FORMULA}</code></p><p class="hint">{html.escape(ASSUMPTIONS)}</p>'


def points_table(points: list[Point]) -> list[list]:
    return [
        [
            p.source,
            p.prompt,
            p.gamma,
            p.drafter,
            p.temperature,
            round(p.speedup, 3),
            round(p.alpha, 3),
            round(p.c, 3),
            round(p.verify_cost, 3),
        ]
        for p in points
    ]


POINT_COLUMNS = ["source", "prompt", "γ", "drafter", "temperature", "speedup ×", "α", "c", "v"]

