"""A scripted OpenAI-compatible server on 127.0.0.1, for examples that must run offline.

It is a script, not a model: each POST to `/v1/chat/completions` or `/v1/responses`
gets the next reply of its script, in order, rendered in that API's shape: a JSON body,
or, for a request with `"stream": true`, a `text/event-stream` of the events the API
sends (text in several deltas, call arguments in pieces). Every request's path and body
are kept for inspection. Nothing leaves the machine; an unscripted request gets HTTP 418
so it fails loudly.
"""

from __future__ import annotations

import json
import re
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["ScriptedChatServer", "completion", "scripted_chat_server"]

PATH = "/v1/chat/completions"
RESPONSES_PATH = "/v1/responses"
_USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}


def completion(
    *calls: tuple[str, str, dict[str, Any]],
    text: str | None = None,
) -> dict[str, Any]:
    """A chat completion as OpenAI documents it: `(call id, wire name, arguments)` calls or text.

    The script's one shape of a reply; the server renders it for the API asked.
    """
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
        "usage": _USAGE,
    }


# --- the same reply in each API's shape -----------------------------------------------------------


def _pieces(text: str) -> list[str]:
    """Text cut into word-sized deltas, as a model streams it."""
    return re.findall(r"\S+\s*|\s+", text) or [text]


def _message(reply: dict[str, Any]) -> tuple[str | None, list[dict[str, Any]]]:
    message = reply["choices"][0]["message"]
    return message.get("content"), list(message.get("tool_calls") or ())


def _chat_events(reply: dict[str, Any]) -> list[object]:
    text, calls = _message(reply)

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return {
            "id": "chatcmpl-s",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "scripted",
            "choices": [choice],
        }

    events: list[object] = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": piece}) for piece in _pieces(text or "") if text]
    for index, call in enumerate(calls):
        opened = {"index": index, "id": call["id"], "type": "function"}
        name, arguments = call["function"]["name"], call["function"]["arguments"]
        events.append(
            chunk({"tool_calls": [opened | {"function": {"name": name, "arguments": ""}}]})
        )
        events += [
            chunk(
                {
                    "tool_calls": [
                        {"index": index, "function": {"arguments": arguments[at : at + 8]}}
                    ]
                }
            )
            for at in range(0, len(arguments), 8)
        ]
    events.append(chunk({}, reply["choices"][0]["finish_reason"]))
    events.append(chunk({}) | {"choices": [], "usage": _USAGE})
    events.append("[DONE]")
    return events


def _response(reply: dict[str, Any]) -> dict[str, Any]:
    text, calls = _message(reply)
    output: list[dict[str, Any]] = []
    if text is not None:
        part = {"type": "output_text", "text": text, "annotations": []}
        output.append(
            {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [part],
            }
        )
    output += [
        {
            "id": f"fc_{n}",
            "type": "function_call",
            "call_id": call["id"],
            "status": "completed",
            "name": call["function"]["name"],
            "arguments": call["function"]["arguments"],
        }
        for n, call in enumerate(calls)
    ]
    usage = {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}
    return {
        "id": "resp_scripted",
        "object": "response",
        "created_at": 1,
        "model": "scripted",
        "status": "completed",
        "incomplete_details": None,
        "error": None,
        "output": output,
        "usage": usage,
    }


def _response_events(reply: dict[str, Any]) -> list[object]:
    whole = _response(reply)
    started = whole | {"status": "in_progress", "output": [], "usage": None}
    events: list[dict[str, Any]] = [{"type": "response.created", "response": started}]
    for index, item in enumerate(whole["output"]):
        if item["type"] == "message":
            opened = item | {"status": "in_progress", "content": []}
            deltas = [
                {
                    "type": "response.output_text.delta",
                    "item_id": item["id"],
                    "output_index": index,
                    "content_index": 0,
                    "delta": piece,
                }
                for piece in _pieces(item["content"][0]["text"])
            ]
        else:
            opened = item | {"status": "in_progress", "arguments": ""}
            arguments = item["arguments"]
            deltas = [
                {
                    "type": "response.function_call_arguments.delta",
                    "item_id": item["id"],
                    "output_index": index,
                    "delta": arguments[at : at + 8],
                }
                for at in range(0, len(arguments), 8)
            ]
        events.append({"type": "response.output_item.added", "output_index": index, "item": opened})
        events += deltas
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    events.append({"type": "response.completed", "response": whole})
    return [event | {"sequence_number": n} for n, event in enumerate(events)]


def _sse(events: Sequence[object]) -> bytes:
    lines: list[str] = []
    for event in events:
        if isinstance(event, dict) and isinstance(event.get("type"), str):
            lines.append(f"event: {event['type']}\n")
        lines.append(f"data: {event if isinstance(event, str) else json.dumps(event)}\n\n")
    return "".join(lines).encode()


# --- the server -----------------------------------------------------------------------------------


class ScriptedChatServer(ThreadingHTTPServer):
    """Answers from a script, in order, and records each request's path and body."""

    daemon_threads = True

    def __init__(self, script: Sequence[dict[str, Any]] = ()) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.script = deque(script)
        self.requests: list[dict[str, Any]] = []
        self.paths: list[str] = []

    @property
    def base_url(self) -> str:
        """The base URL to give the openai SDK."""
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def add(self, *replies: dict[str, Any]) -> None:
        """Append replies (`completion(...)`) to the script."""
        with self.lock:
            self.script.extend(replies)

    def answer(self, path: str, body: dict[str, Any]) -> tuple[int, str, bytes]:
        """Status, content type and payload of the next scripted reply (418 when none)."""
        with self.lock:
            self.requests.append(body)
            self.paths.append(path)
            if path not in (PATH, RESPONSES_PATH) or not self.script:
                failure = {"error": {"message": "nothing scripted for this request"}}
                return 418, "application/json", json.dumps(failure).encode()
            reply = self.script.popleft()
        if body.get("stream") is True:
            events = _chat_events(reply) if path == PATH else _response_events(reply)
            return 200, "text/event-stream", _sse(events)
        whole = reply if path == PATH else _response(reply)
        return 200, "application/json", json.dumps(whole).encode()


class _Handler(BaseHTTPRequestHandler):
    server: ScriptedChatServer
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length) or b"{}")
        status, content_type, payload = self.server.answer(self.path, body)
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002, ANN401
        """Quiet."""


@contextmanager
def scripted_chat_server(script: Sequence[dict[str, Any]] = ()) -> Iterator[ScriptedChatServer]:
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
