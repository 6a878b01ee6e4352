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


def session_of(request) -> str | None:
    """The session key of a gr.Request (None when a handler is called directly, as in tests)."""
    return getattr(request, "session_hash", None)
