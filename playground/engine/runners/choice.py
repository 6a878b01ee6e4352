"""What `auto` chose on this CPU, as recorded: read per CPU, thread count, model (its build key) and
library versions from the cache (runner-choice.json, replaced whole), from memory after the first read.
Beside each runner choice, of the same kind and in the same file: a draft's head, cut or whole, where
the pair's draft vocabulary runs on a runner whose cut is not cheaper by construction (runners/auto.py,
`record_head`).

resolve() reads it at every runner made, so it needs no model run, no cache model and no timing:
measuring a choice (timing each runner's plain step through the cache model) is runners/auto.py's,
which writes here. With nothing recorded for the threads a run uses, auto keeps the table's choice
(config.AUTO_RUNNER).
"""

from __future__ import annotations

import json
import platform
import weakref

from playground.config import cache_dir, write_text_atomic

RUNNER = "runner"  # the kind of a choice: auto's runner for a model (its key is key_of's alone)

# model -> {(kind, rows, threads): its choice, or None}: the file read once per model and thread count, since
# resolve() asks at every runner made and a key hashes the checkpoint's small files (10 ms for Qwen's
# tokenizer)
SEEN: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def cpu_name() -> str:
    """The CPU's marketing name (/proc/cpuinfo on Linux; platform's guess elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def choice_file():
    return cache_dir() / "runner-choice.json"


def key_of(model, rows: int | None, threads: int) -> str:
    """What a measured choice holds for: this CPU and thread count, this model's build, the libraries."""
    from importlib.metadata import version

    from playground.engine.runners.onnx_build import build_identity

    name, precision, build = build_identity(model, rows)
    return " | ".join([cpu_name(), f"{threads} threads", f"{name} {precision} {build[:16]}",
                       f"onnxruntime {version('onnxruntime')}", f"torch {version('torch')}"])


def entry_key(model, rows: int | None, threads: int, kind: str = RUNNER) -> str:
    """Where a choice of this kind lies in the file: auto's runner under key_of's key, any other kind
    beside it, under the same key with the kind after it."""
    key = key_of(model, rows, threads)
    return key if kind == RUNNER else f"{key} | {kind}"


def read_all() -> dict:
    """Every recorded choice; an unreadable file counts as none (it is rewritten whole at the next record)."""
    try:
        return json.loads(choice_file().read_text())
    except (OSError, ValueError):
        return {}


def recorded(model, rows: int | None = None, kind: str = RUNNER) -> dict | None:
    """The choice of this kind measured for this model at the threads torch runs on now, or None."""
    import torch

    threads = torch.get_num_threads()
    mine = SEEN.setdefault(model, {})
    if (kind, rows, threads) not in mine:
        mine[(kind, rows, threads)] = read_all().get(entry_key(model, rows, threads, kind))
    return mine[(kind, rows, threads)]


def write_all(choices: dict) -> None:
    """The file replaced whole: a reader never sees half of it."""
    path = choice_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(choices, indent=1) + "\n")


def remember(model, rows: int | None, threads: int, choice: dict, kind: str = RUNNER) -> None:
    """A new choice written to the file and kept in memory for this model and thread count."""
    write_all({**read_all(), entry_key(model, rows, threads, kind): choice})
    SEEN.setdefault(model, {})[(kind, rows, threads)] = choice
