"""A real HTTP server on 127.0.0.1 that answers model API requests from a script.

Each path (`/v1/chat/completions`, `/v1/responses`, `/v1/messages`) has its own queue of
scripted answers, served in order; every request is recorded (path, headers, JSON body).
An answer is a JSON body or a `text/event-stream` of events. An answer may `hang` until
the test ends, to prove client timeouts; a stream may pause after some events until the
test ends or the client hangs up (recorded in `disconnected`), and may be cut off
mid-body. Every wait is bounded.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
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

    body: object = None
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    hang: bool = False
    events: Sequence[object] | None = None
    """A `text/event-stream` body instead: each dict as a `data:` line (with an `event:`
    line named by its `type`, as the providers send), each str as a raw data line."""
    pause_after: int | None = None
    """Stop after this many events until the test ends or the client hangs up."""
    cut: bool = False
    """End the stream by dropping the connection, without the chunked body's end."""


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
        self.paused = threading.Event()
        self.disconnected = threading.Event()

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
        if answer.events is not None:
            self._stream(answer, answer.events)
            return
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

    def _stream(self, answer: Answer, events: Sequence[object]) -> None:
        self.send_response(answer.status)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        for name, value in answer.headers.items():
            self.send_header(name, value)
        self.end_headers()
        for position, event in enumerate(events):
            if position == answer.pause_after and not self._wait_for_hang_up():
                return
            self._chunk(_sse(event))
        if answer.pause_after == len(events) and not self._wait_for_hang_up():
            return
        if answer.cut:
            self.close_connection = True
            return
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _wait_for_hang_up(self) -> bool:
        """Wait until the test ends (True) or the client hangs up (False, recorded)."""
        self.server.paused.set()
        deadline = time.monotonic() + _HANG_LIMIT
        connection: socket.socket = self.connection
        while not self.server.release.is_set() and time.monotonic() < deadline:
            readable, _, _ = select.select([connection], [], [], 0.02)
            if readable and not _peek(connection):
                self.server.disconnected.set()
                self.close_connection = True
                return False
        return True


def _peek(connection: socket.socket) -> bytes:
    try:
        return connection.recv(1, socket.MSG_PEEK)
    except OSError:
        return b""


def _sse(event: object) -> bytes:
    if isinstance(event, str):
        return f"data: {event}\n\n".encode()
    kind = event.get("type") if isinstance(event, dict) else None
    head = f"event: {kind}\n" if isinstance(kind, str) else ""
    return f"{head}data: {json.dumps(event)}\n\n".encode()


@contextmanager
def scripted_server() -> Iterator[ScriptedServer]:
    """A running server; hanging answers are released before it shuts down."""
    server = ScriptedServer()
    with run_server(server):
        try:
            yield server
        finally:
            server.release.set()
