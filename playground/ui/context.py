"""What every tab shares: the registry, the pair cache, and the rule that model work queues.

One AppContext is built per demo (never a module global), so tests can build apps side by side.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from .measured import Measurements

# Every event that runs a model takes this: one shared queue for all tabs, one job at a time,
# because the models and the CPU are shared and timings are only honest when nothing else runs.
SERIAL = {"concurrency_id": "models", "concurrency_limit": 1}


@dataclass
class Loading:
    """A progress report while a pair loads: message and fraction done (None: unknown)."""

    message: str
    fraction: float | None = None


@dataclass
class AppContext:
    registry: object  # registry.Registry
    cache: object  # loading.PairCache
    default_pair: str | None = None  # selected when the page opens; None: the registry's default
    frame_every: float = 0.15  # least seconds of computing between two redraws of a streaming view
    # Each session's measured speedups (race, sweep, "measure now"), for the theory view; bounded.
    measurements: Measurements = field(default_factory=Measurements)

    def pair_choices(self) -> list[tuple[str, str]]:
        """(label, name) for the pair dropdown; random-weight and hub-only pairs say so."""
        return [(pair_label(p), name) for name, p in self.registry.pairs.items()]

    def load(self, settings) -> Iterator[Loading]:
        """Load the settings' pair, yielding progress while it loads; returns the LoadedPair.

        Use as `pair = yield from ctx.load(settings)`. The load runs in a worker thread so the
        handler can stream its progress to the page; PairCache's lock makes a second load of the
        same pair (e.g. after Stop during a download) wait for the first instead of repeating it.
        """
        reports: queue.Queue = queue.Queue()
        result: dict = {}

        def work():
            try:
                result["pair"] = self.cache.get(
                    settings.pair,
                    **settings.quantization(),
                    progress=lambda message, fraction: reports.put(Loading(message, fraction)),
                )
            except BaseException as e:  # handed to the handler's thread, which raises it
                result["error"] = e
            reports.put(None)

        threading.Thread(target=work, name="pair-loader", daemon=True).start()
        while (report := reports.get()) is not None:
            yield report
        if "error" in result:
            raise result["error"]
        return result["pair"]


def pair_label(pair) -> str:
    notes = [
        note
        for flag, note in (
            (pair.random_weights, "random weights: gibberish output, instant"),
            (pair.needs_hub, "needs the hub"),
        )
        if flag
    ]
    return f"{pair.name} ({'; '.join(notes)})" if notes else pair.name


def build_context(config: str | None = None, cache=None) -> AppContext:
    """Read models.yaml (or `config`); the cache loads nothing until a run asks for a pair."""
    from ..loading import PairCache
    from ..registry import load_registry

    registry = load_registry(config)
    return AppContext(
        registry, cache if cache is not None else PairCache(registry, keep=1), registry.default_pair
    )
