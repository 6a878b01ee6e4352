"""Compiling a run's step shapes ahead of it, once per model and shape, with progress (and, for the
onnxruntime runner, building its models: see `Building`).

The compiled runner compiles each step shape on its first call; left to itself that happens in
the middle of the first run (about 25 s a shape for the 1.5B target on two cores, cold), inside
nobody's progress bar. `warm_up` compiles the shapes a run will meet right after its pair loads,
on a throwaway runner, and yields an event before and after each one, so a page can say
"compiling target step 2 of 3 (shape 8)" and then what it took. The seconds are kept with the
model (compiled.Steps), which is how they are reported beside the timings and never inside them.
A shape the model already has is skipped: a second warm-up compiles nothing.

Which shapes a run meets (after its prompt, which runs uncompiled):
- the target: 1 row (plain decoding: the baseline, and a step with no room left for a draft),
  and the verification shape: γ + 1 rows (γmax + 1 when adaptive) for a chain, budget + 1 for a
  tree; a shorter check rides on the smallest compiled shape that holds it.
- a chain's draft: 1 row a draft token, and 2 rows after a fully accepted draft (the last draft
  token and the bonus token, which its cache has not seen).
- a tree's draft: 1 row, and one shape for what a draft forward reads at once: a depth's frontier
  (at most budget / branching nodes, or the width) or the accepted path and the bonus token.
Capacity: a step is compiled per cache capacity too. A run takes, at its start, the one capacity
that holds its prompt, its new tokens and a padded step (static.run_capacity), so given the
prompt's length the warm-up compiles that one capacity and the race never meets another; without
it, the first (256 entries). Span: a step's attention reads the filled entries' span (256, 512, ... up
to the capacity: static.span_of), one compile for them all but a CUDA graph each, so the warm-up
records each span from the prompt's to the capacity's on each cache; without the prompt's length, the
capacity's alone, which serves any length.

Under auto on a GPU each model's runner is measured first (eager against compiled, runners/auto.py,
once per card, model and library versions), and only a model that runs compiled is compiled for.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, replace

from playground.config import DRAFT_MODEL_DRAFTERS, SELF, TREE, RunConfig
from playground.engine.kvcache import CachedModel
from playground.engine.runners import COMPILED, EAGER, ONNXRUNTIME, STATIC, is_handle, module_of, resolve
from playground.engine.runners.compiled import bucket, step_key, steps_of
from playground.engine.runners.choice import DRAFT, TARGET
from playground.engine.runners.static import MIN_CAPACITY, pool_of, run_capacity, spans


@dataclass(frozen=True)
class Compiling:
    """One shape of one model's warm-up: yielded before its compile (seconds None), then after."""

    model: str  # "target" or "draft"
    index: int  # this shape's place among the shapes compiled now for this model, from 1
    total: int  # shapes compiled now for this model (those it already had are not counted)
    rows: int  # rows a step of this shape reads
    capacity: int  # the cache's capacity the step is compiled for
    seconds: float | None = None  # None: about to compile; then what its first call took
    failed: str | None = None  # why compiling or capturing it failed: it runs uncompiled (compiled.Steps.failed)
    reads: int = 0  # entries its attention reads (static.span_of): a CUDA graph is recorded per span

    @property
    def done(self) -> bool:
        return self.seconds is not None


def run_shapes(run: RunConfig) -> dict[str, tuple[int, ...]]:
    """Rows of the compiled steps each model of this run meets, smallest first (see the module's
    docstring); a model that drafts nothing (prompt lookup) has none. Shapes past the largest
    bucket run uncompiled and are left out."""
    if run.speculation == TREE:
        verify = run.tree_budget + 1
        frontier = math.ceil(run.tree_budget / run.tree_branching)
        reads = max(run.tree_depth + 1, min(frontier, run.tree_width) if run.tree_width else frontier)
        draft = (1, bucket(reads))
    else:
        verify = (max(run.gamma, run.gamma_max) if run.adaptive else run.gamma) + 1
        draft = (1, 2)
    shapes = {TARGET: (1, bucket(verify)), DRAFT: draft if run.drafter in DRAFT_MODEL_DRAFTERS else ()}
    return {name: tuple(sorted({b for b in rows if b is not None})) for name, rows in shapes.items()}


def run_capacities(run: RunConfig, prompt_tokens: int | None) -> tuple[int, ...]:
    """The capacity a run of this prompt steps in, taken at its start (static.run_capacity); None: the
    prompt unknown, the first capacity."""
    if prompt_tokens is None:
        return (MIN_CAPACITY,)
    return (run_capacity(prompt_tokens + run.max_new_tokens),)


@dataclass(frozen=True)
class Building:
    """One model's onnxruntime build (onnx_build.py): yielded before it (seconds None), then after;
    0 seconds when the build was found in the cache, with the path it was made from where the model
    reached the same bytes by another one (an Ollama blob of a pack's file): no second build."""

    model: str  # "target" or "draft"
    index: int  # this model's place among the builds checked now, from 1
    total: int
    seconds: float | None = None
    beside: int = 1  # builds running at once, this one among them
    same_as: str | None = None  # found in the cache, built from this other path to the same bytes

    @property
    def done(self) -> bool:
        return self.seconds is not None


RUNNER, HEAD = "runner", "head"  # what a Choosing event chooses
BUILD_HEADROOM = 2e9  # left to the app and the rest of the machine while builders run side by side


@dataclass(frozen=True)
class Choosing:
    """A choice measured on this machine (runners/auto.py): yielded before (choice None), then with the
    choice. `what` RUNNER: auto's runner for one model, the choice naming the runner and each
    candidate's plain step in milliseconds; HEAD: the draft's head, cut or whole, the choice naming
    the head kept and each head's rows, runner and plain step (auto.record_head)."""

    model: str  # "target" or "draft"
    choice: dict | None = None
    what: str = RUNNER
    candidates: tuple[str, ...] = ()  # RUNNER: the runners timed (auto.candidates)

    @property
    def done(self) -> bool:
        return self.choice is not None


def warm_up(target, draft, run: RunConfig, prompt_tokens: int | None = None,
            head: bool = False) -> Iterator[Making | Compiling | Building | Choosing]:
    """Prepare what this run's runners need before its first step, yielding progress: the onnxruntime
    runner's builds (minutes the first time, then read from the cache) and, under auto on a CPU, its
    choice between onnxruntime and eager, measured once; under auto on a GPU, each model's choice
    between eager and compiled, measured once; then the compiled runner's step shapes on each model
    that runs compiled (nothing when every shape is compiled already). `head`: the draft's head too,
    where the run's draft vocabulary is the pair's to choose (see build_models). Nothing for the other
    runners. `prompt_tokens`: the prompt's length, if known (see run_capacities); auto's choices are
    measured and read for the run's length (run_context)."""
    context = run_context(run, prompt_tokens)
    yield from making(target, draft, run, context)
    yield from choose(target, draft, run, head, context)
    heads = {TARGET: None, DRAFT: run.draft_vocab or None}  # the drafter factory's head, as a run builds it
    models = {TARGET: target, DRAFT: draft}
    for name, rows in run_shapes(run).items():
        model = models[name]
        if rows and model is not None and runner_of(run, model, name, heads[name], context) == COMPILED:
            # a race holds two caches of each model at once: the target's plain and speculative runs, the
            # drafter made for the race and the one of its short warm-up run (race/frames.py)
            yield from warm_model(model, rows, heads[name], run_capacities(run, prompt_tokens), name,
                                  copies=2, prompt_tokens=prompt_tokens)


def run_context(run: RunConfig, prompt_tokens: int | None) -> int:
    """Entries a run of this prompt holds at its end (its new tokens alone where the prompt is unknown):
    the length auto's choices are measured and read for (choice.bucket_of)."""
    return (prompt_tokens or 0) + run.max_new_tokens


def runner_of(run: RunConfig, model, name: str, rows: int | None, context: int | None) -> str:
    """The runner the run's `name` model ("target" or "draft") steps on, as its cache model resolves it."""
    return resolve(run.runner, model.device, run.speculation == TREE, model, rows, context, name)


def choose(target, draft, run: RunConfig, head: bool = False,
           context: int | None = None) -> Iterator[Building | Choosing]:
    """auto's choice for each model of the run, measured where none is recorded for its role and the run's
    `context` (entries; None: a short run): on a CPU the onnxruntime builds and their choice (build_models:
    nothing unless a model runs on onnxruntime), on a GPU eager against compiled (choose_on_gpu). One
    function for the page's warm-up and the benchmark, so both run what the same measurement chose."""
    yield from build_models(target, draft, run, head, context)
    yield from choose_on_gpu(target, draft, run, context)


def choose_on_gpu(target, draft, run: RunConfig, context: int | None = None) -> Iterator[Choosing]:
    """Under auto, each model of the run on a GPU with nothing recorded for it: its plain step timed on
    eager and compiled (runners/auto.record; compiling its one-row step is part of it, and said), the
    faster kept for this card. A candidate that fails is dropped with its reason (in the choice)."""
    from playground.engine.runners.auto import candidates, record
    from playground.engine.runners.choice import RUNNER, device_kind, recorded

    if run.runner != "auto":
        return
    todo = [(TARGET, target, None)]
    if run.drafter in DRAFT_MODEL_DRAFTERS and draft is not None:
        todo.append((DRAFT, draft, run.draft_vocab or None))
    for name, model, rows in todo:
        if device_kind(model) == "cuda" and recorded(model, rows, RUNNER, name, context) is None:
            yield Choosing(name, candidates=candidates(model))
            yield Choosing(name, record(model, rows, name == TARGET, context), candidates=candidates(model))


@dataclass(frozen=True)
class Making:
    """A model kept as its files (models/handle.py) getting its PyTorch model, which this run computes
    with: yielded before (seconds None) and after. A minute or two for the default target on two cores."""

    model: str  # "target" or "draft"
    seconds: float | None = None

    @property
    def done(self) -> bool:
        return self.seconds is not None


TORCH_RUNNERS = (EAGER, STATIC, COMPILED)


def making(target, draft, run: RunConfig, context: int | None = None) -> Iterator[Making]:
    """The PyTorch model of each handle this run computes with in torch (on a torch runner, or the
    target drafting for itself), made now with progress rather than inside the run's first step."""
    import time

    needs = [(TARGET, target, run.drafter == SELF
              or runner_of(run, target, TARGET, None, context) in TORCH_RUNNERS)]
    if run.drafter in DRAFT_MODEL_DRAFTERS and draft is not None:
        needs.append((DRAFT, draft, runner_of(run, draft, DRAFT, run.draft_vocab or None, context) in TORCH_RUNNERS))
    for name, model, in_torch in needs:
        if in_torch and is_handle(model) and not model.loaded:
            yield Making(name)
            start = time.perf_counter()
            module_of(model)
            yield Making(name, time.perf_counter() - start)


def build_models(target, draft, run: RunConfig, head: bool = False,
                 context: int | None = None) -> Iterator[Building | Choosing]:
    """The onnxruntime builds of the target and (when it drafts on that runner too) the draft, with the
    draft's head cut to the run's draft vocabulary as its drafter will ask; then, under auto, each
    model's runner measured on this machine for its role and the run's `context` where nothing is
    recorded yet (runners/auto.py), so the run's first step already runs on it. Nothing for a model
    that does not run on onnxruntime.
    `head`: the run's draft vocabulary is the pair's suggestion, not the user's, so the draft's head is
    the machine's to choose: see choose_head (chosen_head then gives the run as it drafts)."""
    from playground.engine.runners.auto import RUNNER, candidates, record, recorded

    todo = []
    if runner_of(run, target, TARGET, None, context) == ONNXRUNTIME:
        todo.append((TARGET, target, None))
    rows = run.draft_vocab or None
    if run.drafter in DRAFT_MODEL_DRAFTERS and draft is not None and \
            runner_of(run, draft, DRAFT, rows, context) == ONNXRUNTIME:
        todo.append((DRAFT, draft, rows))
    yield from builds(todo)
    if run.runner == "auto":
        for name, model, head_rows in todo:
            if recorded(model, head_rows, RUNNER, name, context) is None:
                yield Choosing(name, candidates=candidates(model))
                yield Choosing(name, record(model, head_rows, name == TARGET, context), candidates=candidates(model))
    if head:
        yield from choose_head(draft, run, context)


def builds(todo: list[tuple[str, object, int | None]]) -> Iterator[Building]:
    """The onnxruntime builds of (name, model, head rows) this process does not have yet, each said
    before and after (0 seconds: found in the cache); side by side where the memory holds their
    builders' peaks (fit_side_by_side), else one after the other."""
    from playground.engine.runners.onnx_build import built_model, is_built

    missing = [item for item in todo if not is_built(item[1], item[2])]
    if len(missing) > 1 and fit_side_by_side([model for _, model, _ in missing]):
        yield from side_by_side(missing)
        return
    for index, (name, model, head_rows) in enumerate(missing, 1):
        yield Building(name, index, len(missing))
        built = built_model(model, head_rows)
        yield Building(name, index, len(missing), built.seconds, same_as=built.same_as)


def fit_side_by_side(models: list) -> bool:
    """Whether the builds of `models` can run at once: each reads a GGUF (a peak it can estimate) and
    the memory available now holds all their peaks, with BUILD_HEADROOM to spare. Each builder
    computes on about one core, so on two cores two builds take about the longer one's time."""
    import psutil

    from playground.engine.runners.onnx_build import builder_peak

    peaks = [builder_peak(model) for model in models]
    if None in peaks:
        return False
    return sum(peaks) + BUILD_HEADROOM <= psutil.virtual_memory().available


def side_by_side(missing: list[tuple[str, object, int | None]]) -> Iterator[Building]:
    """The builds started at once, each said as it starts and as it ends. Closing this generator
    waits for them (the pool's exit): no builder child is left running."""
    from concurrent.futures import ThreadPoolExecutor, as_completed

    from playground.engine.runners.onnx_build import built_model

    n = len(missing)
    with ThreadPoolExecutor(n) as pool:
        started = {pool.submit(built_model, model, rows): (index, name)
                   for index, (name, model, rows) in enumerate(missing, 1)}
        for index, name in started.values():
            yield Building(name, index, n, beside=n)
        running = dict(started)
        for future in as_completed(started):
            index, name = running.pop(future)
            built = future.result()
            yield Building(name, index, n, built.seconds, beside=n, same_as=built.same_as)
            for index, name in running.values():  # still building: said again, the page shows the last line
                yield Building(name, index, n, beside=n)


def head_runners(draft, run: RunConfig, context: int | None = None) -> dict[str, str] | None:
    """The runners the run's draft would step on with its head cut and whole, where a cut is not free
    there (runners/auto.CUT_NOT_FREE); None where the run has no such choice: no draft model drafting,
    no draft vocabulary, or a runner on which the cut is cheaper by construction."""
    from playground.engine.runners.auto import CUT, CUT_NOT_FREE, FULL

    if draft is None or not run.draft_vocab or run.drafter not in DRAFT_MODEL_DRAFTERS:
        return None
    cut = runner_of(run, draft, DRAFT, run.draft_vocab, context)
    if cut not in CUT_NOT_FREE:
        return None
    return {CUT: cut, FULL: runner_of(run, draft, DRAFT, None, context)}


def choose_head(draft, run: RunConfig, context: int | None = None) -> Iterator[Building | Choosing]:
    """The draft's plain step timed with its head cut to the run's draft vocabulary and with the whole
    head, where a cut is not free on the draft's runner and nothing is recorded for it yet (once per
    machine, thread count and build: auto.record_head); the whole head's build first where it runs
    on onnxruntime. Run build_models first: under auto the cut's runner is the one measured there."""
    from playground.engine.runners.auto import CUT, FULL, head_kind, record_head, recorded

    runners = head_runners(draft, run, context)
    if runners is None or recorded(draft, run.draft_vocab, head_kind(runners[CUT])) is not None:
        return
    yield from builds([(DRAFT, draft, None)] if runners[FULL] == ONNXRUNTIME else [])
    yield Choosing(DRAFT, what=HEAD)
    yield Choosing(DRAFT, record_head(draft, run.draft_vocab, runners), HEAD)


def head_choice(draft, run: RunConfig) -> dict | None:
    """The head choice recorded for the run's draft on the runner its cut head steps on (choose_head),
    or None: no choice there (a runner on which the cut is free) or none measured yet."""
    from playground.engine.runners.auto import CUT, head_kind, recorded

    runners = head_runners(draft, run)
    return None if runners is None else recorded(draft, run.draft_vocab, head_kind(runners[CUT]))


def chosen_head(draft, run: RunConfig) -> RunConfig:
    """The run as its draft drafts with the head recorded as faster here: its draft vocabulary 0 (the
    whole head) where the whole head measured faster; else the run as it is. For a run whose draft
    vocabulary is the pair's suggestion: one the user set is theirs."""
    from playground.engine.runners.auto import FULL

    known = head_choice(draft, run)
    return replace(run, draft_vocab=0) if known is not None and known["head"] == FULL else run


def warm_model(model, rows: tuple[int, ...], head_rows: int | None, caps: tuple[int, ...],
               name: str = TARGET, copies: int = 1, prompt_tokens: int | None = None) -> Iterator[Compiling]:
    """Compile the steps of `rows` at each capacity and record them on each of `copies` caches of that
    capacity held at once (the caches the runs that follow take from the pool: a CUDA graph replays only
    on the cache it was recorded with), at each span a run after a prompt of `prompt_tokens` meets there
    (static.spans; the capacity alone where the prompt is unknown: it serves any length), smallest first;
    nothing for a shape a cache already has at that span."""
    steps = steps_of(model)
    pool_of(model).held = max(caps)  # the runs that follow step in these caches: none is let go before them
    runners = [(capacity, taken(model, head_rows, capacity)) for capacity in caps for _ in range(copies)]
    todo = [(capacity, b, span, runner) for capacity, runner in runners for b in rows
            for span in spans_met(runner, prompt_tokens) if not runner.is_warm(b, span)]
    try:
        for index, (capacity, b, span, runner) in enumerate(todo, 1):
            yield Compiling(name, index, len(todo), b, capacity, reads=span)
            seconds, key = runner.warm(b, span), step_key(b, capacity, head_rows)
            yield Compiling(name, index, len(todo), b, capacity, seconds if seconds is not None else 0.0,
                            steps.failed.get(key), reads=span)
    finally:
        for _, runner in runners:  # each cache back to the pool now, not whenever the collector finds its
            runner.finalizer()  # runner: one still held leaves the next run (or warm-up) a new, unrecorded cache


def spans_met(runner, prompt_tokens: int | None) -> tuple[int, ...]:
    """The spans a run after a prompt of `prompt_tokens` meets in this runner's cache (static.spans); the
    capacity's alone where the prompt is unknown (it serves any length) or attention reads it all."""
    if prompt_tokens and runner.filled:
        return spans(prompt_tokens + 1, runner.capacity)
    return (runner.capacity,)


def taken(model, head_rows: int | None, capacity: int):
    """A compiled runner holding a cache of `capacity` from the model's pool (throwaway: the cache goes
    back to the pool when it ends, for the next run to take)."""
    runner = CachedModel(model, head_rows=head_rows, runner=COMPILED).runner
    runner.reserve(capacity)
    return runner
