"""The Gradio app: a header and one tab per module in TABS.

Adding a tab: write `playground/app/<name>/tab.py` with `TITLE` and `build(ctx)` (layout, then
wiring: `flow.model_job` for a button that runs the models, or `**context.SERIAL` on any other
event that does), and add it to TABS below. Its inputs are a form (a small dataclass, form.Form,
built of its components; a click hands the handler the same form of the values sent) and its
outputs a view (a small dataclass of the components its handlers' dicts redraw; `flow.outputs(view)`
is the event's outputs). Its knobs are `controls.control(name)` and its pair `controls.pair_control`.
A tab imports app/shared and the layers below, never another tab: one that hands something to
another returns its components from build(), and build_demo wires the two.
Nothing here loads a model: pairs load on the first run, through the context's PairCache.
"""

from __future__ import annotations

import gradio as gr

from playground.app.board import tab as tab_board
from playground.app.export import tab as tab_export
from playground.app.lab import tab as tab_lab
from playground.app.race import tab as tab_race
from playground.app.served import tab as tab_served
from playground.app.stepthrough import tab as tab_stepthrough
from playground.app.sweep import tab as tab_sweep
from playground.app.theory import tab as tab_theory
from playground.app.explorer import tab as tab_explorer
from playground.app.lesson import tab as tab_lesson
from playground.app.yours import tab as tab_yours
from playground.app.shared.context import build_context

TABS = [tab_race, tab_lesson, tab_stepthrough, tab_explorer, tab_theory, tab_lab, tab_sweep, tab_board, tab_export,
        tab_served, tab_yours]

HEADER = """# Speculative Sampling Playground
A small **draft** model proposes γ tokens, the big **target** model checks them all in one forward pass
and keeps those it agrees with (Leviathan et al. 2023): the output follows the target's own distribution,
with fewer target calls."""


def build_demo(config: str | None = None, *, default_pair: str | None = None, cache=None, models_dirs=()) -> gr.Blocks:
    """The whole app, queued: one model job at a time across all sessions and tabs.

    config: a models.yaml path (default: $PLAYGROUND_CONFIG, else the repository's), the user's kept pairs
    merged in; default_pair: the pair selected when the page opens (default: the registry's);
    cache: a pair_cache.PairCache to share (default: a new one owned by this app);
    models_dirs: folders the Your models tab scans beside the usual stores (--models-dir).
    """
    ctx = build_context(config, cache, models_dirs)
    ctx.default_pair = ctx.registry.pair(default_pair).name  # raises, naming the pairs, if unknown
    with gr.Blocks(title="Speculative Sampling Playground") as demo:
        gr.Markdown(HEADER)
        handles = {}  # what a tab hands to another, wired here: tabs never import each other
        with gr.Tabs():
            for tab in TABS:
                with gr.Tab(tab.TITLE):
                    handles[tab] = tab.build(ctx) or {}
        fastest, knobs = handles[tab_sweep]["fastest"], handles[tab_export]["knobs"]
        fastest.change(tab_export.take, fastest, list(knobs.values()), queue=False, api_visibility="private")
        hand, winner = handles[tab_board]["hand"], handles[tab_board]["winner"]
        for knobs_of in (handles[tab_export]["knobs"], handles[tab_race]["knobs"]):  # one click: the winner to both
            hand.click(tab_export.take, winner, list(knobs_of.values()), queue=False, api_visibility="private")
        demo.unload(handles[tab_served]["unload"])  # a closed page's vLLM servers are stopped
        offer_pairs(ctx, demo, handles[tab_yours])
    demo.queue(default_concurrency_limit=1)
    return demo


def offer_pairs(ctx, demo: gr.Blocks, yours: dict) -> None:
    """A pair raced or kept in the Your models tab shows in every tab's pair list at once, selected (and its
    models in every draft list); a page opened later reads the kept pairs again (another process may
    have kept one), so its lists hold them too."""
    lists = ctx.pair_controls + ctx.draft_controls

    def offered(name: str | None = None) -> list:
        pairs = gr.update(choices=ctx.pair_choices(), **({"value": name} if name else {}))
        return [pairs] * len(ctx.pair_controls) + [gr.update(choices=ctx.draft_choices())] * len(ctx.draft_controls)

    def opened() -> list:
        ctx.refresh()
        return offered()

    for event in yours["events"]:
        event.success(offered, yours["picked"], lists, queue=False, api_visibility="private")
    demo.load(opened, None, lists, queue=False, api_visibility="private")


__all__ = ["TABS", "build_demo"]
