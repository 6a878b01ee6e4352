"""The GPU runners script's fallback check (measure/hardware/gpu_runners.py): auto's fallback on this card
on two planted failures (a compile that raises, a compiled step whose argmax is not eager's), on the
draft's head cut to DRAFT_ROWS (a key of its own, so the real choices and steps stay as they are):
eager kept, the reason recorded, nothing half compiled left. auto's real choices for the pair are the
app check's (gpu_app.py, through warmup.choose as the page makes them). Choices are recorded in a
folder of the call's own (own_choices); under --cpu-smoke the models count as on a card named
"CPU stand-in", so the GPU's candidates run on the CPU.
"""

from __future__ import annotations

import tempfile
import time

DRAFT_ROWS = 65536  # the planted failures run on the draft's head cut to this: choices and steps of their own


def fallback(args, draft, budget) -> dict:
    """Each planted failure measured afresh (a folder of choices of its own), eager kept with why."""
    from playground.engine.runners import compile_seconds

    rows = min(DRAFT_ROWS, draft.config.vocab_size // 2)
    out, before = {}, compile_seconds(draft)
    for name, plant in PLANTS.items():
        with own_choices(args.cpu_smoke):  # each plant measured afresh, not read back from the one before
            out[f"planted: {name}"] = budget.skip() or planted_choice(draft, rows, plant)
    out["compile_s"] = round(max(0.0, compile_seconds(draft) - before), 2)  # a planted compile keeps nothing
    return out


def timed_choice(model, rows, verifies: bool = False, context: int | None = None) -> dict:
    """auto's choice measured now (auto.record), with the seconds it took and in words."""
    from playground.engine.runners.auto import choice_text, record

    started = time.monotonic()
    choice = record(model, rows, verifies, context)
    return {**choice, "seconds": round(time.monotonic() - started, 2), "said": choice_text(choice)}


def raising(real):
    def compile_step(name, mode, own_buffer):
        def step(*args):  # torch.compile traces at the first call: where a real failure shows
            raise RuntimeError("planted: an op the compiler cannot trace")
        return step
    return compile_step


def argmax_moved(real):
    def compile_step(name, mode, own_buffer):
        import torch

        from playground.engine.runners.static import step as static_step

        def step(*args):  # eager's step, uncompiled, with token 0 pushed over every other logit
            out = static_step(*args)
            return out.index_fill(-1, torch.tensor([0], device=out.device), float(out.max()) + 10)
        return step
    return compile_step


PLANTS = {"a compile that raises": raising, "a compiled step whose argmax is not eager's": argmax_moved}


def planted_choice(draft, rows: int, plant) -> dict:
    """auto's choice for the draft's cut head with compiled's step replaced by a planted failure; the
    steps the model keeps for that head afterwards (none: nothing half compiled is left)."""
    from playground.engine.runners import compiled
    from playground.engine.runners.compiled import steps_of

    real = compiled.compile_step
    compiled.compile_step = plant(real)
    steps = steps_of(draft)
    try:
        row = timed_choice(draft, rows)
    finally:
        compiled.compile_step = real
        for key in [key for key in steps.failed if key[2] == rows]:  # a planted failure is not the model's:
            del steps.failed[key]  # the next plant compiles afresh (a real one runs uncompiled for the session)
    row["steps_left_for_this_head"] = len([key for key in steps if key[2] == rows])
    return row


class own_choices:
    """auto's records in a temporary folder for the check's length (the call's choices are its own);
    under --cpu-smoke every model counts as on a card named "CPU stand-in"."""

    def __init__(self, smoke: bool):
        self.smoke = smoke

    def __enter__(self):
        import weakref

        from playground.engine.runners import auto, choice

        self.folder = tempfile.TemporaryDirectory(prefix="gpu-runners-choices-")
        self.saved = {(module, name): getattr(module, name) for module in (auto, choice)
                      for name in ("device_kind", "choice_file", "card_name", "SEEN") if hasattr(module, name)}
        choice.choice_file = lambda: __import__("pathlib").Path(self.folder.name) / "runner-choice.json"
        choice.SEEN = weakref.WeakKeyDictionary()
        if self.smoke:
            auto.device_kind = choice.device_kind = lambda model: "cuda"
            choice.card_name = lambda device: "CPU stand-in"
        return self

    def __exit__(self, *exc):
        for (module, name), value in self.saved.items():
            setattr(module, name, value)
        self.folder.cleanup()
