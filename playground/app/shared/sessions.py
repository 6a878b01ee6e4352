"""Per browser session state the tabs share: each session's measured points, keyed by Gradio's
session hash, so a session never sees another's."""

from __future__ import annotations

import threading
from collections import OrderedDict

from playground.measure.teach.points import Point


class Measurements:
    """Each session's measured points, bounded: at most `sessions` sessions (least recently used
    dropped) and `per_session` points each (oldest dropped). Thread-safe: handlers run in threads.

    Keyed by gr.Request.session_hash, so a session never sees another's points.
    """

    def __init__(self, sessions: int = 64, per_session: int = 200):
        self.sessions, self.per_session = sessions, per_session
        self.store: OrderedDict[str | None, list[Point]] = OrderedDict()
        self.lock = threading.Lock()

    def add(self, session: str | None, point: Point) -> None:
        with self.lock:
            points = self.store.setdefault(session, [])
            self.store.move_to_end(session)
            points.append(point)
            del points[: -self.per_session]
            while len(self.store) > self.sessions:
                self.store.popitem(last=False)

    def get(self, session: str | None) -> list[Point]:
        with self.lock:
            return list(self.store.get(session, []))

    def clear(self, session: str | None) -> None:
        with self.lock:
            self.store.pop(session, None)


class LearningDrafters:
    """Each session's drafters that learn across runs, as vLLM's suffix cache and Token Recycling's
    table do: suffix decoding indexes earlier prompts and answers, token recycling keeps each
    token's successors. One per (session, pair and drafter settings), at most `sessions` sessions'.
    A drafter that remembered the exact prompt being raced would copy its earlier answer: that is
    what these drafters do in deployment, and the step-through and race show it as it happens."""

    def __init__(self, sessions: int = 16):
        self.sessions = sessions
        self.store: OrderedDict[tuple, object] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, session: str | None, key: tuple, make):
        """The session's drafter for `key` (pair and settings), made by `make()` the first time."""
        with self.lock:
            full = (session, *key)
            if full not in self.store:
                self.store[full] = make()
            self.store.move_to_end(full)
            while len({k[0] for k in self.store}) > self.sessions:
                oldest = next(iter(self.store))[0]
                for k in [k for k in self.store if k[0] == oldest]:
                    del self.store[k]
            return self.store[full]

    def clear(self, session: str | None) -> None:
        with self.lock:
            for k in [k for k in self.store if k[0] == session]:
                del self.store[k]


def session_of(request) -> str | None:
    """The session key of a gr.Request (None when a handler is called directly, as in tests)."""
    return getattr(request, "session_hash", None)


class BoardRuns:
    """Each session's drafts-board measurements: per (pair, entry, settings, prompts) the runs of one
    entry that finished both its rounds, so a board run again (or with one drafter more) measures
    only what it has not. Nothing partial goes in: a stopped board's entries are measured anew.
    Bounded like Measurements: at most `sessions` sessions and `per_session` entries each."""

    def __init__(self, sessions: int = 16, per_session: int = 64):
        self.sessions, self.per_session = sessions, per_session
        self.store: OrderedDict[str | None, OrderedDict[tuple, list[dict]]] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, session: str | None, key: tuple) -> list[dict] | None:
        with self.lock:
            return self.store.get(session, {}).get(key)

    def runs(self, session: str | None, pair: str) -> list[dict]:
        """Every run kept for the session's entries on `pair` (a key's first part), oldest entry first."""
        with self.lock:
            return [run for key, runs in self.store.get(session, {}).items() if key[0] == pair for run in runs]

    def put(self, session: str | None, key: tuple, runs: list[dict]) -> None:
        with self.lock:
            entries = self.store.setdefault(session, OrderedDict())
            self.store.move_to_end(session)
            entries[key] = runs
            while len(entries) > self.per_session:
                entries.popitem(last=False)
            while len(self.store) > self.sessions:
                self.store.popitem(last=False)
