"""Acceptance counters each engine reports, as one record: drafts, drafted tokens, accepted
tokens and accepted tokens by draft position (vLLM's /metrics; llama.cpp's per-completion
timings). Counters are cumulative on a server, so a measurement takes the difference of two reads."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

PREFIX = "vllm:spec_decode_"
NAMES = {
    "num_drafts_total": "drafts",
    "num_draft_tokens_total": "draft_tokens",
    "num_accepted_tokens_total": "accepted_tokens",
}
PER_POSITION = "num_accepted_tokens_per_pos_total"
# name{labels} value  (Prometheus text exposition format; HELP/TYPE lines start with '#')
SAMPLE = re.compile(r"^([A-Za-z_:][\w:]*)(?:\{([^}]*)\})?\s+(\S+)")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class SpecCounters:
    drafts: int = 0  # verification steps that had a draft
    draft_tokens: int = 0  # tokens drafted
    accepted_tokens: int = 0  # drafted tokens the target accepted
    by_position: tuple[int, ...] = field(default=())  # accepted at draft position 0, 1, ...

    @property
    def alpha(self) -> float | None:
        """Accepted / drafted: the measured per-token acceptance (the servers' own figure)."""
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else None

    @property
    def acceptance_by_position(self) -> list[float]:
        """P(draft token at position i accepted): accepted there / drafts."""
        return [n / self.drafts for n in self.by_position] if self.drafts else []

    def __sub__(self, before: SpecCounters) -> SpecCounters:
        width = max(len(self.by_position), len(before.by_position))
        pad = lambda xs: list(xs) + [0] * (width - len(xs))
        return SpecCounters(
            self.drafts - before.drafts,
            self.draft_tokens - before.draft_tokens,
            self.accepted_tokens - before.accepted_tokens,
            tuple(a - b for a, b in zip(pad(self.by_position), pad(before.by_position))),
        )

    def problems(self) -> list[str]:
        """What would make these counts inconsistent (empty when they are sound)."""
        out = []
        if self.accepted_tokens > self.draft_tokens:
            out.append(f"accepted {self.accepted_tokens} > drafted {self.draft_tokens}")
        if self.by_position and sum(self.by_position) != self.accepted_tokens:
            out.append(f"per-position sum {sum(self.by_position)} != accepted {self.accepted_tokens}")
        rising = [i for i in range(1, len(self.by_position)) if self.by_position[i] > self.by_position[i - 1]]
        if rising:
            out.append(f"accepted count rises with position at {rising}: {list(self.by_position)}")
        if self.by_position and self.by_position[0] > self.drafts:
            out.append(f"accepted at position 0 ({self.by_position[0]}) > drafts ({self.drafts})")
        return out


def parse_vllm_metrics(text: str) -> SpecCounters:
    """Sum vLLM's spec-decode counters over every label set (engines, models) in /metrics text."""
    totals = dict.fromkeys(NAMES.values(), 0.0)
    positions: dict[int, float] = {}
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if not match or not match.group(1).startswith(PREFIX):
            continue
        name, labels, value = match.group(1)[len(PREFIX):], dict(LABEL.findall(match.group(2) or "")), match.group(3)
        if name in NAMES:
            totals[NAMES[name]] += float(value)
        elif name == PER_POSITION and "position" in labels:
            pos = int(labels["position"])
            positions[pos] = positions.get(pos, 0.0) + float(value)
    width = max(positions) + 1 if positions else 0
    return SpecCounters(
        int(totals["drafts"]), int(totals["draft_tokens"]), int(totals["accepted_tokens"]),
        tuple(int(positions.get(i, 0)) for i in range(width)),
    )


def from_llamacpp_timings(timings: dict) -> SpecCounters:
    """llama.cpp's per-completion figures: draft_n drafted, draft_n_accepted accepted (no positions,
    no count of drafts)."""
    return SpecCounters(0, int(timings.get("draft_n", 0)), int(timings.get("draft_n_accepted", 0)))
