"""Idempotency under attack: one intent, one effect; a reused key never runs something else.

A command id reused with other arguments is refused and audited and runs nothing. Keys
are scoped: two tenants (and, with PRINCIPAL scope, two users) with the same command id
are independent intents that never see each other's results. Thirty-two concurrent
duplicates make one effect. A stored result answers repeats for the retention window;
after it only a tombstone of the key stays, which refuses every repeat. Argument bombs
sent to a write are refused before any plan or execution record exists.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any

import pytest
import sqlalchemy as sa
from pydantic import Field

from handrail import (
    Envelope,
    ErrorCode,
    Gate,
    Principal,
    Registry,
    RiskLevel,
    SideEffect,
    Status,
    ToolCall,
    ToolContext,
    tool,
)
from handrail.declare.definition import Tool
from handrail.declare.hooks import Found, NotExecuted, Reconciled
from handrail.execution import ExecutionStatus, command_key
from handrail.signing import SigningKey
from handrail.spec import (
    ConfirmationMode,
    ConfirmationPolicy,
    IdempotencyMode,
    IdempotencyPolicy,
    IdempotencyScope,
)
from handrail.store import MemoryStore, SqlStore, Store
from handrail.testing import FixedClock, MemoryAuditSink, sequential_ids
from handrail.writes.confirmation import Keyring
from handrail.writes.reconcile import Reconciler
from handrail.writes.service import Writes

pytestmark = pytest.mark.anyio

SEND = frozenset({"mail.send"})
ALICE = Principal(user_id="alice", tenant_id="t1", permissions=SEND)
BOB = Principal(user_id="bob", tenant_id="t1", permissions=SEND)
MALLORY = Principal(user_id="mallory", tenant_id="t2", permissions=SEND)
DUPLICATES = 32
DAY = 86_400.0


@dataclass
class Outbox:
    """The downstream mail system: every call that reaches it sends one message."""

    sent: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    gate_open: asyncio.Event | None = None
    entered: int = 0

    async def send(self, ctx: ToolContext, arguments: dict[str, Any]) -> dict[str, str]:
        assert ctx.idempotency_key is not None
        self.entered += 1
        if self.gate_open is not None:
            await self.gate_open.wait()
        message_id = f"m-{len(self.sent) + 1}"
        self.sent.append((ctx.idempotency_key, ctx.principal.tenant_id, arguments))
        return {"message_id": message_id, "to": arguments["to"]}

    def reconcile(self, key: str, ctx: ToolContext) -> Reconciled:
        found = [n for n, (k, _, _) in enumerate(self.sent, 1) if k == key]
        return Found({"message_id": f"m-{found[0]}"}) if found else NotExecuted()

    def effects(self, key: str) -> int:
        return sum(1 for k, _, _ in self.sent if k == key)


def _mail_tool(outbox: Outbox, name: str, scope: IdempotencyScope) -> Tool:
    @tool(
        risk=RiskLevel.L2_REVERSIBLE_WRITE,
        namespace="mail",
        name=name,
        side_effect=SideEffect.EXTERNAL_WRITE,
        permissions=SEND,
        confirmation=ConfirmationPolicy(),
        idempotency=IdempotencyPolicy(mode=IdempotencyMode.COMMAND_ID, scope=scope),
        reconcile=outbox.reconcile,
        business_id="message_id",
    )
    async def send(
        ctx: ToolContext,
        to: Annotated[str, Field(pattern=r"^[a-z]+@example\.org$")],
        text: Annotated[str, Field(max_length=2000)],
    ) -> dict[str, str]:
        """Send a mail (keyed by the application's command id)."""
        return await outbox.send(ctx, {"to": to, "text": text})

    return send


@dataclass
class Host:
    store: Store
    sleep: Callable[[float], Any] = asyncio.sleep
    clock: FixedClock = field(default_factory=FixedClock)
    audit: MemoryAuditSink = field(default_factory=MemoryAuditSink)
    outbox: Outbox = field(default_factory=Outbox)
    registry: Registry = field(init=False)
    writes: Writes = field(init=False)
    gate: Gate = field(init=False)
    calls: int = 0

    def __post_init__(self) -> None:
        self.registry = Registry()
        self.registry.register(_mail_tool(self.outbox, "send", IdempotencyScope.TENANT))
        self.registry.register(_mail_tool(self.outbox, "send_own", IdempotencyScope.PRINCIPAL))
        self.registry.register(_planned_tool(self.outbox))
        self.writes = Writes(
            self.registry,
            self.store,
            Keyring(SigningKey("k1", b"k" * 32)),
            clock=self.clock,
            audit=self.audit,
            new_id=sequential_ids("plan"),
            sleep=self.sleep,
        )
        self.gate = Gate(self.registry, writes=self.writes, clock=self.clock, audit=self.audit)

    async def send(
        self,
        who: Principal,
        command_id: str | None,
        arguments: object,
        *,
        name: str = "mail.send",
    ) -> Envelope:
        self.calls += 1
        call = ToolCall(id=f"call-{self.calls}", name=name, arguments=arguments)  # type: ignore[arg-type]
        return await self.gate.handle(call, who, command_id=command_id)

    def key(self, who: Principal, command_id: str, *, name: str = "mail.send") -> str:
        scope = self.registry.get(name).spec.idempotency.scope
        return command_key(
            tenant_id=who.tenant_id,
            tool=name,
            command_id=command_id,
            user_id=who.user_id,
            scope=scope,
        )


def _planned_tool(outbox: Outbox) -> Tool:
    @tool(
        risk=RiskLevel.L3_HIGH_RISK_WRITE,
        namespace="mail",
        side_effect=SideEffect.EXTERNAL_WRITE,
        permissions=SEND,
        confirmation=ConfirmationPolicy(mode=ConfirmationMode.CONFIRM),
        reconcile=outbox.reconcile,
    )
    async def broadcast(
        ctx: ToolContext,
        to: Annotated[list[str], Field(max_length=50)],
        text: Annotated[str, Field(max_length=2000)],
    ) -> dict[str, str]:
        """Send one mail to many recipients (needs the user's confirmation)."""
        return await outbox.send(ctx, {"to": ",".join(to), "text": text})

    return broadcast


HELLO = {"to": "ann@example.org", "text": "hello"}
OTHER = {"to": "ann@example.org", "text": "wire the money elsewhere"}


@pytest.fixture
def host(store: Store) -> Host:
    return Host(store=store)


@pytest.fixture
def memory_host() -> Host:
    return Host(store=MemoryStore())


def _mismatch_events(host: Host) -> list[str]:
    return [
        event.detail or ""
        for event in host.audit.events
        if event.kind == "write" and event.code == ErrorCode.IDEMPOTENCY_MISMATCH
    ]


@pytest.mark.invariant(5)
async def test_a_command_id_reused_with_other_arguments_is_refused_audited_and_runs_nothing(
    host: Host,
) -> None:
    first = await host.send(ALICE, "cmd-1", HELLO)
    assert first.status is Status.OK
    key = host.key(ALICE, "cmd-1")
    stored = host.store.get_execution(key)
    assert stored is not None

    for who in (ALICE, BOB):
        refused = await host.send(who, "cmd-1", OTHER)
        assert refused.error_type is ErrorCode.IDEMPOTENCY_MISMATCH
        assert refused.data is None
        assert "wire the money" not in refused.to_json()
    assert host.outbox.effects(key) == 1
    assert host.outbox.entered == 1
    assert host.store.get_execution(key) == stored
    audited = _mismatch_events(host)
    assert len(audited) == 2
    assert all(key in detail for detail in audited)

    # The original intent still answers with its own result.
    again = await host.send(ALICE, "cmd-1", HELLO)
    assert (again.status, again.data) == (Status.OK, first.data)
    assert host.outbox.effects(key) == 1


@pytest.mark.invariant(4)
async def test_the_same_command_id_in_two_tenants_is_two_independent_intents(host: Host) -> None:
    ours = await host.send(ALICE, "cmd-1", HELLO)
    theirs = await host.send(MALLORY, "cmd-1", OTHER)
    assert ours.status is theirs.status is Status.OK
    assert host.key(ALICE, "cmd-1") != host.key(MALLORY, "cmd-1")
    assert len(host.outbox.sent) == 2
    assert [tenant for _, tenant, _ in host.outbox.sent] == ["t1", "t2"]
    assert isinstance(ours.data, dict)
    assert isinstance(theirs.data, dict)
    assert ours.data["message_id"] != theirs.data["message_id"]

    # Each tenant's repeat replays its own result, never the other's.
    assert (await host.send(ALICE, "cmd-1", HELLO)).data == ours.data
    assert (await host.send(MALLORY, "cmd-1", OTHER)).data == theirs.data
    mismatch = await host.send(MALLORY, "cmd-1", HELLO)
    assert mismatch.error_type is ErrorCode.IDEMPOTENCY_MISMATCH
    assert len(host.outbox.sent) == 2


@pytest.mark.invariant(4)
@pytest.mark.parametrize(
    ("name", "effects"),
    [("mail.send", 1), ("mail.send_own", 2)],
    ids=["tenant scope", "principal scope"],
)
async def test_the_scope_decides_whether_two_users_share_a_command_id(
    memory_host: Host, name: str, effects: int
) -> None:
    host = memory_host
    alices = await host.send(ALICE, "cmd-1", HELLO, name=name)
    bobs = await host.send(BOB, "cmd-1", HELLO, name=name)
    assert alices.status is bobs.status is Status.OK
    assert len(host.outbox.sent) == effects
    same_key = host.key(ALICE, "cmd-1", name=name) == host.key(BOB, "cmd-1", name=name)
    assert same_key is (effects == 1)
    assert (alices.data == bobs.data) is (effects == 1)


@pytest.mark.invariant(4)
async def test_thirty_two_concurrent_duplicates_make_one_effect(store: Store) -> None:
    waiting: set[asyncio.Task[Any] | None] = set()
    host: Host

    async def poll(seconds: float) -> None:
        # A duplicate waiting on the running write; once every duplicate is either
        # inside the tool or waiting here, the downstream answers.
        waiting.add(asyncio.current_task())
        assert host.outbox.gate_open is not None
        if host.outbox.entered + len(waiting) >= DUPLICATES:
            host.outbox.gate_open.set()
        await asyncio.sleep(0)

    host = Host(store=store, sleep=poll)
    host.outbox.gate_open = asyncio.Event()
    envelopes = await asyncio.wait_for(
        asyncio.gather(*(host.send(ALICE, "cmd-1", HELLO) for _ in range(DUPLICATES))),
        timeout=60,
    )
    assert host.outbox.entered == 1
    assert len(host.outbox.sent) == 1
    assert len(waiting) == DUPLICATES - 1
    assert {e.status for e in envelopes} == {Status.OK}
    assert len({json.dumps(e.data, sort_keys=True) for e in envelopes}) == 1
    record = host.store.get_execution(host.key(ALICE, "cmd-1"))
    assert record is not None
    assert (record.status, record.attempts) == (ExecutionStatus.SUCCEEDED, 1)


@pytest.mark.invariant(4)
async def test_a_result_is_replayed_for_the_retention_window_and_only_a_tombstone_after_it(
    host: Host,
) -> None:
    first = await host.send(ALICE, "cmd-1", HELLO)
    key = host.key(ALICE, "cmd-1")
    reconciler = Reconciler(host.registry, host.store, clock=host.clock)

    host.clock.advance(DAY - 60)
    late = await host.send(ALICE, "cmd-1", HELLO)
    assert (late.status, late.data) == (Status.OK, first.data)
    assert (await reconciler.run_once()).purged == 0
    assert host.store.get_execution(key) is not None
    assert len(host.outbox.sent) == 1

    host.clock.advance(60)
    assert (await reconciler.run_once()).purged == 1
    tombstone = host.store.get_execution(key)
    assert tombstone is not None
    assert (tombstone.result, tombstone.arguments) == (None, "{}")
    # Past the window the result is gone, the key is not: the command never runs again,
    # and other arguments under it are still another intent.
    again = await host.send(ALICE, "cmd-1", HELLO)
    assert again.error_type is ErrorCode.ALREADY_EXECUTED
    assert again.data == {"business_id": first.data["message_id"]}
    other = await host.send(ALICE, "cmd-1", OTHER)
    assert other.error_type is ErrorCode.IDEMPOTENCY_MISMATCH
    assert len(host.outbox.sent) == 1


def _rows(store: Store, table: str) -> int:
    if isinstance(store, MemoryStore):
        return len(store._plans if table == "plans" else store._executions)
    assert isinstance(store, SqlStore)
    with store.engine.connect() as connection:
        return int(connection.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one())  # noqa: S608 - fixed names


def _deep(levels: int) -> str:
    return "[" * levels + "]" * levels


_BOMBS: dict[str, Callable[[str], str]] = {
    "deep nesting": lambda to: f'{{"to": {to}, "text": "x", "meta": {_deep(5_000)}}}',
    "two megabytes": lambda to: f'{{"to": {to}, "text": "{"x" * (2 << 20)}"}}',
    "a hundred thousand items": lambda to: f'{{"to": {to}, "text": "x", "tags": {[0] * 100_000}}}',
    "huge number": lambda to: f'{{"to": {to}, "text": "x", "n": 1{"0" * 5000}}}',
    "duplicate keys": lambda to: f'{{"to": {to}, "text": "a", "text": "b"}}',
    "truncated": lambda to: f'{{"to": {to}, "text": "x',
}
# A valid recipient for each tool, so that only the bomb is wrong with the arguments.
_TO = {"mail.broadcast": '["ann@example.org"]', "mail.send": '"ann@example.org"'}


@pytest.mark.parametrize("bomb", _BOMBS.values(), ids=_BOMBS.keys())
@pytest.mark.parametrize("name", ["mail.broadcast", "mail.send"], ids=["planned", "command"])
async def test_argument_bombs_sent_to_a_write_store_no_plan_and_no_execution(
    host: Host, name: str, bomb: Callable[[str], str]
) -> None:
    envelope = await host.send(ALICE, "cmd-1", bomb(_TO[name]), name=name)
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS
    assert len(envelope.to_json()) < 8_000
    refused = host.audit.for_call(envelope.call_id)[-1]
    assert (refused.stage, refused.decision) == ("syntax", "refused")
    assert _rows(host.store, "plans") == 0
    assert _rows(host.store, "executions") == 0
    assert host.outbox.entered == 0
    assert not [e for e in host.audit.events if e.kind in {"plan", "write"}]


async def test_a_planned_write_is_keyed_by_its_plan_not_by_a_command_id(memory_host: Host) -> None:
    host = memory_host
    arguments = {"to": ["ann@example.org"], "text": "hi"}
    first = await host.send(ALICE, "cmd-1", arguments, name="mail.broadcast")
    second = await host.send(ALICE, "cmd-1", arguments, name="mail.broadcast")
    # A command id does not turn a write that needs confirmation into one that runs.
    assert first.error_type is second.error_type is ErrorCode.NEEDS_CONFIRMATION
    assert isinstance(first.data, dict)
    assert isinstance(second.data, dict)
    assert first.data["plan_id"] != second.data["plan_id"]
    assert host.outbox.entered == 0
    assert _rows(host.store, "executions") == 0
