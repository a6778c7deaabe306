"""A scripted OpenAI-compatible chat server on 127.0.0.1, for examples that must run offline.

It is a script, not a model: each POST to `/v1/chat/completions` gets the next
completion of its script, in order, and every request body is kept for inspection.
Nothing leaves the machine; an unscripted request gets HTTP 418 so it fails loudly.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["ScriptedChatServer", "completion", "scripted_chat_server"]

PATH = "/v1/chat/completions"


def completion(
    *calls: tuple[str, str, dict[str, Any]],
    text: str | None = None,
) -> dict[str, Any]:
    """A chat completion as OpenAI documents it: `(call id, wire name, arguments)` calls or text."""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
            for call_id, name, arguments in calls
        ]
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": 1,
        "model": "scripted",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls" if calls else "stop",
                "message": message,
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


class ScriptedChatServer(ThreadingHTTPServer):
    """Answers chat completions from a script, in order, and records each request body."""

    daemon_threads = True

    def __init__(self, script: Sequence[dict[str, Any]]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.script = deque(script)
        self.requests: list[dict[str, Any]] = []

    @property
    def base_url(self) -> str:
        """The base URL to give the openai SDK."""
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def answer(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """The next scripted completion for a request, or 418 when there is none."""
        with self.lock:
            self.requests.append(body)
            if path != PATH or not self.script:
                return 418, {"error": {"message": "nothing scripted for this request"}}
            return 200, self.script.popleft()


class _Handler(BaseHTTPRequestHandler):
    server: ScriptedChatServer
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length) or b"{}")
        status, answer = self.server.answer(self.path, body)
        payload = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002, ANN401
        """Quiet."""


@contextmanager
def scripted_chat_server(script: Sequence[dict[str, Any]]) -> Iterator[ScriptedChatServer]:
    """A running server for the block; shut down and closed after it."""
    server = ScriptedChatServer(script)
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
