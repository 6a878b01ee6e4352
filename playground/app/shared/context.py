"""What every tab shares: the registry, the pair cache, and the rule that model work queues.

One AppContext is built per demo (never a module global), so tests can build apps side by side.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from playground.engine.model_thread import ModelThread, device_of
from playground.app.shared.sessions import BoardRuns, LearningDrafters, Measurements
from playground.measure.teach.theory import RunnerCosts

log = logging.getLogger(__name__)

# Every event that runs a model takes this: one shared queue for all tabs, one job at a time,
# because the models and the CPU are shared and timings are only honest when nothing else runs.
SERIAL = {"concurrency_id": "models", "concurrency_limit": 1}


class StopFlag(threading.Event):
    """Stop pressed for one job; `over` is set once the job has ended, however it ended."""

    def __init__(self):
        super().__init__()
        self.over = threading.Event()


class StopFlags:
    """Stop pressed, per browser session. Gradio cancels a streaming job only between two frames;
    a job that checks its flag after each engine step stops within one step instead."""

    def __init__(self):
        self.flags: dict[str | None, StopFlag] = {}
        self.lock = threading.Lock()

    def begin(self, session: str | None) -> StopFlag:
        """A fresh, unset flag for the job this session starts now (replacing an older one)."""
        with self.lock:
            flag = self.flags[session] = StopFlag()
        return flag

    def end(self, session: str | None, flag: StopFlag) -> None:
        """The job is over: say so, and forget its flag (unless a newer job of the session replaced it)."""
        flag.over.set()
        with self.lock:
            if self.flags.get(session) is flag:
                del self.flags[session]

    @contextmanager
    def held(self, session: str | None) -> Iterator[threading.Event]:
        """`with stops.held(session) as flag:` a fresh flag for the job the session runs now, and
        forgotten when the job ends, however it ends (finished, failed, or closed by Gradio's cancel)."""
        flag = self.begin(session)
        try:
            yield flag
        finally:
            self.end(session, flag)

    def press(self, session: str | None) -> StopFlag | None:
        """Raise the session's flag; the flag of the job it stops (None: no job was running)."""
        with self.lock:
            flag = self.flags.get(session)
        if flag is not None:
            flag.set()
        return flag


@dataclass
class Loading:
    """A progress report while a pair loads: message and fraction done (None: unknown)."""

    message: str
    fraction: float | None = None


@dataclass
class Loader:
    """A pair load running in its own thread. It outlives a stopped job; see AppContext.load."""

    key: tuple  # (pair, quantization knobs)
    cancel: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    reports: queue.Queue = field(default_factory=queue.Queue)
    result: dict = field(default_factory=dict)


@dataclass
class AppContext:
    registry: object  # registry.Registry
    cache: object  # pair_cache.PairCache
    default_pair: str | None = None  # selected when the page opens; None: the registry's default
    frame_every: float = 0.15  # least seconds of computing between two redraws of a streaming view
    # Each session's measured speedups (race, sweep, "measure now"), for the theory view; bounded.
    measurements: Measurements = field(default_factory=Measurements)
    # Each session's drafters that learn across its runs (suffix index, recycling table)
    learning: LearningDrafters = field(default_factory=LearningDrafters)
    boards: BoardRuns = field(default_factory=BoardRuns)  # each session's finished drafts-board entries
    # c and v(k) per (model, runner), measured once per app run: the Theory, Lesson and race tabs read them
    costs: RunnerCosts = field(default_factory=RunnerCosts)
    # each pair's γ as followed on this machine (measure/bench/follow.py), once a load measured it: pair -> Followed,
    # the one for the context bucket of the latest load; (pair, bucket) -> Followed: each measured once
    followed: dict = field(default_factory=dict)
    followed_at: dict = field(default_factory=dict)
    loader: Loader | None = None  # the latest pair load; still running after a Stop until finished
    stops: StopFlags = field(default_factory=StopFlags)  # Stop pressed, per session
    wait_report_s: float = 1.0  # how often a job waiting for an earlier load says so
    config: str | None = None  # the models.yaml read (None: the default), read again with the user's pairs
    models_dirs: tuple[str, ...] = ()  # folders the scan of your models walks beside the stores (--models-dir)
    picks: dict = field(default_factory=dict)  # pairs picked from the scan and raced, not kept: name -> (models, pair)
    found: object = None  # the latest scan of your models (models/scan/listing.Scan), this machine's
    # every pair and draft dropdown of the page (controls.py registers them), so a pair kept or raced from
    # the scan shows in all of them at once (app/demo.py wires it)
    pair_controls: list = field(default_factory=list)
    draft_controls: list = field(default_factory=list)
    # every forward of a GPU's models on one long-lived thread (compiled steps keep their graphs per thread)
    model_thread: ModelThread = field(default_factory=ModelThread)

    def on_models(self, pair):
        """Where a lockstep job on this loaded pair's models runs (lockstep's `start`): its device's model
        thread on a GPU, a thread of its own on a CPU (model_thread.py)."""
        return self.model_thread.start(device_of(pair))

    def pair_choices(self) -> list[tuple[str, str]]:
        """(label, name) for the pair dropdown; random-weight and hub-only pairs say so, and yours whether
        its models are still where they were kept."""
        return [(pair_label(p, self.registry), name) for name, p in self.registry.pairs.items()]

    def refresh(self) -> None:
        """Read models.yaml and the user's kept pairs again (another process may have kept one), with this
        app's picks from the scan; the pair cache follows (models/pair_cache.PairCache.use). A models.yaml
        edited into an error since the app started leaves the registry as it was (the page keeps serving;
        the next start says what is wrong)."""
        from playground.models.registry import load_registry

        try:
            registry = load_registry(self.config)
        except ValueError:
            log.exception("reading the model registry again failed; keeping the one read before")
            return
        for models, pair in self.picks.values():
            registry = registry.with_models({n: m for n, m in models.items() if n not in registry.models},
                                            {pair.name: pair} if pair.name not in registry.pairs else {})
        self.registry = registry
        self.cache.use(registry)

    def drafter_for(self, session: str | None, pair, settings):
        """The run's drafter: the session's own for a drafter that learns across runs, else a fresh one."""
        from playground.config import LEARNING
        from playground.engine import factory

        def make():
            return factory.make_drafter(settings, factory.Models.of(pair, settings))

        if settings.drafter not in LEARNING:
            return make()
        return self.learning.get(session, factory.drafter_settings(settings), make)

    def suggested(self, pair: str | None, draft: str = "") -> dict:
        """The knobs a pair suggests (models.yaml), its γ as followed on this machine once measured."""
        spec = self.registry.pair(pair or self.default_pair)
        knobs = spec.suggested(draft)
        followed = self.followed.get(spec.name)
        if followed is not None and draft in ("", spec.draft):
            knobs["gamma"] = followed.gamma
        return knobs

    def draft_choices(self) -> list[tuple[str, str]]:
        """(label, name) for the draft dropdown: the pair's own draft, then every model of the registry."""
        return [("the pair's own draft", ""), *((name, name) for name in self.registry.models)]

    def load(self, settings) -> Iterator[Loading]:
        """Load the settings' pair, yielding progress while it loads; returns the LoadedPair.

        Use as `pair = yield from ctx.load(settings)`. The load runs in a worker thread so the
        handler can stream its progress to the page. Stop ends the job, not the thread. What then
        happens to that load is decided by the next job, and shown on its page:
        - the same pair (Run again after a Stop mid-download): it waits for that load and uses it;
        - another pair: it cancels that load at its next progress report (a download part, a
          conversion, a model), waits until it has let go of its memory, then loads its own.
        So two loads never compete for memory and cores.
        """
        # the same pair whether or not its draft loads now (a later job loads it on the kept pair)
        key = (settings.pair, tuple(sorted((k, v) for k, v in settings.loading().items() if k != "with_draft")))
        previous = self.loader
        if previous is not None and not previous.done.is_set():
            if previous.key == key:
                message = f"continuing the load of {settings.pair} started before Stop"
            else:
                previous.cancel.set()
                message = (f"stopping the load of {previous.key[0]} left running by Stop, so that "
                           f"{settings.pair} gets the memory")
            yield Loading(message)
            while not previous.done.wait(self.wait_report_s):
                yield Loading(message)
        loader = self.loader = Loader(key)

        def progress(message, fraction):
            if loader.cancel.is_set():
                from playground.models.pair_cache import Cancelled

                raise Cancelled(f"the load of {settings.pair} was cancelled for another pair")
            loader.reports.put(Loading(message, fraction))

        def work():
            from playground.measure.bench.resident import mark

            try:
                mark()  # the baseline of the measured resident memory: the first load's, before it
                loader.result["pair"] = self.cache.get(settings.pair, **settings.loading(),
                                                       progress=progress)
            except BaseException as e:  # handed to the handler's thread, which raises it
                loader.result["error"] = e
            loader.done.set()
            loader.reports.put(None)

        threading.Thread(target=work, name="pair-loader", daemon=True).start()
        while (report := loader.reports.get()) is not None:
            yield report
        if "error" in loader.result:
            raise loader.result["error"]
        return loader.result.pop("pair")  # the loader keeps no reference: eviction must free it


def pair_label(pair, registry=None) -> str:
    from playground.models.userpairs import status

    models = [registry.models.get(pair.target), registry.models.get(pair.draft)] if registry else []
    changed = [said.split(":")[0] for m in models if m is not None and (said := status(m))]
    notes = [
        note
        for flag, note in (
            (pair.random_weights, "random weights: gibberish output, instant"),
            (pair.needs_hub, "needs the hub"),
            (pair.kept, "yours"),
            (bool(changed), f"a model {' and '.join(dict.fromkeys(changed))} since kept"),
        )
        if flag
    ]
    return f"{pair.name} ({'; '.join(notes)})" if notes else pair.name


def build_context(config: str | None = None, cache=None, models_dirs=()) -> AppContext:
    """Read models.yaml (or `config`) and the user's kept pairs; the cache loads nothing until a run asks
    for a pair. `models_dirs`: folders the Your models tab scans beside the usual stores."""
    from playground.models.pair_cache import PairCache
    from playground.models.registry import load_registry

    registry = load_registry(config)
    if cache is not None:
        cache.use(registry)
    return AppContext(registry, cache if cache is not None else PairCache(registry, keep=1), registry.default_pair,
                      config=config, models_dirs=tuple(str(d) for d in models_dirs))
