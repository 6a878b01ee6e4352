"""A tab's inputs, declared once, the way its view declares its outputs.

A form is a small frozen dataclass whose fields are what the page sends, in the API's parameter
order. A tab builds it twice: once of its components (its inputs, which flow.model_job wires, each
under its field's name: the API takes `gamma=6` because the field is called gamma), and on every
click flow.model_job builds it again of the values those components sent, with the browser session
the request came from. A field holding a dict (the run's knobs) stands for each of its entries, so
every knob is its own API parameter under its own name.

A handler then takes that one object; a test builds one with values and passes it in directly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace


def quiet(*args, **kwargs) -> None:
    """No progress bar: a handler called directly (a test) has no page to draw one on."""


@dataclass(frozen=True, kw_only=True)
class Form:
    """What every form carries beside the page's values (keyword-only, so a tab's own fields keep
    the API's order): who asked, and Gradio's progress bar over the status box."""

    session: str | None = None  # gr.Request.session_hash; None when a test calls the handler
    progress: Callable = field(default=quiet, repr=False, compare=False)  # gr.Progress, as Gradio passes it

    def controls(self) -> dict:
        """The components of a form built of components, by API parameter name, in field order."""
        named = {}
        for name in page_fields(self):
            held = getattr(self, name)
            named.update(held if isinstance(held, dict) else {name: held})
        return named

    def read(self, values: dict, session: str | None, progress: Callable) -> Form:
        """The same form of the values the page sent (keyed as controls() names them)."""
        page = {}
        for name in page_fields(self):
            held = getattr(self, name)
            page[name] = {key: values[key] for key in held} if isinstance(held, dict) else values[name]
        return replace(self, **page, session=session, progress=progress)


def page_fields(form: Form) -> list[str]:
    """The fields the page fills, in order (not the session and progress every form carries)."""
    return [f.name for f in fields(form) if f.name not in ("session", "progress")]
