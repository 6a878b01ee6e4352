"""A GGUF's metadata folder (checkpoints.save_metadata): the config and tokenizer transformers reads
from the GGUF, written after one parse of its metadata where AutoConfig then AutoTokenizer make two."""

from __future__ import annotations

import pytest

from playground.models import checkpoints

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a", "Ġa n", "Ġan d", "o r", "Ġ w", "Ġw or", "l d"]
TEXTS = ["the world and the rest", "<|im_start|>user\nin and or<|im_end|>", "  héllo\twörld 123 ", ""]


@pytest.fixture(scope="module")
def gguf(tmp_path_factory):
    """A Qwen2 GGUF of metadata only (the config and tokenizer need no tensor): a byte-level BPE whose
    merges make tokens, which transformers' GGUF tokenizer reader requires (write_gguf's one merge does
    not), Qwen's special tokens and a chat template."""
    import gguf as gg
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    tokens = list(bytes_to_unicode().values()) + [m.replace(" ", "") for m in MERGES] + SPECIAL
    path = tmp_path_factory.mktemp("gguf") / "tiny-qwen2.gguf"
    writer = gg.GGUFWriter(str(path), "qwen2")
    writer.add_name("Tiny Qwen2 GGUF")
    writer.add_context_length(256)
    writer.add_embedding_length(64)
    writer.add_block_count(2)
    writer.add_feed_forward_length(128)
    writer.add_head_count(4)
    writer.add_head_count_kv(2)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types([gg.TokenType.CONTROL if t in SPECIAL else gg.TokenType.NORMAL for t in tokens])
    writer.add_token_merges(MERGES)
    writer.add_bos_token_id(tokens.index("<|endoftext|>"))
    writer.add_eos_token_id(tokens.index("<|im_end|>"))
    writer.add_pad_token_id(tokens.index("<|endoftext|>"))
    writer.add_add_bos_token(False)
    writer.add_chat_template("{% for m in messages %}<|im_start|>{{ m['content'] }}<|im_end|>{% endfor %}")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture()
def parses(monkeypatch):
    """The GGUFs that transformers' full metadata parse (gguf's GGUFReader, every field) was run on."""
    import transformers.modeling_gguf_pytorch_utils as gguf_utils

    seen, parse = [], gguf_utils.load_gguf_checkpoint

    def counted(path, *args, **kwargs):
        seen.append(path)
        return parse(path, *args, **kwargs)

    monkeypatch.setattr(gguf_utils, "load_gguf_checkpoint", counted)  # both readers import it when called
    return seen


def files(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_the_metadata_is_parsed_once_and_the_files_equal_those_of_two_parses(gguf, tmp_path, parses,
                                                                            monkeypatch):
    checkpoints.save_metadata(gguf, tmp_path / "once")
    assert len(parses) == 1
    monkeypatch.setattr(checkpoints, "tokenizer_type", lambda *a: None)  # AutoTokenizer reads the config itself
    checkpoints.save_metadata(gguf, tmp_path / "twice")
    assert len(parses) == 3
    written = files(tmp_path / "once")
    assert {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"} <= set(written)
    assert written == files(tmp_path / "twice")


def test_the_folder_gives_the_config_and_tokenizer_transformers_reads_from_the_gguf(gguf, tmp_path):
    from transformers import AutoConfig, AutoTokenizer

    out = tmp_path / "meta"
    checkpoints.save_metadata(gguf, out)
    direct = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name).to_dict()
    saved = AutoConfig.from_pretrained(out).to_dict()
    # what save_metadata adds, as saving the dequantized model does, and where each was read from
    assert saved.pop("architectures") == ["Qwen2ForCausalLM"] and saved.pop("dtype") == "bfloat16"
    for key in ("architectures", "dtype", "_name_or_path"):
        direct.pop(key, None)
        saved.pop(key, None)
    assert saved == direct and saved["vocab_size"] == 256 + len(MERGES) + len(SPECIAL)
    from_gguf = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    from_folder = AutoTokenizer.from_pretrained(out)
    assert type(from_folder) is type(from_gguf) and from_folder.get_vocab() == from_gguf.get_vocab()
    assert len(from_gguf("the world")["input_ids"]) < len("the world")  # the merges are used
    for text in TEXTS:
        ids = from_gguf(text)["input_ids"]
        assert from_folder(text)["input_ids"] == ids
        assert from_folder.decode(ids) == from_gguf.decode(ids)
    assert from_folder.eos_token == from_gguf.eos_token == "<|im_end|>"
    assert from_folder.chat_template == from_gguf.chat_template


def test_autotokenizer_is_told_the_type_only_where_the_type_picks_its_class(tmp_path):
    gguf = tmp_path / "m.gguf"
    assert checkpoints.tokenizer_type(gguf, "qwen2") == "qwen2"
    assert checkpoints.tokenizer_type(gguf, "no-such-type") is None  # AutoTokenizer falls back to TokenizersBackend
    (tmp_path / "tokenizer_config.json").write_text("{}")  # its class, read by AutoTokenizer, decides
    assert checkpoints.tokenizer_type(gguf, "qwen2") is None
