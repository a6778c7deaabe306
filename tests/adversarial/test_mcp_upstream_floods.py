"""An upstream that floods `list_changed` or changes its definitions without end.

Each notification used to start a task of its own that listed the upstream again: a
flood of them was a flood of tasks and tools/list requests. Now notifications that
arrive while a look waits to start are covered by it. And the drift audit remembered
every (tool, listed hash) it had reported, so an upstream listing a new definition
every time grew the proxy's memory without bound; now only the last one per tool is
remembered, and each new definition is still audited once.
"""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.server import Server, ServerRequestContext

from handrail.declare.registry import Registry
from handrail.mcp.pins import PinBook, PinStatus
from handrail.mcp.policy import parse_policy
from handrail.mcp.proxy import McpProxy
from handrail.mcp.upstream import InProcessUpstream, Upstream, UpstreamTool
from handrail.store import MemoryStore
from handrail.testing import MemoryAuditSink

pytestmark = pytest.mark.anyio

WAIT = 30.0
FLOOD = 1_000


async def test_a_flood_of_list_changed_is_one_more_look_not_one_per_notification() -> None:
    lists: list[int] = []

    async def list_tools(
        _ctx: ServerRequestContext[Any],
        _params: types.PaginatedRequestParams | None,
    ) -> types.ListToolsResult:
        lists.append(1)
        tool = types.Tool(name="ok", description="Fine.", input_schema={"type": "object"})
        return types.ListToolsResult(tools=[tool])

    proxy = McpProxy(
        Upstream(InProcessUpstream(server=Server("noisy", on_list_tools=list_tools))),
        parse_policy({"unlisted": "confirm"}),
        PinBook(MemoryStore()),
        Registry(),
        namespace="up",
        approve_new=True,
    )
    try:
        await proxy.sync()
        notified = proxy.upstream.on_list_changed
        assert notified is not None
        for _ in range(FLOOD):
            notified()  # what the upstream's notification handler calls
        waiting = len(proxy._follow)  # the tasks a flood would pile up
        with anyio.fail_after(WAIT):
            await proxy.resynced.wait()
    finally:
        await proxy.aclose()

    assert waiting == 1
    assert len(lists) <= 1 + 1 + 1  # the sync, the connection's own check, one more look


def test_drifts_are_audited_once_each_in_bounded_memory() -> None:
    audit = MemoryAuditSink()
    book = PinBook(MemoryStore(), audit=audit)

    def listed(description: str) -> UpstreamTool:
        return UpstreamTool(name="lookup", description=description, input_schema={})

    book.approve("books", listed("Look up."), actor="ops")
    for round_ in range(50):
        assert book.check("books", listed(f"Look up, version {round_}.")).status is (
            PinStatus.CHANGED
        )
        book.check("books", listed(f"Look up, version {round_}."))

    drifts = [e for e in audit.events if e.stage == "drift"]
    assert len(drifts) == 50
    assert len(book._reported) == 1  # what the process remembers
