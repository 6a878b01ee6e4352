"""One run as the page follows it: its events, its tokens and the coloured spans of its text.

The Race tab keeps two (the baseline and the speculative run), the Step-through one; both build
them here, so neither tab reaches into the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from playground.engine.events import StepEvent
from playground.app.shared.render import SpanBuilder


@dataclass
class RunTrack:
    """One run as seen so far: its events and the spans of its text."""

    name: str
    spans: SpanBuilder
    events: list[StepEvent] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    finished: bool = False

    @property
    def clock(self) -> float:
        return sum(e.seconds for e in self.events)

    def add(self, event: StepEvent) -> None:
        self.events.append(event)
        self.tokens.extend(event.emitted)
        self.spans.add(event)
        self.finished = event.finish is not None


def new_track(name: str, tokenizer, greedy: bool) -> RunTrack:
    """An empty track whose spans show `tokenizer`'s pieces (special tokens discreetly)."""
    from playground.models.text import TokenPieces

    pieces = TokenPieces(tokenizer)
    alone = lambda token: tokenizer.decode([token], skip_special_tokens=False)  # noqa: E731
    return RunTrack(
        name, SpanBuilder(pieces.add, alone, special=set(tokenizer.all_special_ids), greedy=greedy)
    )
