"""A real HTTP server on 127.0.0.1 that answers every POST with a scripted event stream.

The official `openai` SDK's stream helpers are driven against it: each request gets the
next scripted body as `text/event-stream`, and every request body is recorded. An
unscripted request gets a 418, which no SDK retries, so a test fails loudly.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from _http_server import LoopbackServer, QuietHandler, run_server

__all__ = ["SSEServer", "chat_sse", "responses_sse", "sse_server"]


def chat_sse(chunks: Sequence[object]) -> bytes:
    """Chat Completions streaming: one `data:` line per chunk, then `[DONE]`."""
    lines = [f"data: {json.dumps(chunk)}\n\n" for chunk in chunks]
    return "".join([*lines, "data: [DONE]\n\n"]).encode()


def responses_sse(events: Sequence[dict[str, Any]]) -> bytes:
    """Responses streaming: each event named by its type, its JSON the data."""
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


class SSEServer(LoopbackServer):
    """Serves scripted event streams in order and records every request body."""

    def __init__(self) -> None:
        super().__init__("127.0.0.1", _Handler)
        self.lock = threading.Lock()
        self.bodies: deque[bytes] = deque()
        self.received: list[tuple[str, Any]] = []

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, *bodies: bytes) -> None:
        with self.lock:
            self.bodies.extend(bodies)

    def next_body(self, path: str, request: Any) -> bytes | None:
        with self.lock:
            self.received.append((path, request))
            return self.bodies.popleft() if self.bodies else None


class _Handler(QuietHandler):
    server: SSEServer

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        length = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(length)
        body = self.server.next_body(self.path, json.loads(raw) if raw else None)
        if body is None:
            payload = json.dumps({"error": {"message": "nothing scripted"}}).encode()
            self.send_response(418)
            self.send_header("Content-Type", "application/json")
        else:
            payload = body
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@contextmanager
def sse_server() -> Iterator[SSEServer]:
    """A running server, shut down when the block ends."""
    with run_server(SSEServer()) as server:
        yield server
