"""Tokens coloured by fate, as HTML: pure functions of step events (no Gradio, no model).

A run's text is a list of Spans, one per token piece; rejected draft tokens sit inline, struck
through, right before the token the target put in their place. Every piece of text is
HTML-escaped here, so a token like `<script>` is shown, never run.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass

from playground.engine.events import ACCEPTED, BONUS, REJECTED, RESAMPLED, TARGET, StepEvent

SPECIAL = "special"  # fate-less class for EOS and other special tokens, shown small and grey

# Legend order follows a step's life: kept drafts, dropped drafts, the target's own token.
LEGEND = (
    (ACCEPTED, "accepted draft token", "the target agreed: kept for free"),
    (REJECTED, "rejected draft token", "struck through, dropped where it was proposed"),
    (RESAMPLED, "resampled", "the target's replacement after a rejection, from norm(max(0, p - q))"),
    (BONUS, "bonus", "all drafts accepted: the target's extra token from p"),
    (TARGET, "target token", "plain autoregressive decoding: one target call per token"),
)

CSS = """
.race-text { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 13px;
  line-height: 1.55; white-space: pre-wrap; overflow-wrap: anywhere; min-height: 8em; max-height: 34em;
  overflow-y: auto; padding: 8px 10px; border: 1px solid var(--border-color-primary); border-radius: 6px;
  background: var(--background-fill-primary); color: var(--body-text-color); }
.race-text .empty { color: var(--body-text-color-subdued); font-style: italic; }
.tok { border-radius: 2px; box-shadow: inset -1px 0 0 var(--background-fill-primary); }
.tok.accepted { background: rgba(34, 160, 70, .28); }
.tok.rejected { background: rgba(220, 40, 40, .22); color: #b42318; text-decoration: line-through; }
.tok.resampled { background: rgba(245, 150, 20, .40); }
.tok.bonus { background: rgba(60, 110, 235, .32);
  box-shadow: inset -1px 0 0 var(--background-fill-primary), inset 0 -2px 0 rgba(60, 110, 235, .9); }
.tok.target { background: rgba(140, 140, 140, .16); }
.tok:empty { display: inline-block; width: 3px; height: 1.1em; vertical-align: text-bottom; }
.tok.special { font-size: 10px; color: var(--body-text-color-subdued); border: 1px dotted currentColor;
  padding: 0 2px; margin: 0 1px; }
.legend { display: flex; flex-wrap: wrap; gap: 4px 14px; font-size: 12px; margin: 2px 0 4px; }
.legend .tok { font-family: ui-monospace, monospace; padding: 0 4px; }
.legend .note { color: var(--body-text-color); opacity: .75; }
.run-head { padding: 0 4px 4px; }
.run-head b { font-size: 15px; display: block; }
.run-head .meta { font-size: 12px; color: var(--body-text-color-subdued);
  font-variant-numeric: tabular-nums; }
"""


@dataclass(frozen=True)
class Span:
    """One token as shown: its text, its fate (a CSS class) and the hover text."""

    text: str
    fate: str
    tip: str


class SpanBuilder:
    """Turns a run's events into spans as they arrive, decoding each emitted token once.

    `piece(token)` gives the text an emitted token adds to the output (text.TokenPieces.add);
    `alone(token)` decodes a token on its own, for rejected drafts that never join the output;
    `special` holds the ids to show as discreet labels (EOS and friends); `greedy` picks the
    hover wording (no residual is sampled when greedy).
    """

    def __init__(
        self,
        piece: Callable[[int], str],
        alone: Callable[[int], str],
        special=frozenset(),
        greedy: bool = False,
    ):
        self.piece, self.alone, self.special, self.greedy = piece, alone, frozenset(special), greedy
        self.spans: list[Span] = []

    def add(self, event: StepEvent) -> None:
        self.spans.extend(event_spans(event, self.piece, self.alone, self.special, self.greedy))


def event_spans(event: StepEvent, piece, alone, special=frozenset(), greedy: bool = False) -> list[Span]:
    """The spans of one target call, in reading order."""
    spans = []
    n = event.n_accepted
    for i, token in enumerate(event.emitted):
        if i == n:  # the target's own token: first show the drafts it overruled
            spans += [
                Span(alone(event.drafts[j].token), REJECTED, draft_tip(event, j))
                for j in range(n, len(event.drafts))
            ]
        # Byte-level tokens may end inside a character: such a token adds no text yet (its
        # character shows with the next token) and is drawn as a thin sliver of its colour.
        text = piece(token)  # always, so the decoder keeps its place
        if token in special:
            spans.append(Span(alone(token), SPECIAL, f"special token {alone(token)}"))
        else:
            spans.append(
                Span(text, ACCEPTED, draft_tip(event, i))
                if i < n
                else Span(text, event.next_fate, next_tip(event, greedy))
            )
    return spans


def draft_tip(event: StepEvent, i: int) -> str:
    """Hover text of draft position i: the numbers that decided its fate."""
    d = event.drafts[i]
    head = f"target call {event.index + 1}, draft position {i + 1}{chosen(event)}"
    numbers = f"p(x) = {d.p:.3f}   q(x) = {d.q:.3f}"
    if d.fate == REJECTED and i > event.n_accepted:
        return f"{head}: rejected unread (an earlier draft was rejected)\n{numbers}"
    if d.uniform is None:  # greedy: accept exactly while the draft matches the target's argmax
        why = (
            "matches the target's top token" if d.fate == ACCEPTED else "differs from the target's top token"
        )
        return f"{head}: {d.fate} (greedy: {why})\n{numbers}"
    sign = "<" if d.fate == ACCEPTED else "≥"
    return (
        f"{head}: {d.fate}\n{numbers}\n"
        f"min(1, p/q) = {d.accept_prob:.3f}   u = {d.uniform:.3f} {sign} {d.accept_prob:.3f}"
    )


def chosen(event: StepEvent) -> str:
    """Which source a drafter of several (the hybrid) drafted the step from, and why; else nothing."""
    return f" (the hybrid drafted {event.why})" if event.why else ""


def next_tip(event: StepEvent, greedy: bool = False) -> str:
    """Hover text of the token the target added itself."""
    head = f"target call {event.index + 1}{chosen(event)}"
    if event.next_fate == RESAMPLED and not greedy:
        return (
            f"{head}: resampled; after the rejection the target drew it from norm(max(0, p - q))\n"
            f"residual probability = {event.next_p:.3f}"
        )
    where = {
        RESAMPLED: "the target's top token, in place of the rejected draft (greedy)",
        BONUS: "bonus; every draft was accepted, and the same target call gives one more token from p",
        TARGET: "target token (plain decoding: one target call per token)",
    }[event.next_fate]
    return f"{head}: {where}\np(x) = {event.next_p:.3f}"


def render_spans(spans: list[Span], placeholder: str = "waiting…") -> str:
    """The run's text as escaped, coloured spans inside a monospace, whitespace-preserving box."""
    body = "".join(
        f'<span class="tok {s.fate}" title="{html.escape(s.tip)}">{html.escape(s.text)}</span>' for s in spans
    )
    return f'<div class="race-text">{body or f"<span class=empty>{html.escape(placeholder)}</span>"}</div>'


def render_run(title: str, subtitle: str, spans: list[Span], placeholder: str = "waiting…") -> str:
    """A run's heading line (name, live counters) above its text box."""
    return (
        f'<div class="run-head"><b>{html.escape(title)}</b>'
        f'<span class="meta">{html.escape(subtitle) or "&nbsp;"}'
        f"</span></div>{render_spans(spans, placeholder)}"
    )


def legend_html(fates=(ACCEPTED, REJECTED, RESAMPLED, BONUS, TARGET)) -> str:
    """One coloured sample per fate, with what it means; the hover text says more."""
    items = "".join(
        f'<span><span class="tok {fate}" title="{html.escape(note)}">{html.escape(label)}</span> '
        f'<span class="note">{html.escape(note)}</span></span>'
        for fate, label, note in LEGEND
        if fate in fates
    )
    return f'<div class="legend">{items}</div>'


SHOWN_AS = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍", "\x7f": "␡"}


def visible(text: str) -> str:
    """A token's text with whitespace and control characters made visible: ' def' -> '␣def',
    '\\n' -> '↵', '\\x05' -> '␅' (raw control characters also break plotly's labels)."""
    if text == "":
        return "∅"
    return "".join(SHOWN_AS.get(ch) or (chr(0x2400 + ord(ch)) if ord(ch) < 32 else ch) for ch in text)
