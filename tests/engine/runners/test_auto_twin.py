"""auto times a handle's eager step on a random-weight twin (models/twin.py, runners/auto.py): the twin
has the made model's layers, shapes and packing, auto's record leaves the handle unmade and says what
eager ran on, and a handle already made is timed on itself."""

from __future__ import annotations

import weakref

import pytest
import torch

from playground.engine.runners import auto, choice
from playground.models.cpu_quant import Int4Linear, Int8Linear
from tiny_gguf import cache, gguf, load  # noqa: F401 (fixtures)

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def choices(tmp_path, monkeypatch):
    """auto's choices kept in a file of the test's own, none read yet."""
    monkeypatch.setattr(choice, "choice_file", lambda: tmp_path / "runner-choice.json")
    monkeypatch.setattr(choice, "SEEN", weakref.WeakKeyDictionary())


def layout(model) -> dict:
    """Every layer's class, every parameter's and buffer's shape and dtype, and the config that shapes
    a forward: what a step's cost hangs on, its values aside."""
    return {"modules": {name: type(m).__name__ for name, m in model.named_modules()},
            "tensors": {name: (tuple(t.shape), t.dtype) for name, t in
                        [*model.named_parameters(), *model.named_buffers()]},
            "groups": {name: m.group for name, m in model.named_modules() if isinstance(m, Int4Linear)},
            "config": {key: getattr(model.config, key) for key in ("_attn_implementation", "tie_word_embeddings",
                                                                   "dtype", "vocab_size", "num_hidden_layers")}}


def test_the_twin_has_the_made_models_layers_shapes_and_packing(gguf, cache):
    path, _ = gguf
    handle = load(path).model
    twin = handle.twin()
    assert not handle.loaded  # made without the real model
    real = handle.module()
    assert layout(twin) == layout(real)
    kinds = [type(m) for m in twin.modules()]
    assert Int4Linear in kinds and type(twin.get_output_embeddings()) is Int8Linear  # int4 body, int8 head
    with torch.inference_mode():  # its forward computes, finite, the shape of the real one's
        ids = torch.tensor([[5, 6, 7]])
        logits, made = twin(input_ids=ids).logits, real(input_ids=ids).logits
    assert logits.shape == made.shape and logits.dtype == made.dtype and torch.isfinite(logits).all()
    assert not torch.equal(logits, made)  # random, not the GGUF's weights


@pytest.mark.parametrize("quantization", ["int4-cpu", "int8-cpu"])
@pytest.mark.parametrize("tied", [False, True])
def test_random_codes_take_the_layers_quantizing_writes(pair, quantization, tied):
    """cpu_quant.random_for_cpu against quantize_for_cpu on the same config, a head tied to the
    embeddings (the 0.5B draft's) included: the same classes, shapes, dtypes and groups."""
    import copy

    from transformers import AutoModelForCausalLM

    from playground.models.cpu_quant import quantize_for_cpu
    from playground.models.twin import random_twin

    config = copy.deepcopy(pair[0].config)
    config.tie_word_embeddings = tied
    real = AutoModelForCausalLM.from_config(copy.deepcopy(config), dtype=torch.bfloat16).eval()
    assert (real.get_output_embeddings().weight is real.get_input_embeddings().weight) == tied
    quantize_for_cpu(real, quantization)
    twin = random_twin(config, torch.bfloat16, quantization)
    assert layout(twin) == layout(real)
    assert config.tie_word_embeddings == tied  # the caller's config unchanged


def twins_made(handle) -> list:
    """Weak references to each twin the handle makes from now on."""
    made, make = [], handle.twin
    handle.twin = lambda: made.append(weakref.ref(twin := make())) or twin
    return made


def test_a_handles_auto_record_times_eager_on_a_twin_and_leaves_it_unmade(gguf, cache, choices):
    path, _ = gguf
    handle = load(path).model
    handle.make = lambda: pytest.fail("the real PyTorch model was made")
    made = twins_made(handle)
    recorded = auto.record(handle)
    assert not handle.loaded and len(made) == 1 and made[0]() is None  # one twin, let go after
    assert recorded["eager_timed_on"] == auto.TWIN
    assert set(recorded["step_ms"]) == set(auto.candidates(handle)) and min(recorded["step_ms"].values()) > 0
    assert recorded["runner"] == min(recorded["step_ms"], key=recorded["step_ms"].get)
    choice.SEEN.clear()  # as a new process: read from the file
    assert choice.recorded(handle, role=choice.DRAFT) == recorded  # a plain step alone: a draft's choice


def test_a_made_handle_and_a_module_are_timed_on_themselves(gguf, cache, choices, pair, monkeypatch):
    path, _ = gguf
    handle = load(path).model
    handle.module()
    handle.twin = lambda: pytest.fail("a twin was made for a made model")
    recorded = auto.record(handle)
    assert recorded["eager_timed_on"] == auto.ITSELF
    assert handle.loaded == (recorded["runner"] == "eager")  # let go where onnxruntime won, as before
    module = pair[1]  # a model that is no handle (key_of's checkpoint and the timing are other tests')
    monkeypatch.setattr(choice, "key_of", lambda model, rows, threads: f"{id(model)} {rows} {threads}")
    monkeypatch.setattr(auto, "time_steps", lambda model, candidates, verify_rows=0, context=128: auto.Timed({"eager": 2.0, "onnxruntime": 1.0}))
    assert auto.record(module)["eager_timed_on"] == auto.ITSELF


@pytest.mark.parametrize("cut_on", ["onnxruntime", "eager"])
def test_a_handles_draft_head_is_timed_without_making_it(gguf, cache, choices, cut_on):
    """record_head times onnxruntime's cut and whole heads on the builds; a cut on eager (where its
    cut is timed at all) runs on the twin, its head cut there."""
    path, _ = gguf
    handle = load(path).model
    handle.make = lambda: pytest.fail("the real PyTorch model was made")
    made = twins_made(handle)
    recorded = auto.record_head(handle, 64, {"cut": cut_on, "full": "onnxruntime"})
    assert set(recorded["step_ms"]) == {"cut", "full"} and min(recorded["step_ms"].values()) > 0
    assert not handle.loaded and len(made) == (cut_on == "eager") and all(ref() is None for ref in made)


def test_forwards_on_their_own_pool_are_timed_with_torch_at_one_thread_as_runs_take_them(gguf, cache, choices,
                                                                                          monkeypatch):
    """A run whose forwards all run on ONNX Runtime's pool holds torch to one thread (generate.outside_torch);
    auto's timing does the same for such a candidate, else torch's OpenMP workers, woken by the cut
    head's pad, fought ONNX Runtime's spinning ones and the cut measured slower than it runs. Eager's
    forwards keep torch's threads."""
    from playground.engine.runners.eager import EagerRunner
    from playground.engine.runners.onnxruntime import OnnxRuntimeRunner

    seen: dict[str, set] = {"eager": set(), "onnxruntime": set()}
    for runner in (EagerRunner, OnnxRuntimeRunner):
        def forward(self, *args, _real=runner.forward, **kwargs):
            seen[self.name].add(torch.get_num_threads())
            return _real(self, *args, **kwargs)
        monkeypatch.setattr(runner, "forward", forward)
    handle = load(gguf[0]).model
    from playground.engine.generate import torch_threads

    with torch_threads(2):  # the module runs at one thread (one_thread): here torch has two, as a machine's
        auto.time_steps(handle, {"eager": ("eager", None), "onnxruntime": ("onnxruntime", 64)}, verify_rows=2)
        assert torch.get_num_threads() == 2
    assert seen["onnxruntime"] == {1, 2}  # 2: the untimed prompt read; every timed forward at one
    assert seen["eager"] == {2}
