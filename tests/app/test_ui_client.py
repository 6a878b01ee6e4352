"""The launched app (`python app.py --pair tiny`) driven through gradio_client: streaming,
cancelling, bad input, and two clients sharing the queue.

Cancelling and sharing the queue are read where the races run, not off a clock: the same app is built
in this process with each race watched (`inside`), so "the second race began after the first ended"
is an order the server saw, true on a busy machine as on an idle one."""

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
def url(tmp_path_factory):
    """The real CLI, on a free port, with the tiny random pair selected (no download); stopped with SIGTERM,
    it leaves nothing in its temp folder (the tiny pair's checkpoints, written when a race loads it)."""
    temp = tmp_path_factory.mktemp("app-temp")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "app.py", "--pair", "tiny", "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "TMPDIR": str(temp)},
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
    left = sorted(p.name for p in temp.glob("checkpoint-*"))
    assert not left, f"the app left {left} behind when stopped"


@pytest.fixture(scope="module")
def inside():
    """(url, seen): the app as `python app.py --pair tiny` builds it, served from this process with each
    race watched where it runs. seen["began"] lists (prompt, {prompt: ran to its end?} of every race so
    far) as each race begins; seen["ended"][prompt] is whether its last frame so far was its final one."""
    from playground.app.demo import build_demo
    from playground.app.race import tab as tab_race

    seen, real = {"began": [], "ended": {}}, tab_race.race_frames

    def watched(pair, prompt, system, settings, **kw):
        seen["began"].append((prompt, dict(seen["ended"])))
        seen["ended"][prompt] = False
        for frame in real(pair, prompt, system, settings, **kw):
            seen["ended"][prompt] = frame.done
            yield frame

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tab_race, "race_frames", watched)  # racing() reads it when a race starts
        port = free_port()
        demo = build_demo(default_pair="tiny")
        demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
        yield f"http://127.0.0.1:{port}/", seen
        demo.close()


def args(prompt="def add(a, b):", **changes) -> list:
    settings = RunConfig(pair="tiny", max_new_tokens=24)
    values = {**{n: getattr(settings, n) for n in RunConfig.names()}, **changes}
    return [prompt, ""] + [values[n] for n in RunConfig.names()]


def client(url) -> Client:
    return Client(url, verbose=False, download_files=False)


def tokens_shown(html: str) -> int:
    return int(re.search(r"(\d+) tokens", html).group(1))


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


LONG = 2000  # new tokens of the race that is cancelled: nearly all the tiny target's context holds


def test_cancel_stops_the_job_and_frees_the_queue(inside):
    url, seen = inside
    c = client(url)
    job = c.submit(*args("a long one", max_new_tokens=LONG), api_name="/race")
    wait_until(lambda: len(frames(job)) >= 2 and tokens_shown(frames(job)[-1]) > 8, "the race never started")
    job.cancel()
    *_, status = c.predict(*args("still here?", max_new_tokens=4), api_name="/race")
    assert "Done" in status and tokens_shown(frames(job)[-1]) < LONG
    # The queue runs one job at a time: had the cancelled race kept going, "still here?" would have
    # begun only once it had made all LONG tokens. It began with the long race short of its end.
    began = dict(seen["began"])
    assert began["still here?"]["a long one"] is False, seen


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


def test_two_clients_share_the_queue_and_each_gets_its_own_result(inside):
    url, seen = inside
    first = client(url).submit(*args("first", max_new_tokens=120), api_name="/race")
    wait_until(lambda: first.outputs(), "the first race never started")  # queued (and running) first
    second = client(url).submit(*args("second", max_new_tokens=17), api_name="/race")
    a, b = first.result(timeout=300), second.result(timeout=300)
    assert tokens_shown(a[1]) == 120 and tokens_shown(b[1]) == 17  # each its own
    assert "Done" in a[-1] and "Done" in b[-1]
    # One model job at a time: the second race began once the first had made its last frame.
    began = dict(seen["began"])
    assert began["second"]["first"] is True, seen
