"""Where BFCL answers come from: cassettes, and a model behind an OpenAI-compatible API.

The model is a real HTTP server on 127.0.0.1 speaking Chat Completions, reached through
`OpenAICompatibleClient` (the official SDK), as `handrail eval bfcl --endpoint` does.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from _http_server import LoopbackServer, QuietHandler, run_server
from handrail.adapters.transcript import AssistantTurn, UserTurn
from handrail.clock import FixedClock
from handrail.errors import ConfigurationError
from handrail.eval.bfcl import ask_model, load_cassette, run_bfcl
from handrail.eval.report import EvalReport, Metric
from handrail.loop.models import ModelReply, ModelRequest, OpenAICompatibleClient


def test_a_cassette_line_gives_each_question_its_calls(tmp_path: Path) -> None:
    path = tmp_path / "answers.jsonl"
    path.write_text(
        '{"id": "a", "calls": [{"name": "f", "arguments": "{\\"x\\": 1}"}]}\n'
        "\n"
        '{"id": "b", "calls": [{"name": "g", "arguments": {"y": 2}}], "text": "ignored"}\n'
        '{"id": "c"}\n',
        encoding="utf-8",
    )
    answers = load_cassette(path)
    assert [c.arguments for c in answers["a"].calls] == ['{"x": 1}']
    assert [c.arguments for c in answers["b"].calls] == [{"y": 2}]
    assert answers["c"].calls == ()


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("not json", "answers.jsonl:1: not JSON"),
        ('{"calls": []}', "not an object with an id"),
        ('{"id": "a", "calls": {}}', "calls is not a list"),
        ('{"id": "a", "calls": [{"arguments": "{}"}]}', "a call is not an object with a name"),
        ('{"id": "a", "calls": [{"name": "f", "arguments": 3}]}', "neither JSON text"),
        ('{"id": "a"}\n{"id": "a"}', "answers.jsonl:2: a second answer to a"),
    ],
)
def test_a_cassette_that_cannot_be_read_is_refused_with_its_line(
    tmp_path: Path, line: str, message: str
) -> None:
    path = tmp_path / "answers.jsonl"
    path.write_text(line + "\n", encoding="utf-8")
    with pytest.raises(ConfigurationError, match=message):
        load_cassette(path)


class _ChatServer(LoopbackServer):
    def __init__(self, replies: list[tuple[int, dict[str, Any]]]) -> None:
        super().__init__("127.0.0.1", _ChatHandler)
        self.replies = replies
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()


class _ChatHandler(QuietHandler):
    server: _ChatServer

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.server.lock:
            self.server.requests.append(body)
            status, reply = self.server.replies.pop(0)
        payload = json.dumps(reply).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def _completion(name: str, arguments: str) -> dict[str, Any]:
    call = {"id": "call_1", "type": "function", "function": {"name": name, "arguments": arguments}}
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {"role": "assistant", "content": None, "tool_calls": [call]},
            }
        ],
        "usage": {"prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42},
    }


@pytest.fixture
def chat() -> Iterator[_ChatServer]:
    refused = {"error": {"message": "bad request", "type": "invalid_request_error"}}
    replies = [
        (200, _completion("calculate_triangle_area", '{"base": 10, "height": 5}')),
        (200, _completion("math__factorial", '{"number": 5}')),
        (400, refused),
    ]
    with run_server(_ChatServer(replies)) as server:
        yield server


@pytest.mark.anyio
async def test_a_model_is_asked_each_question_with_its_functions_and_answers_by_bfcl_name(
    chat: _ChatServer,
) -> None:
    client = OpenAICompatibleClient(
        base_url=f"http://127.0.0.1:{chat.port}/v1", api_key="k", model="m", strict=False
    )

    async def ask(limit: int) -> EvalReport:
        return await run_bfcl(
            ask_model(client, timeout=30),
            model=client.name,
            clock=FixedClock(),
            categories=["simple_python"],
            limit=limit,
        )

    try:
        # simple_python_1's function is math.factorial, math__factorial on the wire
        [first] = (await ask(2)).scenarios
        assert first.metric("accuracy") == Metric.rate("accuracy", 2, 2)
        assert first.metric("tokens") == Metric.amount("tokens", 84)
        report = await ask(1)
    finally:
        await client.aclose()
    [second] = report.scenarios
    assert second.notes[0].startswith("simple_python_0: unanswered: the model failed: FAILED_FINAL")
    assert second.metric("tokens") is None
    [request, factorial, _] = chat.requests
    assert [t["function"]["name"] for t in factorial["tools"]] == ["math__factorial"]
    assert request["messages"] == [
        {
            "role": "user",
            "content": "Find the area of a triangle with a base of 10 units and height of 5 units.",
        }
    ]
    [offered] = request["tools"]
    assert offered["function"]["name"] == "calculate_triangle_area"
    assert offered["function"]["parameters"]["required"] == ["base", "height"]
    assert offered["function"]["strict"] is False


class _Recorder:
    """A model client that records each request and never calls a tool."""

    name = "recorder"

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest, *, timeout: float) -> ModelReply:
        self.requests.append(request)
        return ModelReply(text="no", model=self.name)


@pytest.mark.anyio
async def test_system_messages_become_the_system_prompt_and_history_the_transcript(
    tmp_path: Path,
) -> None:
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "Book it"},
    ]
    question = {"id": "live_irrelevance_0", "question": [messages], "function": []}
    (tmp_path / "BFCL_v4_live_irrelevance.json").write_text(json.dumps(question), encoding="utf-8")
    model = _Recorder()
    report = await run_bfcl(
        ask_model(model, timeout=5),
        model=model.name,
        clock=FixedClock(),
        categories=["live_irrelevance"],
        folder=tmp_path,
    )
    assert report.total("accuracy") == Metric.rate("accuracy", 1, 1)
    [request] = model.requests
    assert request.system == "You are terse."
    assert request.transcript == (
        UserTurn(text="Hi"),
        AssistantTurn(text="Hello."),
        UserTurn(text="Book it"),
    )
    assert request.tools == ()
