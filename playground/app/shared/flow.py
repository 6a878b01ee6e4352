"""What every tab's handler does the same way: check its form, load the pair while streaming its
progress, turn an error into a message in the page (never a traceback), and wire its Run and
Stop buttons.

A model job's handler takes one object, the tab's form (form.py): its inputs, declared once. It
yields one dict per redraw, keyed by the components it changes (Gradio leaves the others as they
are), so no handler counts output positions. A tab's outputs are a small dataclass of components
(its view); `outputs(view)` lists them in field order, which is the order the API returns them in.
The usual handler reads

    settings = yield from parsed(view.status, form.parse)        # a bad field: a message, nothing loads
    pair = yield from load_pair(ctx, settings, view.status)       # progress in the status box
    yield from guarded(view.status, work(...), "The X failed")    # any failure: a message, not a traceback
"""

from __future__ import annotations

import html
import logging
import re
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, fields
from typing import TypeVar

import gradio as gr

from playground.config import RunConfig
from playground.app.shared.context import SERIAL, Loading, StopFlags
from playground.app.shared.form import Form
from playground.engine.model_thread import device_of
from playground.app.shared.sessions import session_of

log = logging.getLogger(__name__)
T = TypeVar("T")
# how long Stop waits for a job that checks its flag to end before it answers (a job in a load, which
# does not check it, is left to Gradio's cancel)
STOP_WAIT_S = 2.0


def status_html(message: str, fraction: float | None = None, error: bool = False) -> str:
    bar = f' <progress value="{fraction:.3f}" max="1"></progress>' if fraction is not None else ""
    color = "#b42318" if error else "var(--body-text-color-subdued)"
    return f'<div style="color:{color};font-size:13px;white-space:pre-wrap">{html.escape(message)}{bar}</div>'


def outputs(view) -> list:
    """A view's components in field order: the event's outputs, and the API's result order."""
    return [getattr(view, f.name) for f in fields(view)]


@dataclass(frozen=True)
class Stop:
    """A tab's Stop button, as one object. Pressing it cancels the job, answers on the API as
    `api_name`, and leaves `message` in the status box. Gradio's cancel lands only between two
    frames; with `flags` (the context's StopFlags) Stop also raises the session's flag, which a
    handler that checks it after each engine step honours within one step."""

    button: gr.Button
    api_name: str | None = None
    message: str = "Stopped."
    flags: StopFlags | None = None

    def cancels(self, job, status) -> None:
        def on_stop(request: gr.Request):
            stopped = self.flags.press(session_of(request)) if self.flags is not None else None
            if stopped is not None:
                # answer once the job has ended (within an engine step where it checks its flag): a
                # frame it had in flight then lands before this message, not over it
                stopped.over.wait(STOP_WAIT_S)
            return status_html(self.message)

        self.button.click(on_stop, None, status, cancels=[job], queue=False, api_name=self.api_name)


def model_job(button, handle, form: Form, outputs, status, api_name: str, stop: Stop | None = None):
    """Wire a button to `handle(form)`, a handler that runs the models: one job at a time across the
    app (the hardware is shared), progress on the status box, Stop cancelling it between steps.

    `form` is the tab's form built of its components; each becomes an API parameter under its field's
    name (the knobs under theirs: `gamma`, `temperature`, ...), so a client may pass them by name. On a
    click the handler gets the form again, of the values as the page sent them (preprocess=False: the
    form's checks name the field, where Gradio's range check would not; see controls.py)."""

    def event(request: gr.Request, progress=gr.Progress(), **values) -> Iterator[dict]:
        yield from handle(form.read(values, session_of(request), progress))

    job = button.click(event, None, outputs, inputs_kwargs=form.controls(), api_name=api_name,
                       show_progress="minimal", show_progress_on=[status], preprocess=False, **SERIAL)
    if stop is not None:
        stop.cancels(job, status)
    return job


def parsed(status, parse: Callable[[], T]) -> Generator[dict, None, T]:
    """`settings = yield from parsed(view.status, form.parse)`: the form's values checked before
    anything loads; a ValueError (which names the field) becomes the message in the status box."""
    try:
        return parse()
    except ValueError as e:
        yield from fail(status, str(e))


def random_weights_note(pair, real: str = "the mechanics are real") -> str:
    """The status line's last line on a random-weight pair: the text is gibberish by design, and what
    the tab shows is still real; nothing on any other pair."""
    return f"\nRandom-weight pair: the text is gibberish, {real}." if pair.random_weights else ""


# An absolute path: a slash not following a word character, dot or slash (so not 1/2 or a URL),
# then path segments. The page gets its last segment (the file's name) instead.
ABSOLUTE_PATH = re.compile(r"(?<![\w/.~])(?:~)?/(?:[\w.+@-]+/)*([\w.+@-]+)")


def public(message: str) -> str:
    """A message fit for the page and the API: server-side paths become file names, so the page never
    shows where the server keeps its files (its user, its cache, its checkout)."""
    return ABSOLUTE_PATH.sub(lambda m: m.group(1), message)


def fail(status, message: str):
    """Show the error in the status box (a component), then raise it as a Gradio error:
    `yield from fail(...)` ends the handler, and the app keeps serving. Server-side paths are
    reduced to file names."""
    message = public(message)
    yield {status: status_html(f"⚠ {message}", error=True)}
    raise gr.Error(message, print_exception=False)


def guarded(status, work: Iterator, failed: str):
    """`result = yield from guarded(view.status, work, "The lab failed")`: stream a model job's work (a
    generator of redraws) and return its result; settings or a prompt the models cannot take
    (ValueError) and any other failure become a message in the status box, never a traceback."""
    try:
        return (yield from work)
    except ValueError as e:
        yield from fail(status, str(e))
    except Exception as e:
        log.exception(failed)
        yield from fail(status, f"{failed}: {type(e).__name__}: {e}")


def at_once(compute: Callable[[], T]) -> Generator[dict, None, T]:
    """Work that streams nothing, as the generator guarded() runs:
    `value = yield from guarded(view.status, at_once(stepper.step), "Generation failed")`."""
    yield from ()
    return compute()


def loading(progress: Iterator[Loading], status):
    """Stream load progress to the status box; returns what the loader returns (the pair)."""
    while True:
        try:
            report = next(progress)
        except StopIteration as done:
            return done.value
        yield {status: status_html(f"Loading: {report.message}", report.fraction)}


def load_pair(ctx, settings: RunConfig, status, prompt: tuple[str, str] | None = None, head: bool = False):
    """`pair = yield from load_pair(ctx, settings, view.status)`: the settings' pair, its step shapes
    compiled when the runner is compiled (see compiling), or a message in the status box.
    `prompt` (text, system prompt), when a tab knows it: also the longer caches that prompt needs.
    `head`: the settings' draft vocabulary is the pair's suggestion, so the draft's head is chosen on
    this machine while compiling and the pair's γ follows the head kept (drafted_head: the settings
    as the run then drafts)."""
    try:
        pair = yield from loading(ctx.load(settings), status)
    except ValueError as e:
        yield from fail(status, str(e))
    except Exception as e:  # offline, disk full, no source: say so, keep serving
        log.exception("loading pair %s failed", settings.pair)
        yield from fail(status, f"Could not load pair {settings.pair!r}: {e}")
    yield from warmed(ctx, pair, settings, status, prompt, head)
    yield from following(ctx, pair, drafted_head(pair, settings) if head else settings, status,
                         prompt_length(pair, settings, prompt))
    return pair


def warmed(ctx, pair, settings: RunConfig, status, prompt: tuple[str, str] | None = None, head: bool = False):
    """`yield from warmed(...)`: compiling(...) on the pair's model thread, where every later forward of the
    pair runs (a GPU's compiled graphs are kept per thread: model_thread.py); a failure is a message."""
    yield from guarded(status, ctx.model_thread.iterate(device_of(pair), compiling(pair, settings, status, prompt,
                                                                                      head)),
                       f"Could not compile the steps of {settings.pair or 'the default pair'}")


def drafted_head(pair, settings: RunConfig) -> RunConfig:
    """The settings as their draft drafts with the head measured faster on this machine (the whole one
    where the cut measured slower: runners/warmup.chosen_head), for a draft vocabulary the pair chose."""
    from playground.engine import factory
    from playground.engine.runners.warmup import chosen_head
    from playground.measure.bench.machine import spare_a_core

    with spare_a_core():  # the threads compiling measured the head for: a choice holds for its threads
        return chosen_head(factory.Models.of(pair, settings).draft, settings)


def following(ctx, pair, settings: RunConfig, status, prompt_tokens: int | None = None):
    """Once per app run, pair and context bucket: the pair's γ followed on this machine
    (measure/bench/follow.py: its α from models.yaml, c and v(k) measured now at the page's threads, for
    a run of the settings' new tokens after a prompt of `prompt_tokens` where the tab knows it), said in
    the status box; from then on the page suggests that γ for the pair, until a prompt of another bucket
    follows it again. Nothing for a pair without α, another draft or a drafter with no model; a failed
    measurement leaves the suggestion as it was and the run goes on."""
    from playground.engine.runners.choice import bucket_of
    from playground.engine.runners.warmup import run_context
    from playground.measure.bench.follow import follows, measure
    from playground.measure.bench.machine import spare_a_core

    spec = ctx.registry.pair(settings.pair or ctx.default_pair)
    bucket, known = bucket_of(run_context(settings, prompt_tokens)), ctx.followed.get(spec.name)
    if not follows(spec, settings) or (known is not None and known.context == bucket):
        return
    if (spec.name, bucket) in ctx.followed_at:  # followed for this length before: suggested again
        ctx.followed[spec.name] = ctx.followed_at[spec.name, bucket]
        return
    from playground.engine.runners import COMPILED
    from playground.engine.runners.warmup import TARGET, runner_of

    compiles = runner_of(settings, pair.target.model, TARGET, None, bucket) == COMPILED
    yield {status: status_html("Measuring the draft's cost c and the target's v(k) on this machine, so the "
                               "pair's γ follows it (once, a few seconds" +
                               ("; the target's 2- to 8-row steps are compiled first where not yet, tens of "
                                "seconds on a GPU, outside the timing" if compiles else "") + ")…")}
    try:
        with spare_a_core():
            followed = ctx.model_thread.run(device_of(pair), measure, pair, spec, settings, ctx.costs.store,
                                            prompt_tokens)
        ctx.followed[spec.name] = ctx.followed_at[spec.name, followed.context] = followed
    except Exception:  # the run does not need it: say nothing more than the log does
        log.exception("following the γ of %s failed", spec.name)
        return
    yield {status: status_html(f"{followed.line()}.")}  # it begins with γ, which has no capital here


def compiling(pair, settings: RunConfig, status, prompt: tuple[str, str] | None = None, head: bool = False):
    """Right after the pair loads, compile the step shapes the settings' run will meet (runner
    compiled), or build the onnxruntime models and measure auto's runner (runner onnxruntime or auto)
    and, given `head`, the draft's head (see load_pair), with progress in the status box as loading
    shows it: the first run then neither
    waits for a compile in mid-race nor carries one. Once per pair and shape for the session; a
    shape already compiled is skipped, so this yields nothing the second time."""
    from playground.engine import factory
    from playground.engine.runners.warmup import warm_up
    from playground.measure.bench.machine import spare_a_core

    factory.check_models(settings, factory.Models.of(pair, settings))  # before anything is built for it
    length = prompt_length(pair, settings, prompt)
    with spare_a_core():  # the threads the page's runs use: auto's runner is measured for those
        draft = factory.Models.of(pair, settings).draft  # None for a drafter that never runs the draft model
        for event in warm_up(pair.target.model, draft, settings, length, head):
            share = (event.index - (not event.done)) / event.total if hasattr(event, "index") else float(event.done)
            yield {status: status_html(compile_message(event), share)}


def prompt_length(pair, settings: RunConfig, prompt: tuple[str, str] | None) -> int | None:
    """The prompt's tokens, or None when unknown or when it does not fit the target's context (the
    run then refuses it, naming the field: nothing is compiled for it first)."""
    from playground.engine import factory
    from playground.engine.generate import context_problem
    from playground.models.text import encode_prompt

    if prompt is None:
        return None
    ids = encode_prompt(pair.tokenizer, prompt[0], system=prompt[1] or None)
    return None if context_problem(pair.target.model, ids, factory.spec_config(settings)) else len(ids)


def compile_message(event) -> str:
    """What the page says of one step of a warm-up (runners/warmup.Making, Compiling, Building or Choosing)."""
    from playground.engine.runners.auto import choice_text
    from playground.engine.runners.warmup import HEAD  # loaded already: it made the event
    from playground.measure.bench.sweep import head_text

    if type(event).__name__ == "Making":  # a model kept as its files gets its PyTorch model
        if not event.done:
            return (f"Making the {event.model}'s PyTorch model from its GGUF file, which this run computes with "
                    "(the default runs on ONNX Runtime without it): a minute or two, once per session…")
        return f"Made the {event.model}'s PyTorch model in {event.seconds:.0f} s."
    if getattr(event, "what", None) == HEAD:  # the draft's head, cut or whole, measured
        if not event.done:
            return ("Timing the draft's plain step with its head cut to the pair's draft vocabulary and whole: "
                    "on this runner a cut head is not cheaper by itself, so the faster drafts. Once per machine, "
                    "a few seconds…")
        said = head_text(event.choice)
        return f"{said[0].upper()}{said[1:]}: the {event.choice['head']} head drafts (kept for this machine)."
    if hasattr(event, "choice"):  # auto's runner, measured
        if not event.done:
            if "compiled" in event.candidates:
                return (f"Timing the {event.model}'s plain step on eager and compiled (its step compiled and "
                        "its CUDA graph recorded first: tens of seconds, not part of any timing), so auto runs "
                        "it on the faster: once per card and model…")
            return (f"Timing the {event.model}'s plain step on {' and '.join(event.candidates)}, so auto "
                    "runs it on the faster: once per machine, a few seconds (a model kept as its GGUF is "
                    "timed on eager as a random-weight twin of the same shapes, its PyTorch model not made)…")
        return f"auto runs the {event.model} on {choice_text(event.choice)} (kept for this machine)."
    if not hasattr(event, "rows"):  # an onnxruntime build
        if not event.done:
            beside = " side by side with the other" if event.beside > 1 else ""
            return (f"Building the {event.model}'s ONNX model for runner onnxruntime ({event.index} of "
                    f"{event.total}{beside}), once per model: a minute or two the first time, not part of any "
                    "timing…")
        if getattr(event, "same_as", None):  # reached by another path to bytes built before
            return f"ONNX build found for the {event.model}: same bytes as {event.same_as}, nothing to build."
        return (f"The {event.model}'s ONNX model was in the cache." if not event.seconds else
                f"Built the {event.model}'s ONNX model in {event.seconds:.0f} s (kept in the cache).")
    shape = f"shape {event.rows}: {event.rows} row{'s' if event.rows > 1 else ''} a forward, {event.capacity}-entry cache"
    if not event.done:
        return (f"Compiling {event.model} step {event.index} of {event.total} ({shape}), once per pair "
                "and session; not part of any timing…")
    if getattr(event, "failed", None):
        return (f"Could not compile {event.model} step {event.index} of {event.total} ({shape}): {event.failed}. "
                "It runs uncompiled, and auto runs this model on eager from the next load.")
    return f"Compiled {event.model} step {event.index} of {event.total} ({shape}) in {event.seconds:.1f} s."


def read_settings(values: dict) -> RunConfig:
    """RunConfig from page values, checked as far as the engine would (ValueError names the field)."""
    from playground.engine import factory
    settings = RunConfig.from_values(values)
    factory.spec_config(settings)
    return settings


MAX_PROMPT_CHARS = 50_000  # past any context a CPU run can use; refusing early saves tokenizing megabytes


def check_prompt(prompt, field: str = "prompt", empty_ok: bool = False) -> str:
    """Text a tokenizer can take: non-empty (unless `empty_ok`), bounded, no NUL, valid Unicode."""
    if not isinstance(prompt, str) or (not empty_ok and not prompt.strip()):
        raise ValueError(f"{field} must be non-empty text")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise ValueError(f"{field} is {len(prompt)} characters; at most {MAX_PROMPT_CHARS} are allowed")
    if "\x00" in prompt:
        raise ValueError(f"{field} must not contain NUL characters (\\x00); found one at position "
                         f"{prompt.index(chr(0))}")
    try:
        prompt.encode("utf-8")
    except UnicodeEncodeError as e:  # a lone surrogate: JSON can carry it, no tokenizer can encode it
        raise ValueError(f"{field} must be valid Unicode text: a lone surrogate "
                         f"(U+{ord(prompt[e.start]):04X}) at position {e.start}") from None
    return prompt


def whole(name: str, value, low: int, high: int) -> int:
    """A page number that must be a whole number in [low, high]; the error names the field."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name} must be a whole number in [{low}, {high}], got {value!r}")
    return value
