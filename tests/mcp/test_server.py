"""GatedServer driven by the official SDK client in-process, in both protocol eras.

"legacy" is the initialize handshake over the in-memory JSON-RPC transport (what
stdio and most clients speak today); "auto" is the SDK's 2026-era direct path. Every
wait is bounded by WAIT, which only a real bug trips.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import anyio
import mcp_types as types
import pytest
from _mcp_app import Watch, tools
from mcp.client.session import ClientRequestContext
from mcp.shared.exceptions import MCPError

from handrail import (
    ExecutionStatus,
    Handrail,
    MemoryAuditSink,
    Principal,
    Registry,
    RiskLevel,
    tool,
)
from handrail.app import MEMORY
from handrail.envelope import Envelope, Status
from handrail.events import AuditEvent, CallRecord
from handrail.mcp import GatedServer, fixed_principal
from handrail.mcp import server as server_module
from handrail.shaping.marking import read_block
from mcp import Client

pytestmark = pytest.mark.anyio

WAIT = 30.0
ALICE = Principal(user_id="alice", tenant_id="t1")
ANN = Principal(user_id="ann", tenant_id="t1", permissions=frozenset({"reports.read"}))
MODES = pytest.mark.parametrize("mode", ["legacy", "auto"])


@pytest.fixture
def watch() -> Watch:
    return Watch()


@pytest.fixture
def app(watch: Watch) -> Iterator[Handrail]:
    registry = Registry()
    for made in tools(watch):
        registry.register(made)
    with Handrail.open(MEMORY, registry=registry) as opened:
        yield opened


def _server(app: Handrail, principal: Principal | None = ALICE, **options: Any) -> GatedServer:
    return GatedServer(app, principal=lambda: principal, **options)


def _structured(result: types.CallToolResult) -> dict[str, Any]:
    assert isinstance(result.structured_content, dict)
    return result.structured_content


# --- tools/list -------------------------------------------------------------------------------


@MODES
async def test_the_list_shows_only_the_tools_exposed_to_the_principal(
    app: Handrail, mode: str
) -> None:
    for principal, expected in [
        (ALICE, {"lib.search", "lib.whoami", "lib.slow_count", "lib.order_book"}),
        (ANN, {"lib.search", "lib.whoami", "lib.slow_count", "lib.order_book"}),
    ]:
        async with Client(_server(app, principal).lowlevel, mode=mode) as client:
            listed = {t.name for t in (await client.list_tools()).tools}
        shown = {spec.name for spec in app.registry.exposed(principal)}
        assert listed == shown
        assert expected <= listed
    assert "lib.secret_report" not in {s.name for s in app.registry.exposed(ALICE)}
    assert "lib.secret_report" in {s.name for s in app.registry.exposed(ANN)}


@MODES
async def test_listed_tools_carry_annotations_derived_from_the_spec(
    app: Handrail, mode: str
) -> None:
    async with Client(_server(app).lowlevel, mode=mode) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
    search, order = listed["lib.search"], listed["lib.order_book"]
    assert search.annotations is not None
    assert search.annotations.read_only_hint is True
    assert order.annotations is not None
    assert order.annotations.read_only_hint is False
    assert order.annotations.destructive_hint is True
    assert "tenant" not in listed["lib.whoami"].input_schema.get("properties", {})


async def test_without_a_principal_nothing_is_listed_and_nothing_runs(
    app: Handrail, watch: Watch
) -> None:
    async with Client(_server(app, None).lowlevel, mode="legacy") as client:
        assert (await client.list_tools()).tools == []
        result = await client.call_tool("lib.search", {"query": "dune"})
    assert result.is_error is True
    assert _structured(result)["error_type"] == "PERMISSION_DENIED"
    assert watch.ran == []


# --- tools/call -------------------------------------------------------------------------------


@MODES
async def test_a_read_returns_the_envelope_structured_and_as_marked_text(
    app: Handrail, watch: Watch, mode: str
) -> None:
    async with Client(_server(app).lowlevel, mode=mode) as client:
        result = await client.call_tool("lib.search", {"query": "u"})
    assert result.is_error is False
    structured = _structured(result)
    assert structured["status"] == "ok"
    assert structured["data"] == ["Dune", "Ulysses"]
    assert structured["error_type"] is None
    [block] = result.content
    assert isinstance(block, types.TextContent)
    read = read_block(block.text)
    assert read is not None
    assert read.source == "tool:lib.search"
    assert json.loads(read.body) == structured
    assert watch.ran == ["lib.search"]


@MODES
async def test_a_refusal_is_an_error_with_its_stable_code(app: Handrail, mode: str) -> None:
    async with Client(_server(app).lowlevel, mode=mode) as client:
        result = await client.call_tool("lib.search", {"query": 7})
    assert result.is_error is True
    structured = _structured(result)
    assert structured["error_type"] == "INVALID_ARGUMENTS"
    assert "$.query" in structured["field_errors"]


@MODES
async def test_a_tool_not_exposed_to_the_principal_is_unknown_and_does_not_run(
    app: Handrail, watch: Watch, mode: str
) -> None:
    async with Client(_server(app, ALICE).lowlevel, mode=mode) as client:
        hidden = await client.call_tool("lib.secret_report", {})
        missing = await client.call_tool("lib.nothing_here", {})
    for result in (hidden, missing):
        assert result.is_error is True
        assert _structured(result)["error_type"] == "UNKNOWN_TOOL"
    # Hidden and missing read the same: the caller learns nothing about what exists.
    assert _structured(hidden)["summary"] == _structured(missing)["summary"]
    assert watch.ran == []


async def test_the_same_tool_runs_for_a_principal_it_is_exposed_to(
    app: Handrail, watch: Watch
) -> None:
    async with Client(_server(app, ANN).lowlevel, mode="legacy") as client:
        result = await client.call_tool("lib.secret_report", {})
    assert _structured(result)["data"] == {"sold": 42}
    assert watch.ran == ["lib.secret_report"]


@MODES
async def test_arguments_that_carry_identity_are_refused_and_nothing_runs(
    app: Handrail, watch: Watch, mode: str
) -> None:
    async with Client(_server(app).lowlevel, mode=mode) as client:
        forged = await client.call_tool("lib.whoami", {"tenant": "t2"})
        honest = await client.call_tool("lib.whoami", {})
    assert forged.is_error is True
    assert _structured(forged)["error_type"] == "INVALID_ARGUMENTS"
    assert "$.tenant" in _structured(forged)["field_errors"]
    # The tenant comes from the principal, never from the arguments.
    assert _structured(honest)["data"] == "t1"
    assert watch.ran == ["lib.whoami"]


@MODES
async def test_a_write_answers_needs_confirmation_with_the_plan_and_never_a_token(
    app: Handrail, watch: Watch, mode: str
) -> None:
    async with Client(_server(app).lowlevel, mode=mode) as client:
        result = await client.call_tool("lib.order_book", {"title": "Dune"})
    assert result.is_error is True
    structured = _structured(result)
    assert structured["error_type"] == "NEEDS_CONFIRMATION"
    data = structured["data"]
    assert set(data) == {"plan_id", "impact", "expires_at"}
    plan = await app.writes.get_plan(data["plan_id"], ALICE)
    assert plan.plan.tool == "lib.order_book"
    wire = result.model_dump_json(by_alias=True)
    assert "token" not in wire.lower()
    # A token issued now for that plan appears nowhere in what the client got.
    token = await app.writes.issue_token(data["plan_id"], ALICE)
    assert token.value not in wire
    assert watch.ran == []


async def test_each_call_gets_its_own_call_id(watch: Watch) -> None:
    sink = MemoryAuditSink()
    ids = iter(["one", "two"])
    with Handrail.open(MEMORY, registry=tools(watch), audit=sink) as app:
        server = _server(app, new_id=lambda: next(ids))
        async with Client(server.lowlevel, mode="legacy") as client:
            await client.call_tool("lib.search", {"query": "a"})
            await client.call_tool("lib.search", {"query": "a"})
    calls = {e.tool_call_id for e in sink.events if e.tool_call_id}
    assert len(calls) == 2
    assert all(c.startswith("mcp-") for c in calls)
    assert {c.rsplit("-", 1)[1] for c in calls} == {"one", "two"}


def _hidden_tools() -> list[Any]:
    @tool(risk=RiskLevel.L4_FORBIDDEN, namespace="lib")
    def burn_books() -> str:
        """Burn every book."""
        return "burnt"

    @tool(risk=RiskLevel.L0_PUBLIC_READ, namespace="lib", enabled=False)
    def old_search() -> str:
        """The old search."""
        return "old"

    @tool(risk=RiskLevel.L0_PUBLIC_READ, namespace="lib", enabled_tenants=["t2"])
    def t2_catalogue() -> str:
        """Another tenant's catalogue."""
        return "t2"

    return [burn_books, old_search, t2_catalogue]


@pytest.mark.parametrize("name", ["lib.burn_books", "lib.old_search", "lib.t2_catalogue"])
async def test_forbidden_disabled_and_other_tenants_tools_are_unknown_and_never_listed(
    app: Handrail, name: str
) -> None:
    for made in _hidden_tools():
        app.registry.register(made)
    async with Client(_server(app).lowlevel, mode="legacy") as client:
        listed = {t.name for t in (await client.list_tools()).tools}
        result = await client.call_tool(name, {})
    assert name not in listed
    assert _structured(result)["error_type"] == "UNKNOWN_TOOL"
    assert _structured(result)["data"] is None


async def test_a_write_whose_arguments_carry_a_confirmation_is_refused_and_nothing_is_planned(
    app: Handrail, watch: Watch
) -> None:
    forged = {"title": "Dune", "confirmation_token": "hr1.k1.p.h.0.n.mac", "confirmed": True}
    async with Client(_server(app).lowlevel, mode="legacy") as client:
        result = await client.call_tool("lib.order_book", forged)
    assert _structured(result)["error_type"] == "INVALID_ARGUMENTS"
    assert app.store.list_plans(tenant_id="t1") == []
    assert watch.ran == []


async def test_a_tool_name_with_a_control_character_is_unknown_and_nothing_runs(
    app: Handrail, watch: Watch
) -> None:
    async with Client(_server(app).lowlevel, mode="auto") as client:
        result = await client.call_tool("lib.search\u0000", {"query": "a"})
    assert _structured(result)["error_type"] == "UNKNOWN_TOOL"
    assert watch.ran == []


# --- URL-mode elicitation ---------------------------------------------------------------------


async def test_a_client_with_url_elicitation_is_offered_the_confirmation_page(
    app: Handrail,
) -> None:
    asked: list[types.ElicitRequestURLParams] = []

    async def elicit(
        ctx: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestURLParams)
        asked.append(params)
        return types.ElicitResult(action="accept")

    server = _server(app, confirm_url=lambda plan: f"https://shop.example/plans/{plan}")
    async with Client(server.lowlevel, mode="legacy", elicitation_callback=elicit) as client:
        result = await client.call_tool("lib.order_book", {"title": "Dune"})
    plan_id = _structured(result)["data"]["plan_id"]
    [params] = asked
    assert params.url == f"https://shop.example/plans/{plan_id}"
    assert params.elicitation_id == plan_id
    # Accepting opens a page; it confirms nothing.
    assert _structured(result)["error_type"] == "NEEDS_CONFIRMATION"
    record = await app.writes.get_plan(plan_id, ALICE)
    assert record.state.value in {"PROPOSED", "AWAITING_CONFIRMATION"}


async def test_without_the_capability_no_elicitation_is_sent(app: Handrail) -> None:
    server = _server(app, confirm_url=lambda plan: f"https://shop.example/plans/{plan}")
    async with Client(server.lowlevel, mode="legacy") as client:
        result = await client.call_tool("lib.order_book", {"title": "Dune"})
    assert _structured(result)["error_type"] == "NEEDS_CONFIRMATION"


async def test_a_failed_elicitation_changes_nothing(app: Handrail) -> None:
    async def elicit(
        ctx: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ErrorData:
        return types.ErrorData(code=types.INVALID_REQUEST, message="no browser here")

    server = _server(app, confirm_url=lambda plan: f"https://shop.example/plans/{plan}")
    async with Client(server.lowlevel, mode="legacy", elicitation_callback=elicit) as client:
        result = await client.call_tool("lib.order_book", {"title": "Dune"})
    assert _structured(result)["error_type"] == "NEEDS_CONFIRMATION"


async def test_a_2026_client_is_offered_the_page_as_input_and_its_retry_gets_the_same_plan(
    app: Handrail,
) -> None:
    asked: list[types.ElicitRequestURLParams] = []

    async def elicit(
        ctx: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestURLParams)
        asked.append(params)
        return types.ElicitResult(action="accept")

    server = _server(app, confirm_url=lambda plan: f"https://shop.example/plans/{plan}")
    async with Client(server.lowlevel, mode="auto", elicitation_callback=elicit) as client:
        result = await client.call_tool("lib.order_book", {"title": "Dune"})
    structured = _structured(result)
    assert structured["error_type"] == "NEEDS_CONFIRMATION"
    plan_id = structured["data"]["plan_id"]
    [params] = asked
    assert params.url == f"https://shop.example/plans/{plan_id}"
    # The retry answered the plan of the first round; no second plan was made.
    assert [p.plan.plan_id for p in app.store.list_plans(tenant_id="t1")] == [plan_id]
    assert "token" not in result.model_dump_json(by_alias=True).lower()


async def _offered(client: Client) -> types.InputRequiredResult:
    offered = await client.session.call_tool(
        "lib.order_book", {"title": "Dune"}, allow_input_required=True
    )
    assert isinstance(offered, types.InputRequiredResult)
    assert offered.request_state is not None
    return offered


async def _retry(client: Client, state: str) -> types.CallToolResult | types.InputRequiredResult:
    return await client.session.call_tool(
        "lib.order_book",
        {"title": "Dune"},
        input_responses={"confirm": types.ElicitResult(action="accept")},
        request_state=state,
        allow_input_required=True,
    )


async def _accept(ctx: ClientRequestContext, params: Any) -> types.ElicitResult:
    return types.ElicitResult(action="accept")


async def test_the_offered_state_is_sealed_and_names_no_plan(app: Handrail) -> None:
    server = _server(app, confirm_url=lambda plan: f"https://shop.example/plans/{plan}")
    async with Client(server.lowlevel, mode="auto", elicitation_callback=_accept) as client:
        offered = await _offered(client)
        [plan] = app.store.list_plans(tenant_id="t1")
        assert offered.request_state is not None
        assert plan.plan.plan_id not in offered.request_state
        with pytest.raises(MCPError):
            await _retry(client, plan.plan.plan_id)
        with pytest.raises(MCPError):
            await _retry(client, offered.request_state[:-2] + "xx")


async def test_without_a_confirmation_page_any_request_state_is_refused(app: Handrail) -> None:
    server = _server(app)  # no confirm_url: no offers, so no state this server sealed
    async with Client(server.lowlevel, mode="auto", elicitation_callback=_accept) as client:
        plain = await client.session.call_tool("lib.order_book", {"title": "Dune"})
        [plan] = app.store.list_plans(tenant_id="t1")
        # The model (or anyone) sends a plan id back as request state: nothing runs.
        result = await _retry(client, plan.plan.plan_id)
    assert isinstance(plain, types.CallToolResult)
    assert _structured(plain)["error_type"] == "NEEDS_CONFIRMATION"
    assert isinstance(result, types.CallToolResult)
    assert result.is_error
    assert _structured(result)["error_type"] == "INVALID_ARGUMENTS"
    assert _structured(result)["data"] is None
    assert [p.plan.plan_id for p in app.store.list_plans(tenant_id="t1")] == [plan.plan.plan_id]


async def test_a_retry_after_the_plan_was_rejected_says_it_closed(app: Handrail) -> None:
    server = _server(app, confirm_url=lambda plan: f"https://shop.example/plans/{plan}")
    async with Client(server.lowlevel, mode="auto", elicitation_callback=_accept) as client:
        offered = await _offered(client)
        [plan] = app.store.list_plans(tenant_id="t1")
        await app.writes.reject(plan.plan.plan_id, ALICE, reason="not today")
        assert offered.request_state is not None
        result = await _retry(client, offered.request_state)
    assert isinstance(result, types.CallToolResult)
    assert _structured(result)["error_type"] == "PLAN_CLOSED"
    assert "rejected" in _structured(result)["summary"]


async def test_a_retry_whose_tool_is_gone_runs_nothing(app: Handrail) -> None:
    server = _server(app, confirm_url=lambda plan: f"https://shop.example/plans/{plan}")
    async with Client(server.lowlevel, mode="auto", elicitation_callback=_accept) as client:
        offered = await _offered(client)
        app.registry.deregister("lib.order_book")
        assert offered.request_state is not None
        result = await _retry(client, offered.request_state)
    assert isinstance(result, types.CallToolResult)
    assert _structured(result)["error_type"] == "PLAN_CLOSED"
    assert len(app.store.list_plans(tenant_id="t1")) == 1


async def test_a_sealed_state_is_bound_to_its_principal(app: Handrail) -> None:
    caller = [ALICE]
    server = GatedServer(
        app,
        principal=lambda: caller[0],
        confirm_url=lambda plan: f"https://shop.example/plans/{plan}",
    )
    async with Client(server.lowlevel, mode="auto", elicitation_callback=_accept) as client:
        offered = await _offered(client)
        assert offered.request_state is not None
        caller[0] = Principal(user_id="bob", tenant_id="t1")
        with pytest.raises(MCPError):
            await _retry(client, offered.request_state)


# --- list_changed -----------------------------------------------------------------------------


def _extra_tool() -> Any:
    @tool(risk=RiskLevel.L0_PUBLIC_READ, namespace="lib")
    def opening_hours() -> str:
        """When the library is open."""
        return "9-17"

    return opening_hours


async def test_a_handshake_client_hears_list_changed_after_register_and_deregister(
    app: Handrail,
) -> None:
    changed: list[object] = []
    arrived = anyio.Event()

    async def on_message(message: object) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.append(message)
            arrived.set()

    server = _server(app)
    async with Client(server.lowlevel, mode="legacy", message_handler=on_message) as client:
        assert client.server_capabilities.tools is not None
        assert client.server_capabilities.tools.list_changed is True
        before = {t.name for t in (await client.list_tools()).tools}
        app.registry.register(_extra_tool())
        with anyio.fail_after(WAIT):
            await arrived.wait()
        after = {t.name for t in (await client.list_tools()).tools}
        assert after == before | {"lib.opening_hours"}
        arrived = anyio.Event()
        app.registry.deregister("lib.opening_hours")
        with anyio.fail_after(WAIT):
            await arrived.wait()
        assert {t.name for t in (await client.list_tools()).tools} == before
        # The tool is gone for calls too.
        result = await client.call_tool("lib.opening_hours", {})
        assert _structured(result)["error_type"] == "UNKNOWN_TOOL"
    assert len(changed) == 2


async def test_a_2026_client_hears_list_changed_on_its_listen_stream(app: Handrail) -> None:
    server = _server(app)
    async with Client(server.lowlevel, mode="auto") as client:
        async with client.listen(tools_list_changed=True) as subscription:
            app.registry.register(_extra_tool())
            with anyio.fail_after(WAIT):
                event = await anext(aiter(subscription))
        assert type(event).__name__ == "ToolsListChanged"
        assert "lib.opening_hours" in {t.name for t in (await client.list_tools()).tools}


async def test_a_closed_server_stops_following_the_registry(app: Handrail) -> None:
    server = _server(app)
    server.close()
    app.registry.register(_extra_tool())
    assert server._generation == 0


async def test_exposures_are_remembered_per_tenant_and_permissions_and_bounded(
    app: Handrail, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server_module, "_MAX_EXPOSURES", 2)
    server = _server(app)
    assert server.app is app
    first = server._exposure(ALICE)
    assert server._exposure(Principal(user_id="bob", tenant_id="t1")) is first
    server._exposure(ANN)
    server._exposure(Principal(user_id="cy", tenant_id="t2"))
    assert len(server._exposures) <= 2
    assert server._exposure(ALICE) is not first


async def test_a_change_skips_a_loop_that_has_closed(app: Handrail) -> None:
    server = _server(app)
    loop = asyncio.new_event_loop()
    loop.close()
    server._loops.add(loop)
    app.registry.register(_extra_tool())
    assert server._generation == 1


def test_only_a_plan_has_a_plan_id() -> None:
    plain = Envelope(call_id="c", tool="t", status=Status.OK, summary="s", data=["x"])
    odd = Envelope(call_id="c", tool="t", status=Status.OK, summary="s", data={"plan_id": 7})
    assert server_module._plan_id(plain) is None
    assert server_module._plan_id(odd) is None


# --- progress and cancellation ----------------------------------------------------------------


async def test_progress_reaches_a_client_that_asked_for_it(app: Handrail, watch: Watch) -> None:
    seen: list[tuple[float, float | None, str | None]] = []
    three = anyio.Event()

    async def progress(value: float, total: float | None, message: str | None) -> None:
        seen.append((value, total, message))
        if len(seen) == 3:
            three.set()

    async with Client(_server(app).lowlevel, mode="legacy") as client:
        outcome: list[types.CallToolResult] = []

        async def call() -> None:
            outcome.append(
                await client.call_tool("lib.slow_count", {"steps": 3}, progress_callback=progress)
            )

        async with anyio.create_task_group() as group:
            group.start_soon(call)
            with anyio.fail_after(WAIT):
                await three.wait()
            watch.release.set()
    assert seen == [(1.0, 3.0, "step 1"), (2.0, 3.0, "step 2"), (3.0, 3.0, "step 3")]
    assert _structured(outcome[0])["data"] == 3


async def test_no_progress_is_sent_to_a_client_that_did_not_ask(
    app: Handrail, watch: Watch
) -> None:
    messages: list[object] = []

    async def on_message(message: object) -> None:
        messages.append(message)

    watch.release.set()
    async with Client(_server(app).lowlevel, mode="legacy", message_handler=on_message) as client:
        result = await client.call_tool("lib.slow_count", {"steps": 3})
    assert _structured(result)["data"] == 3
    assert not [m for m in messages if isinstance(m, types.ProgressNotification)]


async def _cancel_while_running(client: Client, watch: Watch, name: str, args: Any) -> None:
    """Start a call, wait until its tool runs, then abandon it (notifications/cancelled)."""
    async with anyio.create_task_group() as group:

        async def call() -> None:
            await client.call_tool(name, args)

        group.start_soon(call)
        with anyio.fail_after(WAIT):
            await watch.started.wait()
        group.cancel_scope.cancel()


async def test_cancelling_a_read_stops_it(app: Handrail, watch: Watch) -> None:
    async with Client(_server(app).lowlevel, mode="legacy") as client:
        await _cancel_while_running(client, watch, "lib.slow_count", {"steps": 1})
        with anyio.fail_after(WAIT):
            await watch.cancelled.wait()
        # The server keeps serving the same client.
        result = await client.call_tool("lib.search", {"query": "dune"})
    assert _structured(result)["data"] == ["Dune"]
    assert watch.ran == ["lib.slow_count", "lib.search"]


class _CancelSeen(MemoryAuditSink):
    """Audit in memory, and a flag once the gate records a call as cancelled."""

    def __init__(self) -> None:
        super().__init__()
        self.cancelled = threading.Event()

    def emit(self, events: Sequence[AuditEvent]) -> None:
        super().emit(events)
        self._look(events)

    def emit_call(self, record: CallRecord) -> None:
        super().emit_call(record)
        self._look(record.events())

    def _look(self, events: Sequence[AuditEvent]) -> None:
        if any(e.decision == "cancelled" for e in events):
            self.cancelled.set()


async def test_a_cancelled_external_write_ends_unknown_and_reconcilable_not_failed(
    watch: Watch,
) -> None:
    sink = _CancelSeen()
    with Handrail.open(MEMORY, registry=tools(watch), audit=sink) as app:
        server = _server(app, command_id=lambda ctx: "cmd-1")
        async with Client(server.lowlevel, mode="legacy") as client:
            await _cancel_while_running(client, watch, "lib.hold_shelf", {"shelf": "A1"})
            with anyio.fail_after(WAIT):
                await watch.cancelled.wait()
            # The gate records the cancellation after the write path has settled it.
            assert await anyio.to_thread.run_sync(sink.cancelled.wait, WAIT)
        [record] = app.store.list_executions(tenant_id="t1")
    assert record.status is ExecutionStatus.UNKNOWN
    assert record.tool == "lib.hold_shelf"


async def test_a_call_past_the_servers_budget_times_out_and_its_tool_is_stopped(
    app: Handrail, watch: Watch
) -> None:
    async with Client(_server(app, timeout=0.01).lowlevel, mode="legacy") as client:
        result = await client.call_tool("lib.slow_count", {"steps": 0})
    assert _structured(result)["error_type"] == "TIMEOUT"
    assert watch.cancelled.is_set()


async def test_without_a_command_id_an_unconfirmed_write_is_refused(
    app: Handrail, watch: Watch
) -> None:
    async with Client(_server(app).lowlevel, mode="legacy") as client:
        result = await client.call_tool("lib.hold_shelf", {"shelf": "A1"})
    assert _structured(result)["error_type"] == "RISK_BLOCKED"
    assert watch.ran == []


def test_fixed_principal_always_gives_the_same_principal() -> None:
    source: Callable[[], Principal | None] = fixed_principal(ALICE)
    assert source() is ALICE
    assert source() is ALICE
