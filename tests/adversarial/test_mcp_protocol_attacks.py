"""Hostile MCP clients against GatedServer: each attack gets its answer, nothing runs.

In-process (the SDK client, both protocol eras): a tool not exposed to this principal,
identity in the arguments or in `_meta`, oversized and deeply nested arguments, and a
confirmation replayed through MCP after Handrail's own confirm path executed the plan.
Over stdio (`handrail mcp serve`, raw JSON lines written to its stdin): unparsable
lines, invalid UTF-8, a lone surrogate, batches, wrong versions, unknown methods and
notifications, arguments that are not an object, a 100 000-character tool name,
invalid params, a 2 MiB line, then the same gated attacks; the connection keeps
serving throughout. (Lines the SDK cannot parse get no answer at all: it drops them,
even when they carry an id, so a client waits for its own timeout.) Over Streamable
HTTP: a garbled body, an 8 MiB body, a batch and a forged session id, and another
session calling a hidden tool and forging identity, while a third client's session
keeps working. Every tool records its runs (a list
in-process, a file behind stdio), so "nothing ran" is read, not assumed.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import httpx2
import mcp_types as types
import pytest
from starlette.types import ASGIApp

from _mcp_counting import RUNS_ENV, tools
from _mcp_http import WAIT_S, client, running
from handrail import ErrorCode, Handrail, Principal, Registry, WriteRefusedError
from handrail.app import MEMORY
from handrail.mcp import GatedServer, fixed_principal
from handrail.mcp.auth import ApiKeyAuthenticator, principal_from_request
from handrail.mcp.http import http_app
from handrail.mcp.keys import ApiKeys
from mcp import Client

pytestmark = pytest.mark.anyio

WAIT = WAIT_S
"""Every wait's bound; only a real bug trips it."""
ALICE = Principal(user_id="alice", tenant_id="acme")
MODES = pytest.mark.parametrize("mode", ["legacy", "auto"])
HUGE = 2 << 20
"""A 2 MiB argument: over the gate's 1 MiB bound for a call's arguments."""
HANDRAIL = Path(sys.executable).parent / "handrail"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def runs() -> list[str]:
    return []


@pytest.fixture
def app(runs: list[str]) -> Iterator[Handrail]:
    registry = Registry()
    for made in tools(runs.append):
        registry.register(made)
    with Handrail.open(MEMORY, registry=registry) as opened:
        yield opened


@asynccontextmanager
async def connected(app: Handrail, mode: str) -> AsyncIterator[Client]:
    server = GatedServer(app, principal=fixed_principal(ALICE))
    try:
        async with Client(server.lowlevel, mode=mode, read_timeout_seconds=WAIT) as opened:
            yield opened
    finally:
        server.close()


def _structured(result: types.CallToolResult) -> dict[str, Any]:
    found: dict[str, Any] | None = result.structured_content
    assert found is not None
    return found


def _meta(**items: object) -> types.RequestParamsMeta:
    """A request's `_meta` carrying whatever a hostile client puts there."""
    return cast("types.RequestParamsMeta", items)


def _text(result: types.CallToolResult) -> str:
    return "".join(b.text for b in result.content if isinstance(b, types.TextContent))


# --- in-process ---------------------------------------------------------------------------------


@MODES
async def test_a_tool_not_exposed_answers_like_a_missing_one_and_never_runs(
    app: Handrail, runs: list[str], mode: str
) -> None:
    async with connected(app, mode) as mcp:
        listed = {t.name for t in (await mcp.list_tools()).tools}
        hidden = await mcp.call_tool("lab.secret", {})
        missing = await mcp.call_tool("lab.no_such_tool", {})
        after = await mcp.call_tool("lab.count", {"note": "after"})
    assert "lab.secret" not in listed
    assert hidden.is_error
    assert missing.is_error
    assert _structured(hidden)["error_type"] == ErrorCode.UNKNOWN_TOOL.value
    assert _structured(hidden)["summary"] == _structured(missing)["summary"]
    assert _structured(hidden)["data"] is None
    assert "figure" not in _text(hidden)
    assert runs == ["lab.count"]
    assert not after.is_error


@MODES
@pytest.mark.parametrize(
    "arguments",
    [
        {"tenant": "globex"},
        {"user": "root"},
        {"tenant": "globex", "user": "root"},
        {"tenant_id": "globex", "user_id": "root", "permissions": ["lab.secret"]},
    ],
)
async def test_identity_in_the_arguments_is_refused_before_the_tool(
    app: Handrail, runs: list[str], mode: str, arguments: dict[str, Any]
) -> None:
    async with connected(app, mode) as mcp:
        forged = await mcp.call_tool("lab.whoami", arguments)
        honest = await mcp.call_tool("lab.whoami", {})
    assert forged.is_error
    assert _structured(forged)["error_type"] == ErrorCode.INVALID_ARGUMENTS.value
    assert "globex" not in json.dumps(_structured(honest))
    assert _structured(honest)["data"] == {"tenant": "acme", "user": "alice"}
    assert runs == ["lab.whoami"]


@MODES
async def test_identity_in_the_request_meta_is_ignored(
    app: Handrail, runs: list[str], mode: str
) -> None:
    meta = _meta(
        tenant_id="globex",
        user_id="root",
        principal={"tenant_id": "globex", "user_id": "root"},
        permissions=["lab.secret"],
    )
    async with connected(app, mode) as mcp:
        who = await mcp.call_tool("lab.whoami", {}, meta=meta)
        secret = await mcp.call_tool("lab.secret", {}, meta=meta)
    assert _structured(who)["data"] == {"tenant": "acme", "user": "alice"}
    assert _structured(secret)["error_type"] == ErrorCode.UNKNOWN_TOOL.value
    assert runs == ["lab.whoami"]


@MODES
@pytest.mark.parametrize(
    "arguments",
    [
        {"note": "x" * HUGE},
        {"note": "x", **{f"k{i}": i for i in range(20_000)}},
        {"note": json.loads("[" * 200 + "]" * 200)},
    ],
    ids=["2-MiB-string", "20000-members", "200-deep"],
)
async def test_oversized_arguments_are_refused_in_a_small_answer(
    app: Handrail, runs: list[str], mode: str, arguments: dict[str, Any]
) -> None:
    async with connected(app, mode) as mcp:
        refused = await mcp.call_tool("lab.count", arguments)
        after = await mcp.call_tool("lab.count", {"note": "after"})
    assert refused.is_error
    assert _structured(refused)["error_type"] == ErrorCode.INVALID_ARGUMENTS.value
    assert len(_text(refused)) < 8_000
    assert not after.is_error
    assert runs == ["lab.count"]


@MODES
async def test_a_confirmation_cannot_be_replayed_through_mcp(
    app: Handrail, runs: list[str], mode: str
) -> None:
    async with connected(app, mode) as mcp:
        proposed = await mcp.call_tool("lab.order", {"title": "Dune"})
        assert _structured(proposed)["error_type"] == ErrorCode.NEEDS_CONFIRMATION.value
        plan_id = _structured(proposed)["data"]["plan_id"]
        assert runs == []

        # Handrail's own confirm path: the person confirms, the host executes once.
        token = await app.writes.issue_token(plan_id, ALICE)
        assert token.value not in _text(proposed)
        await app.writes.confirm(plan_id, token.value, ALICE)
        outcome = await app.writes.execute_plan(plan_id, ALICE)
        assert runs == ["lab.order"]
        assert outcome.envelope.error_type is None

        # Then through MCP: the same call, the plan and token smuggled in arguments
        # or in _meta. Each makes a new plan or is refused; none runs the write.
        again = await mcp.call_tool("lab.order", {"title": "Dune"})
        smuggled = await mcp.call_tool(
            "lab.order", {"title": "Dune", "plan_id": plan_id, "token": token.value}
        )
        meta = _meta(plan_id=plan_id, token=token.value)
        in_meta = await mcp.call_tool("lab.order", {"title": "Dune"}, meta=meta)
        alive = await mcp.call_tool("lab.count", {})
    assert _structured(again)["error_type"] == ErrorCode.NEEDS_CONFIRMATION.value
    assert _structured(again)["data"]["plan_id"] != plan_id
    assert _structured(smuggled)["error_type"] == ErrorCode.INVALID_ARGUMENTS.value
    assert _structured(in_meta)["error_type"] == ErrorCode.NEEDS_CONFIRMATION.value
    assert _structured(in_meta)["data"]["plan_id"] != plan_id
    assert not alive.is_error
    with pytest.raises(WriteRefusedError) as replayed:
        await app.writes.confirm(plan_id, token.value, ALICE)
    assert replayed.value.code in {ErrorCode.CONFIRMATION_REPLAYED, ErrorCode.PLAN_CLOSED}
    repeat = await app.writes.execute_plan(plan_id, ALICE)
    assert repeat.replayed
    assert runs == ["lab.order", "lab.count"]


# --- over stdio, raw lines ----------------------------------------------------------------------


class RawStdio:
    """`handrail mcp serve` as a subprocess, spoken to in raw JSON lines."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.unexpected: list[dict[str, Any]] = []

    async def send(self, line: str | bytes) -> None:
        assert self.process.stdin is not None
        data = line.encode() if isinstance(line, str) else line
        self.process.stdin.write(data + b"\n")
        await self.process.stdin.drain()

    async def request(self, ident: int, method: str, params: dict[str, Any] | None = None) -> Any:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": ident, "method": method}
        if params is not None:
            message["params"] = params
        await self.send(json.dumps(message))
        return await self.answer(ident)

    async def answer(self, ident: int) -> dict[str, Any]:
        """The next response; it must be the one to `ident` (nothing answered the junk)."""
        assert self.process.stdout is not None
        while True:
            line = await asyncio.wait_for(self.process.stdout.readline(), WAIT)
            assert line, "the server hung up"
            message: dict[str, Any] = json.loads(line)
            if "id" not in message:
                continue  # a notification (list_changed, progress): not an answer
            if message["id"] != ident:
                self.unexpected.append(message)
                continue
            return message


@asynccontextmanager
async def raw_stdio(tmp_path: Path) -> AsyncIterator[tuple[RawStdio, Path]]:
    record = tmp_path / "runs.txt"
    record.touch()
    env = {**os.environ, RUNS_ENV: str(record)}
    stderr = (tmp_path / "stderr.txt").open("wb")
    process = await asyncio.create_subprocess_exec(
        str(HANDRAIL),
        *("mcp", "serve", "--app", "tests._mcp_counting:build", "--store", MEMORY),
        *("--tenant", "acme", "--user", "alice"),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=stderr,
        env=env,
        cwd=ROOT,
        limit=HUGE * 2,
    )
    raw = RawStdio(process)
    try:
        yield raw, record
    finally:
        if process.returncode is None:
            assert process.stdin is not None
            process.stdin.close()
            try:
                await asyncio.wait_for(process.wait(), WAIT)
            except TimeoutError:
                process.kill()
                await process.wait()
        stderr.close()


def _call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def _error_type(answer: dict[str, Any]) -> str | None:
    error_type: str | None = answer["result"]["structuredContent"]["error_type"]
    return error_type


async def test_raw_hostile_lines_over_stdio_get_their_answers_and_the_server_keeps_serving(
    tmp_path: Path,
) -> None:
    async with raw_stdio(tmp_path) as (raw, record):
        init = await raw.request(
            1,
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "0"},
            },
        )
        assert init["result"]["capabilities"]["tools"]["listChanged"] is True
        await raw.send('{"jsonrpc":"2.0","method":"notifications/initialized"}')

        # Junk the SDK drops without an answer (it cannot tell whom to answer): the
        # next request's answer is the next line on stdout.
        junk_lines: list[str | bytes] = [
            "{not json",
            b'\xff\xfe{"jsonrpc":"2.0","id":90,"method":"ping"}',
            '[{"jsonrpc":"2.0","id":91,"method":"ping"}]',
            '{"jsonrpc":"1.0","id":92,"method":"ping"}',
            '{"jsonrpc":"2.0","id":93}',
            '{"jsonrpc":"2.0","method":"notifications/no_such_thing"}',
            '{"jsonrpc":"2.0","id":94,"result":{}}',
            '{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":77}}',
            # A lone surrogate is legal JSON text but not Unicode: the SDK drops the line.
            '{"jsonrpc":"2.0","id":95,"method":"tools/call","params":{"name":"lab.\\ud800"}}',
            "",
        ]
        for junk in junk_lines:
            await raw.send(junk)
        assert (await raw.request(2, "ping"))["result"] == {}

        unknown = await raw.request(3, "no/such/method", {})
        assert unknown["error"]["code"] == types.METHOD_NOT_FOUND
        invalid = await raw.request(4, "tools/call", {"name": 5})
        assert invalid["error"]["code"] == types.INVALID_PARAMS
        for ident, arguments in [(41, "oops"), (42, [1, 2])]:
            params = {"name": "lab.count", "arguments": arguments}
            bad = await raw.request(ident, "tools/call", params)
            assert bad["error"]["code"] == types.INVALID_PARAMS
        long_name = await raw.request(43, "tools/call", _call("lab." + "a" * 100_000, {}))
        assert _error_type(long_name) == ErrorCode.UNKNOWN_TOOL.value
        assert len(json.dumps(long_name)) < 8_000

        huge = await raw.request(5, "tools/call", _call("lab.count", {"note": "x" * HUGE}))
        assert _error_type(huge) == ErrorCode.INVALID_ARGUMENTS.value
        hidden = await raw.request(6, "tools/call", _call("lab.secret", {}))
        assert _error_type(hidden) == ErrorCode.UNKNOWN_TOOL.value
        forged = await raw.request(7, "tools/call", _call("lab.whoami", {"tenant": "globex"}))
        assert _error_type(forged) == ErrorCode.INVALID_ARGUMENTS.value
        write = await raw.request(8, "tools/call", _call("lab.order", {"title": "Dune"}))
        assert _error_type(write) == ErrorCode.NEEDS_CONFIRMATION.value

        listed = await raw.request(9, "tools/list", {})
        names = {t["name"] for t in listed["result"]["tools"]}
        assert names == {"lab.count", "lab.whoami", "lab.order"}
        fine = await raw.request(10, "tools/call", _call("lab.count", {"note": "after"}))
        assert _error_type(fine) is None
        assert raw.unexpected == []
    assert record.read_text(encoding="utf-8").splitlines() == ["lab.count"]


# --- over Streamable HTTP -----------------------------------------------------------------------


async def test_malformed_and_oversized_http_requests_leave_other_sessions_serving(
    app: Handrail, runs: list[str]
) -> None:
    keys = ApiKeys(app.store, audit=None)
    token = keys.create(ALICE, label="attacks").key

    def make(resource_url: str) -> ASGIApp:
        served = GatedServer(app, principal=principal_from_request)
        return http_app(served, ApiKeyAuthenticator(keys), resource_url=resource_url)

    headers = {
        "Authorization": f"Bearer {token}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
    }
    with running(make) as served:
        async with client(served.resource_url, token) as victim:
            before = await victim.call_tool("lab.count", {"note": "before"})
            async with httpx2.AsyncClient(headers=headers, timeout=WAIT) as http:
                url = served.resource_url
                garbled = await http.post(url, content=b"{not json")
                oversized = await http.post(url, content=b'{"x":"' + b"x" * (8 << 20) + b'"}')
                batch = await http.post(url, content=b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]')
                forged_session = await http.post(
                    url,
                    content=b'{"jsonrpc":"2.0","id":2,"method":"tools/list"}',
                    headers={"Mcp-Session-Id": "0" * 32},
                )
            async with client(served.resource_url, token) as attacker:
                hidden = await attacker.call_tool("lab.secret", {})
                forged = await attacker.call_tool("lab.whoami", {"tenant": "globex"})
            after = await victim.call_tool("lab.count", {"note": "after"})
    assert garbled.status_code == 400
    assert garbled.json()["error"]["code"] == types.PARSE_ERROR
    assert oversized.status_code == 413
    assert batch.status_code == 400
    assert "error" in batch.json()
    assert forged_session.status_code == 404
    assert forged_session.json()["error"]["code"] == types.INVALID_REQUEST
    assert _structured(hidden)["error_type"] == ErrorCode.UNKNOWN_TOOL.value
    assert _structured(forged)["error_type"] == ErrorCode.INVALID_ARGUMENTS.value
    assert not before.is_error
    assert not after.is_error
    assert runs == ["lab.count", "lab.count"]
