"""A tree step drawn for the Step-through tab: the draft tree as a plotly figure (accepted path
highlighted, rejected branches greyed, hover with p, q and min(1, p/q)) and its stages as HTML.

Pure functions of a StepEvent whose `tree` is set (no Gradio, no model); token text is escaped here.
"""

from __future__ import annotations

import html
from collections.abc import Callable

import plotly.graph_objects as go

from playground.engine.events import ACCEPTED, BONUS, RESAMPLED, StepEvent
from playground.app.stepthrough.view import chip, stage, tally, verdict

Label = Callable[[int], str]
COLOURS = {"accepted": "#137333", "rejected": "#d0a3a0", "untested": "#d5d5d5", "root": "#888888",
           BONUS: "#3c6eeb", RESAMPLED: "#f59614", "target": "#888888"}
MAX_LABEL = 8  # characters of a token shown on its node; the hover has the rest

READ = "the target read the whole tree in ONE forward pass (each node sees only its own ancestors)."
SAMPLED_RULE = (
    "Walking down from the root, the children of a node are tried in turn: a child x is kept with "
    "probability min(1, p(x)/q(x)); after a rejection the target's distribution becomes the residual "
    "norm(max(0, p − q)) and the next child is tried against that (SpecInfer's multi-step speculative "
    "sampling). The output still follows the target exactly."
)
GREEDY_RULE = ("At temperature 0 the target keeps the longest path from the root whose every token is its own top "
               "choice, then adds its top token after it.")
SAMPLED_NOTE = ("The draft model proposed several candidates per position, each drawn independently from its q, "
                f"and {READ} {SAMPLED_RULE}")
GREEDY_NOTE = f"The draft model proposed its top few tokens at each node, and {READ} {GREEDY_RULE}"


def tree_note(greedy: bool, note: str | None = None) -> str:
    """The Draft stage's text for a tree: the draft model's, or another drafter's own note (`note`:
    suffixes, recycled tokens, the hybrid, the target's own layers) followed by how a tree is verified."""
    if note is None:
        return GREEDY_NOTE if greedy else SAMPLED_NOTE
    return f"{note} As a tree: {READ[0].upper()}{READ[1:]} {GREEDY_RULE if greedy else SAMPLED_RULE}"


def layout(event: StepEvent) -> tuple[list[int], list[float]]:
    """x (depth) and y of every node: leaves one row apart in drafting order, parents centred."""
    nodes = event.tree.nodes
    children: dict[int, list[int]] = {}
    for i, node in enumerate(nodes):
        children.setdefault(node.parent, []).append(i)
    ys: dict[int, float] = {}
    next_row = [0.0]

    def place(i: int) -> float:
        kids = children.get(i, [])
        ys[i] = sum(place(k) for k in kids) / len(kids) if kids else next_row[0]
        if not kids:
            next_row[0] += 1
        return ys[i]

    roots = children.get(-1, [])
    for r in roots:
        place(r)
    return [n.depth for n in nodes], [-ys[i] for i in range(len(nodes))]


def hover(node, label: Label, greedy: bool) -> str:
    lines = [f"<b>{html.escape(label(node.token))}</b> ({node.fate})", f"q = {node.q:.3f}", f"p = {node.p:.3f}"]
    lines.append(f"target's top: {'yes' if node.ratio else 'no'}" if greedy else f"min(1, p/q) = {node.ratio:.3f}")
    if not greedy and node.accept_prob is not None:
        lines.append(f"tried with {node.accept_prob:.3f} (p after earlier rejections)")
    if node.uniform is not None:
        lines.append(f"u = {node.uniform:.3f}")
    return "<br>".join(lines)


def tree_figure(event: StepEvent, label: Label, greedy: bool) -> go.Figure:
    nodes, path = event.tree.nodes, set(event.tree.path)
    xs, ys = layout(event)
    root_y = sum(ys[i] for i, n in enumerate(nodes) if n.parent == -1) / max(1, sum(n.parent == -1 for n in nodes))
    fig = go.Figure()
    for on_path in (False, True):
        ex, ey = [], []
        for i, n in enumerate(nodes):
            if (i in path) == on_path:
                px, py = (0, root_y) if n.parent == -1 else (xs[n.parent], ys[n.parent])
                ex += [px, xs[i], None]
                ey += [py, ys[i], None]
        fig.add_trace(go.Scatter(x=ex, y=ey, mode="lines", hoverinfo="skip", showlegend=False,
                                 line=dict(color=COLOURS["accepted"] if on_path else "#cccccc",
                                           width=4 if on_path else 1.5)))
    last = event.tree.path[-1] if event.tree.path else None
    nx, ny = (xs[last] + 1, ys[last]) if last is not None else (1, root_y)
    px, py = (xs[last], ys[last]) if last is not None else (0, root_y)
    fig.add_trace(go.Scatter(x=[px, nx], y=[py, ny], mode="lines", hoverinfo="skip", showlegend=False,
                             line=dict(color=COLOURS.get(event.next_fate, "#888"), width=3, dash="dot")))
    fig.add_trace(go.Scatter(
        x=[0, *xs, nx], y=[root_y, *ys, ny], mode="markers+text", showlegend=False,
        text=["context", *(short(label(n.token)) for n in nodes), short(label(event.next_token))],
        textposition="top center",
        marker=dict(size=[12, *(16 if i in path else 11 for i in range(len(nodes))), 16],
                    color=[COLOURS["root"], *(COLOURS[n.fate] for n in nodes), COLOURS.get(event.next_fate, "#888")],
                    line=dict(width=1, color="#555")),
        hovertext=["the last context token", *(hover(n, label, greedy) for n in nodes),
                   f"<b>{html.escape(label(event.next_token))}</b> ({event.next_fate}), p = {event.next_p:.3f}"],
        hoverinfo="text",
    ))
    fig.update_layout(
        title=f"Draft tree: {len(nodes)} nodes, {event.tree.draft_forwards} draft forwards, "
              f"{len(event.tree.path)} kept + 1 from the target",
        xaxis=dict(title="depth", dtick=1, zeroline=False), yaxis=dict(visible=False),
        margin=dict(l=20, r=20, t=50, b=40), height=max(320, 26 * len(ys) + 120), plot_bgcolor="white",
    )
    return fig


def short(text: str) -> str:
    return text if len(text) <= MAX_LABEL else text[: MAX_LABEL - 1] + "…"


def tree_step_html(event: StepEvent, label: Label, greedy: bool, step_no: int, note: str | None = None) -> str:
    """The tree step as stages: the tree drafted, the nodes tried, the outcome, then the tally.
    `note`: what a drafter other than the draft model did (tree_note)."""
    tree = event.tree
    depth = max((n.depth for n in tree.nodes), default=0)
    head = f"Step {step_no}: one call of the target model verified a tree of {len(tree.nodes)} nodes"
    drafted = (f"{len(tree.nodes)} candidates over {depth} depths, drafted in {tree.draft_forwards} draft "
               "forwards (one per depth: every node of a depth in one batched pass).")
    rows = "".join(tried_row(i, n, label, greedy) for i, n in enumerate(tree.nodes) if n.fate != "untested")
    cols = "<th>target's top</th>" if greedy else "<th>min(1, p/q)</th><th>tried with</th><th>u</th>"
    table = f"<table><tr><th>depth</th><th>x</th><th>q(x)</th><th>p(x)</th>{cols}<th>verdict</th></tr>{rows}</table>"
    untested = sum(n.fate == "untested" for n in tree.nodes)
    body = (f"{table}<p>{untested} node{'s' if untested != 1 else ''} off the kept path never needed a "
            "decision: only the children of kept nodes are tried.</p>")
    stages = [stage("① Draft a tree", tree_note(greedy, note), html.escape(drafted)),
              stage(f"② Verify: {len(tree.path)} depth{'s' if len(tree.path) != 1 else ''} kept", "", body),
              stage("③ The target's own token", "", outcome(event, label))]
    return f'<div class="steps"><div class="head">{head}</div>{"".join(stages)}{tally(event)}</div>'


def tried_row(i: int, n, label: Label, greedy: bool) -> str:
    kept = n.fate == ACCEPTED
    cells = [str(n.depth), chip(label(n.token), "accepted" if kept else "rejected"), f"{n.q:.3f}", f"{n.p:.3f}"]
    if greedy:
        cells += ["yes" if n.ratio else "no", verdict(kept, "keep" if kept else "reject")]
    else:
        sign = "<" if kept else "≥"  # u against the probability it was tried with
        cells += [f"{n.ratio:.3f}", f"{n.accept_prob:.3f}", f"{n.uniform:.3f}",
                  verdict(kept, f"u {sign}: {'keep' if kept else 'reject'}")]
    return "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def outcome(event: StepEvent, label: Label) -> str:
    token = chip(label(event.next_token), event.next_fate)
    if event.next_fate == BONUS:
        return f"The kept path ends at a leaf, so the target adds {token} from its p there (a bonus token)."
    if event.next_fate == RESAMPLED:
        return (f"Every child of the last kept node was rejected, so the target draws {token} from what is "
                f"left of its distribution (probability {event.next_p:.3f}).")
    return f"The target wrote {token}."
