"""Each of the playground's drafters in each tool: the same thing where the tool has it, else the nearest
thing it has, and a sentence saying what differs (EQUIVALENTS, read by every snippet and by caveats())."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field

from playground.config import HYBRID, MODEL, PROMPT_LOOKUP, RECYCLING, SELF, SUFFIX

# transformers' generate() drafts three ways, each named by the argument that turns it on
ASSISTANT, LOOKUP, EARLY_EXIT = "assistant_model", "prompt_lookup_num_tokens", "assistant_early_exit"


@dataclass(frozen=True)
class Equivalent:
    """What each tool runs for one of the playground's drafters: the same thing where the tool has it, else
    the nearest thing it has; `differences` says what differs or is missing (a sentence per tool, keyed as
    CHECKED), shown as the snippet's comment and in caveats()."""

    vllm: tuple[str, str]  # speculative_config methods: the one exported, then the one shown beside it
    llamacpp: tuple[str, ...]  # --spec-type values (llama.cpp tries n-gram types before the draft model)
    transformers: str  # ASSISTANT, LOOKUP or EARLY_EXIT
    differences: dict[str, str] = field(default_factory=dict)

    @property
    def uses_draft(self) -> bool:
        """Whether a snippet loads the pair's draft model."""
        return (self.vllm[0] == "draft_model" or "draft-simple" in self.llamacpp
                or self.transformers == ASSISTANT)


NGRAM_MOD = (  # what llama.cpp's nearest type to suffix decoding does differently, said for two drafters
    "ngram-mod, the nearest, drafts a variable length (here 1 to γ) from one pool shared by all requests, "
    "but matches exactly the last --spec-ngram-mod-n-match tokens (24 by default; it warns below 16), not "
    "the longest matching suffix, and keeps the last token seen after each hashed n-gram, not counts."
)
EQUIVALENTS = {
    MODEL: Equivalent(("draft_model", "ngram"), ("draft-simple",), ASSISTANT),
    PROMPT_LOOKUP: Equivalent(("ngram", "draft_model"), ("ngram-simple",), LOOKUP),
    SUFFIX: Equivalent(("suffix", "ngram"), ("ngram-mod",), LOOKUP, {
        "vllm": 'vLLM\'s method "suffix" is the same algorithm, Arctic Inference\'s (pip install '
                "arctic-inference into vLLM's environment, or the server refuses it): one path of up to γ "
                "tokens a step, at most suffix_decoding_max_spec_factor (1.0) times the matched length, of "
                "tokens whose counted probability is at least suffix_decoding_min_token_prob (0.1), as "
                "here; its global tree holds the server's last suffix_decoding_max_cached_requests (10000) "
                "responses, every user's, but not their prompts, which the playground indexes too.",
        "llama.cpp": "llama.cpp has no suffix decoding: " + NGRAM_MOD,
        "transformers": "transformers has no suffix decoding: prompt lookup, the nearest, matches in this "
                        "call's context only, never in earlier outputs.",
    }),
    HYBRID: Equivalent(("draft_model", "suffix"), ("ngram-mod", "draft-simple"), ASSISTANT, {
        "vllm": "vLLM runs one method per server: the draft model is exported (what the hybrid falls back "
                "to), suffix decoding beside it.",
        "llama.cpp": "llama.cpp combines the same way (a comma list of types: n-gram types first, the draft "
                     "model only where they propose nothing), with no suffix decoding: " + NGRAM_MOD,
        "transformers": "transformers drafts one way per generate() call: the draft model alone is exported.",
    }),
    RECYCLING: Equivalent(("suffix", "ngram"), ("ngram-mod",), LOOKUP, {
        "vllm": "vLLM has no Token Recycling (successors read off the target's own verification logits): "
                "suffix decoding, also model-free and learning across requests, stands in.",
        "llama.cpp": "llama.cpp has no Token Recycling: ngram-mod, model-free with a pool shared across "
                     "requests, stands in.",
        "transformers": "transformers has no Token Recycling: prompt lookup, model-free, stands in.",
    }),
    SELF: Equivalent(("draft_model", "ngram"), ("draft-simple",), EARLY_EXIT, {
        "vllm": "vLLM has no self-speculation by skipping layers (its MTP and EAGLE drafters need trained "
                "heads): the pair's draft model stands in.",
        "llama.cpp": "llama.cpp has no self-speculation by skipping layers: the pair's draft model stands "
                     "in.",
        "transformers": "transformers' assistant_early_exit is LayerSkip's self-speculation: the target's "
                        "first N layers, then its norm and head, not a set of layers searched on the "
                        "prompt as here (SWIFT-style, which none of these tools ships); a checkpoint not "
                        "trained for early exit (LayerSkip's are) drafts worse through it.",
    }),
}


def difference_comment(equivalent: Equivalent, tool: str) -> str:
    """The tool's sentence about a drafter's equivalent as comment lines ('' when the tool runs the same
    thing). Given the equivalent, not the settings: the settings read EQUIVALENTS, so this side of the
    pair never imports them back."""
    sentence = equivalent.differences.get(tool)
    if not sentence:
        return ""
    return "".join(f"# {line}\n" for line in textwrap.wrap(sentence, 98, break_on_hyphens=False))
