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
from playground.config import DRAFTERS, HYBRID, MODEL, PROMPT_LOOKUP, RECYCLING, SELF, SUFFIX, TREE, TREE_DRAFTERS, RunConfig


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
        s.target_ref.hf_id == "Qwen/Qwen2.5-Coder-1.5B-Instruct"
        and s.draft_ref.hf_id == "Qwen/Qwen2.5-Coder-0.5B-Instruct"
    )
    assert s.target_ref.gguf == "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
    assert s.draft_ref.gguf_repo == "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF"


def test_vllm_config_parses_and_uses_only_verified_keys(registry):
    for changes in (
        {},
        {"temperature": 0.7, "top_k": 20, "top_p": 0.9},
        {"drafter": PROMPT_LOOKUP, "gamma": 8},
        *({"drafter": d, "temperature": 0.7} for d in DRAFTERS),
    ):
        s = settings(registry, **changes)
        configs = speculative_configs(export.vllm_serve(s))
        assert [c["method"] for c in configs] == list(export.EQUIVALENTS[s.drafter].vllm)
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
    assert tiny.target_ref.checkpoint("target") == "<target model id>" and "random weights" in tiny.target_ref.note
    assert "<target model id>" in export.vllm_serve(tiny) and "<target>.gguf" in export.llamacpp_server(tiny)
    hub = settings(registry, pair="qwen2.5-7b")
    assert hub.target_ref.hf_id == "Qwen/Qwen2.5-7B-Instruct" and hub.target_ref.gguf is None
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
        {"drafter": SUFFIX, "gamma": 5},
        {"drafter": RECYCLING, "speculation": TREE},
        {"drafter": HYBRID, "gamma": 3},
        {"drafter": SELF, "gamma": 3},
        {"drafter": SELF, "kept_layers": 3, "temperature": 0.8, "seed": 1},
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
    mode = export.EQUIVALENTS[s.drafter].transformers
    assert (f"{mode}=" in snippet.run) and ("draft = " in snippet.setup) == (mode == export.ASSISTANT)
    if mode != export.LOOKUP:  # early exit: the target is its own assistant, and its config is read
        config = tiny["draft" if mode == export.ASSISTANT else "target"].generation_config
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


# -- the drafters past the draft model and prompt lookup ------------------------------------------------

# drafter: (vLLM's method, llama.cpp's --spec-type, transformers' generate() argument), as read in each
# tool's source (playground/export/settings.py's CHECKED): the same thing, or the nearest the tool has
EXPORTED = {
    MODEL: ("draft_model", "draft-simple", "assistant_model=draft"),
    PROMPT_LOOKUP: ("ngram", "ngram-simple", "prompt_lookup_num_tokens="),
    SUFFIX: ("suffix", "ngram-mod", "prompt_lookup_num_tokens="),
    HYBRID: ("draft_model", "ngram-mod,draft-simple", "assistant_model=draft"),
    RECYCLING: ("suffix", "ngram-mod", "prompt_lookup_num_tokens="),
    SELF: ("draft_model", "draft-simple", "assistant_early_exit="),
}
# drafter: what each snippet says where the tool lacks it (vLLM, llama.cpp, transformers); None: the same
SAID = {
    MODEL: (None, None, None),
    PROMPT_LOOKUP: (None, None, None),
    SUFFIX: ('vLLM\'s method "suffix" is the same algorithm', "llama.cpp has no suffix decoding",
             "transformers has no suffix decoding"),
    HYBRID: ("vLLM runs one method per server", "llama.cpp combines the same way",
             "transformers drafts one way per generate() call"),
    RECYCLING: ("vLLM has no Token Recycling", "llama.cpp has no Token Recycling",
                "transformers has no Token Recycling"),
    SELF: ("vLLM has no self-speculation by skipping layers", "llama.cpp has no self-speculation by skipping",
           "transformers' assistant_early_exit is LayerSkip's"),
}


def comments(text: str) -> str:
    """A snippet's comment lines as one sentence (wrapped lines joined)."""
    return " ".join(line.removeprefix("# ") for line in text.splitlines() if line.startswith("#"))


@pytest.mark.parametrize("drafter", DRAFTERS)
def test_each_drafter_exports_its_equivalent_or_the_nearest_and_says_which(registry, drafter):
    s = settings(registry, drafter=drafter, gamma=6)
    method, spec_type, argument = EXPORTED[drafter]
    assert export.vllm_config(s)["method"] == method
    assert speculative_configs(export.vllm_serve(s))[0]["method"] == method
    assert f"speculative_config={export.vllm_config(s)!r}" in export.vllm_python(s)
    argv = args_of(export.llamacpp_server(s))
    assert argv[argv.index("--spec-type") + 1] == spec_type
    assert ("-md" in argv) == ("draft-simple" in spec_type)
    snippet = export.transformers_snippet(s)
    assert argument in snippet.run
    texts = (export.vllm_serve(s), export.llamacpp_server(s), snippet.code)
    notes = " ".join(export.caveats(s))
    for text, said in zip(texts, SAID[drafter]):
        if said:
            assert said in comments(text) and said in notes
    if drafter in (MODEL, PROMPT_LOOKUP):  # unchanged: no sentence about a missing equivalent
        assert not export.EQUIVALENTS[drafter].differences


def test_suffix_decoding_is_vllms_suffix_method_and_llamacpps_ngram_mod(registry):
    s = settings(registry, drafter=SUFFIX, gamma=6)
    assert export.vllm_config(s) == {"method": "suffix", "num_speculative_tokens": 6}  # γ: its upper bound
    assert "pip install arctic-inference" in comments(export.vllm_serve(s))  # vLLM refuses suffix without it
    text = export.llamacpp_server(s)
    argv = args_of(text)
    value = {a: argv[i + 1] for i, a in enumerate(argv[:-1]) if a.startswith("-")}
    assert value["--spec-ngram-mod-n-min"] == "1" and value["--spec-ngram-mod-n-max"] == "6"
    assert "-md" not in argv and "# draft: hf download" not in text  # no draft model, no download
    assert "draft = " not in export.transformers_snippet(s).setup
    assert not any("qwen2.5-coder-0.5b" in n for n in export.caveats(s))  # the draft's notes: not its concern


def test_hybrid_is_one_llamacpp_server_with_ngram_mod_before_the_draft_model(registry):
    s = settings(registry, drafter=HYBRID, gamma=5)
    text = export.llamacpp_server(s)
    argv = args_of(text)
    value = {a: argv[i + 1] for i, a in enumerate(argv[:-1]) if a.startswith("-")}
    assert value["--spec-type"] == "ngram-mod,draft-simple"  # llama.cpp tries n-gram types first
    assert value["-md"] == "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf" and "# draft: hf download" in text
    assert value["--spec-ngram-mod-n-max"] == "5" and value["--spec-draft-n-max"] == "5"
    assert [c["method"] for c in speculative_configs(export.vllm_serve(s))] == ["draft_model", "suffix"]


def test_self_drafting_is_transformers_early_exit_with_the_kept_layers(registry):
    three = export.transformers_snippet(settings(registry, drafter=SELF, kept_layers=3)).run
    assert "assistant_early_exit=3," in three
    half = export.transformers_snippet(settings(registry, drafter=SELF)).run  # 0: half, as the self-drafter
    assert "assistant_early_exit=max(1, target.config.num_hidden_layers // 2)," in half


def test_greedy_early_exit_snippet_runs_with_half_the_layers_and_keeps_the_targets_text(registry, tiny,
                                                                                        monkeypatch):
    """kept_layers 0 resolves to half the tiny target's 4 layers inside transformers, and the output is
    still the target's own greedy output (transformers' assisted generation is lossless too)."""
    from transformers.generation.candidate_generator import EarlyExitCandidateGenerator
    from playground.engine.generate import SpecConfig, generate
    from playground.engine.events import output_tokens

    seen = []
    init = EarlyExitCandidateGenerator.__init__

    def spy(self, *args, **kwargs):
        init(self, *args, **kwargs)
        seen.append(self.assistant_early_exit)

    monkeypatch.setattr(EarlyExitCandidateGenerator, "__init__", spy)
    s = settings(registry, drafter=SELF, max_new_tokens=10)
    namespace = dict(tiny)
    exec(export.transformers_snippet(s).run, namespace)
    assert seen == [tiny["target"].config.num_hidden_layers // 2] == [2]
    ids = namespace["inputs"]["input_ids"][0].tolist()
    ours = output_tokens(generate(tiny["target"], ids, SpecConfig(max_new_tokens=10)))
    theirs = namespace["output"][0, len(ids):].tolist()
    assert theirs == ours[: len(theirs)]


def test_trees_and_model_free_drafters_say_what_does_not_carry_over(registry):
    tree = " ".join(export.caveats(settings(registry, drafter=SUFFIX, speculation=TREE, gamma=5)))
    assert "Token tree (up to 16 nodes, 4 deep)" in tree and "a chain of up to γ = 5 tokens" in tree
    assert not any("Token tree" in n for n in export.caveats(settings(registry, drafter=SUFFIX)))
    notes = " ".join(export.caveats(settings(registry, drafter=RECYCLING, adaptive=True, min_confidence=0.3,
                                             draft_vocab=1024)))
    assert "llama.cpp adapts only a draft model's length" in notes
    assert "prompt lookup drafts a fixed length" in notes
    assert "Draft confidence threshold" not in notes and "Draft vocabulary" not in notes  # no model drafts
    hybrid = " ".join(export.caveats(settings(registry, drafter=HYBRID, draft_vocab=1024)))
    assert "Draft vocabulary (first 1024 token ids)" in hybrid


def test_an_unknown_vllm_method_is_refused_naming_the_allowed_ones(registry):
    with pytest.raises(ValueError, match="^method must be one of: draft_model, ngram, suffix, got 'eagle'"):
        export.vllm_config(settings(registry), "eagle")


ACCEPTS = """
import json, sys
from vllm.config import SpeculativeConfig
for config in json.loads(sys.argv[1]):
    try:
        SpeculativeConfig(**config)
        print("accepted")
    except ImportError as e:  # raised after pydantic accepted every field and value
        print("accepted, needs arctic-inference" if "Arctic Inference" in str(e) else f"refused: {e}")
    except Exception as e:
        print(f"refused: {type(e).__name__}")
"""


@pytest.mark.served
def test_the_installed_vllm_accepts_the_exported_suffix_and_ngram_configs(registry):
    """vLLM's own SpeculativeConfig, built offline in its venv (no model, no GPU): it validates the
    fields and `method` before its suffix check asks for arctic-inference. A misspelled key is refused,
    so the check can fail."""
    import subprocess

    from playground.serve import vllm_venv

    if not vllm_venv.is_ready():
        pytest.skip(f"vLLM's venv is absent ({vllm_venv.default_venv()}): "
                    "run `python -m playground.serve setup vllm`")
    s = settings(registry, drafter=SUFFIX, gamma=6)
    configs = [export.vllm_config(s, "suffix"), export.vllm_config(s, "ngram"),
               {**export.vllm_config(s, "suffix"), "suffix_decoding_max_depth": 8}]
    argv = [str(vllm_venv.vllm_python()), "-c", ACCEPTS, json.dumps(configs)]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0] in ("accepted", "accepted, needs arctic-inference") and out[1] == "accepted"
    assert out[2] == "refused: ValidationError"


@pytest.mark.parametrize("drafter", TREE_DRAFTERS)
def test_every_tree_drafter_exports_its_chain_and_says_the_tools_verify_chains(registry, drafter):
    """The hybrid's and the self draft's trees too: no tool verifies token trees, so each snippet
    drafts the drafter's chain equivalent and the caveats say so."""
    s = settings(registry, drafter=drafter, speculation=TREE, tree_budget=12, tree_depth=3)
    assert export.vllm_config(s)["method"] == export.EQUIVALENTS[drafter].vllm[0]
    assert "--spec-type" in args_of(export.llamacpp_server(s))
    ast.parse(export.transformers_snippet(s).code)
    assert any(n.startswith("Token tree (up to 12 nodes, 3 deep)") for n in export.caveats(s))
