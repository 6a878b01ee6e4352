"""models.yaml -> dataclasses: the shipped file, and every kind of mistake a person makes in YAML."""

import sys
import textwrap

import pytest

from playground.models.registry import DEFAULT_CONFIG, ModelSpec, Source, load_registry

GOOD = """
default_pair: small
models:
  big:
    description: the target
    sources:
      - hub: org/big
        revision: v1
      - local: weights/big
    dtype: bfloat16
    quantization: nf4
  little:
    sources:
      - pack: qwen2.5-coder-0.5b-instruct-q4_k_m
  t:
    sources: [{tiny: target}]
  d:
    sources: [{tiny: draft}]
pairs:
  small:
    target: big
    draft: little
    description: a pair
    gamma: 6
    temperature: 0.7
    draft_vocab: 1000
  tiny:
    target: t
    draft: d
    description: random
"""


def write(tmp_path, text, name="models.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def edited(old, new):
    assert old in GOOD, old  # the edit must apply, or the test would check the good file
    return GOOD.replace(old, new, 1)


def test_shipped_registry_loads_with_default_tiny_and_hub_pairs():
    registry = load_registry()
    assert registry.path == str(DEFAULT_CONFIG)
    default = registry.pair(None)
    assert default.name == registry.default_pair == "default"
    assert not default.needs_hub and not default.random_weights
    for role in (default.target, default.draft):
        assert registry.models[role].sources[0].kind == "pack"
    tiny = registry.pair("tiny")
    assert tiny.random_weights and not tiny.needs_hub
    hub_pairs = {name for name, p in registry.pairs.items() if p.needs_hub}
    assert hub_pairs == {"qwen2.5-7b", "llama-3.1-8b", "smollm2-1.7b"}
    assert registry.models["qwen2.5-7b-instruct"].quantization == "nf4"
    assert registry.models["llama-3.1-8b-instruct"].quantization == "nf4"  # 16 GB in bf16: no 16 GB card holds it
    assert all(p.description and "\n" not in p.description for p in registry.pairs.values())


def test_parses_fields_sources_and_derived_flags(tmp_path):
    registry = load_registry(write(tmp_path, GOOD))
    big = registry.models["big"]
    assert big.sources[0] == Source("hub", "org/big", revision="v1")
    # a relative local path is relative to the registry file, not to the working directory
    assert big.sources[1] == Source("local", str((tmp_path / "weights/big").resolve()))
    assert (big.dtype, big.quantization, big.device) == ("bfloat16", "nf4", "auto")
    assert big.trust_remote_code is False
    little = registry.models["little"]
    assert (little.dtype, little.quantization) == ("auto", "none")
    small = registry.pair("small")
    assert (small.gamma, small.temperature, small.needs_hub, small.random_weights) == (6, 0.7, False, False)
    assert small.suggested() == {"gamma": 6, "temperature": 0.7, "draft_vocab": 1000}
    assert registry.pair("tiny").random_weights
    assert registry.pair("tiny").suggested() == {"gamma": 4, "temperature": 0.0, "draft_vocab": 0}


def test_needs_hub_only_when_every_source_is_the_hub():
    hub = Source("hub", "a/b")
    assert ModelSpec("m", (hub,)).needs_hub
    assert not ModelSpec("m", (hub, Source("pack", "p"))).needs_hub
    assert ModelSpec("m", (Source("tiny", "draft"),)).random_weights


def test_config_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("PLAYGROUND_CONFIG", str(write(tmp_path, GOOD, "other.yaml")))
    assert load_registry().default_pair == "small"


def test_unknown_pair_names_the_file_and_lists_known_pairs(tmp_path):
    path = write(tmp_path, GOOD)
    with pytest.raises(ValueError, match=r"models\.yaml: unknown pair 'nope'; known pairs: small, tiny"):
        load_registry(path).pair("nope")


@pytest.mark.parametrize("text, field, expected", [
    ("default_pair: [oops\nmodels: {", "not valid YAML", "line"),
    ("- just\n- a list\n", "(top level)", "a mapping"),
    (edited("default_pair: small", "default_pair: gone"), "default_pair", "the name of a pair"),
    (edited("default_pair: small\n", ""), "default_pair", "required"),
    (edited("    draft: little\n", ""), "pairs.small.draft", "required"),
    (edited("    description: a pair\n", ""), "pairs.small.description", "required"),
    (edited("    draft: little", "    draft: lttle"), "pairs.small.draft", "the name of a model"),
    (edited("    gamma: 6", "    gamma: six"), "pairs.small.gamma", "an integer in [1, 64]"),
    (edited("    gamma: 6", "    gamma: 0"), "pairs.small.gamma", "an integer in [1, 64]"),
    (edited("    gamma: 6", "    gamma: true"), "pairs.small.gamma", "an integer"),
    (edited("    temperature: 0.7", "    temperature: hot"), "pairs.small.temperature", "a number"),
    (edited("    temperature: 0.7", "    temperature: -1"), "pairs.small.temperature", "a number"),
    (edited("    temperature: 0.7", "    temperature: 3"), "pairs.small.temperature", "in [0.0, 2.0]"),
    (edited("    temperature: 0.7", "    temprature: 0.7"), "pairs.small.temprature", "no such field"),
    (edited("    draft_vocab: 1000", "    draft_vocab: -1"), "pairs.small.draft_vocab", "an integer in [0, "),
    (edited("    gamma: 6", "    gamma: 6\n    alpha: 1"), "pairs.small.alpha", "a number between 0 and 1"),
    (edited("    gamma: 6", "    gamma: 6\n    alpha: high"), "pairs.small.alpha", "a number between 0 and 1"),
    (edited("    description: a pair", "    description: [a, pair]"), "pairs.small.description",
     "a non-empty string"),
    (edited("    description: a pair", "    description: |\n      two\n      lines"),
     "pairs.small.description", "one line"),
    (edited("    description: random", "    description: random\n    needs_hub: true"),
     "pairs.tiny.needs_hub", "False"),
    (edited("    description: random", "    description: random\n    random_weights: no"),
     "pairs.tiny.random_weights", "True"),
    (edited("    quantization: nf4", "    quantization: fp4"), "models.big.quantization",
     "one of auto, none, nf4, int8"),
    (edited("    dtype: bfloat16", "    dtype: bf16"), "models.big.dtype", "one of auto, float32"),
    (edited("    dtype: bfloat16", "    device: tpu"), "models.big.device", "one of auto, cpu, cuda"),
    (edited("    dtype: bfloat16", "    trust_remote_code: yes please"), "models.big.trust_remote_code",
     "true or false"),
    (edited("    sources: [{tiny: target}]", "    sources: []"), "models.t.sources", "a non-empty list"),
    (edited("    sources: [{tiny: target}]", "    sources: {tiny: target}"), "models.t.sources",
     "a non-empty list"),
    (edited("    sources: [{tiny: target}]", "    source: [{tiny: target}]"), "models.t.sources", "required"),
    (edited("    sources: [{tiny: target}]", "    sources: [{tiny: middle}]"), "models.t.sources[0].tiny",
     "one of target, draft"),
    (edited("    sources: [{tiny: target}]", "    sources: [{tiny: target, hub: a/b}]"),
     "models.t.sources[0]", "exactly one of hub, local, pack, tiny"),
    (edited("    sources: [{tiny: target}]", "    sources: [{web: x}]"), "models.t.sources[0].web",
     "no such field"),
    (edited("    sources: [{tiny: target}]", "    sources: [{tiny: target, revision: v2}]"),
     "models.t.sources[0].revision", "only hub sources"),
    (edited("      - hub: org/big", "      - hub: 42"), "models.big.sources[0].hub", "a non-empty string"),
    (edited("      - pack: qwen2.5-coder-0.5b-instruct-q4_k_m", "      - pack: no-such-pack"),
     "models.little.sources[0].pack", "a model pack listed in"),
    ("default_pair: a\nmodels: 3\npairs: {a: 1}\n", "models", "a non-empty mapping"),
    (edited("models:\n", "modles: {}\nmodels:\n"), "modles", "no such field"),
    (GOOD + "  broken: 7\n", "pairs.broken", "a mapping"),
])
def test_bad_registry_names_file_field_and_expectation(tmp_path, text, field, expected):
    path = write(tmp_path, text)
    with pytest.raises(ValueError) as error:
        load_registry(path)
    message = str(error.value)
    assert message.startswith(str(path)), message
    assert field in message and expected in message, message


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match=r"missing\.yaml: cannot read the model registry"):
        load_registry(tmp_path / "missing.yaml")


def test_registry_does_not_import_torch():
    """The UI reads the registry to draw its menus; that must not pay for importing torch."""
    import subprocess

    code = "import sys, playground.models.registry as r; r.load_registry(); assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
