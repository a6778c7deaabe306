"""A real HTTP server on 127.0.0.1 that answers model API requests from a script.

Each path (`/v1/chat/completions`, `/v1/messages`) has its own queue of scripted
answers, served in order; every request is recorded (path, headers, JSON body). An
answer may `hang` until the test ends, to prove client timeouts; the wait is bounded.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from _http_server import LoopbackServer, QuietHandler, run_server

__all__ = ["Answer", "Recorded", "ScriptedServer", "scripted_server"]

_HANG_LIMIT = 10.0
"""The longest a hanging answer waits for the test to end, in seconds."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Answer:
    """One scripted HTTP answer."""

    body: object
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    hang: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class Recorded:
    """One request as the server received it."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: Any


class ScriptedServer(LoopbackServer):
    """Serves scripted answers per path, in order, and records every request."""

    def __init__(self) -> None:
        super().__init__("127.0.0.1", _Handler)
        self.lock = threading.Lock()
        self.scripts: dict[str, deque[Answer]] = {}
        self.received: list[Recorded] = []
        self.release = threading.Event()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def script(self, path: str, *answers: Answer) -> None:
        with self.lock:
            self.scripts.setdefault(path, deque()).extend(answers)

    def bodies(self, path: str) -> list[Any]:
        with self.lock:
            return [r.body for r in self.received if r.path == path]

    def next_answer(self, recorded: Recorded) -> Answer:
        with self.lock:
            self.received.append(recorded)
            queue = self.scripts.get(recorded.path)
            if not queue:
                # 418: no client retries it, so an unscripted request fails its test loudly.
                return Answer(status=418, body={"error": {"message": "nothing scripted"}})
            return queue.popleft()


class _Handler(QuietHandler):
    server: ScriptedServer

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        length = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(length)
        recorded = Recorded(
            method="POST",
            path=self.path,
            headers={k.lower(): v for k, v in self.headers.items()},
            body=json.loads(raw) if raw else None,
        )
        answer = self.server.next_answer(recorded)
        if answer.hang:
            self.server.release.wait(_HANG_LIMIT)
        payload = json.dumps(answer.body).encode()
        self.send_response(answer.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for name, value in answer.headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)


@contextmanager
def scripted_server() -> Iterator[ScriptedServer]:
    """A running server; hanging answers are released before it shuts down."""
    server = ScriptedServer()
    with run_server(server):
        try:
            yield server
        finally:
            server.release.set()
