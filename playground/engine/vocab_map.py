"""Which draft tokens are also target tokens: the vocabulary intersection of two tokenizers.

Timor et al. 2025 ("Lossless Speculative Decoding Algorithms for Heterogeneous Vocabularies",
arXiv 2502.05202) draft only among tokens both vocabularies hold: such a token is one draft step
and one target token at once, so the draft's q moves to the target's vocabulary unchanged and
Algorithm 1 verifies it as usual. transformers' AssistantToTargetTranslator does the same by
comparing token strings; here the strings are first turned into the bytes they stand for, so a
byte-level BPE ("Ġthe") and a SentencePiece vocabulary ("▁the", "<0x0A>") can meet.

Pure: tokenizers in, index tensors out; no model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache

import torch

SENTENCEPIECE_SPACE = "\u2581"  # "▁": SentencePiece's mark for a leading space


@dataclass(frozen=True)
class VocabMap:
    """draft_ids[i] and target_ids[i] are the same token in each vocabulary."""

    draft_ids: torch.Tensor  # [n] long
    target_ids: torch.Tensor  # [n] long
    draft_to_target: torch.Tensor  # [draft_size] long: the target id of each draft id, -1 if none
    draft_size: int  # width of the draft's logits
    target_size: int  # width of the target's logits (q's width)
    coverage: float  # share of the target's tokens the draft can propose

    def __len__(self) -> int:
        return int(self.draft_ids.numel())

    @property
    def identical(self) -> bool:
        """Every id means the same token in both: the same tokenizer, nothing to map."""
        return (self.draft_size == self.target_size == len(self) and self.coverage == 1.0
                and bool((self.draft_ids == self.target_ids).all()))

    def to(self, device) -> VocabMap:
        return VocabMap(self.draft_ids.to(device), self.target_ids.to(device), self.draft_to_target.to(device),
                        self.draft_size, self.target_size, self.coverage)


def vocab_map_of(target_tokenizer, draft_tokenizer, target_size: int | None = None,
                 draft_size: int | None = None) -> VocabMap:
    """build_vocab_map, made once per pair of tokenizers (seconds for a 150k vocabulary) and kept on
    the draft's tokenizer object, so it lives and dies with the loaded model (no global cache).

    Keyed by a token stamped on the target's tokenizer, not by id(target_tokenizer): an id is reused
    by the next object once a tokenizer is freed, which would hand a new target another's map. The
    key holds the token, so it stays alive and unique as long as the map is kept."""
    kept = draft_tokenizer.__dict__.setdefault("_playground_vocab_maps", {})
    key = (identity_of(target_tokenizer), target_size, draft_size)
    if key not in kept:
        kept[key] = build_vocab_map(target_tokenizer, draft_tokenizer, target_size, draft_size)
    return kept[key]


def identity_of(tokenizer) -> object:
    """A token that stands for this tokenizer object alone, made on first use and kept on it."""
    return tokenizer.__dict__.setdefault("_playground_identity", object())


def build_vocab_map(target_tokenizer, draft_tokenizer, target_size: int | None = None,
                    draft_size: int | None = None) -> VocabMap:
    """The tokens both tokenizers hold, compared by the bytes they decode to (special and added
    tokens by their content, and only with each other). target_size / draft_size: the models'
    logit widths (ids past them are never produced); default the tokenizers' lengths."""
    target_keys = token_keys(target_tokenizer, target_size)
    draft_keys = token_keys(draft_tokenizer, draft_size)
    by_key = {key: i for i, key in target_keys.items()}
    pairs = sorted((d, by_key[key]) for d, key in draft_keys.items() if key in by_key)
    if not pairs:
        raise ValueError("draft: its tokenizer shares no token with the target's (the intersection of the two "
                         "vocabularies is empty), so it can propose nothing the target could accept")
    draft_size = draft_size or len(draft_tokenizer)
    target_size = target_size or len(target_tokenizer)
    draft_ids = torch.tensor([d for d, _ in pairs], dtype=torch.long)
    target_ids = torch.tensor([t for _, t in pairs], dtype=torch.long)
    draft_to_target = torch.full((draft_size,), -1, dtype=torch.long)
    draft_to_target[draft_ids] = target_ids
    coverage = len(set(target_ids.tolist())) / len(target_keys)
    return VocabMap(draft_ids, target_ids, draft_to_target, draft_size, target_size, coverage)


def token_keys(tokenizer, size: int | None = None) -> dict[int, bytes | tuple[str, str]]:
    """id -> what the token means: its bytes, or ("special", content) for an added token (its
    text is markup, not bytes a merge could produce). Where two ids mean the same, the first wins."""
    added = {i: t.content for i, t in tokenizer.added_tokens_decoder.items()}
    to_bytes = piece_reader(tokenizer)
    keys, seen = {}, set()
    for piece, i in sorted(tokenizer.get_vocab().items(), key=lambda item: item[1]):
        if size is not None and i >= size:
            continue
        key = ("special", added[i]) if i in added else to_bytes(piece)
        if key not in seen:  # a duplicate would map two target ids to one draft id
            seen.add(key)
            keys[i] = key
    return keys


def piece_reader(tokenizer):
    """piece -> bytes for this tokenizer's scheme: byte-level BPE spells each byte as a printable
    character (GPT-2's table), SentencePiece writes spaces as "▁" and unknown bytes as "<0xNN>"."""
    decoder = tokenizer.backend_tokenizer.decoder
    scheme = json.loads(decoder.__getstate__()) if decoder is not None else {}
    if "ByteLevel" in json.dumps(scheme):
        return byte_level_bytes
    return sentencepiece_bytes


def byte_level_bytes(piece: str) -> bytes:
    table = unicode_to_byte()
    if all(ch in table for ch in piece):
        return bytes(table[ch] for ch in piece)
    return piece.encode()  # a piece outside the byte alphabet stands for itself


def sentencepiece_bytes(piece: str) -> bytes:
    if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
        try:
            return bytes([int(piece[3:5], 16)])
        except ValueError:
            pass
    return piece.replace(SENTENCEPIECE_SPACE, " ").encode()


@lru_cache(maxsize=1)
def unicode_to_byte() -> dict[str, int]:
    """GPT-2's bytes_to_unicode, inverted: printable bytes stand for themselves, the other 68 are
    shifted past 255 so every byte has a visible character."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars
