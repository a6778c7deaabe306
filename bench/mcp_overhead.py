"""Per-call cost of a tool call through Handrail's MCP server, against bare `mcp` SDK servers.

The same read tool, `bench.echo(x: int) -> {"x": x}`, served four ways and called by the
official SDK client (`mcp.Client.call_tool`), over two transports:

- `bare-lowlevel`: the SDK's lowlevel `Server` with hand-written list/call handlers that
  validate the arguments with a pydantic model and return the result as structured content;
- `bare-mcpserver`: the SDK's `MCPServer` with `@tool()` (its own validation and output);
- `handrail`: `GatedServer` over a `Handrail.open("memory://")` app: lookup, the four
  checks, the risk decision, a deadline, shaping, the marked envelope and an audit event
  for every stage (into the memory store, as `open` does by default);
- `handrail-audit-off`: the same with `audit=False`, to tell the cost of the audit trail
  from the cost of the gate and the MCP mapping.

Transports: the SDK's in-memory transport (JSON-RPC over memory streams, one event loop)
and Streamable HTTP to uvicorn on 127.0.0.1 (server and client share the loop, so the
client's own cost is in every path alike). Over HTTP Handrail's server is what
`handrail mcp serve --http` runs: Host/Origin checks and an API-key bearer token
verified against the store on every request; the bare servers have no authentication.

Method: a check and a warm-up per path, then K rounds of N sequential calls per path,
interleaved with the order rotated each round (bench/_measure.py). Reported per path:
median and minimum µs/call, and the median of same-round ratios to each bare server on
the same transport. Target: handrail ≤ 1.2x bare. Nothing here asserts a time.

    .venv/bin/python bench/mcp_overhead.py [--rounds 15] [--calls 200] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import socket
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
import pydantic
import uvicorn
from _measure import (
    elapsed_ns,
    environment_facts,
    interleaved,
    same_round_ratio,
    summary,
    table,
)
from mcp.client._memory import InMemoryTransport
from mcp.client.streamable_http import streamable_http_client
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import MCPServer
from starlette.applications import Starlette

from handrail import Handrail, Principal, RiskLevel, tool
from handrail.mcp import GatedServer, fixed_principal
from handrail.mcp.auth import ApiKeyAuthenticator, principal_from_request
from handrail.mcp.http import http_app
from handrail.mcp.keys import ApiKeys
from mcp import Client

TOOL = "bench.echo"
ARGS = {"x": 7}
RESULT = {"x": 7}
BARE_LOWLEVEL = "bare-lowlevel"
BARE_MCPSERVER = "bare-mcpserver"
HANDRAIL = "handrail"
HANDRAIL_NO_AUDIT = "handrail-audit-off"
SERVERS = (BARE_LOWLEVEL, BARE_MCPSERVER, HANDRAIL, HANDRAIL_NO_AUDIT)
TRANSPORTS = ("memory", "http")
START_TIMEOUT_S = 60.0
"""Bound on connecting to a server (a bug, never a measurement, trips it)."""


# --- the tool, three ways ---------------------------------------------------------------------


class EchoArgs(pydantic.BaseModel):
    """The bare lowlevel server's argument model (what an SDK user writes by hand)."""

    model_config = pydantic.ConfigDict(extra="forbid")

    x: int


ECHO_TOOL = types.Tool(
    name=TOOL,
    description="Return the argument unchanged.",
    input_schema=EchoArgs.model_json_schema(),
)


def bare_lowlevel() -> Server[Any]:
    """The SDK's lowlevel Server: list and call handlers, pydantic validation, JSON result."""

    async def list_tools(
        _ctx: ServerRequestContext[Any], _params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[ECHO_TOOL])

    async def call_tool(
        _ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        if params.name != TOOL:
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=f"unknown tool {params.name}")],
                is_error=True,
            )
        try:
            parsed = EchoArgs.model_validate(params.arguments or {})
        except pydantic.ValidationError as exc:
            text = exc.json(include_url=False)
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=text)], is_error=True
            )
        result = {"x": parsed.x}
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(result))],
            structured_content=result,
        )

    return Server("bare-lowlevel", on_list_tools=list_tools, on_call_tool=call_tool)


def bare_mcpserver() -> Server[Any]:
    """The SDK's MCPServer with the tool declared by its decorator."""
    server = MCPServer("bare-mcpserver", log_level="WARNING")

    @server.tool(name=TOOL, description="Return the argument unchanged.")
    async def echo(x: int) -> dict[str, int]:
        return {"x": x}

    return server._lowlevel_server  # noqa: SLF001 - what Client and the HTTP app serve


@tool(risk=RiskLevel.L1_INTERNAL_READ, namespace="bench")
async def echo(x: int) -> dict[str, int]:
    """Return the argument unchanged."""
    return {"x": x}


PRINCIPAL = Principal(user_id="bench", tenant_id="t1")


@contextlib.asynccontextmanager
async def handrail_app(*, audit: bool = True) -> AsyncIterator[Handrail]:
    """A memory-store application with the echo tool (audit on, as by default, or off)."""
    app = Handrail.open("memory://", registry=[echo], audit=audit)
    try:
        yield app
    finally:
        await app.aclose()


@contextlib.asynccontextmanager
async def handrail_server(app: Handrail) -> AsyncIterator[Server[Any]]:
    """GatedServer over `app` for one fixed principal (as over stdio)."""
    served = GatedServer(app, principal=fixed_principal(PRINCIPAL))
    try:
        yield served.lowlevel
    finally:
        served.close()


# --- transports -------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def over_memory(server: Server[Any]) -> AsyncIterator[Client]:
    """A connected client over the SDK's in-memory transport (framed JSON-RPC)."""
    async with Client(InMemoryTransport(server), read_timeout_seconds=START_TIMEOUT_S) as client:
        yield client


AppAt = Callable[[str], Starlette]
"""Builds the Starlette app that will be reached at the given URL."""


@contextlib.asynccontextmanager
async def over_http(app_at: AppAt, token: str | None = None) -> AsyncIterator[Client]:
    """A connected client over Streamable HTTP to the app in uvicorn on 127.0.0.1.

    The socket listens before uvicorn starts, so the client's first request waits in the
    backlog until the server (and its session manager) is up: no polling. `token` is sent
    as the bearer token on every request.
    """
    # proto=IPPROTO_TCP lets asyncio set TCP_NODELAY on accepted connections; without
    # it Nagle meets delayed ACK and every call takes ~40 ms.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    config = uvicorn.Config(app_at(url), log_level="warning", access_log=False, lifespan="on")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    try:
        async with (
            httpx2.AsyncClient(headers=headers, timeout=START_TIMEOUT_S) as http,
            Client(
                streamable_http_client(url, http_client=http),
                read_timeout_seconds=START_TIMEOUT_S,
            ) as client,
        ):
            yield client
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, START_TIMEOUT_S)
        sock.close()


def bare_http(name: str) -> AppAt:
    """A fresh bare server's Streamable HTTP app (no authentication: it is bare)."""
    server = bare_lowlevel() if name == BARE_LOWLEVEL else bare_mcpserver()
    return lambda _url: server.streamable_http_app()


@contextlib.asynccontextmanager
async def handrail_http(app: Handrail) -> AsyncIterator[tuple[AppAt, str]]:
    """Handrail's HTTP app (Host/Origin checks, API-key bearer auth), and a key for it.

    The principal of each request is the one its API key is bound to.
    """
    keys = ApiKeys(app.store, audit=None)
    token = keys.create(PRINCIPAL, label="bench").key
    served = GatedServer(app, principal=principal_from_request)

    def app_at(url: str) -> Starlette:
        return http_app(served, ApiKeyAuthenticator(keys), resource_url=url)

    try:
        yield app_at, token
    finally:
        served.close()


# --- cases ------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class Case:
    """One measured path: a server behind a transport, with its open client."""

    transport: str
    server: str
    client: Client
    samples: list[float] = field(default_factory=list)
    """µs/call, one per round."""

    @property
    def key(self) -> str:
        return f"{self.transport}:{self.server}"


def _data(result: types.CallToolResult, server: str) -> object:
    """What the call returned: the envelope's data for Handrail, the result otherwise."""
    content = result.structured_content or {}
    if server in {HANDRAIL, HANDRAIL_NO_AUDIT}:
        return content.get("data")
    return content.get("result", content) if server == BARE_MCPSERVER else content


async def check(case: Case) -> None:
    """The path lists the tool and answers the call correctly; refusal shape aside."""
    listed = await case.client.list_tools()
    if [t.name for t in listed.tools] != [TOOL]:
        raise AssertionError(f"{case.key} lists {[t.name for t in listed.tools]}")
    result = await case.client.call_tool(TOOL, ARGS)
    if result.is_error or _data(result, case.server) != RESULT:
        raise AssertionError(f"{case.key} answered {result.model_dump(by_alias=True)}")


async def _calls(client: Client, calls: int) -> None:
    for _ in range(calls):
        await client.call_tool(TOOL, ARGS)


async def measure(rounds: int, calls: int, warmup: int) -> list[Case]:
    """Open every path, then take interleaved rounds; the cases carry their samples."""
    cases: list[Case] = []
    async with contextlib.AsyncExitStack() as stack:
        apps = {
            HANDRAIL: await stack.enter_async_context(handrail_app()),
            HANDRAIL_NO_AUDIT: await stack.enter_async_context(handrail_app(audit=False)),
        }
        memory: dict[str, Server[Any]] = {
            BARE_LOWLEVEL: bare_lowlevel(),
            BARE_MCPSERVER: bare_mcpserver(),
            **{
                name: await stack.enter_async_context(handrail_server(app))
                for name, app in apps.items()
            },
        }
        for name, server in memory.items():
            client = await stack.enter_async_context(over_memory(server))
            cases.append(Case(transport="memory", server=name, client=client))
        for name in (BARE_LOWLEVEL, BARE_MCPSERVER):
            client = await stack.enter_async_context(over_http(bare_http(name)))
            cases.append(Case(transport="http", server=name, client=client))
        for name, app in apps.items():
            app_at, token = await stack.enter_async_context(handrail_http(app))
            client = await stack.enter_async_context(over_http(app_at, token))
            cases.append(Case(transport="http", server=name, client=client))

        async def prepare(case: Case) -> None:
            await check(case)
            await _calls(case.client, warmup)

        async def sample(case: Case) -> None:
            spent = await elapsed_ns(_calls, case.client, calls)
            case.samples.append(spent / calls / 1000)

        await interleaved(cases, rounds=rounds, prepare=prepare, sample=sample)
    return cases


# --- report -----------------------------------------------------------------------------------


def results(cases: list[Case]) -> dict[str, dict[str, Any]]:
    """Per transport and server: median, minimum, rounds and same-round ratios to the bares."""
    out: dict[str, dict[str, Any]] = {}
    for transport in TRANSPORTS:
        here = {c.server: c for c in cases if c.transport == transport}
        rows: dict[str, Any] = {}
        for name, case in here.items():
            stats = summary(case.samples)
            rows[name] = {
                "median_us": round(stats.median, 3),
                "min_us": round(stats.minimum, 3),
                "rounds_us": stats.rounds,
                **{
                    f"vs_{bare}": round(same_round_ratio(case.samples, here[bare].samples), 3)
                    for bare in (BARE_LOWLEVEL, BARE_MCPSERVER)
                    if bare in here
                },
            }
        out[transport] = rows
    return out


def report(found: dict[str, dict[str, Any]], rounds: int, calls: int) -> str:
    """The results as a plain table."""
    header = ("path", "median µs", "min µs", "vs lowlevel", "vs MCPServer")
    body: list[tuple[str, ...]] = [
        (
            f"{transport}:{name}",
            f"{row['median_us']:.1f}",
            f"{row['min_us']:.1f}",
            f"{row.get('vs_' + BARE_LOWLEVEL, 0):.2f}x",
            f"{row.get('vs_' + BARE_MCPSERVER, 0):.2f}x",
        )
        for transport, rows in found.items()
        for name, row in rows.items()
    ]
    title = f"{rounds} rounds x {calls} calls per path, interleaved; µs per tools/call"
    return table(header, body, title)


def main(argv: list[str] | None = None) -> int:
    """Run, print a table, optionally write JSON."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=200, help="calls per path per round")
    parser.add_argument("--warmup", type=int, default=50, help="untimed calls per path")
    parser.add_argument("--json", type=Path, metavar="PATH")
    args = parser.parse_args(argv)
    logging.getLogger("mcp").setLevel(logging.WARNING)
    cases = asyncio.run(measure(args.rounds, args.calls, args.warmup))
    found = results(cases)
    print(report(found, args.rounds, args.calls))
    if args.json:
        settings = {"rounds": args.rounds, "calls": args.calls, "warmup": args.warmup}
        payload = {
            "environment": environment_facts(settings, ["mcp", "uvicorn", "pydantic"]),
            "results": found,
        }
        args.json.write_text(json.dumps(payload, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
