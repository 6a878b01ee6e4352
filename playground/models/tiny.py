"""Tiny randomly initialised models and a byte-level tokenizer, built in-process (no download).

For tests and for trying the app on any machine. Same architecture family as the default pair
(Qwen2). The draft is the target's first layers with its embeddings and head ("early exit"), so
the two agree often enough for speculation to be worth watching even with random weights.
"""

from __future__ import annotations

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def byte_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level tokenizer: one token per byte (256) plus Qwen's three special tokens."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens(SPECIAL_TOKENS)  # ids 256, 257, 258, in Qwen's order
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIAL_TOKENS[1:],
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def tiny_config(vocab_size: int, layers: int, hidden: int = 64) -> Qwen2Config:
    return Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=False,
        eos_token_id=vocab_size - 1,
        pad_token_id=vocab_size - 3,
    )


def tiny_model(vocab_size: int, layers: int, seed: int, logit_scale: float = 0.3, hidden: int = 64):
    """A random Qwen2 whose embeddings and head are large enough for peaked next-token
    distributions (near-uniform ones would make every demo and greedy test a coin toss)."""
    with torch.random.fork_rng(devices=[]):  # never disturb the caller's global RNG
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(tiny_config(vocab_size, layers, hidden))
        torch.nn.init.normal_(model.model.embed_tokens.weight, std=logit_scale)
        torch.nn.init.normal_(model.lm_head.weight, std=logit_scale)
    return model.eval()


def early_exit_draft(target, layers: int):
    """The target's first `layers` decoder layers with its embeddings, final norm and head."""
    config = tiny_config(target.config.vocab_size, layers, target.config.hidden_size)
    with torch.random.fork_rng(devices=[]):  # its own init is overwritten; keep the global RNG as it was
        draft = Qwen2ForCausalLM(config)
    draft.load_state_dict(target.state_dict(), strict=False)
    return draft.eval()


def tiny_pair(seed: int = 0, target_layers: int = 4, draft_layers: int = 1):
    """(target, draft, tokenizer) over the byte tokenizer's vocabulary."""
    tokenizer = byte_tokenizer()
    target = tiny_model(len(tokenizer), target_layers, seed)
    return target, early_exit_draft(target, draft_layers), tokenizer
