"""The run configuration is the one record of the knobs: every consumer exposes each field with
the record's default and range, and nothing else decides them."""

from __future__ import annotations

import dataclasses

import gradio as gr
import pytest
from gradio_client import Client

from playground import export
from playground.measure.bench import report
from playground.measure.bench.cli import build_parser, make_plan
from playground.measure.bench.report import settings_of
from playground.measure.bench.sweep import SWEEPABLE
from playground.config import DRAFTER_LABELS, KNOBS, MODEL, PROMPT_LOOKUP, TREE, KnobError, RunConfig, group
from playground.engine.generate import SpecConfig
from playground.app.shared import controls
from playground.app.shared.examples import STEP_THROUGH
from playground.app.shared.context import build_context

NUMERIC = [k for k in KNOBS.values() if k.kind in (int, float) and k.name != "pair"]


def low_of(k):
    return k.low if isinstance(k.low, (int, float)) else KNOBS[k.low].low


def outside(k):
    """Values just past each end of the knob's range (past the low end is the end itself when open)."""
    step = 1 if k.kind is int else 0.5
    return [low_of(k) if k.low_open else low_of(k) - step, k.high + step]


@pytest.mark.parametrize("k", NUMERIC, ids=lambda k: k.name)
def test_the_record_accepts_its_range_and_names_the_field_outside_it(k):
    above = {o.name: o.high for o in KNOBS.values() if o.low == k.name}  # gamma_max >= gamma_min
    for value in [k.default, k.high] + ([] if k.low_open else [low_of(k)]):
        RunConfig(**{k.name: value, **above})
    for value in outside(k):
        with pytest.raises(ValueError, match=rf"^{k.name} must be"):
            RunConfig(**{k.name: value, **above})


def test_bounds_that_are_other_fields():
    with pytest.raises(ValueError, match=r"gamma_max must be an integer in \[8, 64\], got 4"):
        RunConfig(gamma_min=8, gamma_max=4)
    with pytest.raises(ValueError, match=r"ngram_max must be an integer in \[4, 32\], got 2"):
        RunConfig(ngram_min=4, ngram_max=2)


@pytest.mark.parametrize("changes, field", [
    ({"gamma": 0}, "gamma"),
    ({"top_p": float("nan")}, "top_p"),
    ({"drafter": "oracle"}, "drafter"),
    ({"adaptive": "yes"}, "adaptive"),
    ({"pair": ""}, "pair"),
    ({"ngram_min": 4, "ngram_max": 2}, "ngram_max"),
    ({"speculation": TREE, "drafter": PROMPT_LOOKUP}, "speculation"),
    ({"runner": "compiled", "target_quantization": "nf4"}, "runner"),
])
def test_a_refused_value_carries_its_fields_name(changes, field):
    """KnobError is a ValueError whose `field` is the name its message starts with, so a caller can
    point at the field its own way (the benchmark's --flag) without reading the message."""
    import pickle

    with pytest.raises(KnobError) as raised:
        RunConfig(**changes)
    assert raised.value.field == field and str(raised.value).startswith(field)
    copy = pickle.loads(pickle.dumps(raised.value))
    assert (copy.field, str(copy)) == (field, str(raised.value))


@pytest.mark.parametrize("field", ["target_quantization", "draft_quantization"])
@pytest.mark.parametrize("quantization", ["nf4", "int8"])
def test_compiled_and_bitsandbytes_are_refused_naming_both_knobs_and_what_runs_instead(field, quantization):
    with pytest.raises(KnobError) as raised:
        RunConfig(runner="compiled", **{field: quantization})
    message = str(raised.value)
    assert raised.value.field == "runner" and f"{field} {quantization!r}" in message
    assert "use runner auto, eager or static" in message and f"runner compiled with {field} none" in message
    for runner in ("auto", "eager", "static"):
        RunConfig(runner=runner, **{field: quantization})  # the alternatives it names are accepted
    RunConfig(runner="compiled", **{field: "int4-cpu"})  # PyTorch's CPU kernels compile
    if field == "draft_quantization":  # a drafter that runs no draft model does not run it compiled
        RunConfig(runner="compiled", drafter=PROMPT_LOOKUP, **{field: quantization})


def test_a_cross_field_rule_in_the_flags_names_its_flag():
    from playground.measure.bench.cli import base_run
    from playground.measure.bench.sweep import SettingError

    args = build_parser().parse_args(["--pair", "tiny", "--gamma", "4", "--temperature", "0", "--draft-vocab", "0",
                                      "--ngram-min", "4", "--ngram-max", "2"])
    with pytest.raises(SettingError) as raised:
        base_run(args, "tiny")
    assert raised.value.flag == "--ngram-max" and "ngram_max must be an integer in [4, 32]" in str(raised.value)


def test_spec_config_is_the_decoding_group_with_the_same_defaults_and_checks():
    from playground.engine import factory
    spec_fields = {f.name: f.default for f in dataclasses.fields(SpecConfig)}
    for k in group("decoding"):
        assert spec_fields[k.name] == k.default, k.name
        if k.kind in (int, float):
            with pytest.raises(ValueError, match=rf"^{k.name} must be"):
                SpecConfig(**{k.name: outside(k)[1]})
    assert factory.spec_config(RunConfig(gamma=7, temperature=0.5)) == SpecConfig(gamma=7, temperature=0.5)
    # a report's settings: the decoding knobs, then what shapes the draft (what a sweep compares),
    # then the runner both runs went through
    drafting = ["draft"] + [k.name for k in group("drafter")] + ["draft_quantization"]
    assert list(settings_of(RunConfig())) == [k.name for k in group("decoding")] + drafting + ["runner"]
    assert report.SETTINGS == tuple(settings_of(RunConfig()))
    assert set(SWEEPABLE) == {k.name for k in KNOBS.values() if k.sweep} and set(SWEEPABLE) <= set(report.SETTINGS)


def test_every_knob_is_a_cli_flag_with_the_record_default_and_range():
    parser = build_parser()
    actions = {a.dest: a for a in parser._actions}
    for k in KNOBS.values():
        action = actions[k.name]
        assert k.flag in action.option_strings
        assert action.default == (None if k.pair_default else k.default), k.name
        if k.choices:
            assert tuple(action.choices) == k.choices
        if k.kind in (int, float) and k.name != "pair":
            parser.parse_args([k.flag, str(k.high)])
            for value in outside(k):
                with pytest.raises(SystemExit):
                    parser.parse_args([k.flag, str(value)])


def test_cli_errors_name_the_flag_and_range(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--top-p", "1.5"])
    assert "argument --top-p: top_p must be in (0.0, 1.0], got 1.5" in capsys.readouterr().err


def test_cli_builds_the_drafter_the_flags_describe():
    from playground.engine import factory
    args = build_parser().parse_args(["--pair", "tiny", "--drafter", PROMPT_LOOKUP, "--ngram-min", "2",
                                      "--ngram-max", "5", "--draft-vocab", "100"])
    args.argv = []
    run = make_plan(args).cells[0]
    drafter = factory.make_drafter(run, factory.Models(None, None))
    assert (drafter.min_ngram, drafter.max_ngram) == (2, 5)
    assert run.draft_vocab == 100


def test_every_knob_is_a_control_with_the_record_default_and_range():
    ctx = build_context(None)
    ctx.default_pair = "tiny"
    spec = ctx.registry.pair("tiny")
    with gr.Blocks():
        made, _ = controls.settings_controls(ctx)
    assert list(made) == RunConfig.names()
    for name, control in made.items():
        k = KNOBS[name]
        expected = {"pair": "tiny", "gamma": spec.gamma, "temperature": spec.temperature}.get(name, k.default)
        assert control.value == expected, name
        assert control.label == k.label
        if isinstance(control, (gr.Slider, gr.Number)):
            low = k.step if k.low_open else low_of(k)
            assert (control.minimum, control.maximum) == (low, k.high), name
        if k.choices:
            assert tuple(value for _, value in control.choices) == k.choices


# Every tab's controls, found by label or by name (elem_id without the tab's prefix): race (none),
# step-through, export and the p/q explorer, theory, lab, lesson, sweep, served.
TAB_PREFIXES = ("st", "ex", "th", "lab", "lesson", "sw", "sv", "bd")
# Where a tab departs from the record, and why. Nothing else may.
OWN_DEFAULTS = {
    "lab-temperature": 1.0,  # the lab samples: at temperature 0 every draw is the same token
    "st-temperature": STEP_THROUGH[0][4],  # the step-through opens on its first example, and its temperature
}
LOW_END_LEFT_OUT = {"lab-temperature"}  # for the same reason the lab's slider starts one step above 0
KNOB_WIDGETS = (gr.Slider, gr.Number, gr.Radio, gr.Dropdown, gr.Checkbox)


def knob_of(component):
    """The knob a control stands for: its label is the knob's, or its name (elem_id less the prefix)."""
    by_label = {k.label: k for k in KNOBS.values()}
    if component.label in by_label:
        return by_label[component.label]
    name = component.elem_id or ""
    prefix, _, rest = name.partition("-")
    name = (rest if prefix in TAB_PREFIXES else name).replace("-", "_")
    return KNOBS.get(name)


def test_every_tabs_knob_controls_have_the_record_default_range_and_label():
    from playground.app.demo import build_demo

    demo = build_demo(default_pair="tiny")
    spec = build_context(None).registry.pair("tiny")
    suggested = {"pair": "tiny", **spec.suggested()}
    seen = {}
    for control in demo.blocks.values():
        k = knob_of(control) if isinstance(control, KNOB_WIDGETS) else None
        if k is None:
            continue
        where = control.elem_id
        seen.setdefault(where.partition("-")[0] if "-" in where else "race", []).append(k.name)
        assert control.label == k.label, where
        allowed = {OWN_DEFAULTS[where]} if where in OWN_DEFAULTS else {k.default, suggested.get(k.name, k.default)}
        assert control.value in allowed, (where, control.value, allowed)
        if isinstance(control, (gr.Slider, gr.Number)):
            low = low_of(k) + k.step if k.low_open or where in LOW_END_LEFT_OUT else low_of(k)
            assert (control.minimum, control.maximum) == (low, k.high), where
        if k.name == "pair":
            assert [value for _, value in control.choices] == list(build_context(None).registry.pairs), where
        elif k.choices:
            assert tuple(value for _, value in control.choices) == k.choices, where
    assert set(seen) == {"race", *TAB_PREFIXES}, seen  # every tab was walked
    for tab in ("th", "lab", "lesson", "sw", "bd"):  # the tabs with their own few controls
        assert "pair" in seen[tab], tab
    assert {"temperature", "top_k", "top_p", "seed"} <= set(seen["lab"])
    assert {"drafter", "temperature", "gamma"} <= set(seen["th"]) and "gamma" in seen["lesson"]


def test_controls_that_do_not_apply_are_hidden_until_they_do():
    ctx = build_context(None)
    ctx.default_pair = "tiny"
    with gr.Blocks() as demo:
        made, _ = controls.settings_controls(ctx)
    decided = {d: tuple(controls.decided_by(d)) for d in controls.DECIDERS}
    assert set(decided) == {"speculation", "drafter", "adaptive"}
    # the record's defaults: a chain, the draft model, a fixed γ; so no tree, n-gram, kept layers or
    # adaptive bounds, only the draft model's choice and its draft vocabulary
    assert {n for names in decided.values() for n in names if made[n].visible} == {"draft", "draft_vocab"}
    assert all(made[n].visible is not False for n in RunConfig.names() if n not in sum(decided.values(), ()))
    wired = {f.targets[0]: f for f in demo.fns.values()}
    for decider, (when, shown, hidden) in {"speculation": ("tree", "chain", ()),
                                           "drafter": (PROMPT_LOOKUP, "suffix", ("kept_layers", "draft", "draft_vocab")),
                                           "adaptive": (True, False, ())}.items():
        change = wired[(made[decider]._id, "change")]
        assert [o._id for o in change.outputs] == [made[n]._id for n in decided[decider]]
        on = change.fn(when)
        assert {c._id for c in on} == {made[n]._id for n in decided[decider]}
        assert {c.elem_id for c, u in on.items() if u["visible"]} == set(decided[decider]) - set(hidden)
        assert all(u["visible"] is False for u in change.fn(shown).values())
    for drafter, shown in (("self", {"kept_layers"}), ("model", {"draft", "draft_vocab"}),
                           ("hybrid", {"draft", "draft_vocab"})):
        update = wired[(made["drafter"]._id, "change")].fn(drafter)
        assert {c.elem_id for c, u in update.items() if u["visible"]} == shown
    load = wired[(demo._id, "load")]  # and on page load, from the values the page opens with
    at_load = load.fn(TREE, PROMPT_LOOKUP, False)
    assert {c.elem_id for c, u in at_load.items() if u["visible"]} == {*decided["speculation"], "ngram_min",
                                                                       "ngram_max"}


def test_export_carries_every_knob():
    registry = build_context(None).registry
    settings = RunConfig(pair="tiny", gamma=6, ngram_max=5, draft_vocab=50)
    exported = export.from_settings(registry, settings)
    for name in RunConfig.names():
        assert getattr(exported, name) == getattr(settings, name)
    defaults = {f.name: f.default for f in dataclasses.fields(export.ExportSettings)}
    assert all(defaults[k.name] == k.default for k in KNOBS.values())


def test_the_api_takes_the_knobs_by_name(url):
    """gradio_client names the race's parameters after the record's fields, and takes them by name."""
    c = Client(url, verbose=False, download_files=False)
    params = c.view_api(return_format="dict")["named_endpoints"]["/race"]["parameters"]
    assert [p["parameter_name"] for p in params] == ["prompt", "system", *RunConfig.names()]
    *_, stats, status = c.predict(prompt="def add(a, b):", system="", pair="tiny", gamma=3,
                                  max_new_tokens=12, api_name="/race")
    assert "Done" in status
    with pytest.raises(Exception, match=r"gamma must be an integer in \[1, 64\], got 0"):
        c.predict(prompt="hi", system="", pair="tiny", gamma=0, api_name="/race")
    step = c.view_api(return_format="dict")["named_endpoints"]["/step"]["parameters"]
    assert [p["parameter_name"] for p in step][-len(RunConfig.names()):] == RunConfig.names()


def test_the_examples_use_the_record_vocabulary():
    """Each example's drafter, γ and temperature are values the run configuration takes: its
    constructor is the check, refusing anything else, such as the drafter's label on the page."""
    from playground.app.race import tab as tab_race
    from playground.app.stepthrough import tab as tab_stepthrough

    with pytest.raises(KnobError, match=r"^drafter must be one of: model, prompt_lookup, suffix, recycling, self, hybrid, got 'draft model'"):
        RunConfig(drafter=DRAFTER_LABELS[MODEL])  # what the examples once said
    for examples in (tab_race.EXAMPLES, tab_stepthrough.EXAMPLES):
        assert examples
        for _, _, drafter, gamma, temperature, *_ in examples:
            RunConfig(drafter=drafter, gamma=gamma, temperature=temperature)  # raises as above if not
