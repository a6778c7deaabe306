"""Attacks on an MCP session's toolset: a search result never widens what a session sees.

A `search_tools` result naming tools that are forbidden, another tenant's, beyond the
caller's permissions or not registered lists nothing new, tells nobody, and a direct
call stays UNKNOWN_TOOL; a session's discovery dies with a deregistered tool.
"""

from __future__ import annotations

from collections.abc import Iterator

import mcp_types as types
import pytest

from _toolset_tools import Catalogue, error_code, register_catalogue
from handrail import Handrail, Principal, Registry
from handrail.app import MEMORY
from handrail.mcp import GatedServer
from mcp import Client

pytestmark = pytest.mark.anyio

ALICE = Principal(user_id="alice", tenant_id="t1")
HOSTILE = ["wipe_all", "t2_export", "audit_log", "no_such_tool", "billing_lookup\n", "shown_tool"]


@pytest.fixture
def app() -> Iterator[Handrail]:
    registry = Registry()
    register_catalogue(registry, Catalogue(found={"x": HOSTILE, "billing": ["billing_lookup"]}))
    with Handrail.open(MEMORY, registry=registry) as opened:
        yield opened


async def test_a_hostile_search_result_lists_nothing_and_tells_nobody(app: Handrail) -> None:
    heard: list[object] = []

    async def on_message(message: object) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            heard.append(message)

    server = GatedServer(app, principal=lambda: ALICE)
    async with Client(server.lowlevel, mode="legacy", message_handler=on_message) as client:
        before = {t.name for t in (await client.list_tools()).tools}
        assert error_code(await client.call_tool("search_tools", {"query": "x"})) is None
        assert {t.name for t in (await client.list_tools()).tools} == before
        for name in ("wipe_all", "t2_export", "audit_log", "no_such_tool"):
            assert error_code(await client.call_tool(name, {})) == "UNKNOWN_TOOL"
    assert heard == []
    server.close()


async def test_a_discovered_tool_that_is_deregistered_is_gone(app: Handrail) -> None:
    server = GatedServer(app, principal=lambda: ALICE)
    async with Client(server.lowlevel, mode="legacy") as client:
        await client.call_tool("search_tools", {"query": "billing"})
        assert "billing_lookup" in {t.name for t in (await client.list_tools()).tools}
        app.registry.deregister("billing_lookup")
        assert "billing_lookup" not in {t.name for t in (await client.list_tools()).tools}
        result = await client.call_tool("billing_lookup", {"account": "a"})
        assert error_code(result) == "UNKNOWN_TOOL"
    server.close()
