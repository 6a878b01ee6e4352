"""Deployments: the same run configuration served plainly and speculatively (vLLM's draft_model
and ngram methods), started here from the exported `vllm serve` arguments or attached by URL."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path

from playground.config import RunConfig
from playground import export
from playground.measure.bench.served.client import ServedClient, ServedError, check_url
from playground.measure.bench.served.launch import CpuPlacement, Server, start_vllm

METHODS = (export.PLAIN, "draft_model", "ngram")


@dataclass
class Deployment:
    """One server to measure: its name (plain, draft_model, ngram, or a URL), how it was started."""

    name: str
    url: str
    serve_args: list[str] | None = None  # None: attached by URL, started elsewhere
    server: Server | None = None

    @property
    def speculative(self) -> bool:
        return self.name != export.PLAIN

    def client(self, timeout: float = 300.0) -> ServedClient:
        return ServedClient(self.url, timeout=timeout)

    def describe(self) -> dict:
        return {"name": self.name, "url": self.url, "vllm_serve_args": self.serve_args,
                "argv": self.server.argv if self.server else None}


def local_settings(registry, run: RunConfig, folder: Path | None = None) -> export.ExportSettings:
    """The Export tab's settings for `run`, its models named by checkpoint directories on this disk
    (the tiny pair is saved once under the cache, head_dim 64)."""
    from playground.measure.bench.served.checkpoints import cached_checkpoint, save_tiny_pair
    from playground.config import cache_dir

    s = export.from_settings(registry, run)
    pair = registry.pair(run.pair)
    specs = registry.model(pair.target), registry.model(run.draft or pair.draft)  # the draft knob, as exported
    if any(src.kind == "tiny" for src in specs[0].sources):
        dirs = save_tiny_pair(folder or cache_dir() / "served-tiny")
    else:
        dirs = tuple(cached_checkpoint(spec) for spec in specs)
    return replace(s, target_ref=replace(s.target_ref, hf_id=str(dirs[0])),
                   draft_ref=replace(s.draft_ref, hf_id=str(dirs[1])))


def placement_for(settings: export.ExportSettings, tiny: bool) -> CpuPlacement:
    """float32 for the tiny pair (the engine's oracle dtype), bf16 for real checkpoints, with room
    for a prompt and its continuation."""
    return CpuPlacement(dtype="float32", max_model_len=512, kv_cache_gib=1) if tiny else \
        CpuPlacement(dtype="bfloat16", max_model_len=2048, kv_cache_gib=2)


def start_deployment(stack: ExitStack, settings: export.ExportSettings, method: str, placement: CpuPlacement,
                     say=print) -> Deployment:
    """A vLLM server for `method`, stopped when `stack` closes. The benchmark starts them one at a
    time (a 1.5B pair's servers together would not fit beside other work in memory)."""
    if method not in METHODS:
        raise ServedError(f"served method must be one of {', '.join(METHODS)}, got {method!r}")
    args = export.vllm_serve_args(settings, method)
    say(f"starting vLLM ({method}): vllm serve {' '.join(args)}")
    server = stack.enter_context(start_vllm(args, placement, name=f"vllm-{method}"))
    return Deployment(method, server.url, args, server)


def attached(urls: list[str]) -> list[Deployment]:
    """Servers started elsewhere: the first is the baseline (plain), the others speculative."""
    names = [export.PLAIN] + [f"served-{i}" for i in range(1, len(urls))]
    return [Deployment(name, check_url(url)) for name, url in zip(names, urls)]
