"""An ONNX model built once from a model's file, for the onnxruntime runner.

onnxruntime-genai's model builder (`python -m onnxruntime_genai.models.builder`) reads the model's
weights and writes model.onnx with its weights and genai_config.json. It runs as a child process (it
prints, and the engine never does), offline, into a folder beside the cache that is renamed into place
only once whole and marked, so a half-built model is never trusted: one without its marker is built
again. A build is keyed on content (onnx_cache.py), so a copied cache is not rebuilt, and a model
reached by another path to the same bytes (an Ollama blob of a pack's file) finds the build made first.

What it reads (`source_of`, asking the model through onnx_source.py): an int4 build of a model loaded
from a GGUF file (a model pack, a local or hub .gguf) reads that file itself, through gguf_builder.py
(the builder's own GGUF loader, taught to dequantize Q4_K and the other quantized types), with the small
folder of the model's config and tokenizer beside it (`model.metadata_dir()`, else the checkpoint's):
no bfloat16 checkpoint is read, and the key is the GGUF's SHA-256. Anything else reads the checkpoint
the model was loaded from: a hub model, and the tiny pair, whose GGUF and checkpoint are written in
process (its float32 builds hold the runner to eager's logits).

Precision follows the model as loaded: a float32 model (the tiny pair) is built in float32, so the
tests can hold the runner to eager's logits; anything else in int4 (MatMulNBits, int8 activations:
accuracy level 4), the kernel that decodes fastest on a CPU. The run's quantization knob chooses
PyTorch's kernels and does not reach these: baseline and speculation share this build, so the
speculative output is the build's own.

Two edits follow the builder (onnx_graph.py): the head reads only the last rows the runner asks for
(`keep_last_rows`), so a long prompt computes and holds one row of logits, not one per token; and a
draft vocabulary (draft_vocab) is cut into the head, so a draft forward costs what its size says. An
int4 cut is made from the model's full build, with no second builder run (`cut_build`, the full build
made first where no cache holds it): the full graph with its head reading its own first rows, in a
folder that hard-links the full build's files, so the cut adds only its head to the cache (about
37 MB for the default draft's 65,536 rows) and its key follows the full build's. A float32 build (the
tiny pair's) is cut in place in a build of its own (`trim_head`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from playground.engine.runners.onnx_graph import cut_head_from, keep_last_rows, loaded_bytes, trim_head
from playground.engine.runners.onnx_cache import (MARKER, build_folder, build_key, cut_key,  # noqa: F401
                                                  link_files, same_bytes_as, seal, settle, source_name,
                                                  temp_folder, whole)
from playground.engine.runners.onnx_source import (BUILT, checkpoint_of, digest_of, float32,  # noqa: F401
                                                   gguf_of, metadata_of, reads_gguf, serves,
                                                   told_quantization)

ACCURACY_LEVEL = 4  # MatMulNBits with int8 activations: the fast CPU path (float activations: ~4.7x slower)
LOG_TAIL = 2000  # characters of the builder's output an error shows
ROOT = Path(__file__).resolve().parents[3]  # the folder holding `playground`, for the GGUF builder's child


def ort():
    """onnxruntime, imported when a runner is made (never at import of the engine)."""
    try:
        import onnxruntime
    except ImportError as e:
        raise ValueError("runner onnxruntime needs onnxruntime and onnxruntime-genai "
                         "(pip install -r requirements.txt)") from e
    return onnxruntime


@dataclass
class Built:
    """A built model's folder and what a runner binds: layer names, head count and size, cache dtype."""

    folder: Path
    seconds: float  # what the build took (0 when it was already cached)
    same_as: str | None = None  # found in the cache, made from this other path to the same bytes
    past_names: list[str] = field(default_factory=list)
    present_names: list[str] = field(default_factory=list)
    kv_heads: int = 0
    head_size: int = 0
    kv_dtype: type = np.float32
    sessions: dict = field(default_factory=dict)  # SHARED (or threads) -> InferenceSession, shared by its runners

    def __post_init__(self):
        decoder = json.loads((self.folder / "genai_config.json").read_text())["model"]["decoder"]
        layers = decoder["num_hidden_layers"]
        keys, values = decoder["inputs"]["past_key_names"], decoder["inputs"]["past_value_names"]
        out_keys, out_values = decoder["outputs"]["present_key_names"], decoder["outputs"]["present_value_names"]
        self.past_names = [pattern % i for i in range(layers) for pattern in (keys, values)]
        self.present_names = [pattern % i for i in range(layers) for pattern in (out_keys, out_values)]
        self.kv_heads, self.head_size = decoder["num_key_value_heads"], decoder["head_size"]

    def weight_bytes(self) -> int:
        """The graph and its external weights, as a session loads them."""
        return loaded_bytes(self.folder)

    def session(self, threads: int):
        """The model's session for runs at `threads`. On the process's shared pool (shared_pool) one
        session serves every thread count, since the pool, not the session, has the threads: a session
        per count held another copy of the weights (the app's page runs at one thread, auto's timing
        and the benchmark at two: 1.3 GB more for the default target)."""
        O = ort()
        shared = shared_pool(O, threads)
        key = SHARED if shared else threads
        if key not in self.sessions:
            options = O.SessionOptions()
            options.log_severity_level = 3  # errors only: ORT warns at every load that `last_rows` has a default
            if shared:
                options.use_per_session_threads = False
            else:  # two pools on the same cores: one that spins after its run takes them from the other
                options.intra_op_num_threads = threads
                options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            session = O.InferenceSession(str(self.folder / "model.onnx"), options,
                                         providers=["CPUExecutionProvider"])
            kinds = {i.name: i.type for i in session.get_inputs()}
            self.kv_dtype = np.float16 if kinds[self.past_names[0]] == "tensor(float16)" else np.float32
            self.sessions[key] = session
        return self.sessions[key]


SHARED = "shared pool"  # Built.sessions' key for the one session on the process's shared pool


def shared_pool(O, threads: int) -> bool:
    """One intra-op pool for every session of the process (the draft's and the target's take turns
    on the same cores). Its threads spin between runs, which a decoding loop's next step then finds
    awake: on 2 cores, plain decoding measured 15.6 tok/s with it against 14.4 with a pool per
    session and spinning off (pools per session that spin take the cores from each other: the
    draft measured c 0.95 instead of about 0.35). ORT makes that pool with its environment, once
    per process: False when the environment exists already with another size, or none at all."""
    if getattr(O, "_playground_pool", None):  # kept beside ORT's own per-process environment
        return True
    try:
        O.capi._pybind_state.set_global_thread_pool_sizes(threads, 1)
    except Exception:  # the environment was made without it (another library's session came first)
        return False
    O._playground_pool = threads
    return True


BUILDS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> {rows: Built}, freed with it
BUILDING: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> the lock its builds hold
LOCK = threading.Lock()  # the two maps only: two models build side by side (warmup.builds)


def built_model(model, rows: int | None = None) -> Built:
    """The model's build (made now if no cache holds it), with the output layer cut to `rows`."""
    with LOCK:
        mine = BUILDS.setdefault(model, {})
        lock = BUILDING.setdefault(model, threading.Lock())
    with lock:
        if rows not in mine:
            precision, folder, gguf = sources(model)
            mine[rows] = build(folder, precision, rows, gguf, digest_of(model))
        return mine[rows]


def builder_peak(model) -> int | None:
    """Bytes the builder's child peaks at for the model's int4 build from its GGUF (gguf_builder.peak_bytes);
    None for any other: a checkpoint goes through the builder's own pass, 4x more, and is not estimated."""
    from playground.engine.runners.gguf_builder import peak_bytes

    _, _, gguf = sources(model)
    return peak_bytes(gguf) if gguf else None


def build_identity(model, rows: int | None = None) -> tuple[str, str, str]:
    """(name, precision, key) of the build `built_model` gives the model: the name of the file or
    folder it reads, and the cache key (auto's recorded choices are kept under it, runners/choice.py)."""
    precision, folder, gguf = sources(model)
    key = key_of(folder, precision, rows, gguf, digest_of(model))
    built = build_folder(gguf or folder, precision, rows, key)  # built from another path: that one's name
    return source_name(built, gguf.stem if gguf else folder.name), precision, key


def held_bytes(model) -> int:
    """What ONNX Runtime holds for the model outside torch: each open session's copy of its build's weights."""
    return sum(built.weight_bytes() * len(built.sessions) for built in BUILDS.get(model, {}).values())


def release(model) -> None:
    """Close the model's sessions (auto chose eager for it): their weights are not held for nothing.
    A later run on onnxruntime by name opens them again from the cached build."""
    with LOCK:
        BUILDS.pop(model, None)


def is_built(model, rows: int | None = None) -> bool:
    """Has this process the model's build already (no build, no cache lookup left to do)?"""
    return rows in BUILDS.get(model, {})


def sources(model) -> tuple[str, Path, Path | None]:
    """(precision, folder, GGUF or None): the model's build precision and what its builder reads."""
    precision = precision_of(model)
    return (precision, *source_of(model, precision))


def source_of(model, precision: str) -> tuple[Path, Path | None]:
    """(folder, GGUF or None): what the builder reads. An int4 build of a model loaded from a GGUF reads
    the GGUF, with the folder of its config and tokenizer; anything else reads its checkpoint folder.
    Only int4 builds read a GGUF: the float32 ones (the tiny pair's) compare the runner with eager."""
    gguf = gguf_of(model) if precision == "int4" else None
    return (metadata_of(model), gguf) if gguf else (checkpoint_of(model), None)


def precision_of(model) -> str:
    said = told_quantization(model)
    if said is None:
        quantized = any(hasattr(m, "dequantized") for m in model.modules())  # models/cpu_quant's linears
    else:
        quantized = said != "none"
    return "fp32" if model.dtype == float32() and not quantized else "int4"


def build(checkpoint: Path, precision: str, rows: int | None, gguf: Path | None = None,
          digest: str | None = None) -> Built:
    """The cached build of `checkpoint` (or of `gguf`, with `checkpoint` the folder of its config and
    tokenizer; `digest` its SHA-256 if known), or a new one: by the builder, or, for an int4 cut head,
    from the full build. Found under another path to the same bytes, it says which (`same_as`)."""
    key = key_of(checkpoint, precision, rows, gguf, digest)
    folder = build_folder(gguf or checkpoint, precision, rows, key)
    if cut_from_full(precision, rows):
        built = cached(folder, key, lambda work: cut_build(checkpoint, precision, rows, gguf, work, digest))
    else:
        built = cached(folder, key, lambda work: builder_build(checkpoint, precision, rows, gguf, work))
    built.same_as = None if built.seconds else same_bytes_as(folder, gguf or checkpoint)
    return built


def cut_from_full(precision: str, rows: int | None) -> bool:
    """Is this build a cut head made from the full build? An int4 one: the builder's int4 head is a
    MatMulNBits whose rows the cut takes as tensors of its own (onnx_graph.cut_head_from), so the
    builder runs once per model (a second run cost the default draft 39 s and 0.35 GB of cache)."""
    return bool(rows) and precision == "int4"


def key_of(checkpoint: Path, precision: str, rows: int | None, gguf: Path | None = None,
           digest: str | None = None) -> str:
    """The cache key of the build `build` gives: a cut from the full build is keyed on the full
    build's key (onnx_cache.cut_key), anything else on what the builder reads and how."""
    if cut_from_full(precision, rows):
        return cut_key(key_of(checkpoint, precision, None, gguf, digest), rows)
    return build_key(checkpoint, precision, builder_options(checkpoint, precision), rows, gguf, digest)


def cached(folder: Path, key: str, make) -> Built:
    """The build in `folder` if whole under `key`; else `make(work)` writes it into a temp folder and
    returns its marker's fields, and it is sealed and renamed into place (onnx_cache), so a
    half-written build is never trusted. Its seconds count whatever `make` built first."""
    if whole(folder, key):
        return Built(folder, 0.0)
    start = time.perf_counter()
    work = temp_folder(folder.parent)
    try:
        seal(work, {"key": key, **make(work)})
        settle(work, folder, key)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return Built(folder, time.perf_counter() - start)


def builder_build(checkpoint: Path, precision: str, rows: int | None, gguf: Path | None, work: Path) -> dict:
    """The builder's model in `work` (a float32 head cut in place), its head reading only the rows
    asked for."""
    options = builder_options(checkpoint, precision)
    run_builder(checkpoint, work, precision, options, gguf)
    if rows:
        trim_head(work, rows)
    keep_last_rows(work)
    return described(checkpoint, precision, rows, gguf, options)


def cut_build(checkpoint: Path, precision: str, rows: int, gguf: Path | None, work: Path,
              digest: str | None = None) -> dict:
    """The full build (made first if no cache holds it) with its head cut to `rows`, in `work`: its
    files hard-linked (the weights stay on disk once), its graph rewritten with the head's rows in a
    small file of their own (onnx_graph.cut_head_from). No builder runs for it."""
    full = build(checkpoint, precision, None, gguf, digest)
    link_files(full.folder, work, but="model.onnx")
    cut_head_from(full.folder, work, rows)
    marker = json.loads((full.folder / MARKER).read_text())
    return {**described(checkpoint, precision, rows, gguf, marker["options"]), "cut_from": full.folder.name}


def described(checkpoint: Path, precision: str, rows: int | None, gguf: Path | None, options: dict) -> dict:
    """A build's marker fields besides its key and files: what it was built from and how."""
    return {"checkpoint": str(checkpoint), "gguf": gguf and str(gguf), "precision": precision, "rows": rows,
            "options": options}


def builder_options(folder: Path, precision: str) -> dict[str, str]:
    """The builder's --extra_options (`folder`: the checkpoint, or a GGUF's config and tokenizer). The
    embedding is never left in float32 (151,936 x H floats): a tied one shares the int4 output layer's
    weights (a cut head leaves them whole: its rows are tensors of its own); an untied one is quantized
    to int4 on its own."""
    options = {}
    if precision != "fp32":
        options["accuracy_level"] = str(ACCURACY_LEVEL)
        tied = json.loads((folder / "config.json").read_text()).get("tie_word_embeddings", False)
        if tied:
            options["shared_embeddings"] = "true"
        else:  # the embedding in int4 too (GatherBlockQuantized): 0.13 GB instead of 0.9 for the 1.5B
            options["op_types_to_quantize"] = "MatMul/Gather"
    return options


def run_builder(checkpoint: Path, out: Path, precision: str, options: dict, gguf: Path | None = None) -> None:
    """The builder as a child process, offline, its output kept for the error message. A GGUF is read
    through gguf_builder.py (the builder's own main, its GGUF loader taught to dequantize), with the
    config and tokenizer from `checkpoint`; a checkpoint by the builder as it is."""
    if gguf:
        command = [sys.executable, "-m", "playground.engine.runners.gguf_builder", "-m", str(checkpoint),
                   "-i", str(gguf)]
    else:
        command = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(checkpoint)]
    command += ["-o", str(out), "-p", precision, "-e", "cpu", "-c", str(out / ".hf")]
    if options:
        command += ["--extra_options", *[f"{k}={v}" for k, v in options.items()]]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    if gguf:  # the child imports playground wherever the app was started from
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    # progress is warm_up's (a Building event before and after): the builder's own lines only explain a failure
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, check=False)
    shutil.rmtree(out / ".hf", ignore_errors=True)
    if done.returncode != 0 or not (out / "model.onnx").is_file():
        tail = done.stdout[-LOG_TAIL:]
        raise ValueError(f"onnxruntime-genai's builder could not export {(gguf or checkpoint).name} "
                         f"({precision}); its output ends:\n{tail}")
