"""Pairs kept from the scan (models/userpairs.py): written to user-pairs.yaml beside the cache by path and
digest, merged by the registry under names models.yaml leaves free, refused where models.yaml holds the
name, shown gone or changed when the store changes; and a kept Ollama blob (a GGUF with no suffix)
loading through models.yaml's loaders."""

from __future__ import annotations

import copy
import os

import pytest
import yaml
from stores import machine, ollama, sha256, tree, vocabulary, write_gguf  # noqa: F401

from playground.models import userpairs
from playground.models.cli import main
from playground.models.registry import load_registry, user_file
from playground.models.scan import listing, pairing, stores


@pytest.fixture
def shelf(machine, tmp_path):
    made = tmp_path / "made"
    ollama(machine / "ollama", "qwen:7b", write_gguf(made / "t.gguf", hidden=128))
    ollama(machine / "ollama", "qwen:0.5b", write_gguf(made / "d.gguf", hidden=32))
    write_gguf(machine / ".lmstudio" / "models" / "pub" / "repo" / "tiny.gguf", hidden=16)
    return machine


def scanned(name: str):
    return listing.scan(stores.locations()).named(name)


def test_a_pair_kept_from_the_command_line_is_in_the_registry(shelf, capsys):
    before = tree(shelf)
    assert main(["pair", "qwen:7b", "qwen:0.5b", "--name", "mine"]) == 0
    said = capsys.readouterr().out
    assert "kept pair 'mine'" in said and "same tokenizer" in said and "estimate" in said
    registry = load_registry()
    spec = registry.pair("mine")
    assert spec.kept and (spec.target, spec.draft) == ("qwen:7b", "qwen:0.5b") and spec.alpha == 0.81
    target = registry.model("qwen:7b")
    assert target.sources[0].kind == "local" and target.sources[0].ref == scanned("qwen:7b").path
    assert target.kept.sha256 == scanned("qwen:7b").digest == sha256(target.kept.path)
    assert "default" in registry.pairs and not registry.user_problems  # models.yaml's pairs stay
    assert tree(shelf) == before  # keeping wrote the cache's file only


def test_a_store_named_digest_is_taken_and_another_file_is_hashed(shelf, monkeypatch):
    from playground.models import checkpoints

    with monkeypatch.context() as patched:
        patched.setattr(checkpoints, "content_hash", lambda path: pytest.fail(f"hashed {path}"))
        assert userpairs.kept_record(scanned("qwen:7b")).sha256 == scanned("qwen:7b").digest
    lmstudio = scanned("pub/repo/tiny")
    assert lmstudio.digest is None and userpairs.kept_record(lmstudio).sha256 == sha256(lmstudio.path)


def test_a_name_models_yaml_holds_is_refused_and_nothing_is_written(shelf, capsys):
    assert main(["pair", "qwen:7b", "qwen:0.5b", "--name", "default"]) == 1
    assert "name: 'default' is the name of a pair in models.yaml; choose another" in capsys.readouterr().err
    assert not user_file().exists()


def test_a_draft_that_cannot_draft_is_refused_with_its_reason(shelf, capsys):
    assert main(["pair", "qwen:0.5b", "qwen:7b", "--name", "backwards"]) == 1
    assert "qwen:7b cannot draft for qwen:0.5b: not smaller than the target" in capsys.readouterr().err


def test_a_model_gone_or_changed_is_said_not_crashed_on(shelf):
    target, draft = scanned("qwen:7b"), scanned("qwen:0.5b")
    knobs = pairing.suggested_knobs(pairing.pairing(target, draft, load_registry(), pairing.Memory(10**12)),
                                    load_registry(), draft)
    userpairs.keep("mine", target, draft, knobs, "a test pair")
    registry = load_registry()
    assert userpairs.status(registry.model("qwen:7b")) == ""
    blob = registry.model("qwen:0.5b").kept.path
    os.utime(blob, ns=(0, 10**9))
    assert userpairs.status(load_registry().model("qwen:0.5b")).startswith("changed: ollama qwen:0.5b")
    moved = shelf / "elsewhere" / "d.gguf"
    moved.parent.mkdir()
    os.rename(blob, moved)
    spec = load_registry().model("qwen:0.5b")
    assert userpairs.status(spec).startswith("gone: ollama qwen:0.5b is no longer at")
    assert load_registry().pair("mine").draft == "qwen:0.5b"  # still listed, loading it says why it fails
    found = listing.scan(stores.locations([shelf / "elsewhere"])).models
    assert userpairs.moved(spec, found).path == str(moved)  # its digest, found elsewhere

    from playground.measure.bench import cli

    args = cli.build_parser().parse_args(["--pair", "mine", "--models-dir", str(shelf / "elsewhere")])
    args.argv = []
    cli.make_plan(args)  # the benchmark loads from where the scan found it
    assert args.registry.model("qwen:0.5b").sources[0].ref == str(moved)
    assert userpairs.status(args.registry.model("qwen:0.5b")) == ""
    assert userpairs.found_again(load_registry()).model("qwen:0.5b").sources[0].ref == blob  # not without the folder


def test_a_broken_or_colliding_file_leaves_models_yaml_whole_and_is_never_written_over(shelf):
    path = user_file()
    path.parent.mkdir(parents=True)
    path.write_text("models: [unclosed")
    registry = load_registry()
    assert "default" in registry.pairs and "not merged" in registry.user_problems[0]
    with pytest.raises(ValueError, match="cannot be read"):
        userpairs.keep("mine", scanned("qwen:7b"), scanned("qwen:0.5b"), {}, "x")
    assert path.read_text() == "models: [unclosed"
    path.write_text(yaml.safe_dump({"models": {"tiny-target": {"sources": [{"tiny": "target"}]}},
                                    "pairs": {"tiny": {"target": "tiny-target", "draft": "tiny-target",
                                                       "description": "mine"}}}))
    problems = load_registry().user_problems
    assert any("model 'tiny-target' is a name models.yaml holds" in p for p in problems)
    assert any("pair 'tiny' is a name models.yaml holds" in p for p in problems)
    assert load_registry().pair("tiny").description.startswith("Tiny random-weight")  # models.yaml's own


def test_forget_removes_a_pair_and_the_models_only_it_used(shelf):
    target, draft = scanned("qwen:7b"), scanned("qwen:0.5b")
    userpairs.keep("mine", target, draft, {}, "x")
    assert userpairs.forget("mine") and not userpairs.forget("mine")
    assert "mine" not in load_registry().pairs and "qwen:7b" not in load_registry().models


def test_a_kept_ollama_blob_loads_through_the_loaders(machine, tmp_path, monkeypatch):
    """A GGUF known by its magic, not a suffix: the tiny target written as a float32 GGUF, kept from an
    Ollama store, loads and computes what the model it was written from computes."""
    import torch
    from transformers import AutoTokenizer

    from playground.models.gguf_file import write_gguf as write_model
    from playground.models.loading import load_model
    from playground.models.tiny import tiny_pair

    target, draft, tokenizer = tiny_pair(seed=0)
    blob = ollama(machine / "ollama", "tiny:target", write_model(target, tokenizer, tmp_path / "t.gguf"))
    ollama(machine / "ollama", "tiny:draft", write_model(draft, tokenizer, tmp_path / "d.gguf"))
    real = AutoTokenizer.from_pretrained.__func__  # the GGUF reader refuses write_gguf's one-merge vocabulary
    monkeypatch.setattr(AutoTokenizer, "from_pretrained", classmethod(
        lambda cls, path, *a, gguf_file=None, **k: tokenizer if gguf_file else real(cls, path, *a, **k)))
    before = tree(machine)
    assert main(["pair", "tiny:target", "tiny:draft", "--name", "tiny-mine", "--quantization", "none",
                 "--dtype", "float32"]) == 0
    loaded = load_model(load_registry().model("tiny:target"), device="cpu")
    assert loaded.model.gguf_file().suffix == ".gguf" and loaded.model.gguf_file().resolve() == blob.resolve()
    ids = torch.tensor([[1, 2, 3, 4]])
    rounded = copy.deepcopy(target).to(torch.bfloat16).float()  # a GGUF's checkpoint is written in bf16 once
    with torch.no_grad():
        assert torch.allclose(loaded.model(ids).logits, rounded(ids).logits, atol=1e-5)
    handle = load_model(load_registry().model("tiny:target"), device="cpu", quantization="int4-cpu")
    assert type(handle.model).__name__ == "ModelHandle" and not handle.model.loaded  # kept as its file
    assert tree(machine) == before
