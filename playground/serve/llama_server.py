"""llama.cpp's `llama-server`, built from the llama.cpp that llama-cpp-python's source distribution
vendors (the version the llama.cpp extra builds), with the same CPU-chosen flags. Standard library
only, like the extra.

The binary is linked statically and kept under `<cache>/llama-server/<key>/` (or under
$PLAYGROUND_LLAMA_SERVER_DIR), the key hashing the version and the flags, so one build serves every
later run on this CPU. It is built in a temporary
directory and moved into place whole, with a marker written last: a build that died half way leaves
no directory under the key, and a directory without its marker is never trusted (it is removed and
built again).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from playground.serve.llamacpp_extra import COMMON, DIST, VERSION, cmake_args, cpu_flags

BINARY = "llama-server"
MARKER = "BUILT"  # written last: its presence says the binary beside it is whole
SDIST = f"llama_cpp_python-{VERSION}.tar.gz"
# static, server on, nothing else: no tests, examples, curl, OpenSSL, web UI download
SERVER = ["-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_BUILD_COMMON=ON",
          "-DLLAMA_BUILD_TOOLS=ON", "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_BUILD_TESTS=OFF",
          "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_APP=OFF", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF",
          "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF"]


def server_cmake_args(flags: set[str] | None = None) -> list[str]:
    """The extra's CPU part (native, or AVX-512 without AMX) and the server's own flags."""
    cpu = [a for a in cmake_args(cpu_flags() if flags is None else flags) if a not in COMMON]
    return cpu + SERVER


def build_key(args: list[str]) -> str:
    return hashlib.sha256(" ".join([VERSION, *args]).encode()).hexdigest()[:12]


def root() -> Path:
    """$PLAYGROUND_LLAMA_SERVER_DIR, else <playground cache>/llama-server."""
    if os.environ.get("PLAYGROUND_LLAMA_SERVER_DIR"):
        return Path(os.environ["PLAYGROUND_LLAMA_SERVER_DIR"]).expanduser()
    from playground.config import cache_dir  # a leaf: no third-party import

    return cache_dir() / "llama-server"


def build_dir(args: list[str] | None = None) -> Path:
    return root() / build_key(server_cmake_args() if args is None else args)


def built_binary(args: list[str] | None = None) -> Path | None:
    """The cached llama-server for this CPU's flags, or None when it was never built whole."""
    where = build_dir(args)
    binary = where / BINARY
    if (where / MARKER).is_file() and binary.is_file() and os.access(binary, os.X_OK):
        return binary
    return None


def find_binary() -> str | None:
    """llama-server on PATH first (a user's own build), else the one `setup llama-server` built."""
    on_path = shutil.which(BINARY)
    if on_path:
        return on_path
    built = built_binary()
    return str(built) if built else None


def sdist(say=print, python: str = sys.executable) -> Path:
    """llama-cpp-python's source distribution: kept from an earlier setup, else downloaded."""
    from playground.config import cache_dir

    for place in (root() / "sdist", *sorted((cache_dir() / "wheels").glob("llama-cpp-*"))):
        if (place / SDIST).is_file():
            return place / SDIST
    keep = root() / "sdist"
    keep.mkdir(parents=True, exist_ok=True)
    say(f"[setup llama-server] downloading {DIST}=={VERSION}'s source distribution")
    with tempfile.TemporaryDirectory(dir=keep) as tmp:
        got = subprocess.run([python, "-m", "pip", "--disable-pip-version-check", "download", "--no-deps",
                              "--no-binary", ":all:", "-d", tmp, f"{DIST}=={VERSION}"], check=False)
        if got.returncode != 0 or not (Path(tmp) / SDIST).is_file():
            raise RuntimeError(f"setup llama-server: downloading {DIST}=={VERSION} failed "
                               f"(exit {got.returncode})")
        os.replace(Path(tmp) / SDIST, keep / SDIST)
    return keep / SDIST


def setup_llama_server(force: bool = False, say=print, python: str = sys.executable) -> Path:
    """Build llama-server once per flag set; the path of the binary."""
    args = server_cmake_args()
    where = build_dir(args)
    if not force and built_binary(args):
        say(f"[setup llama-server] ready: {where / BINARY}")
        return where / BINARY
    for tool in ("cmake", "c++"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"setup llama-server: {tool} is not on PATH; building llama-server needs "
                               "cmake and a C++ compiler")
    source = sdist(say, python)
    root().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="build-", dir=root()) as tmp:
        tmp = Path(tmp)
        say(f"[setup llama-server] unpacking {source.name}")
        with tarfile.open(source) as tar:
            members = [m for m in tar.getmembers() if "/vendor/llama.cpp/" in m.name + "/"]
            tar.extractall(tmp, members=members, filter="data")
        src = next(tmp.glob("*/vendor/llama.cpp"))
        binary = compile_server(src, tmp / "build", args, say)
        staged = tmp / "staged"
        staged.mkdir()
        shutil.copy2(binary, staged / BINARY)
        (staged / MARKER).write_text(f"{DIST} {VERSION}\n{' '.join(args)}\n")  # last: the build is whole
        if where.exists():
            shutil.rmtree(where)  # unmarked (half made) or --force
        os.replace(staged, where)
    say(f"[setup llama-server] ready: {where / BINARY}")
    return where / BINARY


def compile_server(src: Path, build: Path, args: list[str], say=print) -> Path:
    jobs = str(os.cpu_count() or 2)
    env = {**os.environ, "CMAKE_BUILD_PARALLEL_LEVEL": jobs}
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    say(f"[setup llama-server] building llama.cpp's server from {DIST} {VERSION}'s vendored source "
        f"on {jobs} cores (minutes): {' '.join(args)}")
    start = time.monotonic()
    steps = [["cmake", "-S", str(src), "-B", str(build), *generator, *args],
             ["cmake", "--build", str(build), "--target", BINARY, "--parallel", jobs]]
    for step in steps:
        done = subprocess.run(step, env=env, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"setup llama-server: `{' '.join(step[:3])} ...` failed "
                               f"(exit {done.returncode})")
    binary = build / "bin" / BINARY
    if not binary.is_file():
        raise RuntimeError(f"setup llama-server: the build finished but made no {binary}")
    say(f"[setup llama-server] built in {time.monotonic() - start:.0f} s")
    return binary


def status() -> str:
    built = built_binary()
    on_path = shutil.which(BINARY)
    if on_path:
        return f"llama-server: {on_path} (on PATH)"
    return f"llama-server: {built} (built)" if built else (
        f"llama-server: not built (python -m playground.serve setup llama-server; would go in {build_dir()})")
