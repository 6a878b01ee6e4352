"""A tokenizer's fingerprint, from a GGUF's metadata or a checkpoint's tokenizer files, without
building the tokenizer: two models whose fingerprints agree mean the same thing by every token id, so
one can draft ids for the other directly.

What it hashes is what the loader later compares (models/text.tokenizer_differences): the vocabulary
in id order up to the tokenizer's own size (the padding rows a converter adds to fill a wider
embedding are left out: Qwen2.5-7B's 152,064 rows and 0.5B's 151,936 hold the same 151,665 tokens),
the merges, and the special ids (bos, eos, pad, unk).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from playground.models.text import is_padding

SPECIAL = ("bos", "eos", "pad", "unk")
GGUF_SPECIAL = {"bos": "tokenizer.ggml.bos_token_id", "eos": "tokenizer.ggml.eos_token_id",
                "pad": "tokenizer.ggml.padding_token_id", "unk": "tokenizer.ggml.unknown_token_id"}


@dataclass(frozen=True)
class Vocabulary:
    size: int  # real tokens: ids 0..size-1, padding rows not counted
    fingerprint: str  # sha256 hex of the tokens, merges and special ids


def real_size(tokens: list[str]) -> int:
    """The tokens before the trailing run of padding rows."""
    size = len(tokens)
    while size and is_padding(tokens[size - 1], size - 1):
        size -= 1
    return size


def vocabulary(tokens: list[str], merges: list[str], special: dict[str, int | None]) -> Vocabulary:
    """The fingerprint of a vocabulary given in id order (None where an id has no token)."""
    size = real_size(tokens)
    kept = {name: i for name, i in special.items() if isinstance(i, int) and 0 <= i < size}
    text = json.dumps([tokens[:size], merges, kept], ensure_ascii=False, separators=(",", ":"))
    return Vocabulary(size, hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest())


def from_gguf(metadata: dict) -> Vocabulary | None:
    """A GGUF's vocabulary (tokenizer.ggml.*), or None when it carries none."""
    tokens = metadata.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, list) or not tokens:
        return None
    merges = metadata.get("tokenizer.ggml.merges") or []
    return vocabulary(tokens, [str(m) for m in merges], {k: metadata.get(v) for k, v in GGUF_SPECIAL.items()})


def from_folder(folder: Path) -> Vocabulary | None:
    """A checkpoint's vocabulary from tokenizer.json (else vocab.json and merges.txt) and the special
    tokens tokenizer_config.json names; None when it has neither (a SentencePiece model alone is not
    read: the loader compares it once loaded)."""
    tokens, merges = tokenizer_json(folder / "tokenizer.json") or vocab_json(folder)
    if not tokens:
        return None
    ids = {token: i for i, token in enumerate(tokens) if token is not None}
    config = read_json(folder / "tokenizer_config.json") or read_json(folder / "special_tokens_map.json") or {}
    special = {name: ids.get(token_text(config.get(f"{name}_token"))) for name in SPECIAL}
    return vocabulary(tokens, merges, special)


def tokenizer_json(path: Path) -> tuple[list, list[str]] | None:
    data = read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        return None
    model = data["model"]
    vocab = model.get("vocab")
    if isinstance(vocab, list):  # Unigram: [piece, score] in id order
        pairs = {piece[0]: i for i, piece in enumerate(vocab)}
    elif isinstance(vocab, dict):
        pairs = dict(vocab)
    else:
        return None
    for added in data.get("added_tokens") or []:
        if isinstance(added, dict) and isinstance(added.get("id"), int):
            pairs[added.get("content")] = added["id"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges") or []]
    return in_id_order(pairs), merges


def vocab_json(folder: Path) -> tuple[list, list[str]]:
    """GPT-2's slow files: vocab.json (token -> id), added_tokens.json and merges.txt."""
    pairs = read_json(folder / "vocab.json")
    if not isinstance(pairs, dict):
        return [], []
    pairs = {**pairs, **(read_json(folder / "added_tokens.json") or {})}
    try:
        lines = (folder / "merges.txt").read_text(encoding="utf-8").splitlines()
    except OSError:
        lines = []
    return in_id_order(pairs), [line for line in lines if line and not line.startswith("#version")]


def in_id_order(pairs: dict) -> list:
    ids = [i for i in pairs.values() if isinstance(i, int) and i >= 0]
    tokens = [None] * (max(ids) + 1 if ids else 0)
    for token, i in pairs.items():
        if isinstance(i, int) and i >= 0:
            tokens[i] = token
    return tokens


def token_text(value) -> str | None:
    """A special token as tokenizer_config.json gives it: a string or an AddedToken's dict."""
    return value.get("content") if isinstance(value, dict) else value


def read_json(path: Path):
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
