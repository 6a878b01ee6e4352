"""One run configuration: every knob of a run, declared once with its default, range and help.

The engine's SpecConfig checks its fields here, the drafter factory (engine/factory.py) reads the drafter knobs, the
benchmark's flags, the app's controls and its API parameters, the sweep axes, the export and the
report columns are all derived from this record: nothing else writes a knob's default or range.
Plain Python, no torch, and a leaf: it imports nothing of playground, so every layer may import it.
"""

from __future__ import annotations

import json
import math
import os
import threading
from dataclasses import dataclass, field, fields
from pathlib import Path

MAX_GAMMA = 64  # past this a draft is nearly never fully accepted and verification dominates
MAX_NEW_TOKENS = 4096  # past this a CPU run takes hours; the target's context may allow less

# What models.yaml and the loaders accept: nf4 and int8 are bitsandbytes' (CPU and CUDA); int8-cpu and
# int4-cpu are weight-only on PyTorch's CPU kernels, output layer included (cpu_quant.py); auto is
# whichever measured fastest on the device the model lands on (AUTO_QUANTIZATION)
MODEL_QUANTIZATIONS = ("auto", "none", "nf4", "int8", "int8-cpu", "int4-cpu")
# docs/benchmarks.md: on a CPU the int4-cpu target, plain and with speculation, beats bf16 and nf4
# (Table 6); on a GPU a 1.5B model's step is launch-bound and bf16 beats nf4 (section "GPU")
AUTO_QUANTIZATION = {"cpu": "int4-cpu", "cuda": "none"}
BITSANDBYTES = ("nf4", "int8")  # quantized by bitsandbytes while loading (models/loading.py)

# the drafters, as the API, the CLI and reports name them
MODEL, PROMPT_LOOKUP, SUFFIX, RECYCLING, SELF, HYBRID = "model", "prompt_lookup", "suffix", "recycling", "self", "hybrid"
DRAFTERS = (MODEL, PROMPT_LOOKUP, SUFFIX, RECYCLING, SELF, HYBRID)
DRAFTER_LABELS = {MODEL: "draft model", PROMPT_LOOKUP: "prompt lookup", SUFFIX: "suffix decoding",
                  RECYCLING: "token recycling", SELF: "the target itself, layers skipped",
                  HYBRID: "suffixes or the draft model, whichever pays"}  # as the page shows them
MODEL_FREE = (PROMPT_LOOKUP, SUFFIX, RECYCLING)  # no forward at all: their bookkeeping is their c
TREE_DRAFTERS = (MODEL, SUFFIX, RECYCLING, HYBRID, SELF)  # the drafters with several candidates a position
DRAFT_MODEL_DRAFTERS = (MODEL, HYBRID)  # the drafters that run the draft model (the hybrid where it pays most)
# drafters whose memory grows over a session's runs (they hold no model, so keeping them keeps no weights alive)
LEARNING = (SUFFIX, RECYCLING)
CHAIN, TREE = "chain", "tree"  # the draft model proposes one chain, or a token tree (several candidates a position)
SPECULATIONS = (CHAIN, TREE)
MAX_TREE_NODES = 256  # past this one verification forward costs several plain steps on any device
QUANTIZATIONS = ("default", *MODEL_QUANTIZATIONS)  # default: what models.yaml says for that model
# How a model's forward runs (engine/runners): eager with a dynamic cache; a static cache; its steps
# compiled per fixed shape (CUDA graphs on a GPU); llama.cpp's kernels on the model's GGUF file (an optional
# extra); ONNX Runtime's kernels on a model built once from the checkpoint. auto is what measured fastest on
# the device: on a CPU onnxruntime for an int4 model (plain 1.43x eager's, speculation 1.2x eager's best, in one
# run on a 2-core Xeon: docs/benchmarks.md, "ONNX Runtime's kernels") until the machine's own measurement says
# which of it and eager is faster there (engine/runners/auto.py), eager where it cannot serve the run (a
# tree, a bf16 or float32 model, a model built in process); eager on CUDA until a compiled run measures faster
RUNNERS = ("auto", "eager", "static", "compiled", "llamacpp", "onnxruntime")
AUTO_RUNNER = {"cpu": "onnxruntime", "cuda": "eager"}


@dataclass(frozen=True)
class Knob:
    """How one field of RunConfig is checked, offered and explained."""

    name: str
    kind: type  # int, float, bool or str
    default: object
    label: str  # the control's label on the page
    help: str  # one line: the page's info text and the CLI's help
    group: str  # "models", "drafter" or "decoding" (SpecConfig's fields)
    low: float | str | None = None  # a number, or the name of the field that bounds it
    high: float | str | None = None
    low_open: bool = False  # the low end itself is not allowed (top_p > 0)
    choices: tuple = ()  # the allowed values of a str knob
    step: float = 1  # the page's slider step
    sweep: bool = False  # may be an axis of a sweep
    pair_default: bool = False  # the pair in models.yaml suggests its own value

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


def knob(default, label: str, help: str, group: str, kind: type | None = None, **rules):
    """A RunConfig field carrying its Knob (completed with name and kind by RunConfig)."""
    return field(default=default, metadata={"knob": dict(default=default, label=label, help=help,
                                                         group=group, kind=kind, **rules)})


@dataclass(frozen=True)
class RunConfig:
    """Every knob of a run besides the prompt. Validated on creation; errors name the field and
    its allowed range. Field order is the order of the app's inputs and API parameters."""

    pair: str | None = knob(None, "Model pair (target + draft)", "pair name from models.yaml "
                            "(default: the registry's default pair)", "models", str)
    draft: str = knob("", "Draft model", "any model in models.yaml drafts (empty: the pair's own draft); one "
                      "with another tokenizer drafts across tokenizers: its text re-encoded when greedy, only "
                      "the tokens both vocabularies hold when sampling", "models", sweep=True)
    drafter: str = knob(MODEL, "Drafter", "the pair's draft model; prompt lookup (copies n-grams from the "
                        "context); suffix decoding (continuations of the longest matching suffix of the prompt, "
                        "this run and earlier runs); token recycling (each token's likeliest successors, "
                        "recorded from the target's own verifications); the target itself with layers skipped "
                        "(no second model); or each step from the suffixes or the draft model, whichever pays "
                        "most", "drafter", choices=DRAFTERS,
                        sweep=True)
    gamma: int = knob(4, "γ lookahead", "tokens drafted per target call (the first call's when adaptive)",
                      "decoding", low=1, high=MAX_GAMMA, sweep=True, pair_default=True)
    adaptive: bool = knob(False, "Adaptive γ", "+2 after a fully accepted draft, −1 after a rejection "
                          "(transformers' 'heuristic' schedule)", "decoding")
    gamma_min: int = knob(1, "γ min", "adaptive lower bound", "decoding", low=1, high=MAX_GAMMA)
    gamma_max: int = knob(16, "γ max", "adaptive upper bound", "decoding", low="gamma_min", high=MAX_GAMMA)
    min_confidence: float = knob(0.0, "Draft confidence threshold", "stop drafting when the draft's top "
                                 "probability falls below this (0 is off)", "decoding", low=0.0, high=1.0,
                                 step=0.05, sweep=True)
    temperature: float = knob(0.0, "Temperature", "0 is greedy", "decoding", low=0.0, high=2.0, step=0.05,
                              sweep=True, pair_default=True)
    top_k: int = knob(0, "Top-k", "keep the k most likely tokens; 0 is off", "decoding", low=0, high=10**7,
                      sweep=True)
    top_p: float = knob(1.0, "Top-p", "keep the smallest set whose mass reaches top-p; 1 is off", "decoding",
                        low=0.0, high=1.0, low_open=True, step=0.01, sweep=True)
    seed: int = knob(0, "Seed", "seeds the run's own generators; nothing global is reseeded", "decoding",
                     low=0, high=2**63 - 1)
    max_new_tokens: int = knob(96, "Max new tokens", "new tokens at most (the target's context may allow "
                               "fewer)", "decoding", low=1, high=MAX_NEW_TOKENS)
    ngram_min: int = knob(1, "Prompt lookup: n-gram min", "shortest n-gram prompt lookup matches", "drafter",
                          low=1, high=32, sweep=True)
    ngram_max: int = knob(3, "n-gram max", "longest n-gram prompt lookup matches (tried first)", "drafter",
                          low="ngram_min", high=32, sweep=True)
    draft_vocab: int = knob(0, "Draft vocabulary: first N token ids (0 is all)", "the draft model proposes "
                            "only among the first N token ids: a cheaper output layer, still lossless, but "
                            "the target's tokens past N are never drafted; left at the pair's value on a runner "
                            "whose cut is not cheaper by itself (onnxruntime, llamacpp), the head measured "
                            "faster here drafts", "drafter", low=0, high=10**7, sweep=True, pair_default=True)
    target_quantization: str = knob("default", "Target quantization", "default: as in models.yaml",
                                    "models", choices=QUANTIZATIONS)
    draft_quantization: str = knob("default", "Draft quantization", "default: as in models.yaml", "models",
                                   choices=QUANTIZATIONS, sweep=True)
    runner: str = knob("auto", "Runner", "how each forward runs: eager (dynamic cache), static (fixed-size "
                       "cache, rollback moves an integer) or compiled (static, each step shape compiled "
                       "once; CUDA graphs on a GPU) or llamacpp (llama.cpp's kernels on the model's GGUF file, "
                       "an optional extra) or onnxruntime (ONNX Runtime's int4 kernels on a model built once "
                       "from the checkpoint; chains only); the baseline uses the same", "models", choices=RUNNERS,
                       sweep=True)
    kept_layers: int = knob(0, "Self-drafting: layers kept", "the target drafts for itself with only this "
                            "many of its layers, chosen on the prompt (0: half of them)", "drafter", low=0,
                            high=1000, sweep=True)
    speculation: str = knob(CHAIN, "Speculation: chain or tree", "tree: several candidates per position, all "
                            "verified in one target call (draft model, suffix decoding, token recycling)",
                            "drafter", choices=SPECULATIONS)
    tree_budget: int = knob(16, "Tree: most nodes", "most draft nodes in a tree", "drafter", low=1,
                            high=MAX_TREE_NODES, sweep=True)
    tree_depth: int = knob(4, "depth", "most levels of a tree", "drafter", low=1, high=MAX_GAMMA, sweep=True)
    tree_branching: int = knob(2, "children per node", "children per expanded node", "drafter", low=1, high=16,
                               sweep=True)
    tree_width: int = knob(0, "nodes expanded per depth (0: all)", "most nodes expanded per depth, the draft's "
                           "likeliest (EAGLE-2); 0: as many as the budget allows", "drafter", low=0,
                           high=MAX_TREE_NODES, sweep=True)

    def __post_init__(self):
        check(self)
        if self.speculation == TREE and self.drafter not in TREE_DRAFTERS:
            raise KnobError("speculation", f"speculation {TREE!r} needs a drafter among {TREE_DRAFTERS}, "
                                           f"got {self.drafter!r}")
        for name in ("target_quantization", "draft_quantization")[: 1 + (self.drafter in DRAFT_MODEL_DRAFTERS)]:
            if self.runner == "compiled" and getattr(self, name) in BITSANDBYTES:
                raise compiled_refuses(name, getattr(self, name))

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    @classmethod
    def from_values(cls, values: dict) -> RunConfig:
        """Build from raw page or API values: a whole float becomes an int where an int is expected
        (sliders send 4.0), an int a float where a float is; anything else is left to the checks."""
        return cls(**{name: coerce(KNOBS[name], value) for name, value in values.items()})

    def loading(self) -> dict:
        """Keyword arguments for PairCache.get: None keeps the registry's own setting; the draft is
        loaded now only for a drafter that runs it (else on first use). The runner goes along so that
        a pairing it cannot run (compiled and a bitsandbytes model) is refused before anything loads."""
        q = {"target_quantization": self.target_quantization, "draft_quantization": self.draft_quantization}
        return {"draft": self.draft or None, **{k: (None if v == "default" else v) for k, v in q.items()},
                "with_draft": self.drafter in DRAFT_MODEL_DRAFTERS, "runner": self.runner}

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


KNOBS: dict[str, Knob] = {
    f.name: Knob(name=f.name, **{**f.metadata["knob"], "kind": f.metadata["knob"]["kind"] or type(f.default)})
    for f in fields(RunConfig)
}


def group(name: str) -> list[Knob]:
    """The knobs of one group, in field order."""
    return [k for k in KNOBS.values() if k.group == name]


# -- checks: the one place that says what each knob allows -----------------------------------------


class KnobError(ValueError):
    """A value a field does not allow. The message names the field and what it allows; `field` holds
    the name itself, for a caller that points at the field its own way (the benchmark's --flag)."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field

    def __reduce__(self):  # pickled with both arguments (the default passes the message alone)
        return type(self), (self.field, str(self))


def compiled_refuses(field: str, quantization: str) -> KnobError:
    """The compiled runner and a bitsandbytes model, refused by name (by the run configuration when the
    quantization is given, by the pair cache when models.yaml gives it, by the runner on any other way
    in): LLM.int8's outlier check (`outliers.any()`, `argwhere`) reads the GPU from inside CUDA graph
    capture, and nf4 under a whole-graph compile is untested."""
    return KnobError("runner", f"runner 'compiled' cannot run a bitsandbytes model ({field} {quantization!r}): "
                               "int8's outlier check reads the GPU inside CUDA graph capture and nf4 is untested "
                               f"compiled whole; use runner auto, eager or static with {field} {quantization!r}, "
                               f"or runner compiled with {field} none")


def check(record, names=None) -> None:
    """Check the named fields of any record holding knob values (RunConfig, SpecConfig); the
    KnobError names the first bad field and its allowed values."""
    for name in names or [n for n in KNOBS if hasattr(record, n)]:
        check_value(KNOBS[name], getattr(record, name), record)


def check_value(k: Knob, value, record=None) -> None:
    if k.name == "pair":  # names from models.yaml: which exist is checked against it at load
        if value is not None and (not isinstance(value, str) or not value):
            raise KnobError(k.name, f"pair must be a pair name from models.yaml, got {value!r}")
        return
    if k.name == "draft":
        if not isinstance(value, str):
            raise KnobError(k.name, f"draft must be a model name from models.yaml or empty, got {value!r}")
        return
    if k.choices:
        if value not in k.choices:
            allowed = ", ".join(map(str, k.choices))
            raise KnobError(k.name, f"{k.name} must be one of: {allowed}, got {value!r}")
        return
    if k.kind is bool:
        if not isinstance(value, bool):
            raise KnobError(k.name, f"{k.name} must be true or false, got {value!r}")
        return
    low, high = bound(k.low, record), bound(k.high, record)
    if k.kind is int:
        check_int(k.name, value, low=low, high=high)
    else:
        check_number(k.name, value, low=low, high=high, low_open=k.low_open)


def check_number(name, value, *, low, high, low_open=False):
    """Raise a KnobError naming the field and its allowed range when value is outside it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise KnobError(name, f"{name} must be a number, got {value!r}")
    if value < low or value > high or (low_open and value == low):
        bracket = "(" if low_open else "["
        raise KnobError(name, f"{name} must be in {bracket}{low}, {high}], got {value!r}")


def check_int(name, value, *, low, high):
    """Raise a KnobError naming the field when value is not an integer in [low, high]."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise KnobError(name, f"{name} must be an integer, got {value!r}")
    if not low <= value <= high:
        raise KnobError(name, f"{name} must be an integer in [{low}, {high}], got {value!r}")


def bound(limit, record):
    """A range end: a number, or another field's value (gamma_max >= gamma_min); `record` is an
    object or a dict holding the other fields."""
    if isinstance(limit, str):
        other = record.get(limit) if isinstance(record, dict) else getattr(record, limit, None)
        return other if isinstance(other, (int, float)) and not isinstance(other, bool) else KNOBS[limit].low
    return limit


def coerce(k: Knob, value):
    """What a page or a JSON client sends, made the knob's type where nothing is lost."""
    if k.kind is bool and type(value) is int and value in (0, 1):
        return bool(value)
    if k.kind is int and isinstance(value, float) and value.is_integer():
        return int(value)
    if k.kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def parse_text(k: Knob, text: str):
    """A knob's value from command-line or sweep text; KnobError says what was expected."""
    if k.kind is bool:
        lowered = text.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise KnobError(k.name, f"{k.name} takes true or false, got {text!r}")
    if k.kind in (int, float):
        try:
            return k.kind(text)
        except ValueError:
            raise KnobError(k.name, f"{k.name} takes {'integers' if k.kind is int else 'numbers'}, "
                             f"got {text!r}") from None
    return text.strip()


def cache_dir() -> Path:
    """$PLAYGROUND_CACHE, else the user's cache dir ($XDG_CACHE_HOME or ~/.cache)/speculative-playground:
    where the models keep checkpoints and the compiled runner inductor's caches (both layers read it here)."""
    if os.environ.get("PLAYGROUND_CACHE"):
        return Path(os.environ["PLAYGROUND_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "speculative-playground"


def write_text_atomic(path: Path, text: str) -> None:
    """A file in the cache written whole (the models' manifests, auto's runner choices): a temp file
    beside `path`, flushed, then renamed; a crash leaves the old file or none, never half."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    try:
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def read_json(path: Path) -> dict:
    """A JSON object kept in the cache (an index, a marker), or {} where it is missing, unreadable or not
    an object: what is damaged is ignored and written anew, never trusted in part."""
    try:
        found = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def is_sha256(text) -> bool:
    """Whether a recorded digest is one: 64 lower-case hex digits (a damaged record is hashed again)."""
    return isinstance(text, str) and len(text) == 64 and all(c in "0123456789abcdef" for c in text)


def pid_alive(pid: int) -> bool:
    """Whether a process still runs: what tells a killed writer's leftovers from a live one's."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True
