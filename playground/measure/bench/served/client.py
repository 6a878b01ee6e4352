"""One client for OpenAI-compatible servers (vLLM, llama.cpp's llama-server): streamed
completions, timed per chunk, and each engine's acceptance counters.

Standard library only (urllib), so the measurement layer needs nothing the playground does not
already install. Every failure is a ServedError whose message names the URL and what failed:
a bad URL, a refused port, a timeout, a server that died mid-stream.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field

DEFAULT_TIMEOUT_S = 120.0  # per socket operation: a CPU server may take this long for a first token


class ServedError(RuntimeError):
    """A served engine could not be reached or did not answer as expected; the message says which."""


def check_url(url: str) -> str:
    """The base URL without a trailing slash, or ServedError naming what is wrong with it."""
    parts = urllib.parse.urlparse(url or "")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ServedError(f"server URL must look like http://HOST:PORT, got {url!r}")
    try:
        _ = parts.port  # parsing it is the check: urllib raises on a port out of range
    except ValueError:
        raise ServedError(f"server URL has a bad port: {url!r}") from None
    return url.rstrip("/").removesuffix("/v1")


def explain(url: str, error: BaseException) -> ServedError:
    """A transport error as a sentence naming the URL and the failure."""
    reason = getattr(error, "reason", error)
    if isinstance(error, urllib.error.HTTPError):
        body = error.read().decode("utf-8", "replace")[:500]
        return ServedError(f"{url}: HTTP {error.code} {error.reason}: {body}")
    if isinstance(reason, ConnectionRefusedError):
        return ServedError(f"{url}: connection refused (no server listening on that port)")
    if isinstance(reason, (socket.timeout, TimeoutError)):
        return ServedError(f"{url}: timed out (no answer within the client's timeout)")
    if isinstance(reason, socket.gaierror):
        return ServedError(f"{url}: unknown host ({reason})")
    if isinstance(error, (ConnectionResetError, BrokenPipeError, http_incomplete())):
        return ServedError(f"{url}: the server closed the connection mid-stream ({type(error).__name__})")
    return ServedError(f"{url}: {type(error).__name__}: {reason}")


def http_incomplete():
    import http.client

    return (http.client.IncompleteRead, http.client.RemoteDisconnected)


@dataclass
class Completion:
    """One streamed completion: text and token ids as they came, each chunk's arrival time."""

    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    times: list[float] = field(default_factory=list)  # seconds from the request, one per token
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    timings: dict = field(default_factory=dict)  # llama.cpp's per-completion timings (draft_n, ...)
    elapsed_s: float = 0.0

    @property
    def first_token_s(self) -> float | None:
        return self.times[0] if self.times else None

    @property
    def tokens(self) -> int:
        return self.completion_tokens if self.completion_tokens is not None else len(self.token_ids)

    @property
    def whole(self) -> bool:
        """Ended by the server (a finish reason came), not cut off."""
        return self.finish_reason is not None


@dataclass(frozen=True)
class Delta:
    """One streamed chunk: new text, its token ids, seconds since the request."""

    text: str
    token_ids: tuple[int, ...]
    t: float


class ServedClient:
    """Completions and counters from one server at `url` (http://host:port)."""

    def __init__(self, url: str, timeout: float = DEFAULT_TIMEOUT_S, model: str | None = None):
        self.url = check_url(url)
        self.timeout = timeout
        self._model = model

    # -- plain requests ---------------------------------------------------------------------------

    def get(self, path: str, timeout: float | None = None) -> bytes:
        try:
            with urllib.request.urlopen(self.url + path, timeout=timeout or self.timeout) as r:
                return r.read()
        except (urllib.error.URLError, OSError, *http_incomplete()) as e:
            raise explain(self.url + path, e) from e

    def models(self) -> list[str]:
        data = json.loads(self.get("/v1/models"))
        return [m["id"] for m in data.get("data", [])]

    @property
    def model(self) -> str:
        if self._model is None:
            names = self.models()
            if not names:
                raise ServedError(f"{self.url}/v1/models lists no model")
            self._model = names[0]
        return self._model

    def metrics_text(self) -> str:
        return self.get("/metrics").decode("utf-8", "replace")

    # -- streamed completions -----------------------------------------------------------------------

    def request_body(self, prompt, max_tokens: int, temperature: float = 0.0, seed: int = 0,
                     top_k: int = 0, top_p: float = 1.0, ignore_eos: bool = True) -> dict:
        if not isinstance(prompt, str) and not (isinstance(prompt, list) and prompt
                                                and all(isinstance(t, int) for t in prompt)):
            raise ServedError(f"prompt must be text or a non-empty list of token ids, got {prompt!r:.80}")
        return {
            "model": self.model, "prompt": prompt, "max_tokens": int(max_tokens), "stream": True,
            "temperature": float(temperature), "seed": int(seed), "top_p": float(top_p),
            "top_k": int(top_k) if top_k else -1,  # vLLM and llama.cpp: -1 (or 0) keeps every token
            "ignore_eos": ignore_eos,  # the same length on every server, as the engine's runs
            "stream_options": {"include_usage": True},
            "return_token_ids": True,  # vLLM: each chunk's token ids (llama.cpp ignores it)
        }

    def stream(self, prompt, max_tokens: int, **sampling) -> Iterator[Delta | Completion]:
        """Yield a Delta per chunk as it arrives, then the whole Completion last."""
        body = json.dumps(self.request_body(prompt, max_tokens, **sampling)).encode()
        path = self.url + "/v1/completions"
        request = urllib.request.Request(path, body, {"Content-Type": "application/json"})
        out, start = Completion(), time.perf_counter()
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                for line in response:
                    delta = self.absorb(line, out, time.perf_counter() - start)
                    if delta is not None:
                        yield delta
        except (urllib.error.URLError, OSError, *http_incomplete()) as e:
            raise explain(path, e) from e
        out.elapsed_s = time.perf_counter() - start
        if out.finish_reason is None:
            raise ServedError(f"{path}: the stream ended before the completion did "
                              f"({len(out.token_ids)} tokens came; did the server stop?)")
        yield out

    def complete(self, prompt, max_tokens: int, **sampling) -> Completion:
        *_, last = self.stream(prompt, max_tokens, **sampling)
        return last

    @staticmethod
    def absorb(line: bytes, out: Completion, t: float) -> Delta | None:
        """Fold one server-sent-events line into `out`; the chunk's Delta if it carried text."""
        line = line.strip()
        if not line.startswith(b"data:"):
            return None
        payload = line[5:].strip()
        if payload == b"[DONE]":
            return None
        chunk = json.loads(payload)
        if "error" in chunk:
            raise ServedError(f"server error mid-stream: {chunk['error']}")
        usage = chunk.get("usage") or {}
        out.prompt_tokens = usage.get("prompt_tokens", out.prompt_tokens)
        out.completion_tokens = usage.get("completion_tokens", out.completion_tokens)
        out.timings = chunk.get("timings") or out.timings
        delta = None
        for choice in chunk.get("choices") or []:
            text, ids = choice.get("text") or "", tuple(choice.get("token_ids") or ())
            if text or ids:
                out.text += text
                out.token_ids += ids
                out.times += [t] * max(len(ids), 1 if text else 0)
                delta = Delta(text, ids, t)
            out.finish_reason = choice.get("finish_reason") or out.finish_reason
        return delta
