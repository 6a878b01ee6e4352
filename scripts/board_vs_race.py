"""Does the drafts board's prediction hold in the Race? (issue 28: "within 10 % of what the Race then
measures for it on one prompt per category").

Both measurements go through the launched app, as a user makes them, so both run at the page's
threads (one core left to the page): the Drafts tab's board on the first Spec-Bench prompt of every
category, then the Race, once per board entry and prompt, with the settings the board ended on for
that entry (its best γ). Printed per entry: the board's formula (α, c, v at its γ; decoding only), the
board's own measured speedup over its plain run (with the prefill and decoding only), and the Race's,
pooled over the prompts (total tokens over total compute seconds of each side, as the Race's clocks
count them). A JSON of every figure goes to --json.

    python scripts/board_vs_race.py --drafters suffix,suffix-tree,prompt_lookup,model,hybrid \
        --json out/board_vs_race.json

Nothing else may run meanwhile: both sides are timings.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CATEGORIES = ["translation", "summarization", "qa", "math_reasoning", "rag", "coding", "writing"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launched(pair: str):
    """The app on a free port; returns (process, url) once it accepts connections."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "app.py", "--pair", pair, "--port", str(port)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "GRADIO_ANALYTICS_ENABLED": "False"})
    while proc.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, f"http://127.0.0.1:{port}/"
        except OSError:
            time.sleep(0.5)
    raise SystemExit("the app did not start")


def race_args(prompt: str, settings: dict) -> list:
    from playground.config import RunConfig

    values = {n: getattr(RunConfig(), n) for n in RunConfig.names()}
    values.update({k: v for k, v in settings.items() if k in values})
    return [prompt, ""] + [values[n] for n in RunConfig.names()]


def side(html: str) -> tuple[int, float]:
    """A Race column's tokens and compute seconds: '96 tokens · 40 target calls · 7.81 s · done'."""
    tokens = int(re.search(r"(\d+) tokens", html).group(1))
    seconds = float(re.search(r"([\d.]+) s\b", html).group(1))
    return tokens, seconds


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pair", default="default")
    p.add_argument("--drafters", default="suffix,suffix-tree,prompt_lookup,model,hybrid")
    p.add_argument("--tokens", type=int, default=96)
    p.add_argument("--json", type=Path, default=Path("out/board_vs_race.json"))
    args = p.parse_args(argv)

    from gradio_client import Client

    from playground.measure.bench.prompts import load_prompts

    prompts = load_prompts(categories=CATEGORIES, limit=1)
    proc, url = launched(args.pair)
    try:
        client = Client(url, verbose=False, download_files=False)
        started = time.monotonic()
        result = client.predict(args.pair, args.drafters.split(","), [], CATEGORIES, 1, "", args.tokens, 1, 0.0, 0,
                                600, api_name="/board")
        files, status = result[5], result[6]
        print(f"board: {time.monotonic() - started:.0f} s; {re.sub('<[^>]+>', ' ', status).strip()[:200]}",
              file=sys.stderr)
        paths = [f["path"] if isinstance(f, dict) else f for f in files or []]
        report = json.loads(Path(next(p for p in paths if str(p).endswith(".json"))).read_text())
        last: dict[str, dict] = {}
        for run in report["runs"]:  # each entry's last measurement: the second round's where there is one
            last[run["board"]["entry"]] = run
        rows = []
        for entry, run in last.items():
            races = []
            for prompt in prompts:
                out = client.predict(*race_args(prompt.text, run["settings"]), api_name="/race")
                (pt, ps), (st, ss) = side(out[0]), side(out[1])
                races.append({"prompt": prompt.id, "category": prompt.category, "plain_tokens": pt,
                              "plain_s": ps, "spec_tokens": st, "spec_s": ss, "status": out[-1][-300:]})
                print(f"  race {entry} {prompt.category}: {pt / ps:.2f} → {st / ss:.2f} tok/s "
                      f"({(st / ss) / (pt / ps):.2f}×)", file=sys.stderr)
            plain = sum(r["plain_tokens"] for r in races) / sum(r["plain_s"] for r in races)
            spec = sum(r["spec_tokens"] for r in races) / sum(r["spec_s"] for r in races)
            s = run["summary"]
            rows.append({"entry": entry, "gamma": run["settings"]["gamma"], "speculation": run["settings"]["speculation"],
                         "alpha": s.get("alpha"), "c": s.get("c"), "v": s.get("verify_cost"),
                         "board_formula": s.get("predicted_speedup"), "board_measured": s.get("speedup_total"),
                         "board_decode": s.get("decode_speedup_total"), "race": spec / plain, "races": races})
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"drafters": args.drafters, "rows": rows, "board": report}, indent=1))
    print("| entry | γ | α | c | v(γ+1) | board formula | board measured | board decoding | Race | formula / Race |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        f = r["board_formula"]
        print(f"| {r['entry']} | {r['gamma']} | {r['alpha'] or 0:.2f} | {r['c'] or 0:.3f} | {r['v'] or 0:.2f} | "
              f"{f or 0:.2f}× | {r['board_measured'] or 0:.2f}× | {r['board_decode'] or 0:.2f}× | {r['race']:.2f}× | "
              f"{(f or 0) / r['race']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
