"""The GPU runners script's time budget (measure/hardware/gpu_runners.py): the whole call within
budget_s (8 minutes on a cold card), each check and each row of one started only where what it needs
still fits, and whatever is left out saying why.

What a row needs is mostly compiling. On a bare card whose compile cache is empty each step shape of
a 24-28-layer model compiles for tens of seconds, and one row meets up to four new shapes, so a
deadline for starting rows alone (the script's first budget) let a row started just before it run
minutes past. Here a row's need is its new shapes' layers times the seconds a layer took in the
slowest shape this call has compiled so far (of its deepest model: a small model's fixed costs would
inflate the rate), COLD_S_PER_LAYER until one has compiled, plus `row_s` of running. A row that would
end past the budget is skipped before it starts rather than cut off in its middle.

Nothing here imports torch at module level, so `--help` stays light.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

COLD_S_PER_LAYER = 2.0  # a guess until this call has compiled a shape: 56 s a 28-layer shape, cold
SKIPPED = "skipped"  # every row or check left out says so first, then why


class Budget:
    def __init__(self, total_s: float, row_s: float, started: float | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.total_s, self.row_s, self.clock = total_s, row_s, clock
        self.started = clock() if started is None else started
        # (layers of the deepest model seen compiling, the seconds a layer took in its slowest shape)
        self.per_layer = (0, COLD_S_PER_LAYER)

    def elapsed(self) -> float:
        return self.clock() - self.started

    def learn(self, *models) -> None:
        """The rate a layer compiles at, from the shapes these models compiled (compiled.Steps.seconds):
        the deepest model's slowest shape, which is what the next deep shape will resemble."""
        from playground.engine.runners.static import state_of

        for model in models:
            steps = state_of(model).steps if model is not None else None
            if not steps or not steps.seconds:
                continue
            layers = depth(model)
            rate = max(steps.seconds.values()) / layers
            deepest, known = self.per_layer
            if layers > deepest or (layers == deepest and rate > known):
                self.per_layer = (layers, rate)

    def need(self, shapes: Iterable[tuple[object, int]]) -> tuple[float, str]:
        """Seconds a row needs, and how they were reckoned: `shapes` lists (model, new step shapes it
        will compile)."""
        layers = sum(depth(model) * count for model, count in shapes)
        rate = self.per_layer[1]
        compiling = layers * rate
        source = " (a guess: nothing compiled yet)" if self.per_layer[0] == 0 else ", as this call compiled"
        said = f"{layers} layers of new step shapes to compile at {rate:.1f} s a layer{source}, " \
            if layers else ""
        return compiling + self.row_s, f"{said}{self.row_s:.0f} s of running"

    def skip(self, shapes: Iterable[tuple[object, int]] = ()) -> str | None:
        """None where a row needing `shapes` compiled still ends within the budget; else why it is skipped."""
        need, reckoned = self.need(shapes)
        gone = self.elapsed()
        if gone + need <= self.total_s:
            return None
        return (f"{SKIPPED}: {gone:.0f} s of the call's {self.total_s:.0f} s gone, and this needs about "
                f"{need:.0f} s ({reckoned})")


def depth(model) -> int:
    """A model's layers (1 for one that does not say)."""
    config = getattr(model, "config", None)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return max(1, getattr(text, "num_hidden_layers", 1) or 1)


def new_shapes(model, rows: Iterable[int], head_rows: int | None = None) -> int:
    """How many of the compiled runner's step shapes of `rows` rows (each padded to its bucket) the model
    has not compiled at any capacity yet: what a row on the compiled runner will compile."""
    from playground.engine.runners.compiled import bucket
    from playground.engine.runners.static import state_of

    steps = state_of(model).steps or {}
    have = {key[0] for key in steps if key[2] == head_rows}
    return len({bucket(n) for n in rows if bucket(n) is not None} - have)


def guarded(row, *args) -> dict:
    """One row of a check, or what it raised: a runner that fails on this card is a finding, and the
    rows after it (the other runners, the other shapes) still run."""
    import traceback

    try:
        return row(*args)
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-3000:]}
