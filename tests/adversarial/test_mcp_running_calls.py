"""One principal cannot start calls without end: at most `max_running_calls` run at once.

Before, every `tools/call` a client sent ran at once, however many (the SDK bounds
none), each holding a task and whatever the tool holds. Now a principal's call over
the bound is refused RATE_LIMITED and runs nothing; once its calls end, it is served
again; another principal's calls are not counted against it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

import anyio
import mcp_types as types
import pytest

from handrail import Handrail, Principal, Registry, RiskLevel, tool
from handrail.app import MEMORY
from handrail.errors import ErrorCode
from handrail.mcp import GatedServer
from mcp import Client

pytestmark = pytest.mark.anyio

WAIT = 30.0
LIMIT = 3
ALICE = Principal(user_id="alice", tenant_id="t1")
BOB = Principal(user_id="bob", tenant_id="t1")


class Gate:
    """What the held tool shares with the test."""

    def __init__(self) -> None:
        self.runs: list[str] = []
        self.all_in = asyncio.Event()
        self.bob_in = asyncio.Event()
        self.release = asyncio.Event()


@pytest.fixture
def gate() -> Gate:
    return Gate()


@pytest.fixture
def app(gate: Gate) -> Iterator[Handrail]:
    @tool(risk=RiskLevel.L0_PUBLIC_READ, namespace="lab", timeout=120.0)
    async def hold(note: str) -> str:
        """Wait until released."""
        gate.runs.append(note)
        if note == "bob":
            gate.bob_in.set()
        elif len(gate.runs) == LIMIT:
            gate.all_in.set()
        await gate.release.wait()
        return note

    registry = Registry()
    registry.register(hold)
    with Handrail.open(MEMORY, registry=registry) as opened:
        yield opened


def _code(result: types.CallToolResult) -> Any:
    assert isinstance(result.structured_content, dict)
    return result.structured_content.get("error_type")


async def test_a_principal_over_its_running_calls_is_rate_limited_and_nothing_runs(
    app: Handrail, gate: Gate
) -> None:
    caller: ContextVar[Principal] = ContextVar("caller", default=ALICE)
    server = GatedServer(app, principal=caller.get, max_running_calls=LIMIT)
    results: list[types.CallToolResult] = []
    try:
        with anyio.fail_after(WAIT):
            async with Client(server.lowlevel, mode="legacy") as client:

                async def call(note: str, who: Principal = ALICE) -> None:
                    caller.set(who)  # this task's requests are this principal's
                    results.append(await client.call_tool("lab.hold", {"note": note}))

                async with anyio.create_task_group() as group:
                    for index in range(LIMIT):
                        group.start_soon(call, f"held-{index}")
                    await gate.all_in.wait()
                    refused = await client.call_tool("lab.hold", {"note": "one too many"})
                    group.start_soon(call, "bob", BOB)
                    await gate.bob_in.wait()
                    gate.release.set()
                served = await client.call_tool("lab.hold", {"note": "after"})
    finally:
        server.close()

    assert refused.is_error
    assert _code(refused) == ErrorCode.RATE_LIMITED.value
    assert "one too many" not in gate.runs
    assert [r.is_error for r in results] == [False] * (LIMIT + 1)
    assert not served.is_error
    assert sorted(gate.runs) == sorted([*(f"held-{i}" for i in range(LIMIT)), "bob", "after"])
