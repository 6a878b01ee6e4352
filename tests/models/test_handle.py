"""A GGUF on a CPU in int4 is kept as its files (models/handle.py): nothing loads PyTorch until
something computes with it, and what it then makes is the model the checkpoint path loads."""

from __future__ import annotations

import pytest
import torch

from playground.engine.memory import model_bytes
from playground.engine.runners import is_handle, module_of
from playground.models.handle import ModelHandle
from playground.models.registry import ModelSpec
from tiny_gguf import cache, gguf, load  # noqa: F401 (fixtures)

IDS = [(7 * i + 3) % 250 for i in range(12)]


def test_a_gguf_in_int4_on_the_cpu_is_kept_as_its_files(gguf, cache):
    path, written = gguf
    loaded = load(path)
    handle = loaded.model
    assert isinstance(handle, ModelHandle) and is_handle(handle) and not handle.loaded
    # what a run asks before its first forward, answered without PyTorch
    assert handle.config.get_text_config().vocab_size == written.config.vocab_size
    assert handle.device == torch.device("cpu") and handle.dtype == torch.bfloat16
    assert handle.gguf_file() == path and (handle.metadata_dir() / "config.json").is_file()
    assert handle.checkpoint_dir is None and getattr(handle, "checkpoint_dir", None) is None
    assert loaded.tokenizer.convert_ids_to_tokens(5) is not None
    assert loaded.footprint_bytes == path.stat().st_size
    assert model_bytes(handle) == 0  # no torch weight is held
    assert not handle.loaded
    assert not any(p.is_dir() for p in (cache / "checkpoints").glob("*"))  # no checkpoint written (its GGUF hash index only)


def test_its_pytorch_model_is_made_on_first_use_and_equals_the_checkpoint_path(gguf, cache):
    path, _ = gguf
    handle = load(path).model
    module = module_of(handle)
    assert handle.loaded and module is handle.module()  # made once
    assert any(type(m).__name__ == "Int4Linear" for m in module.modules())  # quantized as asked
    assert model_bytes(handle) > 0
    reference = load(path, quantization="int4-cpu")
    # the checkpoint path: the GGUF converted into a checkpoint, loaded and quantized
    from playground.models.checkpoints import gguf_checkpoint, gguf_key
    from playground.models.loading import load_weights

    folder = gguf_checkpoint(path, gguf_key(path), lambda m, f: None)
    converted = load_weights(folder, "cpu", "bfloat16", "int4-cpu", ModelSpec("tiny-gguf", ()))
    ids = torch.tensor([IDS])
    with torch.inference_mode():
        assert torch.equal(handle(input_ids=ids).logits, converted(input_ids=ids).logits)
    assert reference.model is not handle and not reference.model.loaded
    handle.release()
    assert not handle.loaded and model_bytes(handle) == 0


def test_an_eager_run_makes_it_and_decodes_as_the_model_does(gguf, cache):
    from playground.engine.kvcache import CachedModel

    path, _ = gguf
    handle = load(path).model
    lm = CachedModel(handle, runner="eager")
    assert handle.loaded
    tokens = list(IDS)
    for _ in range(4):
        tokens.append(int(lm.logits_for(tokens, 1)[-1].argmax()))
    with torch.inference_mode():
        direct = handle.module().generate(torch.tensor([IDS]), max_new_tokens=4, do_sample=False)[0].tolist()
    assert tokens == direct


def test_other_quantizations_and_devices_load_pytorch_as_before(gguf, cache):
    path, _ = gguf
    assert not isinstance(load(path, quantization="none").model, ModelHandle)


def test_a_run_on_a_torch_runner_makes_it_before_its_first_step_with_progress(gguf, cache):
    from playground.config import RunConfig
    from playground.engine.runners.warmup import Making, making

    path, _ = gguf
    target, draft = load(path).model, load(path).model
    run = RunConfig(pair="tiny", runner="eager", drafter="prompt_lookup")
    events = list(making(target, draft, run))  # prompt lookup never runs the draft: only the target made
    assert [type(e) for e in events] == [Making, Making] and events[0].model == "target"
    assert not events[0].done and events[1].done and target.loaded and not draft.loaded
    assert list(making(target, draft, run)) == []  # made once
    draft_run = RunConfig(pair="tiny", runner="eager", drafter="model")
    assert [e.model for e in making(target, draft, draft_run)] == ["draft", "draft"] and draft.loaded


def test_a_tree_run_on_handles_makes_pytorch_and_decodes_as_plain_greedy(gguf, cache):
    """A tree needs attention masks that ONNX Runtime's runner has not: auto sends it to eager, which
    makes each handle's PyTorch model; greedy, the tree's text is the target's own."""
    from playground.engine.events import output_tokens
    from playground.engine.generate import SpecConfig, generate
    from playground.engine.tree_drafter import TreeDrafter

    path, _ = gguf
    target, draft = load(path).model, load(path).model
    config = SpecConfig(max_new_tokens=12, tree=True)
    plain = output_tokens(list(generate(target, IDS, config)))
    tree = output_tokens(list(generate(target, IDS, config, TreeDrafter(draft, budget=6, depth=3, branching=2))))
    assert target.loaded and draft.loaded and tree == plain and len(plain) == 12


def test_a_run_on_onnxruntime_leaves_pytorch_unmade(gguf, cache):
    """The default path on a CPU: both models served by ONNX Runtime from their GGUF, the draft's head
    cut, a speculative run and its plain baseline, and neither handle made its PyTorch model."""
    from playground.engine.drafters import ModelDrafter
    from playground.engine.events import output_tokens
    from playground.engine.generate import SpecConfig, generate
    from playground.engine.runners import resolve

    path, _ = gguf
    target, draft = load(path).model, load(path).model
    assert resolve("auto", target.device, False, target) == "onnxruntime"  # nothing recorded: the table's choice
    config = SpecConfig(max_new_tokens=8, gamma=2)
    plain = output_tokens(list(generate(target, IDS, config)))
    spec = output_tokens(list(generate(target, IDS, config, ModelDrafter(draft, draft_vocab=200))))
    assert len(plain) == 8 and spec == plain  # greedy: the build's own tokens
    assert not target.loaded and not draft.loaded
    assert model_bytes(target) > 0  # ONNX Runtime's session, counted beside no torch weight
