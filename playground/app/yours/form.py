"""The Your models tab's fields: what a scan, a race and a keep read from the page, each checked before
anything is read, loaded or written; an error names the field as the page shows it."""

from __future__ import annotations

from dataclasses import dataclass

from playground.app.shared.flow import check_prompt, whole
from playground.app.shared.form import Form

MAX_RACE_TOKENS = 256  # a race here is a warm-up and a timed plain and speculative run while the page waits


@dataclass(frozen=True)
class ScanForm(Form):
    """A scan takes nothing from the page: the stores are the machine's, and the folders beside them the
    app's --models-dir (a page never names folders on the machine serving it)."""


@dataclass(frozen=True)
class PickForm(Form):
    """A target and a draft picked from the scan, and how to race them."""

    target: str | None = None
    draft: str | None = None
    prompt: str = ""
    tokens: int = 64  # new tokens per timed run
    name: str = ""  # the pair's name when kept

    def models(self, found):
        """(target, draft) as the scan found them; ValueError naming the field otherwise."""
        if found is None:
            raise ValueError("scan: press Scan first: nothing has been found yet")
        picked = []
        for field in ("target", "draft"):
            value = getattr(self, field)
            if not value:
                raise ValueError(f"{field}: pick one of the models found")
            try:
                picked.append(found.named(value))
            except ValueError as e:
                raise ValueError(f"{field}: {e}") from None
        return tuple(picked)

    def race(self) -> tuple[str, int]:
        """The prompt and tokens a race runs, checked."""
        return check_prompt(self.prompt), whole("max new tokens", self.tokens, 1, MAX_RACE_TOKENS)
