"""One speculative step per click: a paused engine run kept per session.

`generate` is already a step-at-a-time iterator (one StepEvent per target call, no work between
events), so a Stepper just holds one and advances it on demand. It lives in the session's
gr.State: never shared across sessions, closed when the session's state expires or the user
goes back to the start. While paused it holds the pair's models (a run in progress does), but
only until the pair cache evicts that pair (a pair switch in any tab, or memory needed): then it
lets go (`release`), and the next click reloads the pair and replays the same seeded steps
(`resume`), so the run continues exactly where it was.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

from playground.config import RunConfig
from playground.engine.events import StepEvent
from playground.app.shared.track import RunTrack, new_track
from playground.app.shared.render import visible

DETAIL = 20  # top tokens the engine records per distribution; the page draws fewer
CONTEXT_CHARS = 600  # how much of the text so far the page shows before the new text


@dataclass
class Stepper:
    key: tuple  # (prompt, text so far, settings): a different key means starting over
    pair: object  # the loading.LoadedPair this run uses
    events: Iterator[StepEvent]
    track: RunTrack  # the events so far and the coloured text they make
    label: Callable[[int], str]  # a token as visible text (spaces and newlines shown)
    context: str  # the text so far the user gave, shown greyed before the new text
    greedy: bool
    drafter: str
    source: object = None  # the drafter itself: what it did is read from it (a self-drafter's layers)
    finished: bool = False
    history: list[StepEvent] = field(default_factory=list)

    def step(self) -> StepEvent | None:
        """Run one target call (draft, verify, accept); None once the run has finished."""
        if self.finished:
            return None
        try:
            event = next(self.events)
        except StopIteration:
            self.finished = True
            return None
        self.track.add(event)
        self.history.append(event)
        self.finished = event.finish is not None
        return event

    @property
    def note(self) -> str:
        """What the drafter did, as the Draft stage explains it."""
        from playground.app.stepthrough.view import drafter_note

        layers = getattr(self.source, "layers", None)
        return drafter_note(self.drafter, layers, getattr(self.source, "total_layers", None))

    def close(self) -> None:
        """Stop the engine run (its generator) so nothing of it lingers."""
        if self.events is not None:
            self.events.close()

    def release(self) -> None:
        """Let go of the pair's models (the cache evicted the pair); `resume` picks up from here."""
        self.close()
        self.events, self.pair = None, None

    @property
    def released(self) -> bool:
        return self.pair is None

    def resume(self, pair) -> None:
        """Continue on a reloaded pair: a fresh run of the same prompt and settings, advanced through
        the steps already shown. Its generator is seeded, so the replayed steps are the same ones."""
        fresh = start(pair, *self.key)
        for shown in self.history:
            replayed = next(fresh.events)
            if replayed.emitted != shown.emitted:
                fresh.close()
                raise RuntimeError("the reloaded models did not reproduce the steps shown so far "
                                   "(different hardware or dtype?); press Back to start")
        self.pair, self.events = pair, fresh.events


def stepper_key(prompt: str, text_so_far: str, settings: RunConfig) -> tuple:
    return (prompt, text_so_far or "", settings)


def start(pair, prompt: str, text_so_far: str, settings: RunConfig) -> Stepper:
    """A paused run on `pair` continuing prompt (+ text so far); raises ValueError naming the field."""
    from playground.engine import factory
    from playground.engine.generate import check_inputs, generate
    from playground.models.text import encode_prompt

    tokenizer = pair.tokenizer
    config = replace(factory.spec_config(settings), detail=DETAIL)
    ids = encode_prompt(tokenizer, prompt)
    if text_so_far:  # the answer so far, continued as the assistant's own words
        ids = ids + tokenizer(text_so_far, add_special_tokens=False)["input_ids"]
    drafter = factory.make_drafter(settings, factory.Models.of(pair, settings))
    check_inputs(pair.target.model, ids, config, drafter, tokenizer)  # fail now, not at the first click
    eos = pair.eos
    events = generate(pair.target.model, ids, config, drafter, eos_token_ids=eos)
    return Stepper(
        key=stepper_key(prompt, text_so_far, settings),
        pair=pair,
        events=events,
        track=new_track("step-through", tokenizer, settings.greedy),
        label=lambda token: visible(tokenizer.decode([token], skip_special_tokens=False)),
        context=(text_so_far or "")[-CONTEXT_CHARS:],
        greedy=settings.greedy,
        drafter=settings.drafter,
        source=drafter,
    )


def close_stepper(stepper) -> None:
    """gr.State's delete_callback: the session is gone or its state expired."""
    if isinstance(stepper, Stepper):
        stepper.close()
