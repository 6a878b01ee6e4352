"""Stop latency, measured (not asserted as a time): Gradio cancels a streaming job only between
two frames, so the Stop button also raises the session's stop flag (context.StopFlags), which the
race checks after each engine step. Twenty tries on the tiny pair, in process: a consumer thread
plays Gradio's worker, the test presses Stop at a random moment (the flag, then the cancel, as
the button does); reported are the worst wait and the most engine work (target forward calls)
done after the press. Asserted is the work, a count: at most the one target call in flight.

    python -m pytest -s -q tests/app/race/test_stop_latency.py
"""

from __future__ import annotations

import random
import threading
import time

import gradio as gr
import pytest

from playground.app.shared.context import build_context
from playground.config import RunConfig
from playground.app.race import tab as tab_race

pytestmark = pytest.mark.slow  # a measurement: twenty 1024-token races started and stopped


def test_stop_is_honoured_within_one_engine_step_worst_of_20(capsys):
    ctx = build_context()
    with gr.Blocks():
        view = tab_race.build(ctx)["view"]  # the handler's dicts are keyed by its components
    pair = ctx.cache.get("tiny")
    calls = []
    hook = pair.target.model.register_forward_hook(lambda *_: calls.append(time.monotonic()))
    settings = RunConfig(pair="tiny", max_new_tokens=1024)
    values = {n: getattr(settings, n) for n in RunConfig.names()}
    rng = random.Random(0)
    waits, after = [], []
    for _ in range(20):
        run = tab_race.handle(ctx, view, tab_race.RaceForm("Once upon a time", "", values))
        stop, closed, frames = threading.Event(), threading.Event(), []

        def gradio_worker():
            for frame in run:
                frames.append(frame)
                if stop.is_set():  # the cancel lands between two frames
                    run.close()
                    break
            closed.set()

        threading.Thread(target=gradio_worker, daemon=True).start()
        while len(frames) < 3:  # racing, past loading and the first frame
            assert not closed.is_set(), "the race ended before Stop could be pressed"
            time.sleep(0.005)
        time.sleep(rng.uniform(0, 0.3))  # press Stop at a random moment within a frame
        pressed = time.monotonic()
        ctx.stops.press(None)  # the Stop button: the session's flag (None: called without a request)...
        stop.set()  # ...and Gradio's cancel at the next frame
        assert closed.wait(timeout=600)
        ended = time.monotonic()
        waits.append(ended - pressed)
        after.append(sum(1 for t in calls if pressed <= t <= ended))
    hook.remove()
    with capsys.disabled():
        print(f"\nStop over 20 tries (tiny pair, frame_every {ctx.frame_every} s): worst wait "
              f"{max(waits) * 1000:.0f} ms, median {sorted(waits)[10] * 1000:.0f} ms; target calls after "
              f"the press: worst {max(after)}, median {sorted(after)[10]}")
    assert max(after) <= 1, f"target calls after Stop: {after} (at most the one in flight)"
