"""Where a run stops: the step's tokens emitted up to EOS, a stop string or the token budget."""

from __future__ import annotations


def cut_output(event, context, produced, config, eos, tokenizer) -> tuple[tuple[int, ...], str | None]:
    """Emit the step's tokens up to EOS, a stop string or the token budget, whichever comes first."""
    out: list[int] = []
    for token in event.emitted:
        out.append(token)
        if token in eos:
            return tuple(out), "eos"
        if config.stop_strings and ends_with_stop(context + out, produced + len(out), config, tokenizer):
            return tuple(out), "stop"
        if produced + len(out) >= config.max_new_tokens:
            return tuple(out), "length"
    return tuple(out), None


def ends_with_stop(tokens, generated, config, tokenizer) -> bool:
    """Did the last token complete a stop string? Decodes a short tail only, not the whole text."""
    window = max(len(s) for s in config.stop_strings) + 8
    tail = tokenizer.decode(tokens[-min(window, generated):])
    return any(s in tail for s in config.stop_strings)
