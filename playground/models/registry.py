"""models.yaml (and the user's kept pairs) -> dataclasses: which models exist, where their weights come
from, which pairs run.

Pure configuration: no torch, nothing loaded. Every check names the file, the field path
(e.g. `pairs.default.target`) and what was expected, because a typo in YAML should read like a
form error, not a stack trace from deep inside a loader.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from playground.config import KNOBS, MODEL_QUANTIZATIONS as QUANTIZATIONS
from playground.models.checker import Checker

SOURCE_KINDS = ("hub", "local", "pack", "tiny")
DTYPES = ("auto", "float32", "bfloat16", "float16")
DEVICES = ("auto", "cpu", "cuda")
TINY_ROLES = ("target", "draft")

DEFAULT_CONFIG = Path(__file__).resolve().parents[2] / "models.yaml"
USER_FILE = "user-pairs.yaml"  # beside the cache (config.cache_dir()): pairs kept from the scan of your models
KEPT_FIELDS = ("path", "bytes", "mtime_ns", "sha256", "found", "architecture")


@dataclass(frozen=True)
class Kept:
    """A model kept from the scan (models/userpairs.py): its file as it was when kept, so a model that went
    away or changed in its store is said to have, and the scan's name and architecture."""

    path: str  # the GGUF file or checkpoint folder
    bytes: int
    mtime_ns: int
    sha256: str  # of the file's content (a folder's: of its files' digests)
    found: str  # where the scan found it: "<store> <name>"
    architecture: str = ""


@dataclass(frozen=True)
class Source:
    """One place a model can come from."""

    kind: str  # "hub" | "local" (checkpoint dir or .gguf file) | "pack" | "tiny"
    ref: str  # hub repo id, path (absolute once loaded), model pack name, or tiny role
    revision: str | None = None  # hub only: branch, tag or commit
    gguf_file: str | None = None  # hub only: the GGUF file to take from a repo of GGUF files

    def __str__(self) -> str:
        options = (("revision", self.revision), ("gguf_file", self.gguf_file))
        extra = "".join(f" {k}={v}" for k, v in options if v)
        return f"{self.kind}:{self.ref}{extra}"


@dataclass(frozen=True)
class ModelSpec:
    """One model: its sources in the order to try them, and how to load it."""

    name: str
    sources: tuple[Source, ...]  # tried in order until one loads
    dtype: str = "auto"  # auto | float32 | bfloat16 | float16
    quantization: str = "none"  # none | nf4 | int8 (bitsandbytes) | int8-cpu | int4-cpu (PyTorch CPU kernels)
    device: str = "auto"  # auto | cpu | cuda
    trust_remote_code: bool = False  # run the repo's own modelling code (hub/local only)
    description: str = ""
    kept: Kept | None = None  # set for a model the user kept from the scan (user-pairs.yaml)

    @property
    def needs_hub(self) -> bool:
        """True when the hub is the only way to get this model."""
        return all(s.kind == "hub" for s in self.sources)

    @property
    def random_weights(self) -> bool:
        """True for the tiny in-process models: their output is gibberish by design."""
        return all(s.kind == "tiny" for s in self.sources)


@dataclass(frozen=True)
class PairSpec:
    """A target and the draft that speculates for it, with suggested knobs."""

    name: str
    target: str  # model name
    draft: str  # model name
    description: str  # one line, shown in the UI
    gamma: int = KNOBS["gamma"].default  # suggested knobs (those marked pair_default in config.py)
    temperature: float = KNOBS["temperature"].default
    draft_vocab: int = KNOBS["draft_vocab"].default
    # The acceptance rate its draft reaches on typical prompts, measured once: with it the pair's γ
    # follows this machine's runner (measure/bench/follow.py: the formula's best γ at the measured c
    # and v(k)); `gamma` above is what runs where nothing is measured. None: γ stays fixed.
    alpha: float | None = None
    needs_hub: bool = False  # derived: either model can only come from the hub
    random_weights: bool = False  # derived: either model has random weights (tiny)
    kept: bool = False  # derived: a pair of the user's own models, kept from the scan

    def suggested(self, draft: str | None = None) -> dict:
        """The knobs this pair suggests values for, in place of the run configuration's defaults. Its
        draft vocabulary was chosen for its own draft: another draft (the `draft` knob) drafts over its
        whole vocabulary (one with another tokenizer counts other ids altogether)."""
        knobs = {name: getattr(self, name) for name in PAIR_KNOBS}
        if draft and draft != self.draft:
            knobs["draft_vocab"] = KNOBS["draft_vocab"].default
        return knobs


PAIR_KNOBS = tuple(k.name for k in KNOBS.values() if k.pair_default)
assert set(PAIR_KNOBS) <= set(PairSpec.__dataclass_fields__), "each pair_default knob is a PairSpec field"


@dataclass(frozen=True)
class Registry:
    models: dict[str, ModelSpec]
    pairs: dict[str, PairSpec]
    default_pair: str
    path: str  # the file this was read from
    shown: str = ""  # the file as the user named it (models.yaml by default), for error messages
    user_file: str = ""  # the kept pairs' file merged in, if any
    user_problems: tuple[str, ...] = ()  # what of it was not merged, and why

    def with_models(self, models: dict[str, ModelSpec], pairs: dict[str, PairSpec]) -> Registry:
        """This registry with more models and pairs (the user's), under names it does not hold yet."""
        return replace(self, models={**self.models, **models}, pairs={**self.pairs, **pairs})

    @property
    def where(self) -> str:
        """How messages name this file: never a server-side absolute path the user did not give."""
        return self.shown or Path(self.path).name

    def pair(self, name: str | None) -> PairSpec:
        """The named pair; None gives the default."""
        name = self.default_pair if name is None else name
        if name not in self.pairs:
            raise ValueError(f"{self.where}: unknown pair {name!r}; known pairs: {', '.join(self.pairs)}")
        return self.pairs[name]

    def model(self, name: str) -> ModelSpec:
        if name not in self.models:
            raise ValueError(f"{self.where}: unknown model {name!r}; known models: {', '.join(self.models)}")
        return self.models[name]


def load_registry(path: str | os.PathLike | None = None, user: bool = True) -> Registry:
    """Read and check models.yaml. None: $PLAYGROUND_CONFIG, else the repository's models.yaml. `user`:
    with the pairs kept from the scan merged in (user_file(); a broken entry is left out and said)."""
    given = path or os.environ.get("PLAYGROUND_CONFIG")
    path = Path(given or DEFAULT_CONFIG)
    shown = str(given) if given else path.name  # the shipped file is "models.yaml", not where it lies
    try:
        text = path.read_text()
    except OSError as e:
        raise ValueError(f"{shown}: cannot read the model registry ({e.strerror or e})") from e
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ValueError(f"{shown}: not valid YAML: {e}") from e
    registry = parse_registry(data, path, shown)
    return with_user_pairs(registry, user_file()) if user else registry


def parse_registry(data, path: Path, shown: str | None = None) -> Registry:
    shown = shown or path.name
    check = Checker(shown)
    check.mapping("", data, required=("default_pair", "models", "pairs"), optional=())
    check.mapping("models", data["models"], nonempty=True)
    check.mapping("pairs", data["pairs"], nonempty=True)
    models = {name: parse_model(check, name, entry, path.parent) for name, entry in data["models"].items()}
    pairs = {name: parse_pair(check, name, entry, models) for name, entry in data["pairs"].items()}
    default = check.string("default_pair", data["default_pair"])
    if default not in pairs:
        check.fail("default_pair", f"the name of a pair (one of: {', '.join(pairs)})", default)
    return Registry(models, pairs, default, str(path), shown)


def parse_model(check: Checker, name, entry, base: Path) -> ModelSpec:
    where = f"models.{name}"
    check.mapping(where, entry, required=("sources",),
                  optional=("dtype", "quantization", "device", "trust_remote_code", "description"))
    sources = entry["sources"]
    if not isinstance(sources, list) or not sources:
        check.fail(f"{where}.sources", "a non-empty list of sources", sources)
    return ModelSpec(
        name=check.string(f"{where} (name)", name),
        sources=tuple(parse_source(check, f"{where}.sources[{i}]", s, base) for i, s in enumerate(sources)),
        dtype=check.choice(f"{where}.dtype", entry.get("dtype", "auto"), DTYPES),
        quantization=check.choice(f"{where}.quantization", entry.get("quantization", "none"), QUANTIZATIONS),
        device=check.choice(f"{where}.device", entry.get("device", "auto"), DEVICES),
        trust_remote_code=check.boolean(f"{where}.trust_remote_code", entry.get("trust_remote_code", False)),
        description=check.string(f"{where}.description", entry.get("description", ""), empty_ok=True),
    )


def parse_source(check: Checker, where: str, entry, base: Path) -> Source:
    """A source is a mapping with exactly one kind key (hub/local/pack/tiny) and its options."""
    check.mapping(where, entry, optional=SOURCE_KINDS + ("revision", "gguf_file"))
    kinds = [k for k in SOURCE_KINDS if k in entry]
    if len(kinds) != 1:
        check.fail(where, f"exactly one of {', '.join(SOURCE_KINDS)}", entry)
    kind = kinds[0]
    ref = check.string(f"{where}.{kind}", entry[kind])
    for option in ("revision", "gguf_file"):
        if option in entry and kind != "hub":
            check.fail(f"{where}.{option}", f"no {option} (only hub sources take one)", entry[option])
    if kind == "local":
        ref = str((base / Path(ref).expanduser()).resolve())  # relative to the config file, not the cwd
    if kind == "tiny" and ref not in TINY_ROLES:
        check.fail(f"{where}.tiny", f"one of {', '.join(TINY_ROLES)}", ref)
    if kind == "pack":
        check_pack_name(check, f"{where}.pack", ref)
    revision = check.string(f"{where}.revision", entry["revision"]) if "revision" in entry else None
    gguf_file = check.string(f"{where}.gguf_file", entry["gguf_file"]) if "gguf_file" in entry else None
    return Source(kind, ref, revision, gguf_file)


def check_pack_name(check: Checker, where: str, name: str) -> None:
    from playground.models.modelpack import load_catalog  # plain JSON, no torch

    known = load_catalog()
    if name not in known:
        check.fail(where, f"a model pack listed in playground/model_packs.json ({', '.join(known)})", name)


def parse_pair(check: Checker, name, entry, models: dict[str, ModelSpec]) -> PairSpec:
    where = f"pairs.{name}"
    check.mapping(where, entry, required=("target", "draft", "description"),
                  optional=(*PAIR_KNOBS, "alpha", "needs_hub", "random_weights"))
    target, draft = (check.string(f"{where}.{role}", entry[role]) for role in ("target", "draft"))
    for role, model in (("target", target), ("draft", draft)):
        if model not in models:
            expected = f"the name of a model in 'models' (one of: {', '.join(models)})"
            check.fail(f"{where}.{role}", expected, model)
    description = check.string(f"{where}.description", entry["description"])
    if "\n" in description.strip():
        check.fail(f"{where}.description", "one line", description)
    pair = PairSpec(
        name=check.string(f"{where} (name)", name),
        target=target,
        draft=draft,
        description=description.strip(),
        **{n: check.knob(f"{where}.{n}", KNOBS[n], entry[n]) for n in PAIR_KNOBS if n in entry},
        alpha=check.fraction(f"{where}.alpha", entry["alpha"]) if "alpha" in entry else None,
        needs_hub=models[target].needs_hub or models[draft].needs_hub,
        random_weights=models[target].random_weights or models[draft].random_weights,
        kept=models[target].kept is not None and models[draft].kept is not None,
    )
    for flag in ("needs_hub", "random_weights"):  # optional in YAML as a label; must agree with the models
        if flag in entry and check.boolean(f"{where}.{flag}", entry[flag]) != getattr(pair, flag):
            derived = getattr(pair, flag)
            check.fail(f"{where}.{flag}", f"{derived} (derived from the pair's models)", entry[flag])
    return pair


# ---- the user's kept pairs: user-pairs.yaml beside the cache, merged under names models.yaml leaves free ----


def user_file() -> Path:
    """$PLAYGROUND_USER_PAIRS, else user-pairs.yaml in the playground's cache."""
    from playground.config import cache_dir

    return Path(os.environ["PLAYGROUND_USER_PAIRS"]).expanduser() if os.environ.get("PLAYGROUND_USER_PAIRS") \
        else cache_dir() / USER_FILE


def with_user_pairs(base: Registry, path: Path) -> Registry:
    """`base` with the models and pairs of the kept-pairs file at `path`. A file that cannot be read or
    checked, or an entry whose name `base` holds already, is left out and said in `user_problems`:
    a broken file of the user's never stops models.yaml's pairs from loading."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return base
    except OSError as e:
        return replace(base, user_problems=(f"{path.name}: cannot be read ({e.strerror or e})",))
    try:
        models, pairs = parse_user(yaml.safe_load(text) or {}, Path(path))
    except (ValueError, yaml.YAMLError) as e:
        return replace(base, user_file=str(path), user_problems=(f"{path.name}: not merged: {e}",))
    problems = [f"{path.name}: {kind} {name!r} is a name {base.where} holds; it is left out (rename it there)"
                for kind, names, held in (("model", models, base.models), ("pair", pairs, base.pairs))
                for name in names if name in held]
    models = {n: m for n, m in models.items() if n not in base.models}
    pairs = {n: p for n, p in pairs.items() if n not in base.pairs and {p.target, p.draft} <= set(models)}
    return replace(base.with_models(models, pairs), user_file=str(path), user_problems=tuple(problems))


def parse_user(data, path: Path) -> tuple[dict[str, ModelSpec], dict[str, PairSpec]]:
    """The kept-pairs file: models.yaml's schema, each model with the record of its file (`kept`; a pair
    picked from the scan and not kept has none)."""
    check = Checker(path.name)
    check.mapping("", data, optional=("models", "pairs"))
    entries = data.get("models") or {}
    check.mapping("models", entries)
    models = {}
    for name, entry in entries.items():
        check.mapping(f"models.{name}", entry)
        rest = {k: v for k, v in entry.items() if k != "kept"}
        kept = parse_kept(check, f"models.{name}.kept", entry["kept"]) if "kept" in entry else None
        models[name] = replace(parse_model(check, name, rest, path.parent), kept=kept)
    check.mapping("pairs", data.get("pairs") or {})
    pairs = {name: parse_pair(check, name, entry, models) for name, entry in (data.get("pairs") or {}).items()}
    return models, pairs


def parse_kept(check: Checker, where: str, entry) -> Kept:
    check.mapping(where, entry, required=KEPT_FIELDS[:5], optional=KEPT_FIELDS[5:])
    return Kept(path=check.string(f"{where}.path", entry["path"]),
                bytes=check.integer(f"{where}.bytes", entry["bytes"], 0, 2**63),
                mtime_ns=check.integer(f"{where}.mtime_ns", entry["mtime_ns"], 0, 2**63),
                sha256=check.string(f"{where}.sha256", entry["sha256"]),
                found=check.string(f"{where}.found", entry["found"], empty_ok=True),
                architecture=check.string(f"{where}.architecture", entry.get("architecture", ""), empty_ok=True))
