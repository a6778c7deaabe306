"""Handrail.open: one entry point, audit on by default, keyring rules, the agent factory.

Stores are real (SQLite files, memory, PostgreSQL when a server runs); the model is
always a ScriptedModelClient. What a test reads back it reads through a store opened
anew, so only what was written before `close` returned can pass.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Annotated

import pytest
from pydantic import Field
from typer.testing import CliRunner

from handrail import (
    ConfirmationMode,
    ConfirmationPolicy,
    ErrorCode,
    FromPrincipal,
    Handrail,
    IdempotencyMode,
    IdempotencyPolicy,
    Keyring,
    MemoryAuditSink,
    Principal,
    Registry,
    RiskLevel,
    SideEffect,
    Tool,
    ToolCall,
    ToolContext,
    cli,
    open_store,
    tool,
)
from handrail.app import MEMORY
from handrail.errors import ConfigurationError
from handrail.events import AuditEvent
from handrail.loop import DEFAULT_BUDGET, agent_loop
from handrail.loop.agent import DEFAULT_SYSTEM, RunStatus
from handrail.loop.answers import FinalState
from handrail.loop.budgets import BudgetReason, RunBudget
from handrail.loop.models import ModelReply, ScriptedModelClient, Usage
from handrail.record.batching import AuditWriterState, BatchingAuditSink
from handrail.store import MemoryStore, PostgresStore, SqliteStore

ALICE = Principal(
    user_id="alice",
    tenant_id="acme",
    permissions=frozenset({"books.read", "tickets.create"}),
)
STAGES = ["lookup", "syntax", "schema", "permission", "business", "authorization", "execute"]
KEYS = Keyring.new_key_text("k1", token_bytes=lambda n: b"s" * n)


@tool(risk=RiskLevel.L1_INTERNAL_READ, namespace="shop", permissions={"books.read"})
async def check_inventory(
    isbn: Annotated[str, Field(pattern=r"^\d{13}$")],
    tenant: Annotated[str, FromPrincipal("tenant_id")],
) -> dict[str, object]:
    """How many copies of a book are in stock."""
    return {"isbn": isbn, "tenant": tenant, "in_stock": 3}


def _ticket_tool(effects: Path) -> Tool:
    """A confirmed write that appends one line per idempotency key to `effects`."""

    def create_ticket(
        ctx: ToolContext, asset_id: Annotated[str, Field(pattern=r"^asset-[0-9]+$")]
    ) -> dict[str, str]:
        """Open a recovery ticket for an asset."""
        assert ctx.idempotency_key is not None
        lines = effects.read_text(encoding="utf-8").splitlines() if effects.exists() else []
        if ctx.idempotency_key not in lines:
            lines.append(ctx.idempotency_key)
            effects.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return {"ticket_no": f"TK-{lines.index(ctx.idempotency_key) + 1:04d}"}

    return tool(
        risk=RiskLevel.L2_REVERSIBLE_WRITE,
        side_effect=SideEffect.EXTERNAL_WRITE,
        permissions={"tickets.create"},
        idempotency=IdempotencyPolicy(mode=IdempotencyMode.PLAN),
        confirmation=ConfirmationPolicy(mode=ConfirmationMode.CONFIRM),
        business_id="ticket_no",
    )(create_ticket)


def _call(call_id: str, isbn: str = "9780134685991") -> ToolCall:
    return ToolCall(id=call_id, name="shop.check_inventory", arguments=json.dumps({"isbn": isbn}))


def _reply(*calls: ToolCall, text: str | None = None) -> ModelReply:
    return ModelReply(
        calls=calls,
        text=text,
        usage=Usage(input_tokens=10, output_tokens=5),
        finish_reason="tool_calls" if calls else "stop",
        model="scripted-model",
    )


def _stages(events: list[AuditEvent], call_id: str) -> list[str]:
    return [e.stage for e in events if e.tool_call_id == call_id]


# --- audit on by default ------------------------------------------------------------------------


def test_a_call_through_the_gate_leaves_every_stage_in_a_sqlite_file_after_close(
    tmp_path: Path,
) -> None:
    db = tmp_path / "app.db"
    with Handrail.open(db, registry=[check_inventory]) as app:
        assert app.gate.handle_sync(_call("c1"), ALICE).status.value == "ok"
        assert app.gate.handle_sync(_call("c2", isbn="978-0"), ALICE).error_type == (
            ErrorCode.INVALID_ARGUMENTS
        )
    reopened = SqliteStore.open(db)
    try:
        events = reopened.read_audit(limit=100)
    finally:
        reopened.close()
    assert _stages(events, "c1") == STAGES
    assert _stages(events, "c2") == ["lookup", "syntax", "schema"]
    assert [e.code for e in events if e.tool_call_id == "c2"][-1] == "INVALID_ARGUMENTS"
    # A registry built from tools is audited into the same store.
    assert [(e.kind, e.decision) for e in events if e.tool_call_id is None] == [
        ("registry", "accepted")
    ]


def test_the_audit_trail_of_a_reopened_file_grows_and_the_cli_reads_it(tmp_path: Path) -> None:
    db = tmp_path / "app.db"
    for call_id in ("first", "second"):
        with Handrail.open(f"sqlite:///{db}", registry=[check_inventory]) as app:
            app.gate.handle_sync(_call(call_id), ALICE)
    result = CliRunner().invoke(cli.app, ["audit", "tail", "--db", str(db), "-n", "100"])
    assert result.exit_code == 0, result.output
    assert "first" in result.stdout
    assert "second" in result.stdout


def test_audit_false_records_no_event(tmp_path: Path) -> None:
    db = tmp_path / "app.db"
    with Handrail.open(db, registry=[check_inventory], audit=False) as app:
        assert app.audit is None
        assert app.gate.handle_sync(_call("c1"), ALICE).status.value == "ok"
    reopened = SqliteStore.open(db)
    try:
        assert reopened.read_audit(limit=100) == []
    finally:
        reopened.close()


def test_a_sink_passed_in_receives_the_events_instead_and_is_not_closed(tmp_path: Path) -> None:
    db = tmp_path / "app.db"
    memory = MemoryAuditSink()
    with Handrail.open(db, registry=[check_inventory], audit=memory) as app:
        assert app.audit is memory
        app.gate.handle_sync(_call("c1"), ALICE)
    assert _stages(memory.events, "c1") == STAGES
    reopened = SqliteStore.open(db)
    batching = BatchingAuditSink(reopened)
    try:
        assert reopened.read_audit(limit=100) == []
        with Handrail.open(reopened, registry=[check_inventory], audit=batching) as app:
            app.gate.handle_sync(_call("c2"), ALICE)
        # Neither the store nor the sink was Handrail's to close.
        assert batching.health().state is AuditWriterState.RUNNING
        batching.flush()
        assert _stages(reopened.read_audit(limit=100), "c2") == STAGES
    finally:
        batching.close()
        reopened.close()


def test_a_memory_store_keeps_the_trail_for_the_process() -> None:
    with Handrail.open(MEMORY, registry=[check_inventory]) as app:
        assert isinstance(app.store, MemoryStore)
        app.gate.handle_sync(_call("c1"), ALICE)
    assert _stages(app.store.read_audit(limit=100), "c1") == STAGES


@pytest.mark.anyio
async def test_async_with_closes_and_flushes(tmp_path: Path) -> None:
    db = tmp_path / "app.db"
    async with Handrail.open(db, registry=[check_inventory]) as app:
        envelopes = await app.handle_batch([_call("a"), _call("b")], ALICE)
        assert [e.status.value for e in envelopes] == ["ok", "ok"]
        assert (await app.handle(_call("c"), ALICE)).status.value == "ok"
    app.close()  # a second close does nothing
    reopened = SqliteStore.open(db)
    try:
        events = reopened.read_audit(limit=100)
    finally:
        reopened.close()
    assert [_stages(events, call_id) for call_id in "abc"] == [STAGES] * 3


@pytest.mark.postgres
def test_postgresql_by_url_is_migrated_and_audited(postgres_url: str) -> None:
    call_id = f"pg-{uuid.uuid4().hex[:8]}"
    with Handrail.open(postgres_url, registry=[check_inventory]) as app:
        assert isinstance(app.store, PostgresStore)
        app.gate.handle_sync(_call(call_id), ALICE)
    reopened = PostgresStore.open(postgres_url)
    try:
        events = reopened.read_audit(limit=100, tool_call_id=call_id)
    finally:
        reopened.close()
    assert _stages(events, call_id) == STAGES


def test_an_unsupported_url_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError):
        Handrail.open("mysql://db/handrail", registry=[check_inventory])


# --- keyring rules ------------------------------------------------------------------------------


def test_write_tools_over_a_durable_store_need_a_keyring(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="keyring"):
        Handrail.open(tmp_path / "app.db", registry=[_ticket_tool(tmp_path / "fx")])
    # The file was opened and closed again: it opens with a keyring now.
    keyring = Keyring.from_text(KEYS)
    with Handrail.open(
        tmp_path / "app.db", registry=[_ticket_tool(tmp_path / "fx")], keyring=keyring
    ) as app:
        assert app.writes.store is app.store


@pytest.mark.anyio
async def test_write_tools_over_memory_get_a_key_for_the_process(tmp_path: Path) -> None:
    call = ToolCall(id="w1", name="create_ticket", arguments='{"asset_id": "asset-1"}')
    async with Handrail.open(MEMORY, registry=[_ticket_tool(tmp_path / "fx")]) as app:
        envelope = await app.handle(call, ALICE)
        assert envelope.error_type is ErrorCode.NEEDS_CONFIRMATION
        assert isinstance(envelope.data, dict)
        plan_id = envelope.data["plan_id"]
        token = await app.writes.issue_token(plan_id, ALICE)
        await app.writes.confirm(plan_id, token.value, ALICE)
        outcome = await app.writes.execute_plan(plan_id, ALICE)
        assert outcome.business_id == "TK-0001"
    assert (tmp_path / "fx").read_text(encoding="utf-8").count("\n") == 1


def test_without_write_tools_or_keyring_writes_are_off_and_refused(tmp_path: Path) -> None:
    registry = Registry()
    registry.register(check_inventory)
    with Handrail.open(tmp_path / "app.db", registry=registry) as app:
        with pytest.raises(ConfigurationError, match="writes are off"):
            _ = app.writes
        registry.register(_ticket_tool(tmp_path / "fx"))  # added after open: never planned
        call = ToolCall(id="w1", name="create_ticket", arguments='{"asset_id": "asset-1"}')
        assert app.gate.handle_sync(call, ALICE).error_type is ErrorCode.RISK_BLOCKED
    assert not (tmp_path / "fx").exists()


# --- the agent factory --------------------------------------------------------------------------


def test_the_agent_has_a_finite_default_budget_and_passes_options_on() -> None:
    assert DEFAULT_BUDGET.max_steps > 0
    assert 0 < DEFAULT_BUDGET.deadline_seconds < float("inf")
    assert DEFAULT_BUDGET.max_input_tokens is not None
    assert DEFAULT_BUDGET.max_output_tokens is not None
    with Handrail.open(MEMORY, registry=[check_inventory]) as app:
        model = ScriptedModelClient([_reply(text="done")] * 2)
        assert app.agent(model)._budget is DEFAULT_BUDGET
        assert app.agent(model)._system == DEFAULT_SYSTEM
        custom = app.agent(model, budget=RunBudget(max_steps=1, deadline_seconds=5.0), system="S")
        assert custom._budget.max_steps == 1
        assert custom._system == "S"
        with pytest.raises(TypeError):
            app.agent(model, no_such_option=True)
        plain = agent_loop(gate=app.gate, model=model, store=app.store)
        assert plain._budget is DEFAULT_BUDGET
        assert plain._writes is None


@pytest.mark.anyio
async def test_a_run_ends_when_the_default_step_budget_is_spent() -> None:
    calls = [_reply(_call(f"c{n}", isbn=f"978013468{n:04d}")) for n in range(100)]
    model = ScriptedModelClient(calls)
    async with Handrail.open(MEMORY, registry=[check_inventory]) as app:
        outcome = await app.agent(model).run("Count the books.", ALICE)
    assert outcome.status is RunStatus.BUDGET_EXHAUSTED
    assert outcome.trip is not None
    assert outcome.trip.reason is BudgetReason.STEPS
    assert len(model.requests) == DEFAULT_BUDGET.max_steps


@pytest.mark.anyio
async def test_a_suspended_run_resumes_after_reopening_the_same_sqlite_file(
    tmp_path: Path,
) -> None:
    db, effects = tmp_path / "app.db", tmp_path / "effects.txt"
    propose = ToolCall(id="c1", name="create_ticket", arguments='{"asset_id": "asset-1"}')
    async with Handrail.open(
        db, registry=[_ticket_tool(effects)], keyring=Keyring.from_text(KEYS)
    ) as first:
        started = await first.agent(ScriptedModelClient([_reply(propose)])).run(
            "Open a ticket for asset-1", ALICE
        )
        assert started.status is RunStatus.SUSPENDED
        (plan_id,) = started.plan_ids
        token = await first.writes.issue_token(plan_id, ALICE)
    assert not effects.exists()

    final = json.dumps(
        {
            "state": "succeeded",
            "message": "Ticket opened.",
            "evidence": [{"tool": "create_ticket", "plan_id": plan_id}],
        }
    )
    async with Handrail.open(
        db, registry=[_ticket_tool(effects)], keyring=Keyring.from_text(KEYS)
    ) as second:
        model = ScriptedModelClient([_reply(text=final)])
        done = await second.agent(model).resume(
            started.run_id, ALICE, plan_id=plan_id, token=token.value
        )
    assert done.status is RunStatus.FINISHED
    assert done.answer is not None
    assert done.answer.answer.state is FinalState.SUCCEEDED
    assert not done.answer.downgraded
    assert len(effects.read_text(encoding="utf-8").splitlines()) == 1
    reopened = open_store(db)
    try:
        stages = {e.stage for e in reopened.read_audit(limit=500)}
    finally:
        reopened.close()
    assert {"lookup", "authorization", "plan", "confirm"} <= stages
