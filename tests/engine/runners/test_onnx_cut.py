"""An int4 draft-vocabulary build cut from the full build (onnx_build.cut_build, onnx_graph.cut_head_from)
on the tiny target, untied and tied (the builder's shared_embeddings: the embedding reads the head's int4
tensors): no second builder run, the cut's logits are the full build's first rows exactly (the same
weights), the full build's weights are hard links in the cut's folder beside a small head file, the cache
tool lists, verifies and clears both, and the cut's key follows the full build's."""

import json
import shutil

import numpy as np
import pytest

pytest.importorskip("onnxruntime_genai", reason="onnxruntime-genai is in requirements.txt")

from playground.engine.runners import onnx_build  # noqa: E402
from playground.engine.runners.onnx_graph import HEAD_DATA, LAST_ROWS, head_node  # noqa: E402
from playground.models import cli as models  # noqa: E402
from playground.models.cachetool import human  # noqa: E402
from playground.models.tiny import tiny_pair  # noqa: E402

PROMPT = [(7 * i + 3) % 250 for i in range(40)]
ROWS = 64  # of the tiny vocabulary's 259


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """{"untied", "tied"} -> the tiny target's checkpoint folder (the tied one's head is its embedding)."""
    root = tmp_path_factory.mktemp("checkpoints")
    folders = {}
    for kind in ("untied", "tied"):
        target, _, tokenizer = tiny_pair(seed=0)
        if kind == "tied":
            target.config.tie_word_embeddings = True
            target.lm_head.weight = target.model.embed_tokens.weight
        target.save_pretrained(root / kind)
        tokenizer.save_pretrained(root / kind)
        folders[kind] = root / kind
    return folders


@pytest.fixture(scope="module")
def builds(checkpoints, tmp_path_factory):
    """(cache, runs): a cache of the module's own, and every builder run counted (its output folder)."""
    cache, runs = tmp_path_factory.mktemp("cache"), []
    real = onnx_build.run_builder

    def counted(checkpoint, out, *args, **kwargs):
        runs.append(checkpoint.name)
        return real(checkpoint, out, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PLAYGROUND_CACHE", str(cache))
        patch.setattr(onnx_build, "run_builder", counted)
        yield cache, runs


def prompt_logits(built, tokens: list[int]) -> np.ndarray:
    """Logits at every position of `tokens` fed to an empty cache, as the runner feeds them.  -> [S, V]"""
    session = built.session(1)
    empty = np.zeros((1, built.kv_heads, 0, built.head_size), dtype=built.kv_dtype)
    feeds = {"input_ids": np.asarray([tokens], dtype=np.int64),
             "attention_mask": np.ones((1, len(tokens)), dtype=np.int64),
             LAST_ROWS: np.asarray([len(tokens)], dtype=np.int64),
             **{name: empty for name in built.past_names}}
    return session.run(["logits"], feeds)[0][0]


def graph(built):
    import onnx

    return onnx.load(str(built.folder / "model.onnx"), load_external_data=False).graph


@pytest.mark.parametrize("kind", ["untied", "tied"])
def test_the_cut_is_the_full_builds_first_rows_with_no_builder_run(checkpoints, builds, kind):
    _, runs = builds
    checkpoint = checkpoints[kind]
    cut = onnx_build.build(checkpoint, "int4", ROWS)  # the full build is made first, by the builder
    assert runs.count(kind) == 1 and cut.seconds > 0
    full = onnx_build.build(checkpoint, "int4", None)
    assert full.seconds == 0.0 and runs.count(kind) == 1  # cached by the cut's build
    ours, theirs = prompt_logits(cut, PROMPT), prompt_logits(full, PROMPT)
    assert ours.shape == (len(PROMPT), ROWS) and np.array_equal(ours, theirs[:, :ROWS])
    head = head_node(graph(cut))
    assert head.op_type == "MatMulNBits" and all(name.endswith(f"/rows{ROWS}") for name in head.input[1:3])
    full_head = head_node(graph(full))
    read = {name for node in graph(cut).node for name in node.input}
    stored = {init.name for init in graph(cut).initializer}
    assert (full_head.input[1] in read) == (kind == "tied")  # the embedding still reads the whole rows
    assert (full_head.input[1] in stored) == (kind == "tied")  # an untied head's old tensors are dropped
    assert sum(n.op_type == "Slice" and n.name == "/last_rows/Slice" for n in graph(cut).node) == 1
    marker = json.loads((cut.folder / onnx_build.MARKER).read_text())
    assert marker["rows"] == ROWS and marker["cut_from"] == full.folder.name
    assert onnx_build.build(checkpoint, "int4", ROWS).seconds == 0.0  # cached


def test_a_cut_past_the_drafts_own_rows_is_an_error_naming_draft_vocab(checkpoints, builds):
    """Another family's smaller vocabulary (SmolLM2's 49,152 rows under the default pair's 65,536, issue
    55) failed in numpy's reshape; the tiny head has 259 rows. Nothing half cut is kept."""
    checkpoint = checkpoints["untied"]
    with pytest.raises(ValueError, match=r"^draft_vocab must be in \[1, 259\] for this draft .*got 300"):
        onnx_build.build(checkpoint, "int4", 300)
    assert onnx_build.build(checkpoint, "int4", 259).seconds >= 0  # the whole head, cut to itself: fine


def test_the_cut_holds_hard_links_of_the_full_builds_files_and_a_small_head(checkpoints, builds):
    checkpoint = checkpoints["untied"]
    full, cut = onnx_build.build(checkpoint, "int4", None), onnx_build.build(checkpoint, "int4", ROWS)
    for name in ("model.onnx.data", "tokenizer.json", "genai_config.json"):
        assert (cut.folder / name).stat().st_ino == (full.folder / name).stat().st_ino, name
    assert (cut.folder / "model.onnx").stat().st_ino != (full.folder / "model.onnx").stat().st_ino
    head_bytes = ROWS * 2 * 16 + ROWS * 2 * 4  # int4 weight [rows, 2 blocks, 16 bytes], scales [rows, 2]
    assert head_bytes <= (cut.folder / HEAD_DATA).stat().st_size <= head_bytes + 4096  # one alignment gap
    own = {p.name for p in cut.folder.iterdir() if p.stat().st_nlink == 1}
    assert own == {"model.onnx", HEAD_DATA, onnx_build.MARKER}
    on_disk = sum(p.stat().st_size for p in cut.folder.iterdir() if p.name.startswith("model.onnx"))
    assert cut.weight_bytes() < min(full.weight_bytes(), on_disk)  # the full head is linked, not read


def test_a_half_written_cut_is_cut_again_without_the_builder(checkpoints, builds):
    _, runs = builds
    checkpoint = checkpoints["untied"]
    cut = onnx_build.build(checkpoint, "int4", ROWS)
    before = len(runs)
    (cut.folder / onnx_build.MARKER).unlink()  # as if the cut had stopped before its marker
    again = onnx_build.build(checkpoint, "int4", ROWS)
    assert again.folder == cut.folder and again.seconds > 0 and len(runs) == before
    assert np.array_equal(prompt_logits(again, PROMPT[:5]),
                          prompt_logits(onnx_build.build(checkpoint, "int4", None), PROMPT[:5])[:, :ROWS])


def test_a_new_full_build_gives_the_cut_a_new_key(checkpoints, builds, tmp_path):  # builds: the cache
    """The cut's key is the full build's key and the rows: new bytes in what the full build reads
    (here: a file added to the checkpoint) change both, and the cut's folder with them."""
    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(checkpoints["untied"], checkpoint)
    full, cut = onnx_build.key_of(checkpoint, "int4", None), onnx_build.key_of(checkpoint, "int4", ROWS)
    (checkpoint / "notes.txt").write_text("another file the builder reads")
    assert onnx_build.key_of(checkpoint, "int4", None) != full
    assert onnx_build.key_of(checkpoint, "int4", ROWS) != cut
    assert onnx_build.key_of(checkpoint, "int4", ROWS) != onnx_build.key_of(checkpoint, "int4", ROWS + 1)


def cache(capsys, *argv):
    code = models.main(["cache", *argv])
    return code, capsys.readouterr().out


def own_bytes(folder) -> int:
    """Bytes of the folder's files that have no other name."""
    return sum(p.stat().st_size for p in folder.iterdir() if p.stat().st_nlink == 1)


def test_the_cache_tool_lists_verifies_and_clears_a_cut_and_its_full_build(checkpoints, builds, tmp_path,
                                                                           monkeypatch, capsys):
    """In a cache of its own (its damage and clearing stay here): the total counts the linked files
    once, verify re-hashes every file of both builds (the cut's head file too), and clearing the cut
    frees its own files only, the full build still whole."""
    root = tmp_path / "cache"
    monkeypatch.setenv("PLAYGROUND_CACHE", str(root))
    checkpoint = checkpoints["untied"]
    full, cut = onnx_build.build(checkpoint, "int4", None), onnx_build.build(checkpoint, "int4", ROWS)
    assert full.folder.parent == root / "onnx" and cut.folder.parent == root / "onnx"
    whole_full = sum(p.stat().st_size for p in full.folder.iterdir())
    code, out = cache(capsys, "list")
    assert code == 0 and out.count("ONNX build") == 2 and "shared)" in out
    assert out.strip().endswith(f"2 entries, {human(whole_full + own_bytes(cut.folder))} in all"), out
    code, out = cache(capsys, "verify")
    assert code == 0 and out.count(" ok") == 2, out
    with open(cut.folder / HEAD_DATA, "r+b") as f:  # the cut's own head file, damaged in place
        f.write(b"X")
    code, out = cache(capsys, "verify", cut.folder.name)
    assert code == 1 and f"{HEAD_DATA} does not match its recorded SHA-256" in out
    freed = own_bytes(cut.folder)
    code, out = cache(capsys, "clear", cut.folder.name)
    assert code == 0 and not cut.folder.exists() and f"freed {human(freed)}" in out
    assert (full.folder / "model.onnx.data").stat().st_nlink == 1
    assert cache(capsys, "verify", full.folder.name)[0] == 0
