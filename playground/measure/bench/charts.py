"""Plotly figures of a report, a self-contained HTML page of them, and the speedup-vs-gamma PNG.

The HTML embeds plotly.js (inline, once), so it opens offline. The PNG goes through kaleido,
which drives a local Chrome/Chromium; nothing here runs at import.
"""

from __future__ import annotations

import html
import itertools
import json

from playground.config import KNOBS
from playground.measure.bench.report import DRAFT_SETTINGS, SETTINGS, atomic_write, cell
from playground.measure.bench.report import varying as varying_settings


METHODS = (  # (summary key, label): what the bars compare
    ("baseline_tok_s", "ours, autoregressive"),
    ("speculative_tok_s", "ours, speculative"),
    ("hf_generate_tok_s", "transformers generate()"),
    ("hf_assisted_tok_s", "transformers assisted"),
)
TABLE = (  # (summary key, column title, format)
    ("prompts", "prompts", "{:d}"), ("baseline_tok_s", "AR tok/s", "{:.2f}"),
    ("speculative_tok_s", "spec tok/s", "{:.2f}"), ("speedup", "speedup", "{:.2f}x"),
    ("alpha", "α", "{:.2f}"), ("mean_accepted_tokens", "tokens/call", "{:.2f}"), ("c", "c", "{:.3f}"),
    ("predicted_speedup", "predicted", "{:.2f}x"), ("hf_generate_tok_s", "HF tok/s", "{:.2f}"),
    ("hf_assisted_speedup", "HF assisted", "{:.2f}x"), ("identical_prompts", "identical", "{}"),
)


def setting_label(settings: dict) -> str:
    """The knobs of a setting that differ from the run configuration's defaults (γ and T always)."""
    shown = [k for k in SETTINGS if k in ("gamma", "temperature") or settings.get(k) != KNOBS[k].default]
    return ", ".join(f"{k}={settings[k]}" for k in shown if k in settings)


def rates_figure(run: dict):
    """Tokens/s of every method, per category and overall."""
    import plotly.graph_objects as go

    groups = {**run["categories"], "all": run["summary"]}
    fig = go.Figure()
    for key, label in METHODS:
        if key in run["summary"]:
            fig.add_bar(name=label, x=list(groups), y=[s.get(key) for s in groups.values()])
    fig.update_layout(title=f"Tokens/s ({setting_label(run['settings'])})", barmode="group",
                      yaxis_title="new tokens / s (prefill included)")
    return fig


def speedup_figure(run: dict):
    """Per-prompt speedup by category; below the line at 1, speculation lost."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for key, label in (("speedup", "ours"), ("hf_assisted_speedup", "transformers assisted")):
        points = [r for r in run["prompts"] if key in r]
        if points:
            fig.add_box(name=label, x=[r["category"] for r in points], y=[r[key] for r in points],
                        boxpoints="all", text=[r["id"] for r in points])
    fig.add_hline(y=1.0, line_dash="dot")
    fig.update_layout(title=f"Speedup per prompt ({setting_label(run['settings'])})", boxmode="group",
                      yaxis_title="speculative tok/s ÷ autoregressive tok/s")
    return fig


def gamma_figure(report: dict):
    """Measured and predicted speedup against gamma, one colour per other setting (e.g. temperature);
    None without a gamma sweep."""
    import plotly.express as px
    import plotly.graph_objects as go

    if len({run["settings"]["gamma"] for run in report["runs"]}) < 2:
        return None
    fig = go.Figure()
    lines = lines_by_setting(report["runs"])
    for colour, (label, runs) in zip(itertools.cycle(px.colors.qualitative.Plotly), lines.items()):
        gammas = [run["settings"]["gamma"] for run in runs]
        for key, name, dash in (("speedup", "measured", "solid"), ("predicted_speedup", "predicted", "dash"),
                                ("hf_assisted_speedup", "transformers assisted", "dot")):
            if key in runs[0]["summary"]:
                fig.add_scatter(x=gammas, y=[run["summary"].get(key) for run in runs], mode="lines+markers",
                                name=f"{name} {label}".strip(), line={"dash": dash, "color": colour})
    fig.add_hline(y=1.0, line_dash="dot", line_color="grey")
    gammas = sorted({run["settings"]["gamma"] for run in report["runs"]})
    fig.update_layout(title="Speedup vs lookahead γ (median over prompts)",
                      yaxis_title="speedup over autoregressive",
                      xaxis={"title": "γ (drafted tokens per target call)", "tickvals": gammas},
                      legend={"orientation": "h", "y": -0.2})
    return fig


def drafts_figure(report: dict):
    """Drafts compared for one target: autoregressive and speculative tok/s of each run, with its
    speedup, α, c and tokens per call on the bar; None unless the runs differ in how they draft
    (drafter, n-gram sizes, draft vocabulary, draft quantization, tree shape)."""
    import plotly.graph_objects as go

    keys = varying_settings(report["runs"])
    if not any(k in DRAFT_SETTINGS for k in keys):
        return None
    runs = report["runs"]
    names = [", ".join(f"{k}={run['settings'].get(k)}" for k in keys) for run in runs]
    summaries = [run["summary"] for run in runs]
    fig = go.Figure()
    fig.add_bar(name="autoregressive", x=names, y=[s.get("baseline_tok_s") for s in summaries])
    fig.add_bar(name="speculative", x=names, y=[s.get("speculative_tok_s") for s in summaries],
                text=[f"{s.get('speedup', 0):.2f}× · α {s.get('alpha', 0):.2f} · c {s.get('c', 0):.2f} · "
                      f"{s.get('mean_accepted_tokens', 0):.2f} tok/call" for s in summaries],
                textposition="outside")
    fig.update_layout(title="Drafts compared: tokens/s of each (speedup, α, c, tokens per call on the bar)",
                      barmode="group", yaxis_title="new tokens / s (prefill included)")
    return fig


def lines_by_setting(runs: list[dict]) -> dict[str, list[dict]]:
    """Runs grouped by every swept setting but gamma, labelled by the settings that vary."""
    varying = [k for k in varying_settings(runs) if k != "gamma"]
    lines: dict[str, list[dict]] = {}
    for run in sorted(runs, key=lambda r: r["settings"]["gamma"]):
        label = ", ".join(f"{k}={run['settings'].get(k)}" for k in varying)
        lines.setdefault(f"({label})" if label else "", []).append(run)
    return lines


def figures(report: dict) -> list:
    first = [gamma_figure(report), drafts_figure(report)]
    per_run = [make(run) for run in report["runs"] for make in (rates_figure, speedup_figure)]
    return [f for f in first + per_run if f is not None]


def summary_table(report: dict) -> str:
    head = "".join(f"<th>{html.escape(t)}</th>" for t in ("setting", "category", *[c[1] for c in TABLE]))
    rows = []
    for run in report["runs"]:
        for category, s in {**run["categories"], "all": run["summary"]}.items():
            cells = [setting_label(run["settings"]), category] + [cell(s.get(k), fmt, "–") for k, _, fmt in TABLE]
            rows.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def html_page(report: dict) -> str:
    """One self-contained page: tables, figures (plotly.js embedded once), config and machine."""
    import plotly.io as pio

    # include_plotlyjs=True embeds plotly.js itself (no CDN): once, with the first figure
    plots = [pio.to_html(fig, full_html=False, include_plotlyjs=i == 0) for i, fig in enumerate(figures(report))]
    keys = ("created", "command", "config", "models", "environment", "memory")
    facts = {k: report[k] for k in keys if k in report}
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>Speculative sampling benchmark</title>
<style>body{{font-family:sans-serif;margin:2em}} table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}} pre{{background:#f6f6f6;padding:1em}}</style>
</head><body>
<h1>Speculative sampling benchmark</h1>
<p>Speedup = speculative tok/s ÷ autoregressive tok/s of the same target, same settings, same process
(median run of each prompt; summary speedups are medians over prompts). α, tokens/call and c are
pooled over all steps; predicted = (1 − α^(γ+1)) / ((1 − α)(γc + 1)).</p>
{summary_table(report)}
{''.join(plots)}
<h2>Configuration and machine</h2><pre>{html.escape(json.dumps(facts, indent=2))}</pre>
</body></html>
"""


def write_html(report: dict, path) -> None:
    atomic_write(path, html_page(report))


def write_gamma_png(report: dict, path, width: int = 900, height: int = 500) -> None:
    """The speedup-vs-gamma figure as a PNG (kaleido + a local Chromium)."""
    fig = gamma_figure(report)
    if fig is None:
        raise ValueError("the speedup-vs-gamma plot needs a gamma sweep, e.g. --sweep gamma=1,2,4,8")
    try:
        image = fig.to_image(format="png", width=width, height=height, scale=2)
    except Exception as error:  # kaleido missing, or no Chrome/Chromium for it to drive
        raise RuntimeError(f"could not render PNG ({error}); install kaleido (pip install kaleido) and "
                           "Chromium (apt-get install chromium)") from error
    atomic_write(path, image)


def main(argv=None) -> int:
    """Re-render a saved report without measuring again:
    `python -m playground.measure.bench.charts r.json --png p.png`."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m playground.measure.bench.charts", description=main.__doc__)
    p.add_argument("report", help="a JSON report written by python -m playground.bench --json")
    p.add_argument("--png", help="speedup-vs-gamma plot (the report needs a gamma sweep)")
    p.add_argument("--html", help="the self-contained HTML report")
    args = p.parse_args(argv)
    with open(args.report, encoding="utf-8") as f:
        report = json.load(f)
    try:
        if args.png:
            write_gamma_png(report, args.png)
        if args.html:
            write_html(report, args.html)
    except (ValueError, RuntimeError) as error:
        p.error(str(error))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
