"""The llamacpp runner (engine/runners/llamacpp.py) on the tiny pair written as float32 GGUF files:
llama.cpp's forwards give eager PyTorch's logits for a prompt, one token, γ + 1 tokens and a tree;
greedy speculation through it equals eager plain decoding token for token, chain and tree; rollback,
the tree's sequence ids and a context that grows. llama-cpp-python is an optional extra, which
.ci/run builds from its source distribution as docs/runners.md says."""

import pytest
import torch

pytestmark = pytest.mark.llamacpp
pytest.importorskip("llama_cpp", reason="the optional extra: python -m playground.serve setup llamacpp (docs/runners.md)")

from playground.engine.drafters import ModelDrafter  # noqa: E402
from playground.engine.events import output_tokens  # noqa: E402
from playground.engine.generate import SpecConfig, generate  # noqa: E402
from playground.engine.kvcache import CachedModel  # noqa: E402
from playground.engine.runners import Runner, llamacpp  # noqa: E402
from playground.engine.tree import Tree, attention_mask  # noqa: E402
from playground.engine.tree_drafter import TreeDrafter  # noqa: E402
from playground.models import gguf_file  # noqa: E402
from playground.models.tiny import tiny_pair  # noqa: E402

PROMPT = [(7 * i + 3) % 250 for i in range(40)]
TREE = Tree(tokens=(5, 6, 7, 8, 9, 10, 11), parents=(-1, -1, 0, 1, 1, 4, 2))
TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def gguf_pair():
    """The tiny pair with each model's float32 GGUF written beside it, as loading does for tiny sources."""
    target, draft, tokenizer = tiny_pair(seed=0)
    for model in (target, draft):
        gguf_file.record(model, gguf_file.written_locator(model, tokenizer))
    return target, draft


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and float((a - b).abs().max()) <= TOLERANCE


def test_logits_equal_eager_for_a_prompt_one_token_a_chain_and_a_tree(gguf_pair):
    target = gguf_pair[0]
    eager, cpp = CachedModel(target, runner="eager"), CachedModel(target, runner="llamacpp")
    for tokens, keep in [(PROMPT, 3), (PROMPT + [1], 1), (PROMPT + [1, 2, 3, 4, 5, 6], 5)]:
        assert close(eager.logits_for(tokens, keep), cpp.logits_for(tokens, keep)), len(tokens)
    context = PROMPT + [1, 2, 3]  # two of these are not cached yet: fed as a chain before the branches
    assert close(eager.logits_for_tree(context, TREE), cpp.logits_for_tree(context, TREE))
    for lm in (eager, cpp):
        lm.keep_path(len(context), [1, 4, 5])  # a root path kept: tagged as sequence 0 in llama.cpp
    after = context + [6, 9, 10, 12]
    assert eager.tokens == cpp.tokens == after[:-1] == cpp.runner.tokens
    assert close(eager.logits_for(after, 1), cpp.logits_for(after, 1))
    assert cpp.runner.branches == 0  # the branches' sequences are gone
    cpp.logits_for_tree(after, TREE)
    with pytest.raises(ValueError, match="root-first path"):
        cpp.keep_path(len(after), [1, 3, 5])  # 5 hangs under 4, not under 3


def test_a_rejected_tree_then_a_chain_sees_only_the_context(gguf_pair):
    target = gguf_pair[0]
    eager, cpp = CachedModel(target, runner="eager"), CachedModel(target, runner="llamacpp")
    for lm in (eager, cpp):
        lm.logits_for_tree(PROMPT, TREE)
        lm.keep_path(len(PROMPT), [])  # nothing accepted: every node dropped
    assert close(eager.logits_for(PROMPT + [9, 9], 2), cpp.logits_for(PROMPT + [9, 9], 2))


@pytest.mark.parametrize("path", [[0, 2], [0]])
def test_a_tree_with_one_root_keeps_its_path(gguf_pair, path):
    """A single root is fed as a chain before the branches (sequence 0 already): keeping a path
    through it, or only the root, leaves what eager leaves."""
    target = gguf_pair[0]
    one_root = Tree(tokens=(5, 6, 7), parents=(-1, 0, 0))
    eager, cpp = CachedModel(target, runner="eager"), CachedModel(target, runner="llamacpp")
    for lm in (eager, cpp):
        lm.logits_for(PROMPT, 1)
    assert close(eager.logits_for_tree(PROMPT + [1], one_root), cpp.logits_for_tree(PROMPT + [1], one_root))
    for lm in (eager, cpp):
        lm.keep_path(len(PROMPT) + 1, path)
    after = PROMPT + [1] + [one_root.tokens[i] for i in path] + [9]
    assert eager.tokens == cpp.tokens == after[:-1]
    assert close(eager.logits_for(after, 1), cpp.logits_for(after, 1))


def test_rollback_then_refeed_equals_a_fresh_run(gguf_pair):
    target = gguf_pair[0]
    lm = CachedModel(target, runner="llamacpp")
    assert isinstance(lm.runner, Runner)
    lm.logits_for(PROMPT + [1, 2, 3, 4, 5], 5)
    lm.rollback(len(PROMPT) + 2)  # llama_memory_seq_rm over the three rejected entries
    again = lm.logits_for(PROMPT + [1, 2, 9, 8, 7, 6, 5], 5)
    assert close(again, CachedModel(target, runner="eager").logits_for(PROMPT + [1, 2, 9, 8, 7, 6, 5], 5))
    lm.reset()
    assert lm.runner.length == 0 and close(lm.logits_for(PROMPT, 1),
                                           CachedModel(target, runner="eager").logits_for(PROMPT, 1))


def test_a_context_that_fills_grows_and_keeps_its_entries(gguf_pair, monkeypatch):
    monkeypatch.setattr(llamacpp, "CONTEXT", 512)  # the smallest context: one batch
    monkeypatch.setattr(llamacpp, "HEADROOM", 8)
    target = gguf_pair[0]
    lm = CachedModel(target, runner="llamacpp")
    lm.logits_for(PROMPT * 12, 1)  # 480 entries
    longer = PROMPT * 13  # 520 + 8: a context of 1024, the 480 committed fed again
    assert close(lm.logits_for(longer, 2), CachedModel(target, runner="eager").logits_for(longer, 2))
    assert lm.runner.size == 1024 and lm.runner.tokens == longer


@pytest.mark.parametrize("gamma", [1, 2, 4, 8])
def test_greedy_chain_on_llamacpp_equals_eager_plain_decoding(gguf_pair, gamma):
    target, draft = gguf_pair
    expected = output_tokens(list(generate(target, PROMPT, SpecConfig(max_new_tokens=24, runner="eager"))))
    config = SpecConfig(gamma=gamma, max_new_tokens=24, runner="llamacpp")
    assert output_tokens(list(generate(target, PROMPT, config))) == expected
    drafter = ModelDrafter(draft, runner="llamacpp")
    assert output_tokens(list(generate(target, PROMPT, config, drafter))) == expected
    assert drafter.lm.runner.name == "llamacpp"


def test_greedy_tree_on_llamacpp_equals_eager_plain_decoding(gguf_pair):
    target, draft = gguf_pair
    expected = output_tokens(list(generate(target, PROMPT, SpecConfig(max_new_tokens=24, runner="eager"))))
    drafter = TreeDrafter(draft, budget=7, depth=3, branching=2, runner="llamacpp")
    events = list(generate(target, PROMPT, SpecConfig(max_new_tokens=24, runner="llamacpp"), drafter))
    assert output_tokens(events) == expected
    assert any(e.n_accepted for e in events)


def test_memory_counts_the_gguf_file_llamacpp_maps(gguf_pair):
    from playground.engine.memory import model_bytes, tensor_bytes

    target = gguf_pair[0]
    CachedModel(target, runner="llamacpp").logits_for(PROMPT, 1)
    in_torch = tensor_bytes([*target.parameters(), *target.buffers()])
    assert model_bytes(target) == in_torch + target.gguf_file().stat().st_size > 1.5 * in_torch


def test_a_tree_mask_becomes_parents_and_anything_else_is_refused():
    context = 3
    allowed = attention_mask(TREE, context, context)  # a cache of 3 committed entries, then the nodes
    cached = [-1, 0, 1]
    assert llamacpp.tree_parents(allowed, cached, 3) == [2, 2, 3, 4, 4, 7, 5]  # node i is entry 3 + i
    crossed = allowed.clone()
    crossed[5, context + 0] = True  # node 5 also seeing a node off its path
    with pytest.raises(ValueError, match="token trees"):
        llamacpp.tree_parents(crossed, cached, 3)
    blind = allowed.clone()
    blind[0, 1] = False  # a root that skips part of the committed context
    with pytest.raises(ValueError, match="token trees"):
        llamacpp.tree_parents(blind, cached, 3)


def test_a_draft_tree_grown_level_by_level_sees_only_its_ancestors(gguf_pair):
    """The tree drafter feeds one level at a time, each node seeing cached ancestors only: every
    leaf's sequence is its path copied from its parent's, so the logits match eager's."""
    draft = gguf_pair[1]
    eager, cpp = CachedModel(draft, runner="eager"), CachedModel(draft, runner="llamacpp")
    n = len(PROMPT)
    for lm in (eager, cpp):
        lm.logits_for(PROMPT, 1)
    levels = [([5, 6], [-1, -1]), ([7, 8, 9], [0, 1, 1]), ([10], [3])]  # parents as tree node indices
    nodes: list[int] = []  # node index -> cache entry
    for tokens, parents in levels:
        first = n + len(nodes)
        allowed = torch.zeros(len(tokens), first + len(tokens), dtype=torch.bool)
        positions = []
        for i, parent in enumerate(parents):
            allowed[i, :n] = True
            depth, node = 0, parent
            while node >= 0:
                allowed[i, n + node] = True
                node, depth = levels_parent(levels, node), depth + 1
            allowed[i, first + i] = True
            positions.append(n + depth)
        positions = torch.tensor(positions)
        a = eager.feed_masked(tokens, positions, allowed, len(tokens))
        b = cpp.feed_masked(tokens, positions, allowed, len(tokens))
        assert close(a, b), tokens
        nodes.extend(range(first, first + len(tokens)))
    for lm in (eager, cpp):
        lm.rollback(n)  # the drafter drops its tree before the next proposal
    assert cpp.runner.branches == 0 and close(eager.logits_for(PROMPT + [1], 1), cpp.logits_for(PROMPT + [1], 1))


def levels_parent(levels, node: int) -> int:
    flat = [p for _, parents in levels for p in parents]
    return flat[node]


def test_a_model_without_a_gguf_file_is_refused_with_the_reason():
    target = tiny_pair(seed=1)[0]
    with pytest.raises(ValueError, match="needs a model loaded from a GGUF file"):
        CachedModel(target, runner="llamacpp")


def test_a_loaded_tiny_pair_races_on_llamacpp_identically(tmp_path):
    """The benchmark's --runner llamacpp end to end: loading records each model's GGUF file."""
    import json

    from playground.measure.bench import cli

    out = tmp_path / "llamacpp.json"
    assert cli.main(["--pair", "tiny", "--categories", "coding", "--limit", "1", "--max-new-tokens", "12",
                     "--repeats", "1", "--warmup", "0", "--runner", "llamacpp", "--json", str(out)]) == 0
    run = json.loads(out.read_text())["runs"][0]
    assert all(p["identical"] for p in run["prompts"]) and run["settings"]["runner"] == "llamacpp"
