"""The Your models tab: its handlers called directly on a machine of its own (tests/stores.py), then the
launched app driven through gradio_client: a pair of the scan kept on the page races in the Race tab and
the benchmark, greedy output identical to the target's own (the tiny pair in float32, from a hub cache)."""

from __future__ import annotations

import json
import os
import re
import socket
from pathlib import Path

import gradio as gr
import pytest
from gradio_client import Client
from stores import DRAFT, TARGET, machine, own_machine, shelve, tree, write_gguf  # noqa: F401

from playground.app.shared.context import build_context
from playground.app.yours import tab as tab_yours
from playground.app.yours.form import PickForm, ScanForm
from playground.config import KNOBS, RunConfig

pytestmark = pytest.mark.usefixtures("one_thread")
PROMPT = "def add(a, b):"


@pytest.fixture
def tab(machine, tmp_path):
    shelve(machine, tmp_path / "made")
    ctx = build_context()
    with gr.Blocks():
        view = tab_yours.build(ctx)["view"]
    return ctx, view


def last(frames) -> dict:
    frames = list(frames)
    return frames[-1]


def test_the_scan_fills_the_table_and_offers_usable_targets(tab):
    ctx, view = tab
    shown = last(tab_yours.handle_scan(ctx, view, ScanForm()))
    names = [row[0] for row in shown[view.table]]
    assert {TARGET, DRAFT, "embed:v1"} <= set(names)
    assert shown[view.target]["choices"] == [TARGET, DRAFT]  # the embedding model is no target
    embed = next(row for row in shown[view.table] if row[0] == "embed:v1")
    assert embed[-1] == "no: not a causal LM: an embedding model"
    assert "3 models found, 2 usable here" in shown[view.status]


def test_a_target_classes_every_draft_with_an_estimate(tab):
    ctx, view = tab
    last(tab_yours.handle_scan(ctx, view, ScanForm()))
    shown = tab_yours.choose_target(ctx, view, TARGET)
    assert shown[view.draft]["value"] == DRAFT
    assert (f"{DRAFT} (same tokenizer)", DRAFT) in shown[view.draft]["choices"]
    rows = {row[0]: row for row in shown[view.drafts]}
    assert rows[DRAFT][1] == "same tokenizer" and float(rows[DRAFT][5]) > 1
    assert rows["embed:v1"][1] == "not usable"
    assert "Estimate</b>, nothing loaded yet: estimate" in shown[view.pairing] and "v(k) assumed 1" in shown[view.pairing]
    backwards = tab_yours.choose_draft(ctx, view, DRAFT, TARGET)
    assert "not usable" in backwards[view.pairing] and "not smaller than the target" in backwards[view.pairing]


@pytest.mark.parametrize("form, message", [
    (PickForm(target=TARGET, draft=None, prompt=PROMPT), "draft: pick one of the models found"),
    (PickForm(target="nope", draft=DRAFT, prompt=PROMPT), "target: no model named 'nope'"),
    (PickForm(target=DRAFT, draft=TARGET, prompt=PROMPT), "cannot draft for org/tiny-draft: not smaller"),
    (PickForm(target=TARGET, draft=DRAFT, prompt=" "), "prompt must be non-empty text"),
    (PickForm(target=TARGET, draft=DRAFT, prompt=PROMPT, tokens=10**6), "max new tokens must be a whole number"),
])
def test_a_bad_pick_is_a_message_and_nothing_loads(tab, form, message):
    ctx, view = tab
    last(tab_yours.handle_scan(ctx, view, ScanForm()))
    with pytest.raises(gr.Error, match=re.escape(message)):
        last(tab_yours.handle_race(ctx, view, form))
    assert ctx.cache.resident() == []


def test_keeping_under_a_models_yaml_name_is_refused(tab):
    ctx, view = tab
    last(tab_yours.handle_scan(ctx, view, ScanForm()))
    with pytest.raises(gr.Error, match="'default' is the name of a pair in models.yaml"):
        last(tab_yours.handle_keep(ctx, view, PickForm(target=TARGET, draft=DRAFT, name="default")))


def test_a_race_from_the_tab_measures_the_pick_in_place_of_its_estimate(tab):
    ctx, view = tab
    before = tree(Path(os.environ["HOME"]))
    last(tab_yours.handle_scan(ctx, view, ScanForm()))
    shown = last(tab_yours.handle_race(ctx, view, PickForm(target=TARGET, draft=DRAFT, prompt=PROMPT, tokens=24)))
    name = f"{TARGET} <- {DRAFT}"
    assert shown[view.picked] == name and name in ctx.registry.pairs
    assert "Greedy: the same tokens as the plain run" in shown[view.status]
    assert "<b>Measured</b> on this machine (replaces the estimate)" in shown[view.pairing]
    assert [p.pair for p in ctx.measurements.get(None)] == [name]
    assert "raced, not kept" in shown[view.kept]
    assert tab_yours.choose_draft(ctx, view, TARGET, DRAFT)[view.pairing] == shown[view.pairing]
    assert tree(Path(os.environ["HOME"])) == before


def test_a_race_from_the_tab_runs_at_the_gamma_followed_on_this_machine(tab, monkeypatch):
    """The load measures c and v(k) and follows the pair's γ (app/shared/flow.following); the race then runs
    at that γ, not the family's knob read before the load (which raced the real Qwen pick at γ 3 where
    the load had said γ 1 suits it)."""
    from playground.app.shared import flow
    from playground.measure.bench import follow

    ctx, view = tab
    last(tab_yours.handle_scan(ctx, view, ScanForm()))
    name = f"{TARGET} <- {DRAFT}"
    steep = (1.0, 1.5, 2.2, 2.9, 3.6, 4.3, 5.0)  # each row most of a step: α 0.8 at c 0.1 calls for γ 1

    def following(ctx, pair, settings, status, prompt_tokens=None):  # the load's measurement (the tiny pick
        # states no α to follow)
        ctx.followed[settings.pair] = follow.chosen(0.8, 0.1, steep, settings.gamma, "eager")
        yield from ()

    monkeypatch.setattr(flow, "following", following)
    shown = last(tab_yours.handle_race(ctx, view, PickForm(target=TARGET, draft=DRAFT, prompt=PROMPT, tokens=12)))
    assert ctx.registry.pair(name).gamma != ctx.followed[name].gamma == 1
    assert f"at γ {ctx.followed[name].gamma}, α" in shown[view.status]


# ---- the launched app, and the benchmark, on a pair kept from the page ----------------------------


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    from playground.app.demo import build_demo

    with pytest.MonkeyPatch.context() as patch:
        root = tmp_path_factory.mktemp("machine")
        home = own_machine(root, patch)
        shelve(home, root / "made")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        demo = build_demo(default_pair="tiny")
        demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
        yield Client(f"http://127.0.0.1:{port}/", verbose=False, download_files=False), home
        demo.close()


def race_args(pair: str) -> list:
    settings = RunConfig(pair=pair, max_new_tokens=24)
    return [PROMPT, ""] + [getattr(settings, n) for n in RunConfig.names()]


def test_a_pair_kept_on_the_page_races_in_the_race_tab_and_the_benchmark(app, tmp_path):
    client, home = app
    before = tree(home)
    client.predict(api_name="/scan_models")
    kept = client.predict(target=TARGET, draft=DRAFT, prompt=PROMPT, tokens=24, name="tiny-kept",
                          api_name="/keep_pair")
    assert any(isinstance(v, str) and "Kept &#x27;tiny-kept&#x27;" in v for v in kept)  # (HTML-escaped)
    job = client.submit(*race_args("tiny-kept"), api_name="/race")
    job.result(timeout=600)
    shown = [v for frame in job.outputs() for v in frame if isinstance(v, str)]  # every frame it streamed
    assert any("Done" in v for v in shown)  # the Race tab runs it
    assert any("greedy: speculative text identical to the baseline (24 tokens)" in v for v in shown)
    assert tree(home) == before

    from playground.measure.bench.cli import main

    out = tmp_path / "report.json"  # the app fixture's machine is this process's still
    assert main(["--pair", "tiny-kept", "--limit", "1", "--categories", "coding", "--max-new-tokens", "16",
                 "--repeats", "1", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    records = [record for run in report["runs"] for record in run["prompts"]]
    assert records and all(record["identical"] for record in records)
    assert report["config"]["pair"] == "tiny-kept"


def test_the_apps_folders_are_scanned_and_a_model_gone_is_a_message(machine, tmp_path):
    """--models-dir reaches the tab's scan; a pick whose file went away since the scan fails with a message
    (the page keeps serving), and a kept pair whose model went away says so in every pair list."""
    import shutil

    shelve(machine, tmp_path / "made")
    folder = tmp_path / "mine"
    write_gguf(folder / "solo.gguf", hidden=8)
    ctx = build_context(models_dirs=[folder])
    with gr.Blocks():
        view = tab_yours.build(ctx)["view"]
    found = last(tab_yours.handle_scan(ctx, view, ScanForm()))
    assert "solo" in [row[0] for row in found[view.table]]
    last(tab_yours.handle_keep(ctx, view, PickForm(target=TARGET, draft=DRAFT, name="kept")))
    snapshot = ctx.found.named(DRAFT).path
    shutil.rmtree(snapshot)
    ctx.refresh()
    assert dict((n, label) for label, n in ctx.pair_choices())["kept"] == "kept (yours; a model gone since kept)"
    assert "org/tiny-draft: gone: hub cache org/tiny-draft is no longer at" in tab_yours.kept_html(ctx)
    with pytest.raises(gr.Error, match="Could not load pair"):
        last(tab_yours.handle_race(ctx, view, PickForm(target=TARGET, draft=DRAFT, prompt=PROMPT, tokens=8)))


def test_a_pair_raced_or_kept_is_offered_in_every_pair_list_selected(machine, tmp_path):
    from playground.app.demo import build_demo

    shelve(machine, tmp_path / "made")
    demo = build_demo(default_pair="tiny")
    offered = next(fn for fn in demo.fns.values() if getattr(fn.fn, "__name__", "") == "offered")
    opened = next(fn for fn in demo.fns.values() if getattr(fn.fn, "__name__", "") == "opened")
    pair_lists = [o for o in offered.outputs if getattr(o, "label", "") == KNOBS["pair"].label]
    assert len(pair_lists) >= 8 and len(offered.outputs) > len(pair_lists)  # every tab's, and the draft lists
    from playground.models.scan import listing, stores
    from playground.models.userpairs import keep

    found = listing.scan(stores.locations())
    keep("late", found.named(TARGET), found.named(DRAFT), {}, "kept by another process")
    assert all("late" not in str(u.get("choices")) for u in offered.fn("x"))  # this app has not read it yet
    updates = opened.fn()  # a page opened now reads the file again
    assert all("late" in [c[1] if isinstance(c, (list, tuple)) else c for c in u["choices"]]
               for u in updates[: len(pair_lists)])
    selected = offered.fn("late")
    assert all(u["value"] == "late" for u in selected[: len(pair_lists)])
    assert all(TARGET in [c[1] for c in u["choices"]] for u in selected[len(pair_lists):])  # the draft lists
