"""Tool search and skills over MCP with the real parts together, no stand-ins.

A GatedServer over a registry of deferred tools, the real `search_tools` and the real
skill tools over a `SkillLibrary` loaded from disk, driven by the official SDK client:
the core set is listed; a search returns the deferred tools the principal may use
(never another tenant's, a disabled or a permission-lacking one, not even as a count),
`notifications/tools/list_changed` reaches that session, and the found tool is then
callable; `load_skill` narrows the list to the library's tools for the skill (never
the ones it names but policy bars); another session, and another tenant, see none of
it. Every wait is bounded by WAIT, which only a real bug trips.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest

from _integ_catalogue import (
    ALICE,
    BILLING_SKILL,
    CORE,
    DISABLED,
    LOOKUP,
    MALLORY,
    OTHER_TENANT,
    PRIVILEGED,
    REFUND,
    build_registry,
    write_library,
)
from _toolset_tools import Heard, error_code
from handrail import Handrail, MemoryAuditSink, Principal
from handrail.app import MEMORY
from handrail.mcp import GatedServer
from handrail.skills import SkillLibrary
from mcp import Client

pytestmark = pytest.mark.anyio

WAIT = 30.0


@pytest.fixture
def sink() -> MemoryAuditSink:
    return MemoryAuditSink()


@pytest.fixture
def built(tmp_path: Path, sink: MemoryAuditSink) -> Iterator[tuple[Handrail, SkillLibrary]]:
    registry, library = build_registry(write_library(tmp_path / "skills"))
    with Handrail.open(MEMORY, registry=registry, audit=sink) as opened:
        yield opened, library


async def _names(client: Client) -> set[str]:
    return {t.name for t in (await client.list_tools()).tools}


def _data(result: types.CallToolResult) -> dict[str, Any]:
    assert isinstance(result.structured_content, dict)
    data = result.structured_content["data"]
    assert isinstance(data, dict)
    return data


async def test_search_then_call_then_a_skill_narrows_in_one_session_only(
    built: tuple[Handrail, SkillLibrary], sink: MemoryAuditSink
) -> None:
    app, library = built
    caller: list[Principal] = [ALICE]
    server = GatedServer(app, principal=lambda: caller[0], skills=library)
    one, two = Heard(), Heard()
    async with (
        Client(server.lowlevel, mode="legacy", message_handler=one) as first,
        Client(server.lowlevel, mode="legacy", message_handler=two) as second,
    ):
        assert await _names(first) == await _names(second) == CORE
        assert error_code(await first.call_tool(LOOKUP, {"invoice": "INV-7"})) == "UNKNOWN_TOOL"

        found = _data(await first.call_tool("search_tools", {"query": "invoice", "limit": 20}))
        # Only what ALICE may use: nothing of t2, nothing disabled, nothing privileged,
        # and the counts say so too (two tools matched, none left out).
        assert [t["name"] for t in found["tools"]] == [REFUND, LOOKUP]
        assert (found["matches"], found["omitted"]) == (2, 0)
        hidden = json.dumps(found)
        assert all(name not in hidden for name in (OTHER_TENANT, DISABLED, PRIVILEGED))
        await one.next(WAIT)
        assert await _names(first) == CORE | {LOOKUP, REFUND}
        assert error_code(await first.call_tool(LOOKUP, {"invoice": "INV-7"})) is None
        # The confirmed write is planned, not run.
        assert (
            error_code(await first.call_tool(REFUND, {"invoice": "INV-7"})) == "NEEDS_CONFIRMATION"
        )

        # The other session: nothing listed, nothing callable, nothing heard.
        assert await _names(second) == CORE
        assert error_code(await second.call_tool(LOOKUP, {"invoice": "INV-7"})) == "UNKNOWN_TOOL"

        # The skill names tools policy bars (t2's, a privileged one) and its text asks
        # for them: the list is the library's allowed tools that policy allows, plus the
        # catalogue tools; the asset tool outside the skill is gone.
        loaded = _data(await first.call_tool("load_skill", {"name": BILLING_SKILL}))
        assert loaded["skill"] == BILLING_SKILL
        await one.next(WAIT)
        narrowed = {LOOKUP, REFUND, "search_tools", "load_skill", "read_skill_file"}
        assert await _names(first) == narrowed
        assert error_code(await first.call_tool("asset_status", {"asset_id": "a-1"})) == (
            "UNKNOWN_TOOL"
        )
        assert error_code(await first.call_tool(OTHER_TENANT, {"invoice": "INV-7"})) == (
            "UNKNOWN_TOOL"
        )
        reference = {"skill": BILLING_SKILL, "path": "references/policy.md"}
        policy = await first.call_tool("read_skill_file", reference)
        assert _data(policy)["text"] == "Refunds within 30 days.\n"

        # Another tenant on the same connection: the core set, nothing else.
        caller[0] = MALLORY
        assert await _names(first) == CORE
        assert error_code(await first.call_tool(LOOKUP, {"invoice": "INV-7"})) == "UNKNOWN_TOOL"
        theirs = _data(await first.call_tool("search_tools", {"query": "invoice", "limit": 20}))
        assert {t["name"] for t in theirs["tools"]} == {OTHER_TENANT, LOOKUP, REFUND}
        assert (theirs["matches"], theirs["omitted"]) == (3, 0)
        caller[0] = ALICE
        assert await _names(first) == narrowed
        assert await _names(second) == CORE
    assert two.count == 0
    changes = [(e.stage, e.user_id, e.detail) for e in sink.events if e.kind == "toolset"]
    assert changes[:2] == [
        ("discovered", "alice", json.dumps({"names": [REFUND, LOOKUP], "over": "mcp"})),
        ("skill", "alice", json.dumps({"names": [BILLING_SKILL], "over": "mcp"})),
    ]
    server.close()
