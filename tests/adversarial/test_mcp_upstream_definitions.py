"""Hostile tool definitions from an upstream: each refused alone, the others still served.

An upstream lists, beside one good tool, names that cannot be Handrail names (a
newline, a trailing newline, dots that make an empty segment, a Cyrillic look-alike,
300 characters) and a schema no canonical JSON holds exactly (an integer past 2**53).
Before, pinning or hashing one of them raised inside the connection's tool check, so
the whole upstream was unusable. Now each is refused (never pinned, never served) and
the good tool is served; a pinned tool that changes into such a definition is
withdrawn the same way.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types
import pytest
from mcp.server import Server, ServerRequestContext

from handrail.declare.registry import Registry
from handrail.mcp.pins import PinBook
from handrail.mcp.policy import parse_policy
from handrail.mcp.proxy import McpProxy
from handrail.mcp.upstream import InProcessUpstream, Upstream
from handrail.store import MemoryStore

pytestmark = pytest.mark.anyio

_OBJECT: dict[str, Any] = {"type": "object"}
GOOD = types.Tool(name="ok", description="A good tool.", input_schema=_OBJECT)
BAD_NAMES = ("a\nb", "lookup\n", "a..b", "l\u043e\u043ekup", "x" * 300, ".hidden", "1st")
HUGE_INT = types.Tool(
    name="count",
    description="Count.",
    input_schema={"type": "object", "properties": {"n": {"maximum": 2**64}}},
)
POLICY = {"unlisted": "confirm"}


class Listing:
    """An upstream server whose tool list a test changes."""

    def __init__(self, *tools: types.Tool) -> None:
        self.tools = list(tools)

    def server(self) -> Server[Any]:
        async def list_tools(
            _ctx: ServerRequestContext[Any],
            _params: types.PaginatedRequestParams | None,
        ) -> types.ListToolsResult:
            return types.ListToolsResult(tools=list(self.tools))

        return Server("hostile", on_list_tools=list_tools)


def _proxy(
    listing: Listing, store: MemoryStore, registry: Registry, *, approve_new: bool = True
) -> McpProxy:
    return McpProxy(
        Upstream(InProcessUpstream(server=listing.server())),
        parse_policy(POLICY),
        PinBook(store),
        registry,
        namespace="up",
        approve_new=approve_new,
    )


@pytest.mark.parametrize("approve_new", [True, False])
async def test_unusable_definitions_are_refused_alone_and_never_pinned(approve_new: bool) -> None:
    bad = [types.Tool(name=name, description="d", input_schema=_OBJECT) for name in BAD_NAMES]
    listing = Listing(GOOD, *bad, HUGE_INT)
    store, registry = MemoryStore(), Registry()
    proxy = _proxy(listing, store, registry, approve_new=approve_new)
    try:
        report = await proxy.sync()
    finally:
        await proxy.aclose()

    assert sorted(name for name, _ in report.refused) == sorted([*BAD_NAMES, "count"])
    assert [check.tool.name for check in report.pending] == ([] if approve_new else ["ok"])
    assert report.served == (("up.ok",) if approve_new else ())
    assert [pin.tool for pin in store.list_pins()] == (["ok"] if approve_new else [])
    assert list(registry) == (["up.ok"] if approve_new else [])


async def test_a_pinned_tool_that_turns_unusable_is_withdrawn_and_the_others_stay() -> None:
    count = types.Tool(name="count", description="Count.", input_schema=_OBJECT)
    listing = Listing(GOOD, count)
    store, registry = MemoryStore(), Registry()
    proxy = _proxy(listing, store, registry)
    try:
        assert (await proxy.sync()).served == ("up.count", "up.ok")
        listing.tools = [GOOD, HUGE_INT]
        report = await proxy.sync()
    finally:
        await proxy.aclose()

    assert [name for name, _ in report.refused] == ["count"]
    assert report.served == ("up.ok",)
    assert list(registry) == ["up.ok"]
