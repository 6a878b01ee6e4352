"""The tree in the page: the step-through draws the drafted tree (accepted path highlighted, hover
with p, q and min(1, p/q)), the race runs a tree, and bad tree knobs are messages naming the field.
Handlers are called directly on the tiny pair."""

from __future__ import annotations

import html
from types import SimpleNamespace

import gradio as gr
import pytest

from playground.engine.events import BONUS, RESAMPLED, TARGET, StepEvent, TreeNode, TreeRecord
from playground.app.stepthrough import tree_view
from playground.app.shared.context import build_context
from playground.config import PROMPT_LOOKUP, TREE, RunConfig
from playground.app.race import tab as tab_race
from playground.app.shared.flow import outputs
from playground.app.stepthrough import tab as tab_stepthrough


@pytest.fixture(scope="module")
def ctx():
    ctx = build_context()
    ctx.frame_every = 0.0
    return ctx


@pytest.fixture(scope="module")
def views(ctx):
    """The Race and Step-through tabs' outputs, as the tabs build them."""
    with gr.Blocks():
        return SimpleNamespace(race=tab_race.build(ctx)["view"], step=tab_stepthrough.build(ctx)["view"])


def step_handler(ctx, views):
    """The Next step handler as a function of (prompt, text so far, paused run, knobs)."""
    return lambda prompt, so_far, stepper, knobs: tab_stepthrough.handle(
        ctx, views.step, tab_stepthrough.StepForm(prompt, so_far, stepper, knobs))


def knobs(**changes) -> dict:
    settings = RunConfig(pair="tiny", max_new_tokens=40, speculation=TREE, tree_budget=10, tree_depth=3,
                           tree_branching=3)
    return {**{n: getattr(settings, n) for n in RunConfig.names()}, **changes}


def hand_made() -> StepEvent:
    """root -> a (kept) -> c (rejected), d (kept, a leaf); root -> b (rejected); then a bonus."""
    nodes = (TreeNode(65, -1, 1, 0.5, 0.6, 1.0, 1.0, 0.3, "accepted"),
             TreeNode(66, -1, 1, 0.2, 0.1, 0.5, None, None, "untested"),
             TreeNode(67, 0, 2, 0.4, 0.1, 0.25, 0.25, 0.9, "rejected"),
             TreeNode(68, 0, 2, 0.3, 0.5, 1.0, 0.8, 0.2, "accepted"))
    return StepEvent(index=1, gamma=2, drafts=(), n_accepted=2, next_token=69, next_fate=BONUS, next_p=0.7,
                     emitted=(65, 68, 69), prompt_tokens=0, draft_s=0.01, verify_s=0.02, overhead_s=0.0,
                     tree=TreeRecord(nodes, (0, 3), 2))


def test_tree_figure_highlights_the_path_and_hovers_with_p_q_and_ratio():
    fig = tree_view.tree_figure(hand_made(), chr, greedy=False)
    others, path, next_edge, points = fig.data
    assert [x for x in path.x if x is not None] == [0, 1, 1, 2]  # root -> a -> d
    assert path.line.width > others.line.width
    assert list(points.text) == ["context", "A", "B", "C", "D", "E"]
    assert "min(1, p/q) = 0.250" in points.hovertext[3] and "u = 0.900" in points.hovertext[3]
    assert "p = 0.100" in points.hovertext[2] and "q = 0.200" in points.hovertext[2]
    colours = list(points.marker.color)
    assert colours[1] == colours[4] == tree_view.COLOURS["accepted"] and colours[2] == tree_view.COLOURS["untested"]
    assert "4 nodes, 2 draft forwards, 2 kept + 1" in fig.layout.title.text


def test_tree_stages_list_every_tried_node_and_the_bonus():
    page = tree_view.tree_step_html(hand_made(), chr, greedy=False, step_no=2)
    assert "verified a tree of 4 nodes" in page and "drafted in 2 draft forwards" in page
    assert page.count("<tr>") == 4  # header + the three nodes that were tried
    assert "u ≥: reject" in html.unescape(page) and "a bonus token" in page


def test_step_through_draws_the_tree_of_each_step(ctx, views):
    handler, seen = step_handler(ctx, views), set()
    for seed in range(2, 16):  # a run may end early at an end-of-text token, or draw no rejection: another seed
        stepper = None
        while not (stepper and stepper.finished) and not {RESAMPLED, BONUS} <= seen:
            *_, last = handler("Once upon a time", "", stepper, knobs(temperature=1.0, seed=seed))
            stepper, text, stages, figure, status = (last[c] for c in outputs(views.step))
            event = stepper.history[-1]
            if event.next_fate == TARGET:  # the budget's last token, no room for a tree: a plain step
                continue
            assert event.tree is not None and "verified a tree" in stages
            assert figure.layout.title.text.startswith(f"Draft tree: {len(event.tree.nodes)} nodes")
            assert 'class="tok' in text
            seen.add(event.next_fate)
    assert {RESAMPLED, BONUS} <= seen, seen


def test_greedy_tree_race_matches_the_baseline(ctx, views):
    *_, last = tab_race.handle(ctx, views.race, tab_race.RaceForm("def fibonacci(n):", "", knobs()))
    assert "identical to the baseline" in last[views.race.stats] and "Done" in last[views.race.status]


@pytest.mark.parametrize("changes, message", [
    ({"speculation": "forest"}, "speculation must be one of: chain, tree"),
    ({"drafter": PROMPT_LOOKUP}, "speculation 'tree' needs a drafter among"),
    ({"tree_budget": 0}, "tree_budget must be an integer in [1, 256], got 0"),
    ({"tree_depth": 300}, "tree_depth must be an integer in [1, 64], got 300"),
])
def test_bad_tree_knobs_are_messages_naming_the_field(ctx, views, changes, message):
    with pytest.raises(gr.Error) as raised:
        list(step_handler(ctx, views)("hi", "", None, knobs(**changes)))
    assert message in raised.value.message


@pytest.mark.parametrize("changes, said", [
    (dict(drafter="self", speculation="chain", kept_layers=2), "running only its layers 0, "),
    (dict(drafter="suffix", speculation="chain"), "Suffix decoding found the longest end of the text"),
    (dict(drafter="recycling", speculation="tree"), "verified a tree"),
    (dict(drafter="self", speculation="tree", kept_layers=2), "running only its layers 0, "),
    (dict(drafter="hybrid", speculation="tree"), "verified a tree"),
    (dict(drafter="hybrid", speculation="chain"), "This step the hybrid drafted "),
], ids=["self", "suffix", "recycling-tree", "self-tree", "hybrid-tree", "hybrid"])
def test_each_drafter_says_in_the_step_through_what_it_did(ctx, views, changes, said):
    """The Draft stage explains the drafter at work: for self-drafting, which of the target's layers
    ran; a model-free tree (token recycling) is drawn like the draft model's."""
    handler, stepper, shown = step_handler(ctx, views), None, ""
    prompt = "def add(a, b):\n    return a + b\n\n" * 3
    for _ in range(12):  # until a step drafts something (a cold table or index drafts nothing at first)
        *_, last = handler(prompt, "", stepper, knobs(**changes))
        stepper, text, stages, figure, status = (last[c] for c in outputs(views.step))
        if said in html.unescape(stages):
            shown = stages
            break
    assert shown, stages
