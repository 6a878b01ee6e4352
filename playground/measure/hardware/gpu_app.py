"""The GPU runners script's app check (measure/hardware/gpu_runners.py, check 1): the race as the app
runs it, on the card, from a cold start, twice.

Each step is the app's own function, in the app's order (app/shared/flow.py, app/race/tab.py and
frames.py), under auto:
1. the page's warm-up after a load (runners/warmup.warm_up): auto's choice for the target, its plain
   step and its verification timed together, and for the draft (warmup.choose, the page's and the
   benchmark's one function); then each step shape the race meets compiled where auto kept compiled,
   and recorded on each cache the race takes;
2. the race (measure/bench/race.py, which frames.py runs): its short untimed warm-up, then the plain
   and the speculative run of the target at once, each in a cache of its own, stepped in turn;
both handed, step by step, to one model thread (engine/model_thread.py), as the app's context does,
and both again for a second race, as a user's next click runs them.

Counted, apart for each race's short warm-up and for its timed steps: the graphs recorded that no
warm-up asked for (compiled.Steps.while_running, the page's own count), and, beside it, torch's own
count of what it compiled (dynamo) and recorded (cudagraph trees), from its compilation callbacks
(torch._dynamo.callback_handler; CUDAGRAPH_RECORDING fires in cudagraph_trees.record_function), which
would catch a recording our count does not predict. A graph recorded or a step compiled while timed
is issue 52's first defect (it shows as a first race slower than the second); none should be. Under
--cpu-smoke the models count as on a card (gpu_auto.own_choices), so auto's GPU candidates run on the
CPU (where torch records no CUDA graph: that count is a card's only).
"""

from __future__ import annotations

import threading
import time

RACES = 2  # the user's first race, and the next one
# what is counted in each part of a race: graphs our runner recorded that no warm-up asked for, and what
# torch itself compiled and recorded (TorchCounts)
COUNTED = ("recorded", "torch_compiled", "torch_recorded")


def app(args, pair, thread, budget) -> dict | str:
    """Auto's choices, and each race's warm-up and race as the app runs them; the speedups, the graphs
    recorded while timed, the threads the forwards ran on and the seconds compiling took."""
    from playground.config import RunConfig
    from playground.engine.runners import compile_failures, compile_seconds, resolve
    from playground.measure.hardware.common import prompts
    from playground.measure.hardware.gpu_auto import own_choices

    target, draft = pair
    run = RunConfig(runner="auto", gamma=args.gamma, max_new_tokens=args.max_new_tokens)
    skipped = budget.skip(needs(target, draft, run))
    if skipped:
        return skipped
    ids, threads = prompts(target.config.vocab_size, args)[0], set()
    races = []
    with own_choices(args.cpu_smoke), TorchCounts() as torch_counts:
        def count() -> dict:
            return {"recorded": recordings(target, draft), **torch_counts.seen}

        for _ in range(RACES):
            warm = warmed(thread, args.device, target, draft, run, len(ids), threads, count)
            before = compile_seconds(target, draft)
            races.append({**warm, **raced(thread, args.device, target, draft, run, ids, threads, count),
                          "race_compile_s": round(compile_seconds(target, draft) - before, 2)})
        runners = {"target": resolve(run.runner, target.device, False, target),
                   "draft": resolve(run.runner, draft.device, False, draft)}
    budget.learn(target, draft)
    said = sum(sum(r["choices_compile_s"].values()) + r["warm_up_compile_s"] + r["race_compile_s"]
               for r in races)
    return {"runner": runners, "gamma": run.gamma, "races": races,
            "first_race_speedup": races[0]["speedup"], "second_race_speedup": races[-1]["speedup"],
            **{f"{kind}_while_timed": sum(r["while_timed"][kind] for r in races) for kind in COUNTED},
            "threads": sorted(threads), "compile_failed": compile_failures(target, draft),
            "compile_s": round(said, 2)}


def needs(target, draft, run) -> list[tuple[object, int]]:
    """The step shapes the check may compile, by model: auto's plain step and verification (compiled's
    candidate), and the shapes the race meets (warmup.run_shapes)."""
    from playground.engine.runners.auto import VERIFY_ROWS
    from playground.engine.runners.warmup import DRAFT, TARGET, run_shapes
    from playground.measure.hardware.gpu_budget import new_shapes

    shapes = run_shapes(run)
    return [(target, new_shapes(target, (1, VERIFY_ROWS, *shapes[TARGET]))),
            (draft, new_shapes(draft, (1, *shapes[DRAFT])))]


def warmed(thread, device, target, draft, run, prompt_tokens: int, threads: set, count) -> dict:
    """The page's warm-up (flow.compiling) on the model thread: auto's choices where none is recorded yet
    (the first time only), each shape the race meets compiled and recorded on each of its caches; what
    was compiled and recorded meanwhile (`count()`, as in `raced`: torch's counts show its hook works)."""
    from playground.engine.runners.warmup import Choosing, Compiling

    started, choices, shapes, failed, seconds, before = time.monotonic(), {}, 0, [], 0.0, count()
    for event in thread.iterate(device, compiling(target, draft, run, prompt_tokens, threads)):
        if isinstance(event, Choosing) and event.done:
            choices[event.model] = event.choice
        elif isinstance(event, Compiling) and event.done:
            shapes, seconds = shapes + 1, seconds + event.seconds
            failed += [event.failed] if event.failed else []
    return {"choices": choices,
            "choices_compile_s": {name: c.get("compile_s", 0.0) for name, c in choices.items()},
            "shapes_warmed": shapes, "warm_up_compile_s": round(seconds, 2), "warm_up_failed": failed,
            "warm_up_s": round(time.monotonic() - started, 2), "in_warm_up": between(before, count())}


def compiling(target, draft, run, prompt_tokens: int, threads: set):
    """warm_up as the page runs it: on the threads its races use (spare_a_core), the prompt's length known."""
    from playground.engine.runners.warmup import warm_up
    from playground.measure.bench.machine import spare_a_core

    threads.add(threading.current_thread().name)
    with spare_a_core():
        yield from warm_up(target, draft, run, prompt_tokens)


def raced(thread, device, target, draft, run, ids: list[int], threads: set, count) -> dict:
    """One race on the model thread, as frames.py runs it: the drafter made first, the short warm-up, then
    both runs at once; what was recorded and compiled in each part (`count()`: the counts so far, by
    kind), and what the page's stats say of the race."""
    from playground.engine import factory
    from playground.engine.events import output_tokens, summarize
    from playground.measure.bench.race import BASELINE, SPECULATIVE

    config = factory.spec_config(run)
    drafter = factory.make_drafter(run, factory.Models(target, draft))
    events, marks = {BASELINE: [], SPECULATIVE: []}, [count()]
    started = time.monotonic()
    for item in thread.iterate(device, racing(target, draft, run, ids, config, drafter, threads)):
        if item is WARMED:
            marks.append(count())
        else:
            events[item[0]].append(item[1])
    marks.append(count())
    parts = [between(before, after) for before, after in zip(marks, marks[1:])]
    plain, spec = summarize(events[BASELINE]), summarize(events[SPECULATIVE], baseline=events[BASELINE])
    return {"speedup": round(spec.tok_s / plain.tok_s, 3) if plain.tok_s and spec.tok_s else None,
            "plain_tok_s": round(plain.tok_s, 2), "speculative_tok_s": round(spec.tok_s, 2),
            "alpha": round(spec.alpha, 3) if spec.drafted else None,
            "identical": output_tokens(events[BASELINE]) == output_tokens(events[SPECULATIVE]),
            "in_short_warm_up": parts[0], "while_timed": parts[1],
            "race_s": round(time.monotonic() - started, 2)}


def between(before: dict, after: dict) -> dict:
    """What was counted between two readings, by kind (COUNTED)."""
    return {kind: after[kind] - before[kind] for kind in COUNTED}


WARMED = "short warm-up done"  # what racing yields between its untimed short warm-up and the timed steps


def racing(target, draft, run, ids: list[int], config, drafter, threads: set):
    """frames.race_frames' engine work: one core spared, the short warm-up, WARMED, then (name, event)
    from both runs at once."""
    from playground.measure.bench.machine import spare_a_core
    from playground.measure.bench.race import both_runs, short_warm_up
    from playground.measure.bench.runs import Setup

    threads.add(threading.current_thread().name)
    with spare_a_core():
        short_warm_up(Setup(target, draft, run, eos=()), ids, config)
        yield WARMED
        race = both_runs(target, ids, config, drafter, ())
        try:
            yield from race
        finally:
            race.close()


def recordings(*models) -> int:
    """Graphs recorded so far on these models that no warm-up asked for (compiled.Steps.while_running)."""
    from playground.engine.runners.static import state_of

    return sum(state_of(m).steps.while_running for m in models if state_of(m).steps is not None)


class TorchCounts:
    """torch's own count, while inside, of the frames dynamo compiled and the CUDA graphs cudagraph trees
    recorded, by its compilation callbacks (each fires as one starts), kept in `seen`."""

    def __enter__(self):
        import torch
        from torch._dynamo.callback import CallbackTrigger

        kinds = {CallbackTrigger.DYNAMO: "torch_compiled",
                 CallbackTrigger.CUDAGRAPH_RECORDING: "torch_recorded"}
        self.seen = dict.fromkeys(kinds.values(), 0)

        def started(args) -> None:
            kind = kinds.get(args.callback_trigger)
            if kind is not None:
                self.seen[kind] += 1

        self.handler = torch._dynamo.callback_handler
        self.callback = self.handler.register_start_callback(started)
        return self

    def __exit__(self, *exc) -> None:
        self.handler.remove_start_callback(self.callback)
