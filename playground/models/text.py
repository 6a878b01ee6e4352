"""Text at the edges of the engine: prompts in, token pieces out, and tokenizer compatibility."""

from __future__ import annotations


def encode_prompt(tokenizer, prompt: str, system: str | None = None, chat: bool | None = None) -> list[int]:
    """Token ids of a prompt; through the chat template when the tokenizer has one (instruct models)."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError("prompt must be non-empty text")
    use_chat = bool(getattr(tokenizer, "chat_template", None)) if chat is None else chat
    if not use_chat:
        return tokenizer(prompt, add_special_tokens=True)["input_ids"]
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
    encoded = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    return list(encoded["input_ids"] if hasattr(encoded, "keys") else encoded)


def eos_ids(tokenizer, *models) -> tuple[int, ...]:
    """Every token that ends a turn: the tokenizer's EOS and each model's generation_config EOS."""
    ids = {tokenizer.eos_token_id}
    for model in models:
        config_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        ids.update(config_eos if isinstance(config_eos, (list, tuple)) else [config_eos])
    return tuple(sorted(i for i in ids if i is not None))


def check_same_tokenizer(target_tokenizer, draft_tokenizer, names=("target", "draft")) -> None:
    """Drafting token ids directly needs the two models to mean the same thing by each id."""
    problems = tokenizer_differences(target_tokenizer, draft_tokenizer)
    if problems:
        raise ValueError(
            f"the {names[0]} and {names[1]} tokenizers differ: " + "; ".join(problems)
            + ". Drafting token ids directly needs a draft that shares the target's tokenizer."
        )


def is_padding(token: str, token_id: int) -> bool:
    """A row a converter added to fill the embedding, not a token: llama.cpp's converter names the ids
    past the tokenizer's own size `[PAD<id>]` (Qwen2.5-7B's 152,064 rows hold 151,665 tokens)."""
    return token == f"[PAD{token_id}]"


def real_vocab(tokenizer) -> dict[str, int]:
    """The tokenizer's vocabulary without padding rows: two models padded to different widths mean the
    same by every real id."""
    return {token: i for token, i in tokenizer.get_vocab().items() if not is_padding(token, i)}


def tokenizer_differences(a, b) -> list[str]:
    """How two tokenizers differ in what their ids mean: vocabularies and special tokens (not
    embedding sizes, which some families pad, nor the padding rows a GGUF's vocabulary carries for
    them). Empty when the same."""
    if a is b:
        return []
    problems = []
    vocab_a, vocab_b = real_vocab(a), real_vocab(b)
    if vocab_a != vocab_b:
        differ = sum(vocab_b.get(tok) != i for tok, i in vocab_a.items()) + len(set(vocab_b) - set(vocab_a))
        problems.append(f"vocabularies differ ({len(vocab_a)} vs {len(vocab_b)} tokens, {differ} ids disagree)")
    for attr in ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id"):
        if getattr(a, attr, None) != getattr(b, attr, None):
            problems.append(f"{attr} {getattr(a, attr, None)} vs {getattr(b, attr, None)}")
    return problems


class TokenPieces:
    """Decode tokens one at a time into the text each adds, for streaming display.

    Byte-level tokens can split a character, and some tokenizers change how a token reads by
    what precedes it; so each piece is the growth of a short decoded window (the offsets scheme
    of vLLM's incremental detokenizer), and a token that completes no character yet gives an
    empty piece until its character is whole. Each call decodes a few tokens, not the whole text.
    """

    def __init__(self, tokenizer, skip_special_tokens: bool = True):
        self.tokenizer = tokenizer
        self.skip = skip_special_tokens
        self.tokens: list[int] = []
        self.prefix = 0  # window start: decoded for context only
        self.read = 0  # tokens before this one are already in the text

    def decode(self, tokens: list[int]) -> str:
        return self.tokenizer.decode(tokens, skip_special_tokens=self.skip)

    def add(self, token: int) -> str:
        self.tokens.append(token)
        before = self.decode(self.tokens[self.prefix : self.read])
        after = self.decode(self.tokens[self.prefix :])
        if len(after) <= len(before) or after.endswith("\ufffd"):  # an unfinished UTF-8 sequence
            return ""
        self.prefix, self.read = self.read, len(self.tokens)
        return after[len(before) :]
