"""The Sweep tab: a grid of γ × drafter × temperature × draft settings × draft models on a few prompts,
measured by the benchmark's sweep (measure/bench/sweep.py), with a progress bar and Stop; a results table
and plots that fill in cell by cell; the report to download as CSV and JSON in the benchmark's schema (so
`python -m playground.measure.bench.charts` draws it too); the fastest row's settings handed to the Export
tab (wired in app/demo.py). The fields are a SweepForm, which becomes a plan in form.py.

Every measured prompt also becomes a point of the Theory tab (ctx.measurements).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

import gradio as gr
import plotly.graph_objects as go

from playground.config import MODEL
from playground.measure.bench import sweep
from playground.measure.bench.machine import spare_a_core
from playground.measure.teach.points import Setting, point_from_record
from playground.measure.bench.prompts import prompt_name
from playground.measure.bench.report import write_csv, write_json
from playground.app.shared import controls
from playground.app.shared.context import AppContext
from playground.app.shared.layout import opening
from playground.app.shared.flow import (Stop, guarded, load_pair, model_job, outputs, parsed,
                                        random_weights_note, status_html)
from playground.app.shared.lockstep import streamed
from playground.app.shared.plots import BASELINE_COLOR, SPEC_COLOR, THEORY_COLOR, empty_figure, figure, line
from playground.app.shared.prompt_sets import prompt_controls, run_controls
from playground.app.sweep.form import DRAFT_AXIS, ROW_KINDS, ROW_LABELS, SweepForm, planned

TITLE = "Sweep"

# The table: (column, header, the summary's key) for the measured columns, after the row's settings
SETTINGS_COLUMNS = [("drafter", "drafter"), ("draft", "draft settings"), ("temperature", "T"), ("gamma", "γ")]
SUMMARY_COLUMNS = [
    ("prompts", "prompts", "prompts"),
    ("speedup", "speedup ×", "speedup"),
    ("alpha", "α", "alpha"),
    ("tokens_per_call", "tokens / call", "mean_accepted_tokens"),
    ("c", "c", "c"),
    ("verify_cost", "v", "verify_cost"),
    ("formula_speedup", "formula ×", "predicted_speedup"),
    ("baseline_tok_s", "baseline tok/s", "baseline_tok_s"),
    ("speculative_tok_s", "speculative tok/s", "speculative_tok_s"),
    ("identical", "identical", "identical"),
]
COLUMNS = [c for c, _ in SETTINGS_COLUMNS] + [c for c, _, _ in SUMMARY_COLUMNS]
HEADERS = [h for _, h in SETTINGS_COLUMNS] + [h for _, h, _ in SUMMARY_COLUMNS]
LEGEND = (
    "speedup: median over the prompts of speculative ÷ autoregressive tokens/s. α: share of tested "
    "guesses kept. c: one draft step ÷ one plain target step. v: one verification pass ÷ one plain target "
    "step (the paper's formula assumes 1). formula: (1 − α^(γ+1)) / ((1 − α)(γc + v)) at the measured α, c and v. "
    "identical (greedy only): the speculative text equals the autoregressive one. Tree rows: γ is the tree's "
    "depth, α the chance that a level keeps one of its candidates, c one draft forward per level (all its "
    "nodes at once); the formula then reads a tree as a chain with that α."
)
SPEEDUP_EMPTY, ALPHA_EMPTY = "Speedup against γ appears here.", "α against γ appears here."


@dataclass(frozen=True)
class SweepView:
    """What a sweep redraws; field order is the API's result order."""

    table: gr.Dataframe  # one row per cell
    speedup: gr.Plot  # speedup against γ, a line per drafter, draft settings and T
    alpha: gr.Plot  # α against γ, likewise
    files: gr.File  # the report as CSV and JSON
    status: gr.HTML
    fastest: gr.State  # the fastest row's run configuration: app/demo.py hands it to the Export tab


def build(ctx: AppContext) -> dict:
    inputs, settings = opening(
        "Measure the speedup over a grid of settings. Each cell warms up, then times the autoregressive "
        "baseline and the speculative run alternately (the benchmark's own code). A 3 × 3 grid on one "
        "short prompt takes a few minutes on a CPU."
    )
    with inputs:
        with gr.Row():
            gammas = gr.Textbox("1,2,4", label="γ values", info="e.g. 1,2,4,8 or 1-8", elem_id="sw-gammas")
            temperatures = gr.Textbox("0", label="temperatures", info="e.g. 0,0.7", elem_id="sw-temperatures")
        drafters = gr.CheckboxGroup(
            [(ROW_LABELS[d], d) for d in ROW_KINDS], value=[MODEL], label="drafters", elem_id="sw-drafters"
        )
        drafts = gr.Textbox(
            "", label="draft settings to compare (optional)", elem_id="sw-drafts",
            info="each combination is a row, as the benchmark's --sweep writes them: e.g. "
                 "draft_vocab=0,65536 ngram_max=2,3 (one of: " + ", ".join(DRAFT_AXIS) + ")",
        )
        draft_models = gr.Dropdown(
            ctx.draft_choices(), value=[""], multiselect=True, label="draft models", elem_id="sw-draft-models",
            info="each drafts in rows of its own (the draft model, hybrid and tree rows); one with another "
                 "tokenizer drafts across tokenizers",
        )
        examples, categories, per_category = prompt_controls("sw")
    with settings:
        pair = controls.pair_control(ctx, "sw-pair")
        controls.describe_pair(ctx, pair)
        with gr.Row():
            tokens, repeats = run_controls("sw", 32)
            seed = controls.control("seed", elem_id="sw-seed")
        with gr.Row():
            run = gr.Button("Run the sweep", variant="primary", scale=3, elem_id="sw-run")
            stop = gr.Button("Stop", variant="stop", scale=1, elem_id="sw-stop")
        status = gr.HTML(status_html("Pick the grid, then run."), elem_id="sw-status")
        files = gr.File(label="Download (CSV, JSON)", file_count="multiple", interactive=False, elem_id="sw-files")
    table = gr.Dataframe(headers=HEADERS, value=[], label="Results, one row per setting", interactive=False,
                         elem_id="sw-table")
    gr.Markdown(f"<small>{LEGEND}</small>")
    with gr.Row():
        speedup_plot = gr.Plot(empty_figure(SPEEDUP_EMPTY), show_label=False)
        alpha_plot = gr.Plot(empty_figure(ALPHA_EMPTY), show_label=False)

    view = SweepView(table, speedup_plot, alpha_plot, files, status, gr.State(None))
    form = SweepForm(pair, gammas, drafters, temperatures, examples, categories, per_category, tokens,
                     repeats, seed, drafts, draft_models)
    model_job(run, partial(handle, ctx, view), form, outputs(view), status, "sweep",
              Stop(stop, "sweep_stop", "Stopped. The rows measured so far stay in the table."))
    return {"fastest": view.fastest, "view": view}


def handle(ctx: AppContext, view: SweepView, form: SweepForm) -> Iterator[dict]:
    """Run the sweep: check the grid, load the pair, then measure cell by cell, the table and plots
    filling in; any failure is a message in the status box."""
    plan = yield from parsed(view.status, lambda: planned(ctx.registry, form))
    loaded = yield from load_pair(ctx, plan.grid.base, view.status)
    sweeping_what = f"Sweeping {len(plan.cells)} settings × {len(plan.prompts)} prompts…"
    yield {view.table: [], view.speedup: empty_figure(SPEEDUP_EMPTY), view.alpha: empty_figure(ALPHA_EMPTY),
           view.files: None, view.status: status_html(sweeping_what, 0.0)}
    rows: list[dict] = []  # a table row per measured cell, filled as the sweep goes
    result = yield from guarded(view.status, sweeping(ctx, view, form, plan, loaded, rows),
                                "The sweep failed")
    # Gradio copies returned files into its own cache before it resumes the handler, so the
    # folder is removed as soon as the last redraw is sent (or the job is cancelled).
    with tempfile.TemporaryDirectory(prefix="playground-sweep-") as folder:
        best = fastest(rows)
        where = (f" The fastest ({best['drafter']}, γ = {best['gamma']}) is in the Export tab."
                 if best else "")
        note = random_weights_note(loaded, "the speedups are real")
        yield {**figures(view, rows), view.files: write_files(result, folder), view.fastest: best,
               view.status: status_html(f"Done: {len(rows)} settings measured. The points are on the Theory "
                                        f"tab too.{where}{note}")}


def sweeping(ctx: AppContext, view: SweepView, form: SweepForm, plan: sweep.Plan, loaded, rows: list[dict]):
    """The benchmark's sweep in lockstep; each measured cell adds a row to `rows` (and its prompts'
    points to the session's theory view) and redraws; returns the report."""

    def show(step: sweep.Progress) -> dict:
        form.progress((step.done, step.total), desc="sweeping")
        if step.run is None:
            said = f"Measured {step.what}" if step.record else f"Ran {step.what}"
            return {view.status: status_html(f"{said} ({step.done}/{step.total})", step.done / step.total)}
        if not step.run["prompts"]:
            raise ValueError(f"prompts: none fits the target's context with {step.cell.max_new_tokens} new "
                             "tokens")
        rows.append(row_of(plan, step.cell, step.run))
        for point in rows[-1]["points"]:
            ctx.measurements.add(form.session, point)
        done = f"Measured {len(rows)} of {len(plan.cells)} settings."
        return {**figures(view, rows), view.status: status_html(done, step.done / step.total)}

    def pair_of(cell):  # another draft model: the pair loaded with it (the cache keeps one pair at a time)
        return loaded if cell.draft == plan.grid.base.draft else ctx.cache.get(cell.pair, **cell.loading())

    def work(report) -> dict:
        with spare_a_core():  # as in the race: the page keeps a core, so drawing never stalls the models
            return sweep.run(plan, pair_of, config_of(plan), report)

    return (yield from streamed(work, show, start=ctx.on_models(loaded)))


def config_of(plan: sweep.Plan) -> dict:
    """The report's "config": the sweep as --sweep would write it, over the base run, and the prompts."""
    return {"pair": plan.pair, "sweep": sweep.grammar(plan.grid.axes), "base": asdict(plan.grid.base),
            "repeats": plan.repeats, "warmup": plan.warmup, "prompt_count": len(plan.prompts),
            "prompts": [asdict(p) for p in plan.prompts]}


def row_of(plan: sweep.Plan, cell, run: dict) -> dict:
    """One table row from a cell's run: its kind, draft settings, T and γ, then the bench's summary;
    with a theory point per prompt and the cell's run configuration (for the Export tab)."""
    kind, gamma = sweep.kind_of(cell), sweep.gamma_of(cell)
    points = [point_from_record(r, Setting(plan.pair, kind, cell.temperature, gamma, "sweep",
                                           prompt_name(r["id"], r["category"]), cell.draft))
              for r in run["prompts"]]
    shown = {k: getattr(cell, k) for k in plan.grid.axes if k in DRAFT_AXIS or k == "draft"}
    if "draft" in shown:
        shown["draft"] = shown["draft"] or "the pair's"
    return {"drafter": kind, "draft": " ".join(f"{k}={v}" for k, v in shown.items()),
            "temperature": cell.temperature, "gamma": gamma,
            **{column: run["summary"][key] for column, _, key in SUMMARY_COLUMNS},
            "points": points, "run": asdict(cell)}


def fastest(rows: list[dict]) -> dict | None:
    """The run configuration of the row with the most speculative tokens per second."""
    return max(rows, key=lambda r: r["speculative_tok_s"])["run"] if rows else None


def table(rows: list[dict]) -> list[list]:
    """The rows as the page's table shows them (rounded)."""
    return [[round(r[k], 3) if isinstance(r[k], float) else r[k] for k in COLUMNS] for r in rows]


def write_files(report: dict, folder: str) -> list[str]:
    """The report as the benchmark writes it: CSV (a row per prompt, category and cell) and JSON."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    csv_path, json_path = Path(folder) / f"sweep-{stamp}.csv", Path(folder) / f"sweep-{stamp}.json"
    write_csv(report, csv_path)
    write_json(report, json_path)
    return [str(csv_path), str(json_path)]


def figures(view: SweepView, rows: list[dict]) -> dict:
    return {
        view.table: table(rows),
        view.speedup: sweep_figure(rows, "speedup", "Measured speedup against γ", "speedup ×"),
        view.alpha: sweep_figure(rows, "alpha", "Acceptance rate α against γ", "α"),
    }


def sweep_figure(rows: list[dict], key: str, title: str, y_title: str) -> go.Figure:
    """One line per (drafter, draft settings, temperature) of `key` against γ."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["drafter"], r.get("draft", ""), r["temperature"]), []).append(r)
    palette = [SPEC_COLOR, THEORY_COLOR, "#22a046", "#9b6ad6", "#dc2828", "#8c564b", "#17becf"]
    traces = []
    for i, ((drafter, draft, temperature), group) in enumerate(sorted(groups.items())):
        group = sorted(group, key=lambda r: r["gamma"])
        traces.append(
            line(
                [r["gamma"] for r in group],
                [r[key] for r in group],
                ", ".join(filter(None, [ROW_LABELS.get(drafter, drafter), draft, f"T = {temperature:g}"])),
                palette[i % len(palette)],
                mode="lines+markers",
            )
        )
    hlines = [(1.0, "no gain", BASELINE_COLOR, "dot")] if key == "speedup" else []
    top = max([1.5] + [r[key] for r in rows])
    y_range = [0, 1.05] if key == "alpha" else [0, 1.15 * top]
    fig = figure(title, "γ", y_title, traces, hlines=hlines, y_range=y_range, x_dtick=1)
    fig.update_layout(height=320, uirevision="sweep")
    return fig
