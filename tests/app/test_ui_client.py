"""The launched app (`python app.py --pair tiny`) driven through gradio_client: streaming,
cancelling, bad input, and two clients sharing the queue."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from gradio_client import Client

from playground.config import RunConfig

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def url():
    """The real CLI, on a free port, with the tiny random pair selected (no download)."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "app.py", "--pair", "tiny", "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "GRADIO_ANALYTICS_ENABLED": "False"},
    )
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.3)
    else:
        proc.kill()
        pytest.fail(f"app did not start:\n{proc.stdout.read()}")
    yield url
    proc.terminate()
    proc.wait(timeout=30)


def args(prompt="def add(a, b):", **changes) -> list:
    settings = RunConfig(pair="tiny", max_new_tokens=24)
    values = {**{n: getattr(settings, n) for n in RunConfig.names()}, **changes}
    return [prompt, ""] + [values[n] for n in RunConfig.names()]


def client(url) -> Client:
    return Client(url, verbose=False, download_files=False)


def tokens_shown(html: str) -> int:
    return int(re.search(r"(\d+) tokens", html).group(1))


def race_seconds(html: str) -> float:
    """The run's own clock as the page shows it: '… · 0.55 s · …'."""
    return float(re.search(r"([\d.]+) s\b", html).group(1))


def frames(job) -> list[str]:
    """The baseline column of each frame streamed so far that shows tokens."""
    return [o[0] for o in job.outputs() if isinstance(o[0], str) and re.search(r"\d+ tokens", o[0])]


def wait_until(condition, what: str, limit_s: float = 300) -> None:
    """Poll a condition; the limit only guards against a hang (a loaded machine may take long)."""
    deadline = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_race_streams_and_finishes(url):
    job = client(url).submit(*args(max_new_tokens=48), api_name="/race")
    baseline, speculative, _, _, _, stats, status = job.result(timeout=120)
    assert len(job.outputs()) >= 3  # loading and first frame before the last: it streams
    assert "Done" in status and tokens_shown(speculative) == tokens_shown(baseline) == 48
    assert 'class="tok accepted"' in speculative and 'class="tok target"' in baseline
    assert "identical to the baseline" in stats


def test_cancel_stops_the_job_and_frees_the_queue(url):
    c = client(url)
    job = c.submit(*args(max_new_tokens=1024), api_name="/race")
    wait_until(lambda: len(frames(job)) >= 2 and tokens_shown(frames(job)[-1]) > 8, "the race never started")
    first, at_cancel = frames(job)[0], frames(job)[-1]
    job.cancel()
    started = time.monotonic()
    *_, status = c.predict(*args("still here?", max_new_tokens=4), api_name="/race")
    waited = time.monotonic() - started
    assert "Done" in status and tokens_shown(frames(job)[-1]) < 1024
    # The queue runs one job at a time: had the cancelled race kept going, this request would
    # have waited for the rest of its 1024 tokens. Its own pace (tokens per second of baseline
    # time, as the page reports them) says how long that rest takes on this machine, however
    # loaded: the wait must be well under it. A ratio, not a fixed number of seconds.
    rest = (1024 - tokens_shown(at_cancel)) * race_seconds(at_cancel) / tokens_shown(at_cancel)
    assert waited < 0.5 * rest, (waited, rest, race_seconds(first))


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"prompt": ""}, "prompt must be non-empty text"),
        ({"max_new_tokens": 0}, "max_new_tokens must be an integer in [1, 4096], got 0"),
        ({"max_new_tokens": 10**6}, "max_new_tokens must be an integer in [1, 4096], got 1000000"),
        ({"gamma": 99}, "gamma must be an integer in [1, 64], got 99"),
        ({"seed": -1}, "seed must be an integer in [0, "),
        ({"top_p": 1.5}, "top_p must be in (0.0, 1.0], got 1.5"),
        ({"prompt": "y" * 3000}, "the target's context holds 2048"),
    ],
)
def test_bad_input_is_a_clear_error_and_the_app_keeps_serving(url, changes, message):
    c = client(url)
    prompt = changes.pop("prompt", "hi")
    with pytest.raises(Exception) as raised:
        c.predict(*args(prompt, **changes), api_name="/race")
    assert message in str(raised.value) and "Traceback" not in str(raised.value)
    *_, status = c.predict(*args("fine", max_new_tokens=3), api_name="/race")
    assert "Done" in status


def test_two_clients_share_the_queue_and_each_gets_its_own_result(url):
    first = client(url).submit(*args("first", max_new_tokens=120), api_name="/race")
    wait_until(lambda: first.outputs(), "the first race never started")  # queued (and running) first
    second = client(url).submit(*args("second", max_new_tokens=17), api_name="/race")
    first_done = second_started = None
    deadline = time.monotonic() + 120
    while True:  # watch when each is served; record before leaving, so the last poll counts too
        assert time.monotonic() < deadline
        now, both = time.monotonic(), first.done() and second.done()
        if first_done is None and first.done():
            first_done = now
        frames = [o for o in second.outputs() if isinstance(o[1], str) and "tokens" in o[1]]
        if second_started is None and (frames or second.done()):
            second_started = now
        if both:
            break
        time.sleep(0.01)
    a, b = first.result(), second.result()
    assert tokens_shown(a[1]) == 120 and tokens_shown(b[1]) == 17  # each its own
    assert "Done" in a[-1] and "Done" in b[-1]
    # One model job at a time: the second race starts only once the first is over.
    assert first_done is not None and second_started >= first_done - 0.05
