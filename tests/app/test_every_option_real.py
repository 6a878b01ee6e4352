"""Every option the page offers, on the real default pair (issue 55): each drafter the Race tab
offers, as a chain and as a tree where it is offered, greedy and sampled, and each draft model of
models.yaml that a model pack serves, through the race's handler, the step-through, the Theory tab's
measurement and the benchmark's sweep. The tiny pair races all of them in the other tests; what only a
real pair has (a target kept as its files and run on ONNX Runtime, a draft head cut to the pair's draft
vocabulary, drafts of other families and vocabulary widths) is what this module is for.

The pair is loaded once, on one app context, and shared; runs are short (a few new tokens): the test
is of what works, the benchmark measures speed. A choice fails on any error, said in the status box or
raised; a greedy race fails unless the speculative text is the plain one's (int4 on ONNX Runtime: a
near-tie the race reports as one is the only allowed difference)."""

from __future__ import annotations

import html
import re
from types import SimpleNamespace

import gradio as gr
import pytest

from playground.config import DRAFTER_LABELS, DRAFTERS, TREE, TREE_DRAFTERS, RunConfig

pytestmark = pytest.mark.slow

PROMPT = "Write a Python function is_prime(n) that returns True when n is prime."
NEW_TOKENS = 8
# every chain the Race tab's drafter control offers, then every tree its speculation control allows
CHOICES = [{"drafter": d} for d in DRAFTERS] + [{"drafter": d, "speculation": TREE} for d in TREE_DRAFTERS]


def pack_drafts() -> list[str]:
    """The models of models.yaml a model pack serves (no hub needed), other than the default pair's own."""
    from playground.models.registry import load_registry

    registry = load_registry()
    spec = registry.pair(registry.default_pair)
    return [name for name, model in registry.models.items()
            if any(s.kind == "pack" for s in model.sources) and name not in (spec.target, spec.draft)]


DRAFTS = pack_drafts()


def named(choice: dict) -> str:
    return "-".join(str(v) for v in choice.values())


@pytest.fixture(scope="module")
def app():
    """One app context on the default pair, with the Race, Step-through and Theory tabs built on it."""
    from playground.app.race import tab as race
    from playground.app.shared.context import build_context
    from playground.app.stepthrough import tab as stepthrough
    from playground.app.theory import tab as theory

    from playground.models.handle import free_memory

    ctx = build_context()
    ctx.frame_every = 0.0
    with gr.Blocks():
        views = SimpleNamespace(race=race.build(ctx)["view"], step=stepthrough.build(ctx)["view"],
                                theory=theory.build(ctx)["view"])
    yield SimpleNamespace(ctx=ctx, views=views, race=race, step=stepthrough, theory=theory)
    # the pair's gigabytes let go here, not whenever a later test's allocation wakes the collector (a test
    # of resident memory read the models freed meanwhile as its own buffer not growing the process)
    ctx.cache.clear()
    del ctx, views
    free_memory()


@pytest.fixture(autouse=True)
def freed():
    """What a test let go (a benchmark's own pair cache) freed before the next test, not mid-way through it."""
    yield
    from playground.models.handle import free_memory

    free_memory()


def page_knobs(ctx, picked: bool = False, **changes) -> dict:
    """Every knob as the page shows it on the default pair (its suggestions: γ, draft vocabulary), changed.
    `picked`: as the page shows them once the user picked the draft (the suggestions for that draft)."""
    shown = {n: getattr(RunConfig(), n) for n in RunConfig.names()}
    suggested = ctx.suggested(None, changes.get("draft", "") if picked else "")
    return {**shown, **suggested, "max_new_tokens": NEW_TOKENS, **changes}


def text_of(value) -> str:
    return " ".join(re.sub("<[^>]+>", " ", html.unescape(str(value))).split())


def race(app, temperature: float, **choice) -> tuple[str, str]:
    """(status, stats) after a race of the choice at the page's defaults, as a page that loaded and
    where the user picked only the choice sends it (γ and the draft vocabulary still the page's)."""
    view = app.views.race
    form = app.race.RaceForm(PROMPT, "", page_knobs(app.ctx, temperature=temperature, **choice), False, False)
    status = stats = ""
    try:
        for frame in app.race.handle(app.ctx, view, form):
            status = text_of(frame.get(view.status, status))
            stats = text_of(frame.get(view.stats, stats))
    except gr.Error as error:
        pytest.fail(f"{choice} at temperature {temperature}: {error.message}")
    return status, stats


def check_race(app, temperature: float, choice: dict) -> None:
    status, stats = race(app, temperature, **choice)
    assert status.startswith("Done"), (choice, status)
    if temperature == 0.0:
        assert "identical to the baseline" in stats or "near-tie" in stats, (choice, stats)


@pytest.mark.parametrize("temperature", [0.0, 1.0], ids=["greedy", "sampled"])
@pytest.mark.parametrize("choice", CHOICES, ids=named)
def test_every_drafter_races_on_the_default_pair(app, choice, temperature):
    check_race(app, temperature, choice)


@pytest.mark.parametrize("temperature", [0.0, 1.0], ids=["greedy", "sampled"])
@pytest.mark.parametrize("draft", DRAFTS)
def test_every_packed_draft_model_races_on_the_default_pair(app, draft, temperature):
    check_race(app, temperature, {"draft": draft})


def test_the_pairs_cut_head_does_not_follow_an_api_call_to_another_family_unsaid(app):
    """Through the API (no page, so the draft vocabulary is taken as given) the pair's cut head with a
    draft of another tokenizer is a message naming the knob, said before anything is built for it."""
    view = app.views.race
    other = next(d for d in DRAFTS if "qwen" not in d)
    form = app.race.RaceForm(PROMPT, "", page_knobs(app.ctx, draft=other))
    with pytest.raises(gr.Error) as raised:
        list(app.race.handle(app.ctx, view, form))
    assert "draft_vocab must be 0 for a draft with another tokenizer" in raised.value.message


@pytest.mark.parametrize("choice", CHOICES + [{"draft": d} for d in DRAFTS], ids=named)
def test_every_option_steps_through(app, choice):
    view, stepper = app.views.step, None
    for _ in range(2):
        form = app.step.StepForm(PROMPT, "", stepper, page_knobs(app.ctx, True, **choice))
        try:
            *_, last = app.step.handle(app.ctx, view, form)
        except gr.Error as error:
            pytest.fail(f"{choice}: {error.message}")
        stepper = last[view.stepper]
        assert stepper is not None and stepper.history, (choice, text_of(last.get(view.status, "")))


@pytest.mark.parametrize("choice", [{"drafter": d} for d in DRAFTERS] + [{"draft": d} for d in DRAFTS], ids=named)
def test_every_option_is_measured_in_the_theory_tab(app, choice):
    view = app.views.theory
    form = app.theory.MeasureForm(PROMPT, app.ctx.default_pair, choice.get("drafter", "model"), 0.0, 2,
                                  NEW_TOKENS, draft=choice.get("draft", ""))
    try:
        *_, last = app.theory.handle(app.ctx, view, form)
    except gr.Error as error:
        pytest.fail(f"{choice}: {error.message}")
    assert text_of(last[view.status]).startswith("Measured at γ"), (choice, last[view.status])


def swept(axis: str, values: list[str], tmp_path, capsys) -> None:
    """The benchmark's sweep over `values` of `axis` on the default pair, briefly: it must end well and
    name every value."""
    from playground.measure.bench import cli

    code = cli.main(["--sweep", f"{axis}=" + ",".join(values), "--categories", "coding", "--limit", "1",
                     "--max-new-tokens", str(NEW_TOKENS), "--repeats", "1", "--warmup", "0", "--gamma", "2",
                     "--temperature", "0", "--json", str(tmp_path / "report.json")])
    out = capsys.readouterr().out
    assert code == 0, out
    for value in values:
        assert value in out, (value, out)


def test_the_benchmarks_sweep_runs_every_drafter(tmp_path, capsys):
    swept("drafter", list(DRAFTERS), tmp_path, capsys)


def test_every_drafter_the_page_offers_is_raced_here():
    """The lists above are the page's: a drafter added to the page is raced here without an edit."""
    assert {c["drafter"] for c in CHOICES} == set(DRAFTER_LABELS)
    assert len(DRAFTS) >= 2  # the two other families' packs at least


def test_the_benchmark_sweeps_the_packed_drafts_over_their_own_heads(tmp_path, capsys):
    """`--sweep draft=...` without --draft-vocab: each draft over its own head, not the pair's cut (issue 55:
    refused for another tokenizer before the first run)."""
    swept("draft", DRAFTS, tmp_path, capsys)
