"""What `auto` chose on this machine, as recorded: read per device (a CPU and its thread count, or a
GPU card), model and library versions from the cache (runner-choice.json, replaced whole), from
memory after the first read. Beside each runner choice, of the same kind and in the same file: a
draft's head, cut or whole, where the pair's draft vocabulary runs on a runner whose cut is not
cheaper by construction (runners/auto.py, `record_head`).

resolve() reads it at every runner made, so it needs no model run, no cache model and no timing:
measuring a choice (timing each runner's plain step through the cache model) is runners/auto.py's,
which writes here. With nothing recorded, auto keeps the table's choice (config.AUTO_RUNNER).

A runner choice is kept per role and context: a pair's target (its plain step and verification
timed) apart from a draft (its plain step alone), and per context bucket (256, 1024, 4096, ...
entries: `bucket_of`), timed with the cache filled to half the bucket (`timed_fill`). A step's
attention reads every filled entry, so what ranks runners at 128 entries need not at 8k. resolve()
asks for the run's role and context; where that was not measured, the nearest measured (the same
role at the nearest bucket, then the other role's) stands in for it, and the table's choice only
where nothing was measured for the model.

On a CPU a choice holds for the model's build (onnxruntime's key of its file); on a GPU for the card
(name, compute capability, memory), the model's identity (its source, config, dtype and
quantization: a bitsandbytes model has no file of its own) and the versions of torch, transformers
and Triton, which decide what a compile makes.
"""

from __future__ import annotations

import json
import platform
import weakref

from playground.config import cache_dir, write_text_atomic

RUNNER = "runner"  # the kind of a choice: auto's runner for a model, per role and context (entry_key)
TARGET, DRAFT = "target", "draft"  # a model's role in a run: it verifies, or it drafts
SHORTEST, WIDER = 256, 4  # the context buckets: 256 entries, then each 4 times the last
BUCKETS = tuple(SHORTEST * WIDER ** i for i in range(7))  # 256 to 1M entries: past every model's context today

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


def device_kind(model) -> str:
    """"cuda" or "cpu": which device's candidates auto times for the model, and how its choice is keyed."""
    device = getattr(model, "device", None)  # a model's files alone (onnx_build's) are a CPU's
    return device.type if device is not None else "cpu"


# Bumped when the timing changes what it measures, so every recorded choice is measured again: 2, torch
# held to one thread around a forward on ONNX Runtime's or llama.cpp's pool, as a run holds it (timing.py)
TIMING = 2
# The same for a GPU's choices: 3, a compiled step's attention reads the filled span, not the whole cache
# (filled.py), so its step and verification cost what they did not when these were measured
GPU_TIMING = 3


def key_of(model, rows: int | None, threads: int) -> str:
    """What a measured choice holds for: this CPU and thread count, this model's build, the libraries;
    on a GPU, this card, this model, the libraries (gpu_key)."""
    if device_kind(model) == "cuda":
        return gpu_key(model, rows)
    from playground.engine.runners.onnx_build import build_identity

    name, precision, build = build_identity(model, rows)
    return " | ".join([cpu_name(), f"{threads} threads", f"{name} {precision} {build[:16]}",
                       *(f"{name} {library_version(name)}" for name in ("onnxruntime", "torch", "llama-cpp-python")),
                       f"timing {TIMING}"])


def library_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "absent"


def gpu_key(model, rows: int | None) -> str:
    """A GPU choice's key: the card, the model (model_identity, `rows` of its head) and what compiles it."""
    head = f" head {rows}" if rows else ""
    return " | ".join([card_name(model.device), model_identity(model) + head,
                       *(f"{name} {library_version(name)}" for name in ("torch", "transformers", "triton")),
                       f"timing {GPU_TIMING}"])


def card_name(device) -> str:
    """"NVIDIA H200 (compute capability 9.0, 140 GiB)": what a step's time on a card hangs on."""
    import torch

    props = torch.cuda.get_device_properties(device)
    return f"{props.name} (compute capability {props.major}.{props.minor}, {props.total_memory / 2**30:.0f} GiB)"


def model_identity(model) -> str:
    """The model as its step's cost sees it: where it came from (its checkpoint or hub id; "in process"
    for one built here), a digest of its config (the shapes), its dtype and its quantization."""
    import hashlib

    config = model.config
    source = getattr(config, "_name_or_path", "") or "in process"
    digest = hashlib.sha256(config.to_json_string(use_diff=False).encode()).hexdigest()[:12]
    return f"{source} config {digest} {str(model.dtype).removeprefix('torch.')} {quantization_of(model)}"


def quantization_of(model) -> str:
    """nf4, int8 (bitsandbytes), another method's name from its quantization config, or none."""
    said = getattr(model.config, "quantization_config", None)
    if said is None:
        return "none"
    said = said if isinstance(said, dict) else said.to_dict()
    if said.get("load_in_4bit"):
        return str(said.get("bnb_4bit_quant_type") or "4bit")
    return "int8" if said.get("load_in_8bit") else str(said.get("quant_method", "quantized"))


def bucket_of(entries: int | None) -> int:
    """The context bucket a run of `entries` (prompt and new tokens) steps in: the smallest of 256,
    1024, 4096, ... that holds it (the widest past them all); None (the run's length unknown): the shortest."""
    return next((bucket for bucket in BUCKETS if entries is None or bucket >= entries), BUCKETS[-1])


def nearest_first(context: int | None) -> list[int]:
    """Every bucket, the run's own first, then by distance from it (the shorter of two as near)."""
    wanted = bucket_of(context).bit_length()
    return sorted(BUCKETS, key=lambda bucket: (abs(bucket.bit_length() - wanted), bucket))


def timed_fill(bucket: int) -> int:
    """Entries the cache holds when a bucket's steps are timed: half of it, about where a run of that
    bucket spends its steps (a run of a shorter one would never reach it)."""
    return bucket // 2


def entry_key(model, rows: int | None, threads: int, kind: str = RUNNER, role: str = TARGET,
              context: int | None = None) -> str:
    """Where a choice of this kind lies in the file: auto's runner under key_of's key with the role and
    the context's bucket after it; any other kind (a draft's head: the head's rows, not attention,
    decide it) under key_of's key with the kind after it."""
    return entry_of(key_of(model, rows, threads), kind, role, bucket_of(context))


def entry_of(key: str, kind: str, role: str, bucket: int) -> str:
    return f"{key} | {role} | context {bucket}" if kind == RUNNER else f"{key} | {kind}"


def read_all() -> dict:
    """Every recorded choice; an unreadable file counts as none (it is rewritten whole at the next record)."""
    try:
        return json.loads(choice_file().read_text())
    except (OSError, ValueError):
        return {}


def recorded(model, rows: int | None = None, kind: str = RUNNER, role: str = TARGET,
             context: int | None = None) -> dict | None:
    """The choice of this kind measured for this model at the threads torch runs on now (a runner
    choice: in this role, at this context's bucket), or None."""
    import torch

    threads = torch.get_num_threads()
    mine = SEEN.setdefault(model, {})
    seen = seen_key(kind, rows, threads, role, context)
    if seen not in mine:  # a runner choice's every role and bucket read at once: nearest() asks for them in turn
        everything, key = read_all(), key_of(model, rows, threads)
        for asked in [seen] if kind != RUNNER else [(kind, rows, threads, r, b) for r in (TARGET, DRAFT)
                                                    for b in BUCKETS]:
            mine[asked] = everything.get(entry_of(key, kind, asked[3], asked[4]))
    return mine[seen]


def seen_key(kind: str, rows: int | None, threads: int, role: str, context: int | None) -> tuple:
    """Where SEEN keeps a choice of a model: a runner choice per role and bucket, any other kind alone."""
    return (kind, rows, threads, role, bucket_of(context) if kind == RUNNER else None)


def nearest(model, rows: int | None, role: str = TARGET, context: int | None = None) -> dict | None:
    """The runner choice measured for this role and context, else the nearest measured: the same role
    at the nearest bucket (the shorter of two as near), then the other role's the same way; None where
    nothing was measured for the model."""
    for asked in (role, DRAFT if role == TARGET else TARGET):
        for bucket in nearest_first(context):
            known = recorded(model, rows, RUNNER, asked, bucket)
            if known is not None:
                return known
    return None


def write_all(choices: dict) -> None:
    """The file replaced whole: a reader never sees half of it."""
    path = choice_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(choices, indent=1) + "\n")


def remember(model, rows: int | None, threads: int, choice: dict, kind: str = RUNNER, role: str = TARGET,
             context: int | None = None) -> None:
    """A new choice written to the file and kept in memory for this model and thread count (a runner
    choice: for this role and context's bucket)."""
    write_all({**read_all(), entry_key(model, rows, threads, kind, role, context): choice})
    SEEN.setdefault(model, {})[seen_key(kind, rows, threads, role, context)] = choice


def fell_back(model, rows: int | None, why: str) -> None:
    """A compiled shape of this model failed after auto chose compiled for it (compiled.run_step): each
    of its choices (every role and context) that says compiled turned to eager, with why among what was
    dropped, so the next load runs eager rather than failing again at the same shape. A choice of
    anything else, or none, is left as it is."""
    import torch

    threads = torch.get_num_threads()
    for role in (TARGET, DRAFT):
        for bucket in BUCKETS:
            known = recorded(model, rows, RUNNER, role, bucket)
            if known is not None and known.get("runner") == "compiled":
                dropped = {**known.get("dropped", {}), "compiled": why}
                remember(model, rows, threads, {**known, "runner": "eager", "dropped": dropped}, RUNNER, role, bucket)
