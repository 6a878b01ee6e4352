"""The Your models tab: the models already on this machine (Ollama's, LM Studio's, llama.cpp's downloads,
the Hugging Face cache, the folders the app was started with --models-dir), found from their metadata
without loading them (models/scan/). Pick a target: every other model is classed as a draft for it
(same tokenizer, another tokenizer, or not usable and why) with an estimate beside it, said as one.
"Race this pair" loads the pick through the same loaders as models.yaml's pairs and times it plain and
speculative on a prompt (the Theory tab's measurement): the measured figures replace the estimate, and
every tab's pair list offers the pair, selected (app/demo.py wires that). "Keep this pair" saves it to
user-pairs.yaml beside the cache, where the registry, the benchmark and the next start find it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import partial

import gradio as gr

from playground.app.shared import controls
from playground.app.shared.context import AppContext
from playground.app.shared.flow import (
    Stop,
    at_once,
    fail,
    guarded,
    load_pair,
    model_job,
    outputs,
    parsed,
    read_settings,
    status_html,
)
from playground.app.shared.lockstep import streamed
from playground.app.shared.sessions import session_of
from playground.app.yours import tables
from playground.app.yours.form import MAX_RACE_TOKENS, PickForm, ScanForm
from playground.app.yours.picks import (
    estimate_of,
    kept_html,
    last_race,
    memory,
    named,
    pairing_of,
    pairing_shown,
    pick,
    suggested_name,
    targets,
)

TITLE = "Your models"
INTRO = (
    "The models already on this machine: Ollama's, LM Studio's, llama.cpp's downloads, the Hugging Face cache, "
    "and any folder the app was started with (`python app.py --models-dir DIR`). Found from their metadata only, "
    "nothing loaded. Pick a **target**: every other model is classed as a draft for it, with an **estimate** "
    "(the formula at α, c and v(k), each said where it comes from). **Race this pair** measures it here; "
    "**Keep this pair** saves it for every tab, the benchmark and the next start."
)


@dataclass(frozen=True)
class YoursView:
    """What the tab's handlers redraw; field order is the API's result order."""

    table: gr.Dataframe  # the scan
    target: gr.Dropdown
    draft: gr.Dropdown
    pairing: gr.HTML  # the pick's class and estimate, or what its race measured
    drafts: gr.Dataframe  # every other model as a draft for the target
    kept: gr.HTML  # the kept pairs, and whether their models are still where they were kept
    name: gr.Textbox  # the name to keep the pick under (suggested from its models)
    status: gr.HTML
    picked: gr.State  # the pair raced or kept: app/demo.py selects it in every tab's pair list


def build(ctx: AppContext) -> dict:
    gr.Markdown(INTRO)
    with gr.Row():
        scan = gr.Button("Scan", variant="primary", scale=1, elem_id="ym-scan")
        status = gr.HTML(status_html("Press Scan: a first scan reads each model's header (a second answers "
                                     "from the cache)."), elem_id="ym-status")
    table = gr.Dataframe(headers=tables.SCAN_HEADERS, value=tables.scan_rows(ctx.found), interactive=False,
                         label="Found", wrap=True, elem_id="ym-table")
    with gr.Row():
        with gr.Column(scale=2):
            target = gr.Dropdown([], value=None, label="Target", elem_id="ym-target",
                                 info="the model whose output you want (a usable causal LM)")
            draft = gr.Dropdown([], value=None, label="Draft", elem_id="ym-draft",
                                info="every other model, its class beside it")
            pairing = gr.HTML(tables.pairing_html(None, None), elem_id="ym-pairing")
        with gr.Column(scale=3):
            prompt = controls.prompt_box()
            prompt.elem_id = "ym-prompt"
            tokens = gr.Number(64, minimum=1, maximum=MAX_RACE_TOKENS, precision=0, label="max new tokens",
                               elem_id="ym-tokens")
            with gr.Row():
                race = gr.Button("Race this pair", variant="primary", scale=2, elem_id="ym-race")
                stop = gr.Button("Stop", variant="stop", scale=1, elem_id="ym-stop")
            with gr.Row():
                name = gr.Textbox("", label="Name to keep it under", scale=2, elem_id="ym-name")
                keep = gr.Button("Keep this pair", scale=1, elem_id="ym-keep")
    drafts = gr.Dataframe(headers=tables.DRAFT_HEADERS, value=[], interactive=False, wrap=True,
                          label="Drafts for the target", elem_id="ym-drafts")
    kept = gr.HTML(kept_html(ctx), elem_id="ym-kept")
    view = YoursView(table, target, draft, pairing, drafts, kept, name, status, gr.State(""))

    model_job(scan, partial(handle_scan, ctx, view), ScanForm(), outputs(view), status, "scan_models")
    form = PickForm(target, draft, prompt, tokens, name)
    race_job = model_job(race, partial(handle_race, ctx, view), form, outputs(view), status, "race_pair",
                         Stop(stop, "race_pair_stop"))
    keep_job = model_job(keep, partial(handle_keep, ctx, view), form, outputs(view), status, "keep_pair")
    target.change(target_handler(ctx, view), target, [draft, drafts, pairing, name], queue=False,
                  api_visibility="private")
    draft.change(draft_handler(ctx, view), [target, draft], [pairing, name], queue=False, api_visibility="private")
    tab = gr.context.Context.block  # the enclosing gr.Tab: opened, it shows the latest scan (another page's
    if isinstance(tab, gr.Tab):     # too: the machine is the same) and the kept pairs' state, read again
        tab.select(partial(opened, ctx, view), None, [table, target, kept], queue=False, api_visibility="private")
    return {"view": view, "picked": view.picked, "events": [race_job, keep_job]}


# ---- handlers ---------------------------------------------------------------------------------


def handle_scan(ctx: AppContext, view: YoursView, form: ScanForm) -> Iterator[dict]:
    """Walk the stores and read each model's metadata (a first scan with progress), then show it."""
    from playground.models.scan import listing, stores

    places = stores.locations(ctx.models_dirs)

    def work(report):
        return listing.scan(places, progress=lambda message, fraction: report(message, fraction))

    def show(message: str, fraction: float | None) -> dict:
        return {view.status: status_html(f"Scanning: {message}", fraction)}

    found = yield from guarded(view.status, streamed(work, show), "The scan failed")
    ctx.found = found
    ctx.refresh()
    there = [s for s in found.stores if s.exists]
    said = ", ".join(dict.fromkeys(f"{s.source} ({s.said})" for s in there)) or "none of the usual stores exist here"
    yield {view.table: tables.scan_rows(found), view.drafts: [], view.kept: kept_html(ctx),
           view.target: gr.update(choices=targets(found), value=None),
           view.draft: gr.update(choices=[], value=None), view.pairing: tables.pairing_html(None, None),
           view.status: status_html(f"{len(found.models)} models found, {len(found.usable())} usable here. "
                                    f"Looked in: {said}.")}


def opened(ctx: AppContext, view: YoursView) -> dict:
    """The latest scan and the kept pairs, as the tab shows them when opened; the target picked stays."""
    if ctx.found is None:
        return {view.kept: kept_html(ctx)}
    return {view.table: tables.scan_rows(ctx.found), view.target: gr.update(choices=targets(ctx.found)),
            view.kept: kept_html(ctx)}


def handle_race(ctx: AppContext, view: YoursView, form: PickForm) -> Iterator[dict]:
    """Load the pick through models.yaml's loaders (progress in the status), then time it plain and
    speculative on the prompt; the measured figures replace the estimate."""
    prompt, tokens = yield from parsed(view.status, form.race)
    target, draft = yield from parsed(view.status, lambda: form.models(ctx.found))
    chosen = pairing_of(ctx, target, draft)
    if not chosen.usable:
        yield from fail(view.status, f"draft: {draft.name} cannot draft for {target.name}: {chosen.why}")
    name = f"{target.name} <- {draft.name}"
    yield from parsed(view.status, lambda: pick(ctx, name, chosen, target, draft))
    settings = read_settings({"pair": name, **ctx.suggested(name), "max_new_tokens": tokens})
    loaded = yield from load_pair(ctx, settings, view.status)
    # the load measured c and v(k) here, so the pair's γ follows this machine (as a race's first run does)
    settings = replace(settings, gamma=ctx.suggested(name).get("gamma", settings.gamma))
    point, record = yield from guarded(view.status, measuring(ctx, view, loaded, settings, prompt), "The race failed")
    ctx.measurements.add(form.session, point)
    same = {True: " Greedy: the same tokens as the plain run.", False: " Greedy: NOT the same tokens as the plain run "
            f"(from token {record['first_divergence']})."}.get(record["identical"], "")
    yield {view.pairing: pairing_shown(ctx, chosen, [target, draft], point), view.picked: name,
           view.kept: kept_html(ctx),
           view.status: status_html(f"Raced {name}: {point.speedup:.2f}× at γ {point.gamma}, α {point.alpha:.2f}.{same} "
                                    "Every tab's pair list now offers it, selected; Keep this pair to keep it.")}


def handle_keep(ctx: AppContext, view: YoursView, form: PickForm) -> Iterator[dict]:
    """Save the pick to user-pairs.yaml (each model's file recorded by path and digest), then offer it."""
    from playground.models.scan.pairing import suggested_knobs
    from playground.models.userpairs import keep

    target, draft = yield from parsed(view.status, lambda: form.models(ctx.found))
    chosen = pairing_of(ctx, target, draft)
    if not chosen.usable:
        yield from fail(view.status, f"draft: {draft.name} cannot draft for {target.name}: {chosen.why}")
    knobs = suggested_knobs(chosen, ctx.registry, draft)
    yield {view.status: status_html("Keeping: recording each model's file (its SHA-256 is hashed once where its "
                                    "store does not name the file by it)…")}
    description = f"{target.name} drafted by {draft.name} ({chosen.verdict}; kept from the scan)"
    yield from guarded(view.status, at_once(lambda: keep(form.name, target, draft, knobs, description,
                                                         config=ctx.config)), "Keeping the pair failed")
    ctx.refresh()
    name = form.name.strip()
    yield {view.kept: kept_html(ctx), view.picked: name,
           view.status: status_html(f"Kept {name!r} ({', '.join(f'{k} {v}' for k, v in knobs.items())}): every tab's "
                                    f"pair list offers it, and python -m playground.bench --pair {name!r} races it.")}


def target_handler(ctx: AppContext, view: YoursView):
    def choose(target: str | None, request: gr.Request = None) -> dict:
        return choose_target(ctx, view, target, session_of(request))

    return choose


def draft_handler(ctx: AppContext, view: YoursView):
    def choose(target: str | None, draft: str | None, request: gr.Request = None) -> dict:
        return choose_draft(ctx, view, target, draft, session_of(request))

    return choose


def choose_target(ctx: AppContext, view: YoursView, target: str | None, session=None) -> dict:
    """The target's drafts, each classed, with their estimates; the first usable one picked."""
    from playground.models.scan.pairing import drafts_for

    model = named(ctx, target)
    if model is None:
        return {view.draft: gr.update(choices=[], value=None), view.drafts: [],
                view.pairing: tables.pairing_html(None, None), view.name: ""}
    pairings = drafts_for(model, ctx.found.models, ctx.registry, memory())
    estimates = {p.draft: estimate_of(ctx, p) for p in pairings if p.usable}
    best = next((p for p in pairings if p.usable), None)
    choices = [(f"{p.draft} ({p.verdict})", p.draft) for p in pairings]
    return {view.draft: gr.update(choices=choices, value=best.draft if best else None),
            view.drafts: tables.draft_rows(pairings, estimates),
            **choose_draft(ctx, view, target, best.draft if best else None, session)}


def choose_draft(ctx: AppContext, view: YoursView, target: str | None, draft: str | None, session=None) -> dict:
    """The pick's class and estimate, or what this session's last race of it measured."""
    t, d = named(ctx, target), named(ctx, draft)
    if t is None or d is None:
        return {view.pairing: tables.pairing_html(None, None), view.name: ""}
    chosen = pairing_of(ctx, t, d)
    measured = last_race(ctx, session, t.name, d.name) if chosen.usable else None
    return {view.pairing: pairing_shown(ctx, chosen, [t, d], measured), view.name: suggested_name(t.name, d.name)}


def measuring(ctx: AppContext, view: YoursView, loaded, settings, prompt: str):
    """(point, record) measured in lockstep (a warm-up, then plain and speculative runs: the Theory tab's
    measurement), then the target's v(k) into ctx.costs, so the next estimate of this target reads it."""
    from playground.measure.bench.machine import spare_a_core
    from playground.measure.teach.theory import measured
    from playground.models.text import encode_prompt

    ids = encode_prompt(loaded.tokenizer, prompt)

    def work(report):
        point = measured(loaded, ids, settings, 1, report, "your models", " ".join(prompt.split())[:40])
        with spare_a_core():
            ctx.costs.measure(loaded.target, settings.runner, 9, 3)
        return point

    def show(done: int, total: int, what: str) -> dict:
        return {view.status: status_html(f"Racing: ran {what} ({done}/{total})", done / total)}

    return (yield from streamed(work, show, start=ctx.on_models(loaded)))
