"""What every teaching and tuning handler does the same way: read the knobs, load the pair while
streaming its progress, and turn an error into a message in the page (never a traceback).

Handlers yield one tuple per redraw; `n` is the number of outputs and `at` the index of the
status box among them. Everything but the status box is left as it is (gr.skip()).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import gradio as gr

from .context import Loading
from .settings import RunSettings
from .tab_race import status_html

log = logging.getLogger(__name__)


def status_only(n: int, at: int, html: str) -> tuple:
    out = [gr.skip()] * n
    out[at] = html
    return tuple(out)


def fail(n: int, at: int, message: str):
    """Show the error in the status box, then raise it as a Gradio error: `yield from fail(...)`
    ends the handler, and the app keeps serving."""
    yield status_only(n, at, status_html(f"⚠ {message}", error=True))
    raise gr.Error(message, print_exception=False)


def loading(progress: Iterator[Loading], n: int, at: int):
    """Stream load progress to the status box; returns what the loader returns (the pair)."""
    while True:
        try:
            report = next(progress)
        except StopIteration as done:
            return done.value
        yield status_only(n, at, status_html(f"Loading: {report.message}", report.fraction))


def load_pair(ctx, settings: RunSettings, n: int, at: int):
    """`pair = yield from load_pair(...)`: the settings' pair, or a message in the page."""
    try:
        return (yield from loading(ctx.load(settings), n, at))
    except ValueError as e:
        yield from fail(n, at, str(e))
    except Exception as e:  # offline, disk full, no source: say so, keep serving
        log.exception("loading pair %s failed", settings.pair)
        yield from fail(n, at, f"Could not load pair {settings.pair!r}: {e}")


def read_settings(values: dict) -> RunSettings:
    """RunSettings from page values, checked as far as the engine would (ValueError names the field)."""
    settings = RunSettings.from_values(values)
    settings.spec_config()
    return settings


def check_prompt(prompt) -> str:
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError("prompt must be non-empty text")
    return prompt


def whole(name: str, value, low: int, high: int) -> int:
    """A page number that must be a whole number in [low, high]; the error names the field."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name} must be a whole number in [{low}, {high}], got {value!r}")
    return value
