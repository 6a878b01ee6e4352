"""Export snippets: valid for each tool's checked version. The transformers snippet is executed
against the tiny pair; the vLLM config is parsed and may only use keys read in vLLM's source."""

from __future__ import annotations

import ast
import json
import shlex

import pytest

from playground import export
from playground.models.registry import load_registry
from playground.models.tiny import tiny_pair
from playground.config import PROMPT_LOOKUP, RunConfig


@pytest.fixture(scope="module")
def registry():
    return load_registry()


def settings(registry, **changes) -> export.ExportSettings:
    return export.from_settings(registry, RunConfig(**{"pair": "default", **changes}))


def args_of(command: str) -> list[str]:
    """A shell snippet's command as argv (comments dropped, continuations joined)."""
    lines = [line for line in command.splitlines() if line and not line.startswith("#")]
    return shlex.split(" ".join(line.rstrip("\\") for line in lines))


def speculative_configs(serve: str) -> list[dict]:
    argv = args_of(serve)
    return [json.loads(argv[i + 1]) for i, a in enumerate(argv) if a == "--speculative-config"]


def test_default_pair_resolves_to_the_hub_checkpoints_and_the_gguf_files(registry):
    s = settings(registry)
    assert (
        s.target.hf_id == "Qwen/Qwen2.5-Coder-1.5B-Instruct"
        and s.draft.hf_id == "Qwen/Qwen2.5-Coder-0.5B-Instruct"
    )
    assert s.target.gguf == "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
    assert s.draft.gguf_repo == "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF"


def test_vllm_config_parses_and_uses_only_verified_keys(registry):
    for changes in (
        {},
        {"temperature": 0.7, "top_k": 20, "top_p": 0.9},
        {"drafter": PROMPT_LOOKUP, "gamma": 8},
    ):
        s = settings(registry, **changes)
        configs = speculative_configs(export.vllm_serve(s))
        assert [c["method"] for c in configs] == (
            ["ngram", "draft_model"] if s.lookup else ["draft_model", "ngram"]
        )
        for config in configs:
            assert set(config) <= export.VLLM_KEYS, set(config) - export.VLLM_KEYS
            assert config["num_speculative_tokens"] == s.gamma
        python = export.vllm_python(s)
        ast.parse(python)
        assert f"speculative_config={export.vllm_config(s)!r}" in python


def test_vllm_draft_model_settings(registry):
    greedy = export.vllm_config(settings(registry, gamma=5))
    assert greedy == {
        "method": "draft_model",
        "model": "Qwen/Qwen2.5-Coder-0.5B-Instruct",
        "num_speculative_tokens": 5,
    }
    sampled = export.vllm_config(settings(registry, temperature=0.8))
    assert sampled["draft_sample_method"] == "probabilistic"  # q enters min(1, p/q), as in the playground
    lookup = export.vllm_config(settings(registry, drafter=PROMPT_LOOKUP, ngram_min=2, ngram_max=4))
    assert lookup == {
        "method": "ngram",
        "num_speculative_tokens": 4,
        "prompt_lookup_max": 4,
        "prompt_lookup_min": 2,
    }
    argv = args_of(export.vllm_serve(settings(registry, temperature=0.8, top_k=0, top_p=0.9)))
    assert argv[:3] == ["vllm", "serve", "Qwen/Qwen2.5-Coder-1.5B-Instruct"]
    override = json.loads(argv[argv.index("--override-generation-config") + 1])
    assert override == {"temperature": 0.8, "top_k": 0, "top_p": 0.9}
    assert argv[argv.index("--generation-config") + 1] == "vllm"


def test_llama_server_uses_the_current_flag_names(registry):
    argv = args_of(export.llamacpp_server(settings(registry, gamma=6, min_confidence=0.3, temperature=0.7)))
    assert argv[:3] == ["llama-server", "-m", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"]
    value = {a: argv[i + 1] for i, a in enumerate(argv[:-1]) if a.startswith("-")}
    assert (
        value["--spec-type"] == "draft-simple" and value["-md"] == "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    )
    assert value["--spec-draft-n-max"] == "6" and value["--spec-draft-n-min"] == "0"
    assert value["--spec-draft-p-min"] == "0.3" and value["--temp"] == "0.7"
    assert (
        value["--top-k"] == "0" and value["--top-p"] == "1" and value["--min-p"] == "0"
    )  # llama.cpp's defaults off
    assert not {"--draft-max", "--draft-min", "--draft"} & set(argv)  # removed in llama.cpp (PR #22397)
    lookup = args_of(export.llamacpp_server(settings(registry, drafter=PROMPT_LOOKUP, gamma=8, ngram_max=3)))
    assert "-md" not in lookup and lookup[lookup.index("--spec-type") + 1] == "ngram-simple"
    assert lookup[lookup.index("--spec-ngram-simple-size-m") + 1] == "8"
    adaptive = args_of(export.llamacpp_server(settings(registry, adaptive=True, gamma_min=2, gamma_max=10)))
    assert adaptive[adaptive.index("--spec-draft-n-max") + 1] == "10"


def test_the_download_hint_names_the_gguf_repo_and_file(registry):
    text = export.llamacpp_server(settings(registry))
    assert (
        "# target: hf download Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
        in text
    )


def test_tiny_and_hub_only_pairs_say_what_to_substitute(registry):
    tiny = settings(registry, pair="tiny")
    assert tiny.target.checkpoint("target") == "<target model id>" and "random weights" in tiny.target.note
    assert "<target model id>" in export.vllm_serve(tiny) and "<target>.gguf" in export.llamacpp_server(tiny)
    hub = settings(registry, pair="qwen2.5-7b")
    assert hub.target.hf_id == "Qwen/Qwen2.5-7B-Instruct" and hub.target.gguf is None
    assert any("llama.cpp needs a GGUF" in c for c in export.caveats(hub))


@pytest.fixture(scope="module")
def tiny():
    """What the snippet's setup section makes (`import torch` included), with the tiny models."""
    import torch

    target, draft, tokenizer = tiny_pair()
    return {"target": target, "draft": draft, "tokenizer": tokenizer, "torch": torch}


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"temperature": 0.8, "top_k": 20, "top_p": 0.9, "seed": 3},
        {"adaptive": True, "min_confidence": 0.2, "gamma": 3},
        {"drafter": PROMPT_LOOKUP, "gamma": 5, "ngram_max": 2},
    ],
)
def test_the_transformers_snippet_runs_on_the_tiny_pair(registry, tiny, changes, capsys):
    s = settings(registry, max_new_tokens=12, **changes)
    snippet = export.transformers_snippet(s)
    compile(snippet.setup, "setup", "exec")  # loading needs the hub; the rest runs for real below
    assert "from_pretrained('Qwen/Qwen2.5-Coder-1.5B-Instruct')" in snippet.setup
    namespace = dict(tiny)
    exec(snippet.run, namespace)  # our own generated code, on in-process models
    generated = namespace["output"].shape[1] - namespace["inputs"]["input_ids"].shape[1]
    assert 1 <= generated <= 12 and capsys.readouterr().out
    if not s.lookup:
        config = tiny["draft"].generation_config
        assert config.num_assistant_tokens == s.gamma
        # "heuristic_transient": the length grown in a call is reset afterwards; each run here starts at γ
        assert config.num_assistant_tokens_schedule == ("heuristic_transient" if s.adaptive else "constant")


def test_greedy_transformers_snippet_reproduces_the_targets_own_greedy_text(registry, tiny):
    from playground.engine.generate import SpecConfig, generate
    from playground.engine.events import output_tokens

    s = settings(registry, max_new_tokens=10)
    namespace = dict(tiny)
    exec(export.transformers_snippet(s).run, namespace)
    ids = namespace["inputs"]["input_ids"][0].tolist()
    ours = output_tokens(generate(tiny["target"], ids, SpecConfig(max_new_tokens=10)))
    theirs = namespace["output"][0, len(ids) :].tolist()
    assert theirs == ours[: len(theirs)]


def test_caveats_say_what_does_not_carry_over(registry):
    notes = " ".join(export.caveats(settings(registry, adaptive=True, min_confidence=0.3)))
    assert "vLLM has no per-request adaptive draft length" in notes and "vLLM has no such option" in notes
    assert "Quantization is not exported" in notes
    assert "Runner (auto) is not exported" in notes
    assert "Runner (compiled)" in " ".join(export.caveats(settings(registry, runner="compiled")))


def test_a_trimmed_draft_vocabulary_is_said_not_to_carry_over(registry):
    assert not any("Draft vocabulary" in n for n in export.caveats(settings(registry)))
    notes = export.caveats(settings(registry, draft_vocab=32768))
    assert any("Draft vocabulary (first 32768 token ids)" in n for n in notes)
