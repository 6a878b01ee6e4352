"""The optional llama.cpp extra: llama-cpp-python built from its source distribution into the
python that runs the command (the project's venv), for the llamacpp runner and `--reference
llama.cpp`. Standard library only, so CI can run it before the venv holds anything else.

The build flags are chosen from this CPU: native code where the CPU has no AMX; where it has AMX,
the AVX-512 set spelled out with AMX left off, since a native build with AMX died with "Illegal
instruction" on batches of more than one token on this project's VMs (issue 20). The wheel is kept
under the playground cache per flag set, so a second setup installs it without compiling.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

DIST, VERSION = "llama-cpp-python", "0.3.36"
COMMON = ["-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_TOOLS=OFF",
          "-DLLAMA_BUILD_SERVER=OFF"]
AVX512_NO_AMX = ["-DGGML_NATIVE=OFF", "-DGGML_AVX512=ON", "-DGGML_AVX512_VNNI=ON", "-DGGML_AVX512_BF16=ON",
                 "-DGGML_AVX512_VBMI=ON"]


def cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    return set(line.split(":", 1)[-1].split())


def cmake_args(flags: set[str]) -> list[str]:
    """The build's CMake flags for a CPU with these /proc/cpuinfo flags."""
    if any(f.startswith("amx") for f in flags):
        return AVX512_NO_AMX + COMMON
    return ["-DGGML_NATIVE=ON"] + COMMON


def is_installed(python: str = sys.executable) -> bool:
    return subprocess.run([python, "-c", "import llama_cpp"], capture_output=True, check=False).returncode == 0


def setup_llamacpp(python: str = sys.executable, say=print) -> None:
    """Build (once per flag set) and install llama-cpp-python into `python`'s environment."""
    from playground.config import cache_dir  # a leaf: no third-party import before the venv has any

    args = cmake_args(cpu_flags())
    key = hashlib.sha256(" ".join([VERSION, *args]).encode()).hexdigest()[:12]
    wheels = cache_dir() / "wheels" / f"llama-cpp-{key}"
    pip = [python, "-m", "pip", "--disable-pip-version-check"]
    if not list(wheels.glob("llama_cpp_python-*.whl")):
        say(f"[setup llamacpp] building {DIST}=={VERSION} from source (a few minutes): CMAKE_ARGS={' '.join(args)}")
        env = {**os.environ, "CMAKE_ARGS": " ".join(args), "CMAKE_BUILD_PARALLEL_LEVEL": str(os.cpu_count() or 2)}
        built = subprocess.run(pip + ["wheel", "--no-deps", "--no-binary", DIST, "--no-cache-dir", "-w",
                                      str(wheels), f"{DIST}=={VERSION}"], env=env, check=False)
        if built.returncode != 0:
            raise RuntimeError(f"setup llamacpp: building {DIST} failed (exit {built.returncode}); it needs "
                               "cmake and a C++ compiler")
    wheel = str(sorted(wheels.glob("llama_cpp_python-*.whl"))[-1])
    say(f"[setup llamacpp] installing {wheel}")
    if subprocess.run(pip + ["install", "-q", wheel], check=False).returncode != 0 or not is_installed(python):
        raise RuntimeError(f"setup llamacpp: installing {wheel} into {python} failed")
    say(f"[setup llamacpp] ready in {python}")
