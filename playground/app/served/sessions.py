"""The servers each page session started: reused while the session asks for the same deployment,
replaced when it asks for another, and all stopped when the page closes (demo.unload) or the
app exits (the launcher's atexit)."""

from __future__ import annotations

import threading

from playground.measure.bench.served.launch import Server


class SessionServers:
    """session -> {deployment name: (its server arguments, Server)}. One per app, not global."""

    def __init__(self):
        self.servers: dict[str | None, dict[str, tuple[list[str], Server]]] = {}
        self.lock = threading.Lock()

    def get(self, session: str | None, name: str, args: list[str]) -> Server | None:
        """The session's live server for `name` if it runs these arguments; another is stopped."""
        with self.lock:
            held = self.servers.get(session, {}).get(name)
        if held is None:
            return None
        if held[0] == args and held[1].alive():
            return held[1]
        self.drop(session, name)
        return None

    def put(self, session: str | None, name: str, args: list[str], server: Server) -> None:
        self.drop(session, name)
        with self.lock:
            self.servers.setdefault(session, {})[name] = (args, server)

    def drop(self, session: str | None, name: str) -> None:
        with self.lock:
            held = self.servers.get(session, {}).pop(name, None)
        if held is not None:
            held[1].stop()

    def stop_session(self, session: str | None) -> int:
        """Stop every server of the session; how many were stopped."""
        with self.lock:
            held = self.servers.pop(session, {})
        for _, server in held.values():
            server.stop()
        return len(held)

    def running(self, session: str | None) -> list[Server]:
        with self.lock:
            return [server for _, server in self.servers.get(session, {}).values()]
