"""The onnxruntime runner (engine/runners/onnxruntime.py) on the tiny pair built in float32 by
onnxruntime-genai's builder: ONNX Runtime's forwards give eager PyTorch's logits for a prompt, one
token and γ + 1 tokens; rollback then re-feed equals a fresh run; greedy speculation through it equals
eager plain decoding token for token; the build is cached, a half-written one rebuilt, and a model
the builder cannot export refused with its reason."""

import copy
import json
import os

import pytest
import torch

pytest.importorskip("onnxruntime_genai", reason="onnxruntime-genai is in requirements.txt")

from playground.engine.drafters import ModelDrafter  # noqa: E402
from playground.engine.events import output_tokens  # noqa: E402
from playground.engine.generate import SpecConfig, generate  # noqa: E402
from playground.engine.kvcache import CachedModel  # noqa: E402
from playground.engine.runners import onnx_build  # noqa: E402
from playground.engine.tree import Tree  # noqa: E402
from playground.models.loading import written_checkpoint  # noqa: E402
from playground.models.tiny import tiny_pair  # noqa: E402

PROMPT = [(7 * i + 3) % 250 for i in range(40)]
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def built_pair(tmp_path_factory):
    """The tiny pair with each model's checkpoint written beside it, as loading does for tiny sources;
    builds go to a cache of the module's own (the first build of each model happens here)."""
    cache = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PLAYGROUND_CACHE", str(cache))
        target, draft, tokenizer = tiny_pair(seed=0)
        for model in (target, draft):
            model.checkpoint_dir = written_checkpoint(model, tokenizer)
            onnx_build.built_model(model)
        yield target, draft, cache


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and float((a - b).abs().max()) <= TOLERANCE


@pytest.mark.parametrize("shrink_rows", [64, 8])  # 8: the prompt's forward gives its arena back after
def test_logits_equal_eager_for_a_prompt_one_token_and_a_chain(built_pair, shrink_rows, monkeypatch):
    from playground.engine.runners import onnxruntime

    monkeypatch.setattr(onnxruntime, "SHRINK_ROWS", shrink_rows)
    target = built_pair[0]
    eager, ort = CachedModel(target, runner="eager"), CachedModel(target, runner="onnxruntime")
    for tokens, keep in [(PROMPT, 3), (PROMPT + [1], 1), (PROMPT + [1, 2, 3, 4, 5, 6], 5)]:
        assert close(eager.logits_for(tokens, keep), ort.logits_for(tokens, keep)), len(tokens)


def test_rollback_then_refeed_equals_a_fresh_run(built_pair):
    target = built_pair[0]
    used, fresh = CachedModel(target, runner="onnxruntime"), CachedModel(target, runner="onnxruntime")
    used.logits_for(PROMPT + [9, 8, 7, 6], 4)
    used.rollback(len(PROMPT) + 1)  # the rejected entries stay in the buffer, behind the valid length
    assert close(used.logits_for(PROMPT + [9, 1, 2], 2), fresh.logits_for(PROMPT + [9, 1, 2], 2))


def test_a_cache_that_fills_grows_and_keeps_its_entries(built_pair):
    target = built_pair[0]
    eager, ort = CachedModel(target, runner="eager"), CachedModel(target, runner="onnxruntime")
    long = [(3 * i + 1) % 250 for i in range(300)]  # past the first 256 entries
    ort.logits_for(long[:200], 1)
    assert ort.runner.capacity == 256
    assert close(eager.logits_for(long, 2), ort.logits_for(long, 2)) and ort.runner.capacity == 512


@pytest.mark.parametrize("gamma", [1, 2, 4])
def test_greedy_chain_on_onnxruntime_equals_eager_plain_decoding(built_pair, gamma):
    target, draft, _ = built_pair
    expected = output_tokens(list(generate(target, PROMPT, SpecConfig(max_new_tokens=24, runner="eager"))))
    config = SpecConfig(gamma=gamma, max_new_tokens=24, runner="onnxruntime")
    assert output_tokens(list(generate(target, PROMPT, config))) == expected
    drafter = ModelDrafter(draft, runner="onnxruntime")
    assert output_tokens(list(generate(target, PROMPT, config, drafter))) == expected


def test_a_draft_vocabulary_is_cut_into_the_built_head(built_pair):
    """draft_vocab 200: the build's head has 200 rows, the logits past them are -inf as eager's."""
    draft = built_pair[1]
    eager = CachedModel(draft, head_rows=200, runner="eager")
    ort = CachedModel(draft, head_rows=200, runner="onnxruntime")
    a, b = eager.logits_for(PROMPT, 2), ort.logits_for(PROMPT, 2)
    assert torch.isinf(b[:, 200:]).all() and close(a[:, :200], b[:, :200])
    assert json.loads((ort.runner.built.folder / onnx_build.MARKER).read_text())["rows"] == 200


def test_memory_counts_each_sessions_copy_of_the_built_weights(built_pair):
    from playground.engine.memory import model_bytes, tensor_bytes

    target = built_pair[0]
    CachedModel(target, runner="onnxruntime")  # opens the session, which loads its own copy
    built = onnx_build.built_model(target)
    in_torch = tensor_bytes([*target.parameters(), *target.buffers()])
    assert built.sessions and built.weight_bytes() > in_torch / 2  # a float32 build: about the model's size
    assert model_bytes(target) == in_torch + built.weight_bytes() * len(built.sessions)


def test_a_tree_is_refused_naming_the_runner(built_pair):
    ort = CachedModel(built_pair[0], runner="onnxruntime")
    with pytest.raises(ValueError, match="runner onnxruntime verifies chains only"):
        ort.logits_for_tree(PROMPT, Tree(tokens=(5, 6), parents=(-1, 0)))


def test_the_build_is_reused_and_a_half_written_one_rebuilt(built_pair):
    target, _, cache = built_pair
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PLAYGROUND_CACHE", str(cache))
        checkpoint = onnx_build.checkpoint_of(target)
        again = onnx_build.build(checkpoint, "fp32", None)
        assert again.seconds == 0.0  # found whole in the cache: nothing built
        (again.folder / onnx_build.MARKER).unlink()  # as if the build had stopped before its marker
        (again.folder / "model.onnx").write_bytes(b"half")
        rebuilt = onnx_build.build(checkpoint, "fp32", None)
        assert rebuilt.seconds > 0 and rebuilt.folder == again.folder
        assert json.loads((rebuilt.folder / onnx_build.MARKER).read_text())["precision"] == "fp32"
        assert (rebuilt.folder / "model.onnx").stat().st_size > 4
        assert not [p for p in rebuilt.folder.parent.iterdir() if p.name.startswith(".building-")]


def test_a_copied_cache_and_a_touched_checkpoint_are_not_rebuilt(built_pair, tmp_path):
    """Builds are keyed on content (the checkpoint's bytes, options, rows, builder version), not on
    times: a cache copied elsewhere (every file's mtime new) serves the same build, with no build."""
    import shutil

    target, _, cache = built_pair
    checkpoint = onnx_build.checkpoint_of(target)
    copied = tmp_path / "copied"
    shutil.copytree(cache, copied, copy_function=shutil.copy)  # copy, not copy2: new modification times
    for path in checkpoint.iterdir():
        os.utime(path)  # the checkpoint touched too
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PLAYGROUND_CACHE", str(copied))
        again = onnx_build.build(checkpoint, "fp32", None)
        assert again.seconds == 0.0 and again.folder.parent == copied / "onnx"
        (again.folder / "model.onnx.data").write_bytes(b"cut short")  # a damaged copy is not trusted
        rebuilt = onnx_build.build(checkpoint, "fp32", None)
        assert rebuilt.seconds > 0 and (rebuilt.folder / "model.onnx.data").stat().st_size > 9


def test_a_model_the_builder_cannot_export_is_refused_with_its_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("PLAYGROUND_CACHE", str(tmp_path / "cache"))
    checkpoint = tmp_path / "gpt-ish"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text(json.dumps({"model_type": "not-a-model", "architectures": ["Nope"]}))
    with pytest.raises(ValueError, match="builder could not export gpt-ish"):
        onnx_build.build(checkpoint, "fp32", None)
    left = [p.name for p in (tmp_path / "cache" / "onnx").iterdir()]
    assert left == [".hashes.json"]  # nothing half-built left behind (the checkpoint's hashes are remembered)


def test_a_model_without_a_checkpoint_is_refused_with_the_reason():
    target = tiny_pair(seed=1)[0]
    with pytest.raises(ValueError, match="builds its model from the checkpoint"):
        CachedModel(target, runner="onnxruntime")


def test_auto_takes_onnxruntime_only_where_it_can_serve_the_run(built_pair, monkeypatch):
    """With auto onnxruntime on a CPU: a chain of an int4-cpu model read from a checkpoint on disk runs
    on it; a model in float32, a tree (no tree mask there), a model with no checkpoint, and one built
    in process (whose checkpoint was written for runner onnxruntime by name) run eagerly."""
    from playground.engine import runners
    from playground.models.cpu_quant import quantize_for_cpu

    monkeypatch.setitem(runners.AUTO_RUNNER, "cpu", "onnxruntime")
    target = built_pair[0]
    folder = onnx_build.checkpoint_of(target)
    assert CachedModel(target).runner.name == "eager"  # float32, its checkpoint written in process
    target = copy.deepcopy(target)
    assert quantize_for_cpu(target, "int4-cpu") > 0
    assert CachedModel(target).runner.name == "eager"  # int4 now, its checkpoint still written in process
    target.checkpoint_dir = lambda: folder  # as if read from a checkpoint on disk
    assert CachedModel(target).runner.name == "onnxruntime"
    assert CachedModel(target, tree=True).runner.name == "eager"
    assert CachedModel(tiny_pair(seed=1)[0]).runner.name == "eager"


@pytest.mark.parametrize("gamma", [2, 4])
def test_sampled_speculation_on_onnxruntime_draws_what_eager_draws(built_pair, gamma):
    """T = 0.8: the same seed draws the same tokens through either runner (their p and q agree within
    1e-4), so the sampled output follows the target's distribution as the engine's own statistical
    tests show for eager; a runner whose logits were off would part from eager within a few draws."""
    target, draft, _ = built_pair
    runs = []
    for runner in ("eager", "onnxruntime"):
        config = SpecConfig(gamma=gamma, max_new_tokens=24, temperature=0.8, seed=7, runner=runner)
        runs.append(output_tokens(list(generate(target, PROMPT, config, ModelDrafter(draft, runner=runner)))))
    assert runs[0] == runs[1] and len(runs[0]) == 24


@pytest.fixture
def int4_target(built_pair, tmp_path, monkeypatch):
    """The tiny target in int4-cpu as if read from a checkpoint on disk (a model auto may put on
    onnxruntime), with auto's choices kept in a file of the test's own."""
    from playground.engine import runners
    from playground.engine.runners import choice
    from playground.models.cpu_quant import quantize_for_cpu

    monkeypatch.setitem(runners.AUTO_RUNNER, "cpu", "onnxruntime")
    monkeypatch.setattr(choice, "choice_file", lambda: tmp_path / "runner-choice.json")
    folder = onnx_build.checkpoint_of(built_pair[0])
    target = copy.deepcopy(built_pair[0])
    assert quantize_for_cpu(target, "int4-cpu") > 0
    target.checkpoint_dir = lambda: folder
    return target


def test_auto_times_both_runners_once_and_runs_the_faster(int4_target, monkeypatch):
    from playground.config import RunConfig
    from playground.engine.runners import auto, choice as choices, resolve
    from playground.engine.runners.warmup import Choosing, build_models

    run = RunConfig(pair="tiny", runner="auto")
    choosing = [e for e in build_models(int4_target, None, run) if isinstance(e, Choosing)]
    assert [e.done for e in choosing] == [False, True]
    choice = choosing[-1].choice
    assert set(choice["step_ms"]) == {"eager", "onnxruntime"} and min(choice["step_ms"].values()) > 0
    assert choice["runner"] == min(choice["step_ms"], key=choice["step_ms"].get)
    assert CachedModel(int4_target).runner.name == choice["runner"]
    assert onnx_build.is_built(int4_target) == (choice["runner"] == "onnxruntime")  # eager's: sessions closed
    choices.SEEN.clear()  # as a new process: the choice is read from the file, nothing is timed again
    monkeypatch.setattr(auto, "time_steps", lambda *a: pytest.fail("timed again"))
    assert not [e for e in build_models(int4_target, None, run) if isinstance(e, Choosing)]
    assert resolve("auto", "cpu", model=int4_target) == choice["runner"]
    assert resolve("onnxruntime", "cpu", model=int4_target) == "onnxruntime"  # a name asked for is kept


@pytest.mark.parametrize("measured", ["eager", "onnxruntime"])
def test_a_recorded_choice_decides_for_its_threads_only(int4_target, measured):
    from playground.engine.runners import choice

    threads = torch.get_num_threads()
    choice.write_all({choice.entry_key(int4_target, None, threads): {"runner": measured, "step_ms": {}}})
    assert CachedModel(int4_target).runner.name == measured
    assert choice.key_of(int4_target, None, threads + 1) != choice.key_of(int4_target, None, threads)
    assert choice.key_of(int4_target, 64, threads) != choice.key_of(int4_target, None, threads)  # a cut head
    choice.SEEN.clear()
    choice.write_all({choice.entry_key(int4_target, None, threads + 1): {"runner": "eager", "step_ms": {}}})
    assert CachedModel(int4_target).runner.name == "onnxruntime"  # none for these threads: the table's


def test_an_unreadable_record_is_measured_again_and_a_failed_write_leaves_the_file(int4_target, monkeypatch):
    from playground.engine.runners import auto, choice as choices

    path = choices.choice_file()
    path.write_text('{"half a')
    assert choices.recorded(int4_target) is None
    choice = auto.record(int4_target)
    key = choices.entry_key(int4_target, None, torch.get_num_threads(), role=choices.DRAFT)
    assert json.loads(path.read_text()) == {key: choice}
    before = path.read_text()
    def full_disk(fd):  # the temp file is written, then its flush to disk fails
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="disk full"):
        choices.write_all({"other": {}})
    assert path.read_text() == before and [p.name for p in path.parent.iterdir()] == [path.name]


def test_a_draft_head_on_onnxruntime_is_timed_cut_and_whole_and_the_kept_one_drafts(int4_target):
    """On onnxruntime a cut head is another build: the whole head's step is timed beside it, both
    sessions are closed after, and a drafter of the head kept runs (issue 38)."""
    from playground.config import RunConfig
    from playground.engine.runners.warmup import HEAD, Choosing, build_models, chosen_head

    run = RunConfig(pair="tiny", runner="onnxruntime", draft_vocab=64)
    events = list(build_models(int4_target, int4_target, run, head=True))
    made = [e for e in events if isinstance(e, Choosing) and e.what == HEAD][-1].choice
    assert made["runners"] == {"cut": "onnxruntime", "full": "onnxruntime"} and min(made["step_ms"].values()) > 0
    assert made["head"] == ("cut" if made["step_ms"]["cut"] < made["step_ms"]["full"] else "full")
    assert not onnx_build.is_built(int4_target, 64) and not onnx_build.is_built(int4_target)  # both closed
    rows = chosen_head(int4_target, run).draft_vocab or None
    assert rows == (64 if made["head"] == "cut" else None)
    drafter = ModelDrafter(int4_target, draft_vocab=rows, runner="onnxruntime")
    assert drafter.lm.runner.name == "onnxruntime" and drafter.lm.logits_for(PROMPT, 1).shape[-1] == int4_target.config.vocab_size


def test_a_tree_timed_beside_a_chain_gets_plain_decoding_on_its_own_runner(int4_target, built_pair):
    """Under auto the chain runs on onnxruntime and a tree on eager: the tree's speedup is then over a
    plain run of its own on eager (both speedups same-runner); with one runner for both, none is added."""
    from playground.config import RunConfig
    from playground.engine.generate import SpecConfig
    from playground.measure.bench.runs import Setup, measure_prompt

    setup = Setup(int4_target, built_pair[1], RunConfig(pair="tiny", runner="auto"), (), tree=True)
    config = SpecConfig(runner="auto", max_new_tokens=8, gamma=2)
    assert list(setup.methods(config)) == ["baseline", "speculative", "tree", "tree_baseline"]
    record = measure_prompt(setup, PROMPT, config, 1)
    assert record["tree_speedup"] > 0 and record["tree_new_tokens"] == 8
    eager = SpecConfig(runner="eager", max_new_tokens=8, gamma=2)
    assert list(setup.methods(eager)) == ["baseline", "speculative", "tree"]


def test_the_head_computes_only_the_rows_asked_for_and_every_row_by_default(built_pair):
    """`last_rows` (onnx_graph.keep_last_rows) slices the hidden states before the output layer: the
    runner asks for the rows it keeps (a prompt's last one), while a caller that feeds nothing (as
    onnxruntime-genai's own loop) still gets every row, the same numbers either way."""
    import numpy as np

    target = built_pair[0]
    session = onnx_build.built_model(target).session(torch.get_num_threads())
    built = onnx_build.built_model(target)
    feeds = {"input_ids": np.array([PROMPT]), "attention_mask": np.ones((1, len(PROMPT)), dtype=np.int64),
             **{name: np.zeros((1, built.kv_heads, 0, built.head_size), dtype=built.kv_dtype)
                for name in built.past_names}}
    every = session.run(["logits"], feeds)[0]
    last = session.run(["logits"], {**feeds, "last_rows": np.array([2])})[0]
    assert every.shape[:2] == (1, len(PROMPT)) and last.shape[:2] == (1, 2)
    assert np.abs(every[:, -2:] - last).max() <= TOLERANCE
