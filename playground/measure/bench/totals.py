"""Totals over a group's per-prompt records, and total-token rates: all new tokens / all seconds, so
long outputs weigh more, as they do for a user waiting on them.

Shared by the summary and by each reference engine's own summary (references/), which pool their
rates the same way: a leaf of the bench, so neither side imports the other back.
"""

from __future__ import annotations


def total(records, key) -> float:
    return sum(r[key] for r in records)


def rate(records, tokens_key, seconds_key) -> float:
    seconds = total(records, seconds_key)
    return total(records, tokens_key) / seconds if seconds else 0.0
