"""The runners under the CachedModel (engine/runners) on the tiny pair in float32: the static and
compiled runners give eager's logits for a prompt, one token, γ + 1 tokens and a tree; greedy
speculation through them equals eager plain decoding token for token; rollback, padding and the
compiled steps' output buffers; and no compiled step recompiles.

The compiled tests share the session's tiny pair, whose compiled steps stay on the model, so each
shape compiles once for the whole file (target: 1 and 8 rows, draft: 1, 2 and 4); prompts are
longer than the largest bucket, so they run uncompiled and compile nothing."""

import pytest
import torch

from playground.config import RunConfig
from playground.engine import factory
from playground.engine.drafters import ModelDrafter
from playground.engine.events import output_tokens
from playground.engine.generate import SpecConfig, generate
from playground.engine.kvcache import CachedModel
from playground.engine.runners import Runner, resolve
from playground.engine.runners.compiled import BUCKETS, pad
from playground.engine.runners.static import rows_of
from playground.engine.tree import Tree
from playground.engine.tree_drafter import TreeDrafter

RUNNERS = ["static", "compiled"]
PROMPT = [(7 * i + 3) % 250 for i in range(40)]  # longer than the largest bucket: its prefill runs uncompiled
TREE = Tree(tokens=(5, 6, 7, 8, 9, 10, 11), parents=(-1, -1, 0, 1, 1, 4, 2))  # 7 nodes + 1: bucket 8
TOLERANCE = 1e-5


def both(target, runner):
    return CachedModel(target, runner="eager"), CachedModel(target, runner=runner)


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and float((a - b).abs().max()) <= TOLERANCE


@pytest.mark.parametrize("runner", RUNNERS)
def test_logits_equal_eager_for_a_prompt_one_token_a_chain_and_a_tree(pair, runner):
    target = pair[0]
    eager, other = both(target, runner)
    steps = [(PROMPT, 3), (PROMPT + [1], 1), (PROMPT + [1, 2, 3, 4, 5, 6], 5)]  # prefill, k = 1, k = γ + 1
    for tokens, keep in steps:
        assert close(eager.logits_for(tokens, keep), other.logits_for(tokens, keep)), (runner, len(tokens))
    context = PROMPT + [1, 2, 3]
    assert close(eager.logits_for_tree(context, TREE), other.logits_for_tree(context, TREE))
    for lm in (eager, other):
        lm.keep_path(len(context), [1, 3, 5])  # a root path kept, moved into place
    after = context + [6, 8, 10, 12]
    assert eager.tokens == other.tokens == after[:-1]
    assert close(eager.logits_for(after, 1), other.logits_for(after, 1))


@pytest.mark.parametrize("runner", RUNNERS)
def test_rollback_then_refeed_equals_a_fresh_run(pair, runner):
    target = pair[0]
    lm = CachedModel(target, runner=runner)
    lm.logits_for(PROMPT + [1, 2, 3, 4, 5], 5)
    lm.rollback(len(PROMPT) + 2)  # two accepted, three rejected: their entries stay behind the mask
    again = lm.logits_for(PROMPT + [1, 2, 9, 8, 7, 6, 5], 5)
    fresh = CachedModel(target, runner="eager").logits_for(PROMPT + [1, 2, 9, 8, 7, 6, 5], 5)
    assert close(again, fresh)
    lm.reset()
    assert lm.runner.length == 0 and close(lm.logits_for(PROMPT, 1), CachedModel(target, runner="eager").logits_for(PROMPT, 1))


@pytest.mark.parametrize("runner", ["eager", *RUNNERS])
def test_every_runner_follows_the_runner_protocol(pair, runner):
    assert isinstance(CachedModel(pair[0], runner=runner).runner, Runner)


def test_padding_rows_see_only_themselves_and_no_real_row_sees_them():
    """Of the new entries (the cached ones every row sees): rows_of's [n, 2 + n] padded to [b, 2 + b]."""
    allowed = torch.ones(3, 5 + 3, dtype=torch.bool).tril(diagonal=5)
    rows = pad(rows_of([1, 2, 3], torch.tensor([5, 6, 7]), allowed, 5), 8)
    assert rows[:, 0].tolist() == [1, 2, 3, 0, 0, 0, 0, 0] and rows[:, 1].tolist() == [5, 6, 7, 7, 7, 7, 7, 7]
    assert torch.equal(rows[:3, 2:5].bool(), allowed[:, 5:]) and not rows[:3, 5:].any()
    assert all(rows[r, 2:].nonzero().flatten().tolist() == [r] for r in range(3, 8))


def test_padded_rows_leave_the_real_rows_and_the_next_step_unchanged(pair):
    target = pair[0]
    eager, compiled = both(target, "compiled")
    for lm in (eager, compiled):
        lm.logits_for(PROMPT, 1)
    five = PROMPT + [1, 2, 3, 4, 5]  # 5 new tokens padded to 8
    assert close(eager.logits_for(five, 5), compiled.logits_for(five, 5))
    assert compiled.runner.length == len(five) == len(compiled.tokens)
    assert close(eager.logits_for(five + [6], 1), compiled.logits_for(five + [6], 1))  # pads stayed invisible


def test_compiled_outputs_survive_the_next_step_of_the_same_shape(pair):
    """The step's output buffer is reused by the next call of that shape (as a CUDA graph's is):
    the rows handed out must be copies, or the first step's logits change under the caller."""
    target = pair[0]
    eager, compiled = both(target, "compiled")
    first = compiled.logits_for(PROMPT + [1], 1)
    compiled.logits_for(PROMPT + [1, 2], 1)
    assert close(first, eager.logits_for(PROMPT + [1], 1))


def test_fifty_compiled_steps_do_not_recompile(pair):
    target = pair[0]
    lm = CachedModel(target, runner="compiled")
    tokens = list(PROMPT)
    lm.logits_for(tokens, 1)
    lm.logits_for(tokens + [1, 2, 3, 4, 5], 5)  # both shapes compiled (or already) before counting
    lm.rollback(len(tokens))
    frames = dict(torch._dynamo.utils.counters["frames"])
    with torch._dynamo.config.patch(error_on_recompile=True):
        for i in range(50):
            if i % 5 == 4:  # a verification step, then a rollback over two of its rows
                lm.logits_for(tokens + [i % 200, 1, 2, 3, 4], 5)
                lm.rollback(len(tokens) + 3)
                tokens = lm.tokens[:]
            else:
                tokens.append((i * 13) % 250)
                lm.logits_for(tokens, 1)
    assert dict(torch._dynamo.utils.counters["frames"]) == frames  # nothing new was even compiled
    assert lm.runner.capacity == 256


def test_a_cut_head_is_a_buffer_at_the_models_own_address_and_compiles_to_eagers_logits(pair):
    """draft_vocab on the compiled runner: the head's rows are a module buffer viewing the model's own
    weight (a fixed address CUDA graphs read in place, not a closure tensor they copy each replay),
    and the compiled step (1 row, as a draft step) gives eager's logits, -inf past the cut."""
    draft = pair[1]
    eager, compiled = (CachedModel(draft, head_rows=200, runner=r) for r in ("eager", "compiled"))
    head = compiled.head
    assert isinstance(head, torch.nn.Module) and dict(head.named_buffers()).keys() == {"weight"}
    assert head.weight.data_ptr() == draft.get_output_embeddings().weight.data_ptr()  # a view, nothing copied
    for tokens in (PROMPT, PROMPT + [1], PROMPT + [1, 2]):
        got = compiled.logits_for(tokens, 1)
        assert close(eager.logits_for(tokens, 1)[:, :200], got[:, :200]) and torch.isinf(got[:, 200:]).all()
    assert compiled.runner.key(1) in compiled.runner.steps.seconds  # the compiled step ran, not the prompt's
    again = CachedModel(draft, head_rows=200, runner="compiled")  # the next run's drafter: a head of its own
    with torch._dynamo.config.patch(error_on_recompile=True):
        assert close(again.logits_for(PROMPT + [1], 1)[:, :200], eager.logits_for(PROMPT + [1], 1)[:, :200])


@pytest.mark.parametrize("quantization", ["nf4", "int8"])
def test_the_compiled_runner_refuses_a_bitsandbytes_model_by_name(quantization):
    """However the model got here (a RunConfig and the pair cache refuse it before loading)."""
    from playground.config import KnobError
    from playground.models.loading import load_model
    from playground.models.registry import ModelSpec, Source

    model = load_model(ModelSpec("tiny-target", (Source("tiny", "target"),), dtype="float32"),
                       quantization=quantization, device="cpu").model
    with pytest.raises(KnobError, match=rf"runner 'compiled' cannot run a bitsandbytes model \(quantization "
                                        rf"'{quantization}'\).*use runner auto, eager or static"):
        CachedModel(model, runner="compiled")
    assert CachedModel(model, runner="static").runner.name == "static"


CHAINS = [("static", g) for g in (1, 2, 4, 8)] + [("compiled", 4)] + [
    pytest.param("compiled", g, marks=pytest.mark.slow) for g in (1, 2, 8)]  # three more shapes to compile


@pytest.mark.parametrize("runner,gamma", CHAINS)
def test_greedy_chain_through_a_runner_equals_eager_plain_decoding(pair, runner, gamma):
    check_chain(pair, runner, gamma)


def check_chain(pair, runner, gamma):
    target, draft, _ = pair
    expected = output_tokens(list(generate(target, PROMPT, SpecConfig(max_new_tokens=24, runner="eager"))))
    config = SpecConfig(gamma=gamma, max_new_tokens=24, runner=runner)
    assert output_tokens(list(generate(target, PROMPT, config))) == expected
    drafter = ModelDrafter(draft, runner=runner)
    assert output_tokens(list(generate(target, PROMPT, config, drafter))) == expected
    assert drafter.lm.runner.name == runner


@pytest.mark.parametrize("runner", RUNNERS)
def test_greedy_tree_through_a_runner_equals_eager_plain_decoding(pair, runner):
    target, draft, _ = pair
    expected = output_tokens(list(generate(target, PROMPT, SpecConfig(max_new_tokens=24, runner="eager"))))
    drafter = TreeDrafter(draft, budget=7, depth=3, branching=2, runner=runner)
    events = list(generate(target, PROMPT, SpecConfig(max_new_tokens=24, runner=runner), drafter))
    assert output_tokens(events) == expected
    assert any(e.n_accepted for e in events)  # the tree path was kept at least once


def test_the_run_configuration_carries_one_runner_to_target_and_drafter(pair):
    run = RunConfig(runner="static", speculation="tree")
    assert factory.spec_config(run).runner == "static"
    assert factory.make_drafter(run, factory.Models(pair[0], pair[1])).lm.runner.name == "static"
    assert factory.make_drafter(RunConfig(runner="eager"), factory.Models(pair[0], pair[1])).lm.runner.name == "eager"
    with pytest.raises(ValueError, match="runner must be one of: auto, eager, static, compiled"):
        RunConfig(runner="graphs")
    assert resolve("auto", "cpu", model=pair[0]) == "eager"  # an in-process float32 model: onnxruntime passed over
    assert resolve("auto", "cuda") == "eager"  # measured: docs/benchmarks.md, "Runners"
    assert BUCKETS[0] == 1  # a draft step and a plain step are one row, never padded


def test_the_bench_takes_a_runner_flag():
    from playground.measure.bench.cli import build_parser

    assert build_parser().parse_args(["--runner", "compiled"]).runner == "compiled"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--runner", "fast"])


def test_the_gpu_script_runs_its_identity_check_on_the_cpu(tmp_path):
    """measure/hardware/gpu_runners.py is left ready for a GPU; its checks run here on tiny shapes."""
    import json

    from playground.measure.hardware import gpu_runners

    out = tmp_path / "runners.json"
    assert gpu_runners.main(["--cpu-smoke", "--checks", "identity", "--json", str(out)]) == 0
    identity = json.loads(out.read_text())["identity"]
    compile_s = identity.pop("compile_s")  # what compiling the compiled runner's shapes took, beside the rows
    assert set(identity) == {f"{r} {s}" for r in ("eager", "static", "compiled") for s in ("chain", "tree")}
    assert all(row["identical"] for row in identity.values()) and isinstance(compile_s, float)


def test_a_benchmark_sweep_compares_runners_and_records_each(tmp_path):
    """--sweep runner=...: one report, each run's settings naming the runner both its methods used."""
    import json

    from playground.measure.bench import cli

    out = tmp_path / "runners.json"
    assert cli.main(["--pair", "tiny", "--categories", "coding", "--limit", "1", "--max-new-tokens", "12",
                     "--repeats", "1", "--warmup", "0", "--sweep", "runner=eager,static", "--json", str(out)]) == 0
    runs = json.loads(out.read_text())["runs"]
    assert [r["settings"]["runner"] for r in runs] == ["eager", "static"]
    assert all(p["identical"] for r in runs for p in r["prompts"])


def test_the_benchmark_reports_compile_seconds_beside_the_timings_and_only_for_compiled(tmp_path, capsys):
    """DESIGN.md: compile time is reported beside the per-token figures, never hidden. The warm-up
    meets each shape first, so the medians leave it out and the run's summary says what it was."""
    import json

    from playground.measure.bench import cli

    out = tmp_path / "compiled.json"
    assert cli.main(["--pair", "tiny", "--categories", "coding", "--limit", "1", "--max-new-tokens", "12",
                     "--repeats", "1", "--warmup", "1", "--sweep", "runner=eager,compiled", "--json", str(out)]) == 0
    eager, compiled = json.loads(out.read_text())["runs"]
    assert "compile_s" not in eager["summary"] and compiled["summary"]["compile_s"] > 0
    assert "compile s" in capsys.readouterr().out


def test_a_copy_of_a_model_starts_without_its_runners_caches_and_compiled_steps(pair):
    import copy

    target = pair[0]
    CachedModel(target, runner="compiled").logits_for(PROMPT + [1], 1)  # the model now holds both
    twin = copy.deepcopy(target)
    lm = CachedModel(twin, runner="compiled")
    assert lm.runner.pool is not CachedModel(target, runner="static").runner.pool
    assert not lm.runner.steps and close(lm.logits_for(PROMPT + [1], 1), CachedModel(target).logits_for(PROMPT + [1], 1))
