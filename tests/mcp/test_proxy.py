"""An upstream's tools, imported through the proxy, are ordinary tools behind the Gate.

They live in their own namespace with the policy's risk and permissions; reads answer
the upstream's result as untrusted data; writes are planned and confirmed first; the
policy's `unlisted` setting decides whether an unnamed tool is hidden or a confirmed
write; a new tool waits for approval unless the operator said otherwise.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp.server import Server, ServerRequestContext

from _mcp_proxying import ALICE, proxied
from handrail.calls import ToolCall
from handrail.declare.registry import Registry
from handrail.envelope import Trust
from handrail.errors import ErrorCode
from handrail.mcp.pins import PinBook, PinStatus
from handrail.mcp.policy import parse_policy
from handrail.mcp.proxy import ImportReport, McpProxy, as_draft_2020
from handrail.mcp.upstream import InProcessUpstream, Upstream
from handrail.principal import Principal
from handrail.shaping.marking import read_block
from handrail.spec import ConfirmationMode, RiskLevel, SideEffect
from handrail.store import MemoryStore

pytestmark = pytest.mark.anyio


def _call(name: str, arguments: str = "{}", call_id: str = "c1") -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=arguments)


async def test_the_named_tools_are_imported_in_their_namespace_with_the_policys_rules(
    tmp_path: Path,
) -> None:
    async with proxied(tmp_path / "up") as (proxy, app):
        assert proxy.served == (
            "books.crash",
            "books.flood",
            "books.inject",
            "books.lookup",
            "books.notes_add",
            "books.wait",
        )
        lookup = app.registry.get("books.lookup").spec
        assert lookup.risk is RiskLevel.L1_INTERNAL_READ
        assert lookup.permissions == {"books.read"}
        assert lookup.owner == "mcp:books"
        assert lookup.input_schema["properties"] == {"book_id": {"type": "string", "maxLength": 20}}
        notes = app.registry.get("books.notes_add").spec
        assert notes.side_effect is SideEffect.EXTERNAL_WRITE
        assert notes.confirmation.mode is ConfirmationMode.CONFIRM
        assert "books.wipe" not in app.registry  # unlisted, and the policy hides unlisted tools


async def test_a_read_answers_the_upstreams_structured_result_as_untrusted_data(
    tmp_path: Path,
) -> None:
    async with proxied(tmp_path / "up") as (_, app):
        envelope = await app.handle(_call("books.lookup", '{"book_id": "b1"}'), ALICE)

    assert envelope.status == "ok"
    assert envelope.data == {"book_id": "b1", "title": "Dune", "stock": 3}
    assert envelope.trust is Trust.UNTRUSTED
    assert envelope.source_label == "tool:books.lookup"


async def test_arguments_are_checked_against_the_pinned_schema_before_the_upstream_is_asked(
    tmp_path: Path,
) -> None:
    async with proxied(tmp_path / "up") as (_, app):
        envelope = await app.handle(_call("books.lookup", '{"book_id": 7}'), ALICE)

    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS


async def test_an_upstream_is_error_answer_is_a_final_failure_of_the_tool(tmp_path: Path) -> None:
    async with proxied(tmp_path / "up") as (_, app):
        envelope = await app.handle(_call("books.lookup", '{"book_id": "missing"}'), ALICE)

    assert envelope.error_type is ErrorCode.FAILED_FINAL
    assert envelope.trust is Trust.UNTRUSTED  # the upstream's own words


async def test_a_caller_without_the_policys_permission_is_refused_before_the_upstream_runs(
    tmp_path: Path,
) -> None:
    reader = Principal(user_id="bob", tenant_id="acme", permissions=frozenset())
    async with proxied(tmp_path / "up") as (_, app):
        envelope = await app.handle(_call("books.lookup", '{"book_id": "b1"}'), reader)
        exposed = {spec.name for spec in app.registry.exposed(reader)}

    assert envelope.error_type is ErrorCode.PERMISSION_DENIED
    assert "books.lookup" not in exposed


async def test_a_write_needs_confirmation_and_runs_upstream_once_after_it(tmp_path: Path) -> None:
    state = tmp_path / "up"
    async with proxied(state) as (_, app):
        envelope = await app.handle(_call("books.notes_add", '{"text": "hello"}'), ALICE)
        assert envelope.error_type is ErrorCode.NEEDS_CONFIRMATION
        assert not (state / "notes.txt").exists()
        assert isinstance(envelope.data, dict)
        plan_id = envelope.data["plan_id"]
        token = await app.writes.issue_token(plan_id, ALICE)
        await app.writes.confirm(plan_id, token.value, ALICE)
        first = await app.writes.execute_plan(plan_id, ALICE)
        again = await app.writes.execute_plan(plan_id, ALICE)

    assert first.envelope.status == "ok"
    assert again.envelope.status == "ok"
    assert (state / "notes.txt").read_text() == "hello\n"


async def test_unlisted_confirm_imports_an_unnamed_tool_as_a_write_that_needs_confirmation(
    tmp_path: Path,
) -> None:
    from _mcp_proxying import policy  # noqa: PLC0415 - the variant of this test only

    state = tmp_path / "up"
    (state).mkdir()
    (state / "notes.txt").write_text("keep\n")
    async with proxied(state, rules=policy(unlisted="confirm")) as (_, app):
        wipe = app.registry.get("books.wipe").spec
        envelope = await app.handle(_call("books.wipe"), ALICE)

    assert wipe.risk is RiskLevel.L3_HIGH_RISK_WRITE
    assert wipe.side_effect is SideEffect.EXTERNAL_WRITE
    assert envelope.error_type is ErrorCode.NEEDS_CONFIRMATION
    assert (state / "notes.txt").read_text() == "keep\n"


async def test_a_new_tool_waits_for_approval_unless_new_tools_are_approved(tmp_path: Path) -> None:
    async with proxied(tmp_path / "up", approve_new=False) as (proxy, app):
        report = await proxy.sync()
        assert proxy.served == ()
        assert {c.tool.name for c in report.pending} == {
            "lookup",
            "notes_add",
            "inject",
            "flood",
            "crash",
            "wait",
        }
        assert all(c.status is PinStatus.NEW for c in report.pending)
        assert report.hidden == ("rename", "wipe")
        assert (await app.handle(_call("books.lookup", '{"book_id": "b1"}'), ALICE)).error_type is (
            ErrorCode.UNKNOWN_TOOL
        )

        lookup = next(c.tool for c in report.pending if c.tool.name == "lookup")
        proxy.pins.approve("books", lookup, actor="ops")
        await proxy.sync()

        assert proxy.served == ("books.lookup",)
        envelope = await app.handle(_call("books.lookup", '{"book_id": "b1"}'), ALICE)
        assert envelope.status == "ok"


async def test_the_imported_tools_are_served_onward_through_a_gated_server(tmp_path: Path) -> None:
    from handrail.mcp import GatedServer, fixed_principal  # noqa: PLC0415 - loads the SDK
    from mcp import Client  # noqa: PLC0415

    async with proxied(tmp_path / "up") as (_, app):
        server = GatedServer(app, principal=fixed_principal(ALICE), name="firewall")
        async with Client(server.lowlevel, mode="legacy") as client:
            listed = {t.name: t for t in (await client.list_tools()).tools}
            read = await client.call_tool("books.lookup", {"book_id": "b1"})
            write = await client.call_tool("books.notes_add", {"text": "hi"})
        server.close()

    assert set(listed) == {
        "books.crash",
        "books.flood",
        "books.inject",
        "books.lookup",
        "books.notes_add",
        "books.wait",
    }
    lookup = listed["books.lookup"].annotations
    assert lookup is not None
    assert lookup.read_only_hint is True
    notes = listed["books.notes_add"].annotations
    assert notes is not None
    assert notes.read_only_hint is False
    assert read.is_error is False
    assert isinstance(read.structured_content, dict)
    assert read.structured_content["data"] == {"book_id": "b1", "title": "Dune", "stock": 3}
    [block] = read.content
    assert isinstance(block, types.TextContent)
    marked = read_block(block.text)
    assert marked is not None
    assert marked.source == "tool:books.lookup"
    assert isinstance(write.structured_content, dict)
    assert write.structured_content["error_type"] == ErrorCode.NEEDS_CONFIRMATION
    assert not (tmp_path / "up" / "notes.txt").exists()


DRAFT_07 = "http://json-schema.org/draft-07/schema#"


def test_a_draft_07_schema_whose_keywords_mean_the_same_is_read_as_draft_2020_12() -> None:
    schema = {
        "$schema": DRAFT_07,
        "type": "object",
        "properties": {"dependencies": {"type": "array", "items": {"type": "string"}}},
    }

    assert as_draft_2020(schema) == {
        "type": "object",
        "properties": {"dependencies": {"type": "array", "items": {"type": "string"}}},
    }


@pytest.mark.parametrize(
    "changed",
    [
        {"type": "array", "items": [{"type": "string"}]},
        {"type": "array", "items": {"type": "string"}, "additionalItems": False},
        {"type": "object", "dependencies": {"a": ["b"]}},
    ],
)
def test_a_draft_07_schema_using_a_keyword_that_changed_meaning_is_left_to_be_refused(
    changed: dict[str, object],
) -> None:
    schema = {"$schema": DRAFT_07, "type": "object", "properties": {"x": changed}}

    assert as_draft_2020(schema) is schema


def _server_of(*tools: types.Tool) -> Server[Any]:
    async def list_tools(
        _ctx: ServerRequestContext[Any],
        _params: types.PaginatedRequestParams | None,
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=list(tools))

    return Server("tiny", on_list_tools=list_tools)


async def _import(server: Server[Any], rules: dict[str, Any]) -> tuple[ImportReport, Registry]:
    registry = Registry()
    proxy = McpProxy(
        Upstream(InProcessUpstream(server=server)),
        parse_policy(rules),
        PinBook(MemoryStore()),
        registry,
        namespace="tiny",
        approve_new=True,
    )
    try:
        return await proxy.sync(), registry
    finally:
        await proxy.aclose()


USER_ID = types.Tool(
    name="messages",
    description="Messages of a user.",
    input_schema={"type": "object", "properties": {"user_id": {"type": "string"}}},
)


async def test_an_identity_parameter_is_refused_unless_the_policy_declares_it_business_data() -> (
    None
):
    plain = {"unlisted": "hide", "tools": {"messages": {"risk": "L1"}}}
    declared = {
        "unlisted": "hide",
        "tools": {
            "messages": {
                "risk": "L1",
                "business_values": {"user_id": "the workspace member whose messages are read"},
            },
        },
    }

    refused, _ = await _import(_server_of(USER_ID), plain)
    accepted, registry = await _import(_server_of(USER_ID), declared)

    assert [name for name, _ in refused.refused] == ["messages"]
    assert refused.served == ()
    assert accepted.served == ("tiny.messages",)
    assert set(registry.get("tiny.messages").spec.business_values) == {"#/properties/user_id"}


async def test_a_description_too_long_for_the_model_is_not_imported() -> None:
    long = types.Tool(name="long", description="x" * 8_001, input_schema={"type": "object"})

    report, registry = await _import(
        _server_of(long),
        {"unlisted": "hide", "tools": {"long": {"risk": "L0"}}},
    )

    assert [name for name, _ in report.refused] == ["long"]
    assert "tiny.long" not in registry
