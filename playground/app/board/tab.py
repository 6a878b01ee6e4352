"""The Drafts tab: which way of drafting should I use for this target, on my prompts, on this
machine? Every drafter the loaded target can use, each at its best γ for the measured v(k)
(measure/bench/board/: a probe round, then the formula's best γ re-measured), side by side: the
leaderboard against the fastest plain decoding, the winner per category, the speedup map (α × c,
the formula's contours, every drafter a dot), which tokens each drafter caught on one prompt. The
winner's settings go to the Race and Export tabs in one click (wired in app/demo.py); the report
downloads as the benchmark's JSON and CSV, the map as PNG.

Each session keeps its finished entries (context.boards), so a board run again, or with one
drafter more, measures only what is new. Stop ends the board within one engine step.
"""

from __future__ import annotations

import html
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path

import gradio as gr

from playground.measure.bench import sweep
from playground.measure.bench.board import lineup
from playground.measure.bench.board import table as board_table
from playground.measure.bench.board.charts import board_map_figure, coverage_figure
from playground.measure.bench.board.rounds import rounds
from playground.measure.bench.machine import spare_a_core
from playground.measure.bench.prompts import prompt_name
from playground.measure.bench.report import SCHEMA, settings_of, write_csv, write_json
from playground.measure.bench.runs import Interrupted
from playground.app.board.form import MAX_BUDGET_MIN, BoardForm, BoardPlan, planned
from playground.app.shared import controls
from playground.app.shared.context import AppContext
from playground.app.shared.layout import opening
from playground.app.shared.flow import (Stop, guarded, load_pair, model_job, outputs, parsed,
                                        random_weights_note, status_html)
from playground.app.shared.lockstep import streamed
from playground.app.shared.plots import empty_figure
from playground.app.shared.prompt_sets import prompt_controls, run_controls

TITLE = "Drafts"

COLUMNS = [  # (leaderboard key, header, digits)
    ("entry", "drafter", None), ("what", "what drafts", None), ("gamma", "γ", None), ("alpha", "α", 2),
    ("alpha_by_position", "α by position", None), ("c", "c", 3), ("verify_cost", "v(γ+1)", 2),
    ("tokens_per_call", "tokens / call", 2), ("weights_mb", "weights MB (counted)", 0),
    ("resident_mb", "resident MB (measured)", 0), ("tok_s", "tok/s", 2),
    ("decode_tok_s", "decode tok/s", 2), ("over_fastest", "× fastest plain", 2),
    ("decode_over_fastest", "decoding × fastest", 2),
    ("predicted_over_fastest", "formula ×", 2), ("identical", "same tokens", None), ("runner", "runner", None),
]
HEADERS = [h for _, h, _ in COLUMNS]
LEGEND = (
    "Each drafter probed at γ 4, then measured again at the γ the formula picks for its per-position acceptance, "
    "its c and this machine's v(k) (γ is a tree's depth on tree rows). × fastest plain: its own speedup over "
    "the plain run timed beside it (prefill included), rescaled by its runner's plain rate over the fastest plain "
    "decoding measured (medians over the probe round's cells, which measure every drafter once in one pass; "
    "a cell's own speedup is side by side, so a machine slowing down over a long board does not move it), named above the table; decoding ×: the same without the prefill; formula: the prediction at its "
    "α, c and v for the decoding, the plain run's prefill kept as it took (speculation does not touch it), on "
    "the same scale. α by position: the share of steps whose i-th draft was "
    "kept. weights MB (counted): the target's weights plus what the drafter holds. resident MB (measured): what "
    "this process's resident memory grew by since before its first model loaded, read at the entry's last run "
    "(one process holds every entry's models). same tokens (greedy): prompts whose output "
    "equals plain decoding's."
)
MAP_EMPTY, COVERAGE_EMPTY = "The speedup map appears here.", "Which drafter caught which token appears here."


@dataclass(frozen=True)
class BoardView:
    """What a board run redraws; field order is the API's result order."""

    table: gr.Dataframe  # the leaderboard
    verdict: gr.HTML  # fastest plain, the winner per category, who cannot pay
    speedup_map: gr.Plot
    coverage: gr.Plot
    coverage_prompt: gr.Dropdown  # which prompt the coverage grid shows
    files: gr.File  # JSON, CSV and the map's PNG
    status: gr.HTML
    report: gr.State  # the board's report and its prompts' decoded tokens: the coverage grid is redrawn from them
    winner: gr.State  # the fastest entry's run configuration, handed on by the button


def build(ctx: AppContext) -> dict:
    spec = ctx.registry.pair(ctx.default_pair)
    inputs, settings = opening(
        "Which way of drafting should you use for this target, on your prompts, on this machine? Every drafter "
        "the target can use is timed against plain decoding on the same prompts (the benchmark's own code), each "
        "at its best γ for this machine. On a CPU, budget minutes: each drafter runs every prompt twice or more."
    )
    with inputs:
        drafters = gr.CheckboxGroup(entry_choices(ctx, spec.name), value=lineup.available(ctx.registry, spec),
                                    label="drafters", elem_id="bd-drafters",
                                    info="model:NAME drafts with another model of models.yaml; -tree rows "
                                         "draft token trees")
        examples, categories, per_category = prompt_controls("bd")
        own = gr.Textbox("", lines=3, label="your prompts, one per line (optional)", elem_id="bd-own")
    with settings:
        pair = controls.pair_control(ctx, "bd-pair")
        with gr.Row():
            tokens, repeats = run_controls("bd", 48)
        with gr.Row():
            temperature = controls.control("temperature", 0.0, elem_id="bd-temperature")
            seed = controls.control("seed", elem_id="bd-seed")
            budget = gr.Number(30, minimum=0.1, maximum=MAX_BUDGET_MIN, label="budget (minutes)",
                               info="the board refuses to start if it would take longer", elem_id="bd-budget")
        with gr.Row():
            run = gr.Button("Run the board", variant="primary", scale=3, elem_id="bd-run")
            stop = gr.Button("Stop", variant="stop", scale=1, elem_id="bd-stop")
        status = gr.HTML(status_html("Pick drafters and prompts, then run."), elem_id="bd-status")
        files = gr.File(label="Download (JSON, CSV, map PNG)", file_count="multiple", interactive=False,
                        elem_id="bd-files")
        hand = gr.Button("Use the winner in the Race and Export tabs", size="sm", elem_id="bd-hand")
    verdict = gr.HTML("", elem_id="bd-verdict")
    table = gr.Dataframe(headers=HEADERS, value=[], label="Leaderboard, fastest first", interactive=False,
                         elem_id="bd-table")
    gr.Markdown(f"<small>{LEGEND}</small>")
    speedup_map = gr.Plot(empty_figure(MAP_EMPTY), show_label=False, elem_id="bd-map")
    coverage_prompt = gr.Dropdown([], label="coverage on prompt", elem_id="bd-coverage-prompt")
    coverage = gr.Plot(empty_figure(COVERAGE_EMPTY), show_label=False, elem_id="bd-coverage")

    view = BoardView(table, verdict, speedup_map, coverage, coverage_prompt, files, status, gr.State(None),
                     gr.State(None))
    form = BoardForm(pair, drafters, examples, categories, per_category, own, tokens, repeats, temperature, seed,
                     budget)
    model_job(run, partial(handle, ctx, view), form, outputs(view), status, "board",
              Stop(stop, "board_stop", "Stopped. Nothing of an unfinished board is kept.", flags=ctx.stops))
    pair.change(partial(follow, ctx), pair, [pair, drafters], queue=False, api_visibility="private",
                show_progress="hidden")
    coverage_prompt.change(redraw_coverage, [view.report, coverage_prompt], coverage, queue=False,
                           api_visibility="private")
    return {"hand": hand, "winner": view.winner, "view": view}  # app/demo.py wires hand to Race and Export


def entry_choices(ctx: AppContext, pair: str) -> list[tuple[str, str]]:
    spec = ctx.registry.pair(pair)
    return [(name, name) for name in lineup.available(ctx.registry, spec)]


def follow(ctx: AppContext, name: str):
    """Another pair: its description, and its drafters, all chosen."""
    spec = ctx.registry.pair(name)
    return (gr.update(info=spec.description),
            gr.update(choices=entry_choices(ctx, name), value=lineup.available(ctx.registry, spec)))


def handle(ctx: AppContext, view: BoardView, form: BoardForm) -> Iterator[dict]:
    """Check the form, load the pair, estimate, then measure what this session has not measured yet."""
    made = yield from parsed(view.status, lambda: planned(ctx.registry, form))
    loaded = yield from load_pair(ctx, made.plan.grid.base, view.status)
    with ctx.stops.held(form.session) as flag:
        yield from guarded(view.status, boarding(ctx, view, form, made, loaded, flag.is_set), "The board failed")


def boarding(ctx: AppContext, view: BoardView, form: BoardForm, made: BoardPlan, loaded, stopped):
    plan = made.plan
    keys = {e.name: cache_key(plan, e) for e in made.entries}
    kept = {e.name: ctx.boards.get(form.session, keys[e.name]) for e in made.entries}
    todo = [e for e in made.entries if kept[e.name] is None]
    runner = board_runner(plan.grid.base, loaded)
    yield {view.status: status_html(f"Timing a plain step of the target on the {runner} runner for the estimate…")}
    step = ctx.costs.measure(loaded.target, runner, lineup.PROBE_GAMMA + 1).step_s
    fresh = replace(plan, cells=[e.cell for e in todo], grid=plan.grid) if todo else None
    if fresh is not None:
        least, most = lineup.estimate_seconds(fresh, step, sum(e.cell.drafter == "self" for e in todo))
        if least > made.budget_s:
            raise ValueError(f"budget (minutes): the board needs at least about {least / 60:.0f} min here "
                             f"({len(todo)} drafters × {len(plan.prompts)} prompts, a plain step {step * 1000:.0f} ms), "
                             f"more than {made.budget_s / 60:g}; choose fewer drafters or prompts, or a larger budget")
        yield {view.table: [], view.verdict: "", view.files: None,
               view.status: status_html(f"About {least / 60:.0f}–{most / 60:.0f} min: {len(todo)} drafters × "
                                        f"{len(plan.prompts)} prompts ({len(made.entries) - len(todo)} kept from "
                                        "this session's earlier boards).", 0.0)}
    runs = [run for e in made.entries if kept[e.name] for run in kept[e.name]]
    report = {"schema": SCHEMA, "command": plan.command, "runs": runs}
    if fresh is not None:
        report = yield from measuring(ctx, view, form, fresh, [e.name for e in todo], loaded, stopped, runs)
        if report is None:
            return
        for e in todo:
            ctx.boards.put(form.session, keys[e.name], [r for r in report["runs"] if r["board"]["entry"] == e.name])
        report["runs"] = runs + report["runs"]
    yield from finished(view, made, loaded, report)


def measuring(ctx, view: BoardView, form: BoardForm, plan: sweep.Plan, names: list[str], loaded, stopped,
              kept: list[dict]):
    """Both rounds in lockstep with the page; the table fills in as entries are measured. None if stopped."""
    measured: list[dict] = []

    def show(step: sweep.Progress) -> dict:
        form.progress((step.done, step.total), desc="drafts board")
        shown = {view.status: status_html(f"{step.what} ({step.done}/{step.total})", step.done / max(step.total, 1))}
        if step.run is not None and step.run["prompts"]:
            measured.append(step.run)
            shown[view.table] = table(board_table.leaderboard({"runs": kept + measured}))
        return shown

    def pair_of(cell):  # another draft model or quantization: the pair loaded with it
        return loaded if lineup.loaded_as(cell) == lineup.loaded_as(plan.grid.base) else \
            ctx.cache.get(cell.pair, **cell.loading())

    def curve_of(pair, runner: str) -> tuple[float, ...]:
        return ctx.costs.measure(pair.target, runner, lineup.PROBE_GAMMA + 1).v

    def work(report) -> dict:
        with spare_a_core():  # as in the sweep: the page keeps a core, so drawing never stalls the models
            return sweep.run(plan, pair_of, {"pair": plan.pair, "drafters": names, "prompts": len(plan.prompts)},
                             report, runs_of=partial(rounds, names=names, curve_of=curve_of, stopped=stopped))

    try:
        return (yield from streamed(work, show, start=ctx.on_models(loaded)))
    except Interrupted:
        yield {view.status: status_html("Stopped. Nothing of an unfinished board is kept.")}
        return None


def finished(view: BoardView, made: BoardPlan, loaded, report: dict) -> Iterator[dict]:
    rows = board_table.leaderboard(report)
    ids = list(dict.fromkeys(rec["id"] for run in report["runs"] for rec in run["prompts"]))
    names = {p.id: prompt_name(p.id, p.category) for p in made.plan.prompts}
    choices = [(names.get(i, str(i)), str(i)) for i in ids]
    held = {"report": report, "texts": {str(i): [loaded.tokenizer.decode([t]) for t in board_table.coverage(report, i)[0]]
                                        for i in ids}}
    note = random_weights_note(loaded, "the speedups are real")
    with tempfile.TemporaryDirectory(prefix="playground-board-") as folder:
        paths, png_note = write_files(report, folder)
        yield {view.table: table(rows), view.verdict: verdict_html(report, rows),
               view.speedup_map: board_map_figure(report),
               view.coverage: coverage_of(held, str(ids[0]) if ids else None),
               view.coverage_prompt: gr.update(choices=choices, value=str(ids[0]) if ids else None),
               view.files: paths, view.report: held, view.winner: winner_run(made, rows),
               view.status: status_html(f"Done: {len(rows)} drafters measured.{png_note}{note}")}


def winner_run(made: BoardPlan, rows: list[dict]) -> dict | None:
    """The fastest entry's run configuration at the γ it was measured at (for the Race and Export tabs)."""
    if not rows:
        return None
    best = next(e for e in made.entries if e.name == rows[0]["entry"])
    cell = best.cell
    cell = replace(cell, tree_depth=rows[0]["gamma"]) if cell.speculation == "tree" else replace(cell, gamma=rows[0]["gamma"])
    return asdict(cell)


def board_runner(base, loaded) -> str:
    from playground.engine.runners import resolve

    return resolve(base.runner, loaded.target.device, False, loaded.target.model)


def cache_key(plan: sweep.Plan, e: lineup.Entry) -> tuple:
    """What an entry's measurement depends on: the pair, its settings, the prompts, the repeats."""
    return (plan.pair, e.name, tuple(sorted(settings_of(e.cell).items())),
            tuple((p.id, p.text) for p in plan.prompts), plan.repeats)


def table(rows: list[dict]) -> list[list]:
    def cell(row, key, digits):
        value = row[key]
        if key == "alpha_by_position":
            return " / ".join(f"{a:.2f}" for a in value[:6])
        if value is None:
            return ""
        return round(value, digits) if digits is not None else value
    return [[cell(r, k, d) for k, _, d in COLUMNS] for r in rows]


def verdict_html(report: dict, rows: list[dict]) -> str:
    plain = board_table.fastest_plain(board_table.probe_runs(report))
    won = [w for w in board_table.winners(report)]
    lines = [f"<b>Against:</b> the fastest plain decoding measured, {html.escape(plain.name)}, "
             f"{plain.tok_s:.2f} tok/s" + (f" ({plain.decode_tok_s:.2f} decoding only)" if plain.decode_tok_s else "")
             + ", the median over the probe round's cells"]
    if rows:
        top = rows[0]
        lines.append(f"<b>Fastest:</b> {html.escape(top['entry'])} ({html.escape(top['what'])}), "
                     f"{top['over_fastest']:.2f}× the fastest plain decoding at γ {top['gamma']}"
                     + ("" if top["over_fastest"] > 1 else ": no drafter beats plain decoding here"))
    lines.append("<b>Winner per category:</b> " + "; ".join(
        f"{html.escape(w['category'])}: {html.escape(w['winner'])} ({w['over_fastest']:.2f}×)" for w in won))
    lines += [html.escape(s) for s in board_table.cannot_pay(report)]
    return "<div style='font-size:14px;line-height:1.6'>" + "<br>".join(lines) + "</div>"


def coverage_of(held: dict, prompt: str | None):
    """The coverage grid of one prompt (its id as the dropdown holds it) from the held report."""
    ids = {str(rec["id"]): rec["id"] for run in held["report"]["runs"] for rec in run["prompts"]}
    if prompt not in ids:
        return empty_figure(COVERAGE_EMPTY)
    tokens, marks = board_table.coverage(held["report"], ids[prompt])
    if not tokens:
        return empty_figure("No run of this prompt to show.")
    caught = ", ".join(f"{n} {sum(m)}" for n, m in marks.items())
    return coverage_figure(held["texts"][prompt], marks, f"Tokens each drafter supplied (of {len(tokens)}): {caught}")


def redraw_coverage(held: dict | None, prompt: str | None):
    return gr.skip() if not held else coverage_of(held, prompt)


def write_files(report: dict, folder: str) -> tuple[list[str], str]:
    """The report as the benchmark writes it (JSON, CSV) and the map as PNG, where kaleido can draw it."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    paths = [Path(folder) / f"board-{stamp}.json", Path(folder) / f"board-{stamp}.csv"]
    write_json(report, paths[0])
    write_csv(report, paths[1])
    png = Path(folder) / f"board-map-{stamp}.png"
    try:
        png.write_bytes(board_map_figure(report).to_image(format="png", width=1000, height=700))
        paths.append(png)
        note = ""
    except Exception as error:  # no Chromium for kaleido: the map's own camera button still saves it
        note = f" (No PNG of the map: {type(error).__name__}; the camera above the map saves one.)"
    return [str(p) for p in paths], note

