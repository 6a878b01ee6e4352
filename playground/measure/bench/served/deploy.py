"""Deployments: the same run configuration served plainly and speculatively, started here from the
Export tab's text (vLLM: the exported `vllm serve` arguments, methods draft_model and ngram;
llama.cpp: the exported `llama-server` command, --spec-type draft-simple and ngram-simple, and the
same command less its speculation flags for the plain one) or attached by URL."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path

from playground.config import MODEL, PROMPT_LOOKUP, RunConfig
from playground import export
from playground.measure.bench.served.client import ServedClient, ServedError, check_url
from playground.measure.bench.served.launch import CpuPlacement, Server, llamacpp_args_of, start_llamacpp, start_vllm

METHODS = (export.PLAIN, "draft_model", "ngram")
ENGINES = ("vllm", "llamacpp")
# the drafter whose exported llama-server command a method launches (as export maps it: draft-simple,
# ngram-simple); the plain deployment is the draft_model command less its speculation flags
LLAMACPP_DRAFTER = {export.PLAIN: MODEL, "draft_model": MODEL, "ngram": PROMPT_LOOKUP}
SPEC_FLAGS = ("--spec-type", "-md", "--model-draft")  # each takes a value, as every --spec-* flag export writes


@dataclass
class Deployment:
    """One server to measure: its name (plain, draft_model, ngram, or a URL), how it was started."""

    name: str
    url: str
    serve_args: list[str] | None = None  # None: attached by URL, started elsewhere
    server: Server | None = None
    engine: str = "vllm"  # what serve_args are for: vllm (`vllm serve`) or llamacpp (`llama-server`)

    @property
    def speculative(self) -> bool:
        return self.name != export.PLAIN

    def client(self, timeout: float = 300.0) -> ServedClient:
        return ServedClient(self.url, timeout=timeout)

    def describe(self) -> dict:
        key = "llama_server_args" if self.engine == "llamacpp" else "vllm_serve_args"
        return {"name": self.name, "url": self.url, "engine": self.engine, key: self.serve_args,
                "argv": self.server.argv if self.server else None}


def local_settings(registry, run: RunConfig, folder: Path | None = None) -> export.ExportSettings:
    """The Export tab's settings for `run`, its models named by checkpoint directories on this disk
    (the tiny pair is saved once under the cache, head_dim 64)."""
    from playground.measure.bench.served.checkpoints import cached_checkpoint, save_tiny_pair
    from playground.config import cache_dir

    folder = folder or cache_dir() / "served-tiny"
    return on_disk(registry, run, "hf_id", lambda: save_tiny_pair(folder), cached_checkpoint)


def on_disk(registry, run: RunConfig, field: str, write_tiny, find) -> export.ExportSettings:
    """The Export tab's settings for `run`, both models' ModelRef `field` set to a path on this disk:
    the tiny pair's as `write_tiny()` writes them (target, draft), any other model's as `find(spec)`
    finds it. The draft is the run's draft knob, as exported."""
    s = export.from_settings(registry, run)
    pair = registry.pair(run.pair)
    specs = registry.model(pair.target), registry.model(run.draft or pair.draft)
    tiny = any(src.kind == "tiny" for src in specs[0].sources)
    target, draft = write_tiny() if tiny else tuple(find(spec) for spec in specs)
    return replace(s, target_ref=replace(s.target_ref, **{field: str(target)}),
                   draft_ref=replace(s.draft_ref, **{field: str(draft)}))


def placement_for(settings: export.ExportSettings, tiny: bool) -> CpuPlacement:
    """float32 for the tiny pair (the engine's oracle dtype), bf16 for real checkpoints, with room
    for a prompt and its continuation."""
    return CpuPlacement(dtype="float32", max_model_len=512, kv_cache_gib=1) if tiny else \
        CpuPlacement(dtype="bfloat16", max_model_len=2048, kv_cache_gib=2)


def start_deployment(stack: ExitStack, settings: export.ExportSettings, method: str, placement: CpuPlacement,
                     say=print, engine: str = "vllm", parallel: int = 1) -> Deployment:
    """A vLLM (or llama.cpp) server for `method`, stopped when `stack` closes. The benchmark starts
    them one at a time (a 1.5B pair's servers together would not fit beside other work in memory)."""
    if method not in METHODS:
        raise ServedError(f"served method must be one of {', '.join(METHODS)}, got {method!r}")
    if engine == "llamacpp":
        args = llamacpp_args(settings, method)
        say(f"starting llama.cpp ({method}): llama-server {' '.join(args)}")
        server = stack.enter_context(start_llamacpp(args + slot_args(placement, parallel),
                                                    name=f"llama-server-{method}"))
        return Deployment(method, server.url, args, server, "llamacpp")
    args = export.vllm_serve_args(settings, method)
    say(f"starting vLLM ({method}): vllm serve {' '.join(args)}")
    server = stack.enter_context(start_vllm(args, placement, name=f"vllm-{method}"))
    return Deployment(method, server.url, args, server)


def attached(urls: list[str]) -> list[Deployment]:
    """Servers started elsewhere: the first is the baseline (plain), the others speculative."""
    names = [export.PLAIN] + [f"served-{i}" for i in range(1, len(urls))]
    return [Deployment(name, check_url(url)) for name, url in zip(names, urls)]


# -- llama.cpp -------------------------------------------------------------------------------------


def llamacpp_command(settings: export.ExportSettings, method: str) -> str:
    """The Export tab's llama.cpp text for the drafter a method stands for (LLAMACPP_DRAFTER)."""
    return export.llamacpp_server(replace(settings, drafter=LLAMACPP_DRAFTER[method]))


def without_speculation(args: list[str]) -> list[str]:
    """llama-server arguments less --spec-type, the draft model and every --spec-* limit (each with
    its value): the same server, sampling and models, decoding plainly."""
    out, i = [], 0
    while i < len(args):
        if args[i] in SPEC_FLAGS or args[i].startswith("--spec-"):
            i += 2
            continue
        out.append(args[i])
        i += 1
    return out


def llamacpp_args(settings: export.ExportSettings, method: str) -> list[str]:
    """`llama-server`'s arguments for `method`, parsed from the exported text itself, so the command a
    user pastes is the one that ran."""
    args = llamacpp_args_of(llamacpp_command(settings, method))
    return without_speculation(args) if method == export.PLAIN else args


def slot_args(placement: CpuPlacement, parallel: int) -> list[str]:
    """What the export leaves to the deployer: `parallel` slots (--concurrency's largest level, so
    that many requests decode at once), each with room for max_model_len tokens (llama-server splits
    --ctx-size between its slots)."""
    return ["--parallel", str(parallel), "--ctx-size", str(placement.max_model_len * parallel)]


def gguf_settings(registry, run: RunConfig, folder: Path | None = None) -> export.ExportSettings:
    """The Export tab's settings for `run`, its models named by GGUF files on this disk: for the tiny
    pair, float32 files of the very models our engine loads, written once under the cache; else the
    GGUF file each model loads from (a model pack, a local .gguf or a hub gguf_file source)."""
    from playground.config import cache_dir

    folder = folder or cache_dir() / "served-tiny-gguf"
    return on_disk(registry, run, "gguf", lambda: write_tiny_ggufs(folder), local_gguf)


def write_tiny_ggufs(folder: Path) -> tuple[Path, Path]:
    """The tiny pair (models/loading.py's seed) as float32 GGUF files; reused when both exist (each is
    written to a temporary name and renamed, so a half-written file is never found)."""
    import os

    paths = Path(folder) / "target.gguf", Path(folder) / "draft.gguf"
    if all(p.is_file() for p in paths):
        return paths
    from playground.models.gguf_file import write_gguf
    from playground.models.loading import TINY_SEED
    from playground.models.tiny import tiny_pair

    target, draft, tokenizer = tiny_pair(TINY_SEED)
    Path(folder).mkdir(parents=True, exist_ok=True)
    for model, path in zip((target, draft), paths):
        partial = path.with_name(f".{path.name}.{os.getpid()}.part")
        write_gguf(model, tokenizer, partial)
        os.replace(partial, path)
    return paths


def local_gguf(spec) -> Path:
    """The GGUF file a registry model loads from (models/gguf_file.locator), or ServedError naming why
    there is none on this disk."""
    from playground.models.gguf_file import locator

    failures = []
    for source in spec.sources:
        locate = locator(source, lambda message, fraction=None: None)
        if locate is None:
            continue
        try:
            return Path(locate())
        except Exception as e:  # the next source is tried, as the loader does
            failures.append(f"{source.kind} {source.ref}: {e}")
    raise ServedError(f"{spec.name}: llama-server loads a GGUF file and none is on this disk "
                      f"({'; '.join(failures) or 'no GGUF source in models.yaml'}); load the pair once in "
                      "the app (it downloads the file), or choose a pair with GGUF sources")
