"""The Sweep tab: measure a grid of γ × drafter × temperature × draft settings on a few prompts, with
a progress bar and Stop; a results table and plots that fill in cell by cell; CSV and JSON to
download; the fastest row's settings handed to the Export tab (wired in ui/__init__.py).

Every measured prompt also becomes a point of the Theory tab (ctx.measurements).
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Iterator

import gradio as gr
import plotly.graph_objects as go

from playground.config import MAX_NEW_TOKENS, MODEL
from playground.measure import sweep
from playground.app.shared.plots import BASELINE_COLOR, SPEC_COLOR, THEORY_COLOR, empty_figure, figure, line
from playground.app.shared.context import AppContext
from playground.app.shared.flow import fail, load_pair, model_job, read_settings, status_html
from playground.app.shared.lockstep import streamed
from playground.measure.points import session_of
from playground.app.shared.examples import RACE

TITLE = "Sweep"
log = logging.getLogger(__name__)

N_OUTPUTS, STATUS = 6, 4  # table, speedup plot, α plot, files, status, the fastest row's settings
BUILTIN = {e[0]: e[1] for e in RACE}  # the Race tab's examples, by label


def build(ctx: AppContext) -> None:
    from playground.measure.prompts import categories_of, load_prompts

    spec = ctx.registry.pair(ctx.default_pair)
    gr.Markdown(
        "Measure the speedup over a grid of settings. Each cell warms up, then times the autoregressive "
        "baseline and the speculative run alternately (the benchmark's own code). A 3 × 3 grid on one "
        "short prompt takes a few minutes on a CPU."
    )
    with gr.Row():
        with gr.Column(scale=3):
            with gr.Row():
                gammas = gr.Textbox(
                    "1,2,4", label="γ values", info="e.g. 1,2,4,8 or 1-8", elem_id="sw-gammas"
                )
                temperatures = gr.Textbox(
                    "0", label="temperatures", info="e.g. 0,0.7", elem_id="sw-temperatures"
                )
            drafters = gr.CheckboxGroup(
                [(sweep.ROW_LABELS[d], d) for d in sweep.ROW_KINDS], value=[MODEL], label="drafters",
                elem_id="sw-drafters"
            )
            drafts = gr.Textbox(
                "", label="draft settings to compare (optional)", elem_id="sw-drafts",
                info="each combination is a row, as the benchmark's --sweep writes them: e.g. "
                     "draft_vocab=0,65536 ngram_max=2,3 (one of: " + ", ".join(sweep.DRAFT_AXIS) + ")",
            )
            examples = gr.CheckboxGroup(
                list(BUILTIN), value=[next(iter(BUILTIN))], label="example prompts", elem_id="sw-examples"
            )
            with gr.Row():
                categories = gr.CheckboxGroup(
                    categories_of(load_prompts()),
                    label="Spec-Bench categories",
                    elem_id="sw-categories",
                    scale=3,
                )
                per_category = gr.Number(
                    1,
                    minimum=1,
                    maximum=sweep.MAX_PER_CATEGORY,
                    precision=0,
                    label="prompts per category",
                    elem_id="sw-per-category",
                    scale=1,
                )
        with gr.Column(scale=2):
            pair = gr.Dropdown(ctx.pair_choices(), value=spec.name, label="Model pair", elem_id="sw-pair")
            with gr.Row():
                tokens = gr.Number(
                    32,
                    minimum=1,
                    maximum=MAX_NEW_TOKENS,
                    precision=0,
                    label="max new tokens",
                    elem_id="sw-tokens",
                )
                repeats = gr.Number(
                    1, minimum=1, maximum=10, precision=0, label="repeats (median kept)", elem_id="sw-repeats"
                )
                seed = gr.Number(0, minimum=0, precision=0, label="seed", elem_id="sw-seed")
            with gr.Row():
                run = gr.Button("Run the sweep", variant="primary", scale=3, elem_id="sw-run")
                stop = gr.Button("Stop", variant="stop", scale=1, elem_id="sw-stop")
            status = gr.HTML(status_html("Pick the grid, then run."), elem_id="sw-status")
            files = gr.File(
                label="Download (CSV, JSON)", file_count="multiple", interactive=False, elem_id="sw-files"
            )
    table = gr.Dataframe(
        headers=sweep.HEADERS,
        value=[],
        label="Results, one row per setting",
        interactive=False,
        elem_id="sw-table",
    )
    gr.Markdown(f"<small>{sweep.LEGEND}</small>")
    with gr.Row():
        speedup_plot = gr.Plot(empty_figure("Speedup against γ appears here."), show_label=False)
        alpha_plot = gr.Plot(empty_figure("α against γ appears here."), show_label=False)

    fastest = gr.State(None)  # the fastest row's run configuration: app.py hands it to the Export tab
    inputs = [pair, gammas, drafters, temperatures, examples, categories, per_category, tokens, repeats, seed,
              drafts]
    outputs = [table, speedup_plot, alpha_plot, files, status, fastest]
    model_job(run, sweep_handler(ctx), inputs, outputs, status, "sweep", stop=stop, stop_api="sweep_stop",
              stopped="Stopped. The rows measured so far stay in the table.")
    return {"fastest": fastest}


def sweep_handler(ctx: AppContext):
    def run(
        pair: str,
        gammas: str,
        drafters: list,
        temperatures: str,
        examples: list,
        categories: list,
        per_category: int,
        tokens: int,
        repeats: int,
        seed: int,
        drafts: str = "",
        request: gr.Request = None,
        progress=gr.Progress(),
    ) -> Iterator[tuple]:
        try:
            settings = read_settings({"pair": pair})
            plan = sweep.make_plan(
                settings.pair,
                gammas,
                drafters,
                temperatures,
                examples,
                categories,
                per_category,
                tokens,
                repeats,
                seed,
                BUILTIN,
                drafts,
                ctx.registry.pair(settings.pair).suggested(),
            )
        except ValueError as e:
            yield from fail(N_OUTPUTS, STATUS, str(e))
        loaded = yield from load_pair(ctx, settings, N_OUTPUTS, STATUS)
        rows: list[dict] = []
        yield (
            [],
            empty_figure("Speedup against γ appears here."),
            empty_figure("α against γ appears here."),
            None,
            status_html(f"Sweeping {len(plan.cells)} settings × {len(plan.prompts)} prompts…", 0.0),
            gr.skip(),
        )
        session = session_of(request)

        def show(kind: str, payload, done: int, total: int) -> tuple:
            progress((done, total), desc="sweeping")
            if kind == "run":
                return (*(gr.skip(),) * 4, status_html(f"Ran {payload} ({done}/{total})", done / total), gr.skip())
            rows.append(payload)  # a finished cell: a table row, and a point per prompt for the Theory tab
            for point in payload["points"]:
                ctx.measurements.add(session, point)
            done_cells = f"Measured {len(rows)} of {len(plan.cells)} settings."
            return (*figures(rows), gr.skip(), status_html(done_cells, done / total), gr.skip())

        try:
            yield from streamed(lambda report: sweep.run_sweep(loaded, plan, report), show)
        except ValueError as e:
            yield from fail(N_OUTPUTS, STATUS, str(e))
        except Exception as e:
            log.exception("sweep failed")
            yield from fail(N_OUTPUTS, STATUS, f"The sweep failed: {type(e).__name__}: {e}")
        note = (
            "\nRandom-weight pair: speedups are real, the text is gibberish." if loaded.random_weights else ""
        )
        # Gradio copies returned files into its own cache before it resumes the handler, so the
        # folder is removed as soon as the last redraw is sent (or the job is cancelled).
        with tempfile.TemporaryDirectory(prefix="playground-sweep-") as folder:
            paths = list(sweep.write_files(plan, rows, folder))
            best = sweep.fastest(rows)
            where = (f" The fastest ({best['drafter']}, γ = {best['gamma']}) is in the Export tab." if best else "")
            yield (
                *figures(rows),
                paths,
                status_html(f"Done: {len(rows)} settings measured. The points are on the Theory tab too.{where}"
                            f"{note}"),
                best,
            )

    return run


def figures(rows: list[dict]) -> tuple:
    return (
        sweep.table(rows),
        sweep_figure(rows, "speedup", "Measured speedup against γ", "speedup ×"),
        sweep_figure(rows, "alpha", "Acceptance rate α against γ", "α"),
    )


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
                ", ".join(filter(None, [sweep.ROW_LABELS.get(drafter, drafter), draft, f"T = {temperature:g}"])),
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
