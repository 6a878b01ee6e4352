"""`python -m playground.serve setup openvino [--pair NAME]`: OpenVINO GenAI for `--reference openvino`,
`--peers` and the Served tab's OpenVINO race, in one command.

It installs openvino-genai (wheels only, no torch, seconds) into the python that runs the command, and,
with --pair, has OpenVINO write that pair's IR folders into the cache now (measure/bench/references/
openvino_files.py: what its GGUF reader refuses converted first, about a minute for the default pair),
so the first benchmark or race does not pay for it. Without --pair the IR is written on first use.
"""

from __future__ import annotations

import importlib
import subprocess
import sys

DIST, VERSION = "openvino-genai", "2026.4.1"


def install(python: str = sys.executable, say=print) -> None:
    say(f"[setup openvino] installing {DIST}=={VERSION} into {python}")
    done = subprocess.run([python, "-m", "pip", "--disable-pip-version-check", "install", "-q",
                           f"{DIST}=={VERSION}"], check=False)
    if done.returncode != 0:
        raise RuntimeError(f"setup openvino: pip install {DIST}=={VERSION} failed (exit {done.returncode})")
    importlib.invalidate_caches()


def write_pair_irs(pair: str, python: str = sys.executable) -> None:
    """The pair's IR folders, written by the measurement layer in a fresh process (one that imports the
    openvino-genai just installed; this layer imports nothing above the standard library)."""
    done = subprocess.run([python, "-m", "playground.measure.bench.references.openvino_files", "--pair", pair],
                          check=False)
    if done.returncode != 0:
        raise RuntimeError(f"setup openvino: writing pair {pair!r}'s IR failed (exit {done.returncode}; above)")


def setup_openvino(pair: str | None = None, say=print) -> None:
    install(say=say)
    if pair:
        write_pair_irs(pair)
    say("[setup openvino] ready")
