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


def write_pair_irs(pair: str, say=print) -> None:
    """Each model of the pair as OpenVINO IR in the cache, from the GGUF file it loads from."""
    import os
    from pathlib import Path

    from playground.config import RunConfig
    from playground.measure.bench.references import openvino_files
    from playground.measure.bench.served.deploy import gguf_settings
    from playground.models.registry import load_registry

    registry = load_registry()
    if registry.pair(pair).random_weights:
        raise RuntimeError(f"setup openvino: pair {pair!r} has random weights, written when it loads: its IR is "
                           "made on first use")
    settings = gguf_settings(registry, RunConfig(pair=pair))
    for role, ref in (("target", settings.target_ref), ("draft", settings.draft_ref)):
        folder = openvino_files.ir_folder(Path(ref.gguf), {"INFERENCE_NUM_THREADS": os.cpu_count() or 1})
        say(f"[setup openvino] {role} {ref.name}: {folder}")


def setup_openvino(pair: str | None = None, say=print) -> None:
    install(say=say)
    if pair:
        write_pair_irs(pair, say)
    say("[setup openvino] ready")
