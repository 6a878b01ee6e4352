"""The knobs of a run as one typed record, and what the engine needs from them.

Values arrive from the page (sliders may send 4.0 for 4, a cleared box sends None); they are
coerced where harmless and otherwise left for SpecConfig and the drafters to reject with a
message naming the field and its allowed range.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

DRAFT_MODEL, PROMPT_LOOKUP = "draft model", "prompt lookup"
DRAFTERS = (DRAFT_MODEL, PROMPT_LOOKUP)
QUANTIZATIONS = ("default", "none", "nf4", "int8", "int8-cpu", "int4-cpu")  # default: models.yaml's choice
MAX_NEW_TOKENS = 1024  # a page-level cap: past this a CPU run takes hours, whatever the context allows


@dataclass(frozen=True)
class RunSettings:
    """Everything the controls set besides the prompt. Field order is the order of the inputs."""

    pair: str | None  # registry pair name; None is the registry's default
    drafter: str = DRAFT_MODEL  # DRAFT_MODEL or PROMPT_LOOKUP
    gamma: int = 4
    adaptive: bool = False
    gamma_min: int = 1
    gamma_max: int = 16
    min_confidence: float = 0.0
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    max_new_tokens: int = 96
    ngram_min: int = 1
    ngram_max: int = 3
    draft_vocab: int = 0  # 0: the draft's whole vocabulary; N: it drafts among the first N token ids
    target_quantization: str = "default"
    draft_quantization: str = "default"

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    @classmethod
    def from_values(cls, values: dict) -> RunSettings:
        """Build from raw page values: whole floats become ints where an int is expected."""
        ints = {f.name for f in fields(cls) if f.type == "int"}
        clean = {k: as_int(v) if k in ints else v for k, v in values.items()}
        return cls(**clean)

    def check(self) -> None:
        """Checks the engine does not make (it cannot know the page's choices)."""
        if self.drafter not in DRAFTERS:
            raise ValueError(f"drafter must be one of: {', '.join(DRAFTERS)}, got {self.drafter!r}")
        for field in ("target_quantization", "draft_quantization"):
            if getattr(self, field) not in QUANTIZATIONS:
                raise ValueError(
                    f"{field} must be one of: {', '.join(QUANTIZATIONS)}, got {getattr(self, field)!r}"
                )
        if isinstance(self.draft_vocab, bool) or not isinstance(self.draft_vocab, int) or self.draft_vocab < 0:
            raise ValueError(f"draft_vocab must be a whole number >= 0 (0: the whole vocabulary), "
                             f"got {self.draft_vocab!r}")
        if isinstance(self.max_new_tokens, int) and not 1 <= self.max_new_tokens <= MAX_NEW_TOKENS:
            raise ValueError(
                f"max_new_tokens must be an integer in [1, {MAX_NEW_TOKENS}], got {self.max_new_tokens}"
            )

    def spec_config(self):
        """The engine's SpecConfig; raises ValueError naming the bad field and its range."""
        from ..engine import SpecConfig  # torch: imported when a run starts, not with the page

        self.check()
        return SpecConfig(
            gamma=self.gamma,
            adaptive=bool(self.adaptive),
            gamma_min=self.gamma_min,
            gamma_max=self.gamma_max,
            min_confidence=self.min_confidence,
            temperature=self.temperature,
            top_k=self.top_k,
            top_p=self.top_p,
            seed=self.seed,
            max_new_tokens=self.max_new_tokens,
        )

    def make_drafter(self, draft_model):
        """A fresh drafter for one run (a model drafter owns a KV cache, so never share one)."""
        from ..drafters import ModelDrafter, PromptLookupDrafter

        if self.drafter == PROMPT_LOOKUP:
            return PromptLookupDrafter(self.ngram_min, self.ngram_max)
        return ModelDrafter(draft_model, draft_vocab=self.draft_vocab or None)

    def quantization(self) -> dict:
        """Keyword arguments for PairCache.get: None keeps the registry's own setting."""
        q = {"target_quantization": self.target_quantization, "draft_quantization": self.draft_quantization}
        return {k: (None if v == "default" else v) for k, v in q.items()}

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def as_int(value):
    """4.0 -> 4 (sliders send floats); anything else unchanged, for the validators to judge."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value
