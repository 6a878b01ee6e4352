"""The field's reference: the same models and settings through transformers' `generate()`.

`hf_generate(..., assistant=draft)` is transformers' assisted generation. Its draft length is read
from the *assistant's* generation_config, not from generate()'s arguments, and by default it also
stops drafting below a confidence of 0.4 (and adapts that threshold when scikit-learn is
installed). To compare at the same settings we set num_assistant_tokens = gamma, the schedule
("constant", or "heuristic" when ours is adaptive: the same +2/-1 rule, though without our upper
bound) and the threshold (our min_confidence) on the assistant for the call, and restore them
afterwards, so every call starts from gamma as ours does.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

from playground.engine.generate import SpecConfig, clock

ASSISTANT_FIELDS = ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")
PROMPT_LOOKUP_MAX_NGRAM = 3  # same n-gram range as our PromptLookupDrafter(1, 3)


def sampling_kwargs(config: SpecConfig) -> dict:
    """generate() arguments for our settings, all explicit: instruct models ship generation_configs
    with their own temperature, top-k, top-p and repetition penalty, which would change the task."""
    kwargs = {"max_new_tokens": config.max_new_tokens, "repetition_penalty": 1.0}
    if config.temperature == 0:
        return {**kwargs, "do_sample": False}
    return {**kwargs, "do_sample": True, "temperature": config.temperature, "top_k": config.top_k,
            "top_p": config.top_p}


@contextmanager
def matched_assistant(assistant, config: SpecConfig):
    """Make the assistant draft as our engine does under `config` for the duration of the call:
    gamma tokens a step, or the adaptive schedule from gamma, with the same confidence cut."""
    if assistant is None:
        yield None
        return
    saved = {name: getattr(assistant.generation_config, name, None) for name in ASSISTANT_FIELDS}
    assistant.generation_config.num_assistant_tokens = config.gamma
    assistant.generation_config.num_assistant_tokens_schedule = "heuristic" if config.adaptive else "constant"
    assistant.generation_config.assistant_confidence_threshold = config.min_confidence
    try:
        yield assistant
    finally:
        for name, value in saved.items():
            setattr(assistant.generation_config, name, value)


@torch.inference_mode()
def hf_generate(target, prompt_ids, config: SpecConfig, eos_token_ids, pad_token_id=None,
                assistant=None, prompt_lookup=False) -> tuple[list[int], float]:
    """(new tokens, wall seconds) of one transformers generate() call, prefill included.

    assistant: a draft model for assisted generation; prompt_lookup: transformers' prompt lookup
    decoding with gamma tokens per step instead. New tokens = output length - prompt length.
    """
    ids = torch.tensor([list(prompt_ids)], device=target.device)
    kwargs = sampling_kwargs(config)
    kwargs.update(eos_token_id=list(eos_token_ids) or None, attention_mask=torch.ones_like(ids),
                  pad_token_id=pad_token_id if pad_token_id is not None else (list(eos_token_ids) or [0])[0])
    if prompt_lookup:
        kwargs.update(prompt_lookup_num_tokens=config.gamma, max_matching_ngram_size=PROMPT_LOOKUP_MAX_NGRAM)
    if assistant is not None:
        kwargs["assistant_model"] = assistant
    # transformers samples from the global RNG: seed it for repeatable runs, inside a fork so the
    # caller's RNG state is left as it was (the fork is outside the timed region).
    devices = [target.device] if target.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices), matched_assistant(assistant, config):
        torch.manual_seed(config.seed)
        started = clock(target.device)
        out = target.generate(ids, **kwargs)
        seconds = clock(target.device) - started
    return out[0, ids.shape[1]:].tolist(), seconds
