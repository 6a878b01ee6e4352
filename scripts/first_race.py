"""The first race a newcomer runs, timed end to end: `python app.py` on a cache folder (empty for a
fresh start), the page opened in headless Chromium, "Run the race" clicked once, and every status
line the page shows kept with the second it appeared, until "Done.". Beside it the resident memory of
the app's process tree (the ONNX builder's child included) is sampled every 0.2 s: its peak, when and
in which stage it came, and where it ends once the race is done (every sample in the JSON).

    python scripts/first_race.py --cache /tmp/fresh-cache [--json out/first-race.json]

Issue 39's figures: first race <= 150 s after the click; <= 1.8 GB resident after a default race
with the draft, peak <= 3 GB while loading and building. Run it with nothing else on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CHROMIUM = "/usr/bin/chromium"


def cache_bytes(cache: Path) -> int:
    """What the cache tool counts in `cache` (`python -m playground.models cache list`): a file with
    several names once (a cut-head build links its full build's weights)."""
    from playground.models.cachetool import disk_bytes, entries

    return disk_bytes(entries(cache))


def tree_rss(proc: psutil.Process) -> int:
    """Resident bytes of a process and its children (the builder runs as a child)."""
    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


def sample(proc: psutil.Process, samples: list, stop: threading.Event) -> None:
    while not stop.wait(0.2):
        samples.append((time.monotonic(), tree_rss(proc)))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", required=True, help="PLAYGROUND_CACHE for the app (empty: a fresh start)")
    parser.add_argument("--json", help="write the stages and memory here")
    parser.add_argument("--timeout", type=float, default=1800)
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    port = free_port()
    env = {**os.environ, "PLAYGROUND_CACHE": args.cache, "GRADIO_ANALYTICS_ENABLED": "False"}
    started = time.monotonic()
    app = subprocess.Popen([sys.executable, "app.py", "--port", str(port)], cwd=ROOT, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    proc = psutil.Process(app.pid)
    samples: list = []
    stop = threading.Event()
    threading.Thread(target=sample, args=(proc, samples, stop), daemon=True).start()
    stages = []
    try:
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.3)
        serving = time.monotonic() - started
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--headless"])
            page = browser.new_page()
            page.goto(f"http://127.0.0.1:{port}/")
            page.get_by_role("button", name="Run the race").wait_for()
            idle_rss = tree_rss(proc)
            clicked = time.monotonic()
            page.get_by_role("button", name="Run the race").click()
            last = ""
            while time.monotonic() - clicked < args.timeout:
                status = page.locator("#status").inner_text()
                if status != last:
                    stages.append((round(time.monotonic() - clicked, 1), status.strip()[:300]))
                    print(f"{stages[-1][0]:7.1f} s  {stages[-1][1][:160]}", flush=True)
                    last = status
                if "Done." in status or "⚠" in status:
                    break
                time.sleep(0.5)
            done = time.monotonic() - clicked
            stats = page.locator("#stats").inner_text() if page.locator("#stats").count() else ""
            browser.close()
        time.sleep(1)
        after = tree_rss(proc)
    finally:
        stop.set()
        app.terminate()
        app.wait(timeout=30)
    series = [(round(t - clicked, 1), round(r / 1e9, 3)) for t, r in samples if t >= clicked]
    peak_at, peak = max(series, key=lambda s: s[1])
    result = {"serving_s": round(serving, 1), "race_done_s": round(done, 1), "stages": stages,
              "rss_idle_gb": round(idle_rss / 1e9, 2), "rss_after_race_gb": round(after / 1e9, 2),
              "rss_peak_gb": round(peak, 2), "rss_peak_at_s": peak_at,
              "rss_peak_stage": next((line for t, line in reversed(stages) if t <= peak_at), "")[:120],
              "rss_series": series, "stats": stats[:2000], "cache_gb": round(cache_bytes(Path(args.cache)) / 1e9, 2)}
    print(json.dumps({k: v for k, v in result.items() if k not in ("stages", "stats", "rss_series")}, indent=1))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
