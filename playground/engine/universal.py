"""A draft model whose tokenizer differs from the target's (universal assisted generation).

Two ways to draft across vocabularies, after transformers' two implementations:

- greedy (AssistedCandidateGeneratorDifferentTokenizers, 4.46): the target's context becomes text,
  the draft reads that text in its own tokens, drafts freely, and its text is re-encoded in the
  target's tokens. Greedy verification only asks whether each token is p's argmax, so any
  proposal is exact (q one-hot).
- sampled (UniversalSpeculativeDecodingGenerator, 4.50; Timor et al. 2025, arXiv 2502.05202):
  the draft proposes only tokens both vocabularies hold (engine/vocab_map.py), its q restricted
  there and renormalised, so q is a distribution over target ids and Algorithm 1 applies as is.

Either way the draft keeps its own token sequence for the context in step with the target's,
re-encoding only a look-behind window of the text's tail (`Retokenized`), so its cache is
rolled back to what still agrees instead of reading the whole context again.
"""

from __future__ import annotations

import torch

from playground.config import CHAIN
from playground.engine.drafters import Draft, cut_after_stop
from playground.engine.kvcache import CachedModel
from playground.engine.runners.choice import DRAFT
from playground.engine.memory import cached_model_bytes
from playground.engine.sampling import display_probs, logits_to_probs, sample
from playground.engine.vocab_map import VocabMap, vocab_map_of

LOOKBEHIND = 4  # completed tokens re-encoded before the first change: a merge across it is redone
REPLACEMENT = "\ufffd"  # what a decode shows for bytes that do not finish a character yet


# -- text: tokens <-> text at clean character boundaries -----------------------------------------


def decode(tokenizer, ids: list[int]) -> str:
    return tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)


def encode(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []


def grow_text(tokenizer, ids: list[int], prefix: int, read: int) -> list[tuple[int, str]]:
    """The text each token of ids[read:] adds, as (tokens done, piece) at each token that completes
    a character; tokens ids[prefix:read] are decoded as left context only (a SentencePiece space,
    a byte sequence). Bytes that do not yet finish a character are left for later."""
    done = []
    for end in range(read + 1, len(ids) + 1):
        before = decode(tokenizer, ids[prefix:read])
        after = decode(tokenizer, ids[prefix:end])
        if len(after) > len(before) and not after.endswith(REPLACEMENT):
            done.append((end, after[len(before):]))
            prefix, read = read, end
    return done


class Retokenized:
    """The draft's own tokens for a target context, kept in step as the context grows.

    Both sequences record where their tokens complete characters of one shared text: `source`
    (target ids) and `marks` [(tokens, characters)] on each side. An update keeps what agrees,
    steps back `lookbehind` completed target tokens (a token boundary may merge differently once
    more text follows it), and re-encodes only the text after the draft mark there.
    """

    def __init__(self, target_tokenizer, draft_tokenizer, lookbehind: int = LOOKBEHIND):
        self.target_tok, self.draft_tok, self.lookbehind = target_tokenizer, draft_tokenizer, lookbehind
        self.source: list[int] = []
        self.text = ""
        self.tokens: list[int] = []  # the draft's tokens for self.text
        self.target_marks: list[tuple[int, int]] = [(0, 0)]
        self.draft_marks: list[tuple[int, int]] = [(0, 0)]

    def update(self, ids: list[int]) -> list[int]:
        """The draft's tokens for target context `ids` (of which only the text so far is read)."""
        kept = self.read_target(ids)  # target marks still valid before the new tokens
        self.reencode_draft(self.target_marks[max(0, kept - 1 - self.lookbehind)][1])
        return self.tokens

    def read_target(self, ids: list[int]) -> int:
        """Extend the text with what ids adds after the prefix it shares with the last context;
        returns how many target marks were kept."""
        agree = common_prefix(ids, self.source)
        self.target_marks = [m for m in self.target_marks if m[0] <= agree]
        kept = len(self.target_marks)
        n, chars = self.target_marks[-1]
        prefix = self.target_marks[-2][0] if kept > 1 else 0
        self.text = self.text[:chars]
        for end, piece in grow_text(self.target_tok, ids, prefix, n):
            self.text += piece
            self.target_marks.append((end, len(self.text)))
        self.source = list(ids)
        return kept

    def reencode_draft(self, chars: int) -> None:
        """Keep the draft's tokens up to its last mark at or before `chars`, encode the rest."""
        self.draft_marks = [m for m in self.draft_marks if m[1] <= chars]
        n, start = self.draft_marks[-1]
        prefix = self.draft_marks[-2][0] if len(self.draft_marks) > 1 else 0
        self.tokens = self.tokens[:n] + encode(self.draft_tok, self.text[start:])
        pieces = grow_text(self.draft_tok, self.tokens, prefix, n)
        if "".join(p for _, p in pieces) == self.text[start:]:  # the tail reads back as it was written
            position = start
            for end, piece in pieces:
                position += len(piece)
                self.draft_marks.append((end, position))


def continue_in(tokenizer, ids: list[int], marks: list[tuple[int, int]], text: str, new: str,
                lookbehind: int = LOOKBEHIND) -> list[int]:
    """Target tokens for `new` text after context `ids` (whose completed text is `text`, `marks`
    where its tokens complete characters): re-encode a look-behind window of the context with it
    and keep what follows the window's own tokens, so the first new tokens continue the context
    as the tokenizer would split it; shrink the window where the context's tokens would merge
    with the new text (they are verified as they stand)."""
    for n, chars in reversed(marks[-1 - lookbehind:]):
        window = encode(tokenizer, text[chars:] + new)
        if window[: len(ids) - n] == ids[n:]:
            return window[len(ids) - n:]
    return []


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    return next(i for i in range(n) if a[i] != b[i])


# -- the drafter -------------------------------------------------------------------------------


class UniversalDrafter:
    """A draft model with its own tokenizer, proposing target tokens (a chain).

    propose() receives the target's ids and returns a Draft of target ids: greedy, the draft's
    free continuation re-encoded in the target's tokens (q None); sampled, tokens of the
    vocabulary intersection drawn from the draft's q restricted there, q given in the target's
    vocabulary (width target_vocab_size) so the output keeps the target's distribution.
    """

    name = "draft model (other tokenizer)"
    speculation = CHAIN

    def __init__(self, model, tokenizer, target_tokenizer, target_vocab_size: int, *,
                 vocab_map: VocabMap | None = None, lookbehind: int = LOOKBEHIND, runner: str = "auto"):
        """target_vocab_size: the target's logit width (its config's vocab_size). vocab_map: the
        pair's intersection, when already built (it is the slow part for a 150k vocabulary)."""
        if not isinstance(lookbehind, int) or not 0 <= lookbehind <= 64:
            raise ValueError(f"lookbehind must be an integer in [0, 64], got {lookbehind!r}")
        self.lm = CachedModel(model, runner=runner, role=DRAFT)
        self.device = self.lm.device
        self.vocab_size = target_vocab_size
        self.tokenizer, self.target_tokenizer, self.lookbehind = tokenizer, target_tokenizer, lookbehind
        self.map = (vocab_map or vocab_map_of(target_tokenizer, tokenizer, target_vocab_size,
                                              self.lm.vocab_size)).to(self.device)
        if self.map.identical:
            raise ValueError("draft: its tokenizer is the target's; use the draft model drafter (ModelDrafter), "
                             "which drafts over the whole vocabulary without re-encoding")
        self.coverage = self.map.coverage
        # ids that are markup or past the tokenizer (padded logit rows): not text to re-encode
        self.markup = set(tokenizer.all_special_ids) | set(tokenizer.added_tokens_decoder)
        self.text_ids = len(tokenizer)
        self.context = Retokenized(target_tokenizer, tokenizer, lookbehind)

    def resident_bytes(self) -> int:
        return cached_model_bytes(self.lm)

    def begin(self, ids: list[int]) -> None:
        self.lm.reset()
        self.context = Retokenized(self.target_tokenizer, self.tokenizer, self.lookbehind)

    def propose(self, ids, k, sampling, generator, min_confidence=0.0, stop_tokens=frozenset()) -> Draft:
        context = list(self.context.update(ids))
        if not context:  # nothing of the context reads as text yet (a split character)
            return Draft([], None)
        if sampling.greedy:
            return self.propose_greedy(ids, context, k, sampling, min_confidence, stop_tokens)
        return self.propose_sampled(context, k, sampling, generator, min_confidence, stop_tokens)

    def propose_greedy(self, ids, context, k, sampling, min_confidence, stop_tokens) -> Draft:
        """Draft k tokens in the draft's vocabulary, then re-encode their text in the target's."""
        drafted, special = [], None
        for _ in range(k):
            q = display_probs(self.lm.logits_for(context + drafted, keep=1)[-1], sampling)
            token = int(q.argmax())
            if token in self.markup or token >= self.text_ids:  # not text: only a shared token maps
                special = int(self.map.draft_to_target[token]) if token < self.map.draft_size else -1
                break
            drafted.append(token)
            if min_confidence > 0 and float(q.max()) < min_confidence:
                break
        new = "".join(piece for _, piece in grow_text(self.tokenizer, context + drafted,
                                                      max(0, len(context) - 1), len(context)))
        marks = self.context.target_marks
        tokens = continue_in(self.target_tokenizer, ids, marks, self.context.text, new, self.lookbehind)
        if special is not None and special >= 0 and len(tokens) < k and marks[-1][0] == len(ids):
            tokens.append(special)
        return Draft(cut_after_stop(tokens[:k], stop_tokens), None)

    def propose_sampled(self, context, k, sampling, generator, min_confidence, stop_tokens) -> Draft:
        """Draw k tokens of the intersection, each one draft token and one target token."""
        drafted, tokens, rows = [], [], []
        for _ in range(k):
            logits = self.lm.logits_for(context + drafted, keep=1)[-1, : self.map.draft_size]
            q = restrict_to_intersection(logits_to_probs(logits, sampling), self.map)
            if q is None:  # the draft's processed q has no mass on a shared token
                break
            token = sample(q, generator)
            drafted.append(token)
            tokens.append(target_token(self.map, token))
            rows.append(q_in_target_vocabulary(q, self.map))
            if tokens[-1] in stop_tokens or (min_confidence > 0 and float(q.max()) < min_confidence):
                break
        return Draft(tokens, torch.stack(rows) if rows else None)


def restrict_to_intersection(q: torch.Tensor, vocab_map: VocabMap) -> torch.Tensor | None:
    """q on the shared tokens only, renormalised (None when it has no mass there).  [V_draft]"""
    kept = torch.zeros_like(q)
    kept[vocab_map.draft_ids] = q[vocab_map.draft_ids]
    total = kept.sum()
    return kept / total if total > 0 else None


def target_token(vocab_map: VocabMap, draft_token: int) -> int:
    """The target id of a drawn shared token."""
    return int(vocab_map.draft_to_target[draft_token])


def q_in_target_vocabulary(q: torch.Tensor, vocab_map: VocabMap) -> torch.Tensor:
    """The same distribution over target ids (zero on tokens the draft cannot reach).  -> [V_target]"""
    row = q.new_zeros(vocab_map.target_size)
    row[vocab_map.target_ids] = q[vocab_map.draft_ids]
    return row
