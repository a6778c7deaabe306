"""The write path keeps invariants 3-6 of DESIGN.md section 3 under any sequence of actions.

A hypothesis state machine plays the host and its users: it proposes plans (through the
gate or `Writes.propose`), issues tokens, presents them as issued, tampered, replayed,
for another plan or by another person, rejects plans, moves the clock past expiry,
executes plans and command writes against a downstream system that succeeds, loses the
response after committing, loses the request, fails transiently or fails for good, and
runs reconciler passes. After every step it checks the invariants against the store, a
log of every compare-and-set the store accepted, and the downstream system, which counts
effects per idempotency key. It runs on the in-memory store, SQLite and PostgreSQL.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
from collections import Counter
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from pydantic import Field

from _stores import STORE_TABLES
from handrail import (
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
from handrail.errors import (
    IllegalTransitionError,
    ToolFailed,
    ToolRetryable,
    WriteRefusedError,
)
from handrail.events import AuditEvent
from handrail.execution import (
    ExecutionRecord,
    ExecutionStatus,
    check_transition,
    command_key,
    plan_key,
)
from handrail.plans import PlanRecord, PlanState, check_plan_transition
from handrail.signing import SigningKey
from handrail.spec import (
    ConfirmationMode,
    ConfirmationPolicy,
    IdempotencyMode,
    IdempotencyPolicy,
    ReconcilePolicy,
)
from handrail.store import MemoryStore, SqlStore, Store
from handrail.testing import FixedClock, MemoryAuditSink, sequential_ids
from handrail.writes.confirmation import Keyring
from handrail.writes.reconcile import Reconciler
from handrail.writes.service import Writes

pytestmark = [
    pytest.mark.invariant(3),
    pytest.mark.invariant(4),
    pytest.mark.invariant(5),
    pytest.mark.invariant(6),
]

T = TypeVar("T")
S = ExecutionStatus
P = PlanState

TTL = 600.0
GRACE = 30.0
MAX_PLANS = 10
MAX_LIVE_PLANS = 4
WRITE = frozenset({"tickets.write"})
ALICE = Principal(user_id="alice", tenant_id="t1", permissions=WRITE)
BOB = Principal(user_id="bob", tenant_id="t1", permissions=WRITE)
MALLORY = Principal(user_id="mallory", tenant_id="t2", permissions=WRITE)
OSCAR = Principal(user_id="oscar", tenant_id="t2", permissions=WRITE)
PEOPLE = (ALICE, BOB, MALLORY, OSCAR)

OPEN = frozenset({P.PROPOSED, P.AWAITING_CONFIRMATION})
LIVE = OPEN | {P.CONFIRMED}
TERMINAL = frozenset({P.REJECTED, P.EXPIRED, P.EXECUTED})
# The plan machine of plans.py.
PLAN_MOVES: dict[PlanState, frozenset[PlanState]] = {
    P.PROPOSED: frozenset({P.AWAITING_CONFIRMATION, P.REJECTED, P.EXPIRED}),
    P.AWAITING_CONFIRMATION: frozenset({P.CONFIRMED, P.REJECTED, P.EXPIRED}),
    P.CONFIRMED: frozenset({P.EXECUTED, P.REJECTED, P.EXPIRED}),
    P.REJECTED: frozenset(),
    P.EXPIRED: frozenset(),
    P.EXECUTED: frozenset(),
}

Behaviour = Literal["ok", "lose_response", "lose_request", "retryable", "fail"]
BEHAVIOURS: tuple[Behaviour, ...] = ("ok", "lose_response", "lose_request", "retryable", "fail")
# What a run of the tool must leave its RUNNING record as, by what the downstream did.
OUTCOME_OF: dict[str, ExecutionStatus] = {
    "ok": S.SUCCEEDED,
    "lose_response": S.UNKNOWN,
    "lose_request": S.UNKNOWN,
    "retryable": S.PREPARED,
    "fail": S.FAILED_FINAL,
}
ENVELOPE_CODE: dict[str, ErrorCode | None] = {
    "ok": None,
    "lose_response": ErrorCode.OUTCOME_UNKNOWN,
    "lose_request": ErrorCode.OUTCOME_UNKNOWN,
    "retryable": ErrorCode.TRANSIENT,
    "fail": ErrorCode.FAILED_FINAL,
}

# Examples per backend: PostgreSQL round trips cost the most, the memory store the least.
EXAMPLES = {"MemoryStore": 100, "SqliteStore": 40, "PostgresStore": 30}
SETTINGS = settings(
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def _same(a: Principal, b: Principal) -> bool:
    return (a.user_id, a.tenant_id) == (b.user_id, b.tenant_id)


def _colleague(of: Principal) -> Principal:
    """Another user of the same tenant."""
    return next(p for p in PEOPLE if p.tenant_id == of.tenant_id and p.user_id != of.user_id)


def _outsider(of: Principal) -> Principal:
    """A user of another tenant."""
    return next(p for p in PEOPLE if p.tenant_id != of.tenant_id)


def _relative(of: Principal, relation: str) -> Principal:
    return {"self": of, "colleague": _colleague(of), "outsider": _outsider(of)}[relation]


# --- the downstream system ------------------------------------------------------------------


@dataclass
class Downstream:
    """An external system that records one effect per call, keyed by idempotency key.

    It does not deduplicate: a second call for a key would be a second effect, which is
    exactly what invariant 4 forbids Handrail to cause. `behaviour` says what the next
    call does; `reachable` whether reconcile checks get an answer.
    """

    behaviour: Behaviour = "ok"
    reachable: bool = True
    effects: dict[str, list[str]] = field(default_factory=dict)
    calls: list[tuple[str, Behaviour]] = field(default_factory=list)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def perform(self, key: str) -> dict[str, str]:
        behaviour = self.behaviour
        self.calls.append((key, behaviour))
        if behaviour == "retryable":
            raise ToolRetryable("the ticket system is busy")
        if behaviour == "fail":
            raise ToolFailed("the ticket system refused the ticket")
        if behaviour == "lose_request":
            raise TimeoutError("the request was lost before the system saw it")
        ticket = f"TK-{next(self._ids)}"
        self.effects.setdefault(key, []).append(ticket)
        if behaviour == "lose_response":
            raise TimeoutError("the response was lost after the ticket was made")
        return {"ticket": ticket}

    def reconcile(self, key: str, ctx: ToolContext) -> Reconciled:
        if not self.reachable:
            raise ConnectionError("the ticket system does not answer")
        found = self.effects.get(key)
        return Found({"ticket": found[0]}) if found else NotExecuted()


def _tools(downstream: Downstream) -> tuple[Tool, Tool]:
    policy = ReconcilePolicy(not_found_grace=GRACE, first_check=5.0, max_interval=60.0)

    @tool(
        risk=RiskLevel.L2_REVERSIBLE_WRITE,
        side_effect=SideEffect.EXTERNAL_WRITE,
        permissions=WRITE,
        confirmation=ConfirmationPolicy(mode=ConfirmationMode.CONFIRM, ttl_seconds=TTL),
        reconcile=downstream.reconcile,
        reconcile_policy=policy,
        business_id="ticket",
    )
    def file_ticket(
        ctx: ToolContext,
        asset: Annotated[str, Field(pattern=r"^asset-[0-9]$")],
        reason: Literal["disk", "network"],
    ) -> dict[str, str]:
        """Open a repair ticket for an asset."""
        assert ctx.idempotency_key is not None
        return downstream.perform(ctx.idempotency_key)

    @tool(
        risk=RiskLevel.L2_REVERSIBLE_WRITE,
        side_effect=SideEffect.EXTERNAL_WRITE,
        permissions=WRITE,
        confirmation=ConfirmationPolicy(),
        idempotency=IdempotencyPolicy(mode=IdempotencyMode.COMMAND_ID),
        reconcile=downstream.reconcile,
        reconcile_policy=policy,
        business_id="ticket",
    )
    def log_incident(ctx: ToolContext, note: Literal["fan", "psu"]) -> dict[str, str]:
        """Log an incident (a write keyed by the application's command id)."""
        assert ctx.idempotency_key is not None
        return downstream.perform(ctx.idempotency_key)

    return file_ticket, log_incident


# --- a store that reports what it accepted ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class Move:
    """One accepted write of an execution record (`old` is None for the insert)."""

    key: str
    plan_id: str | None
    old: ExecutionStatus | None
    new: ExecutionStatus
    in_reconciler: bool
    last_call: tuple[str, Behaviour] | None


@dataclass
class StoreLog:
    moves: list[Move] = field(default_factory=list)
    plan_moves: list[tuple[str, PlanState, PlanState]] = field(default_factory=list)
    nonces: list[tuple[str, str, str]] = field(default_factory=list)
    in_reconciler: bool = False
    writes: int = 0
    """Accepted writes of any kind: the store is unchanged while this is."""


class ObservedStore:
    """Delegates to a real Store and logs every compare-and-set that it accepted."""

    def __init__(self, inner: Store, log: StoreLog, downstream: Downstream) -> None:
        self._inner = inner
        self._log = log
        self._downstream = downstream

    def _last_call(self) -> tuple[str, Behaviour] | None:
        calls = self._downstream.calls
        return calls[-1] if calls else None

    def migrate(self) -> None:
        self._inner.migrate()

    def append_audit(self, events: Sequence[AuditEvent]) -> None:
        self._inner.append_audit(events)

    def read_audit(
        self, *, limit: int = 50, tenant_id: str | None = None, tool_call_id: str | None = None
    ) -> list[AuditEvent]:
        return self._inner.read_audit(limit=limit, tenant_id=tenant_id, tool_call_id=tool_call_id)

    def insert_plan(self, record: PlanRecord) -> bool:
        return self._counted(self._inner.insert_plan(record))

    def _counted(self, accepted: bool) -> bool:
        self._log.writes += accepted
        return accepted

    def get_plan(self, plan_id: str) -> PlanRecord | None:
        return self._inner.get_plan(plan_id)

    def move_plan(
        self,
        plan_id: str,
        *,
        expect_state: PlanState,
        expect_version: int,
        state: PlanState,
        at: datetime,
    ) -> bool:
        moved = self._inner.move_plan(
            plan_id, expect_state=expect_state, expect_version=expect_version, state=state, at=at
        )
        if moved:
            self._log.plan_moves.append((plan_id, expect_state, state))
        return self._counted(moved)

    def use_nonce(self, nonce: str, *, plan_id: str, user_id: str, at: datetime) -> bool:
        used = self._inner.use_nonce(nonce, plan_id=plan_id, user_id=user_id, at=at)
        if used:
            self._log.nonces.append((nonce, plan_id, user_id))
        return self._counted(used)

    def add_approval(self, plan_id: str, *, user_id: str, at: datetime) -> bool:
        return self._counted(self._inner.add_approval(plan_id, user_id=user_id, at=at))

    def insert_execution(
        self,
        record: ExecutionRecord,
        *,
        require_confirmed_plan: bool = False,
    ) -> bool:
        inserted = self._inner.insert_execution(
            record,
            require_confirmed_plan=require_confirmed_plan,
        )
        if inserted:
            self._log.moves.append(
                Move(
                    key=record.idempotency_key,
                    plan_id=record.plan_id,
                    old=None,
                    new=record.status,
                    in_reconciler=self._log.in_reconciler,
                    last_call=self._last_call(),
                )
            )
        return self._counted(inserted)

    def get_execution(self, key: str) -> ExecutionRecord | None:
        return self._inner.get_execution(key)

    def replace_execution(
        self,
        record: ExecutionRecord,
        *,
        expect_status: ExecutionStatus,
        expect_version: int,
        lease_owner: str | None = None,
        lease_valid_at: datetime | None = None,
        require_confirmed_plan: bool = False,
    ) -> bool:
        replaced = self._inner.replace_execution(
            record,
            expect_status=expect_status,
            expect_version=expect_version,
            lease_owner=lease_owner,
            lease_valid_at=lease_valid_at,
            require_confirmed_plan=require_confirmed_plan,
        )
        if replaced:
            self._log.moves.append(
                Move(
                    key=record.idempotency_key,
                    plan_id=record.plan_id,
                    old=expect_status,
                    new=record.status,
                    in_reconciler=self._log.in_reconciler,
                    last_call=self._last_call(),
                )
            )
        return self._counted(replaced)

    def due_executions(self, *, now: datetime, limit: int) -> list[ExecutionRecord]:
        return self._inner.due_executions(now=now, limit=limit)

    def purge_executions(self, *, now: datetime) -> int:
        purged = self._inner.purge_executions(now=now)
        self._log.writes += purged
        return purged

    def close(self) -> None:
        """The test owns the real store; a machine never closes it."""


def _emptied(store: Store) -> Store:
    """The store of one example: a new MemoryStore, or the SQL store with its rows deleted."""
    if isinstance(store, MemoryStore):
        return MemoryStore()
    assert isinstance(store, SqlStore)
    with store.engine.begin() as connection:
        for table in STORE_TABLES:
            connection.execute(sa.text(f"DELETE FROM {table}"))  # noqa: S608 - fixed names
    return store


# --- the model ------------------------------------------------------------------------------------


@dataclass
class ModelPlan:
    plan_id: str
    key: str
    requester: Principal
    plan_hash: str
    expires_at: datetime
    state: PlanState = P.PROPOSED


@dataclass(frozen=True, slots=True)
class Snapshot:
    writes: int
    plans: dict[str, PlanRecord]
    executions: dict[str, ExecutionRecord | None]


@dataclass(frozen=True, slots=True)
class ModelToken:
    value: str
    plan_id: str
    plan_hash: str
    holder: Principal
    nonce: str


_URLSAFE = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_-"
_EXPIRY_FIELD = 4


def _tampered(value: str, field_index: int) -> str:
    """The token with the last character of one of its 7 fields replaced by another."""
    parts = value.split(".")
    text = parts[field_index]
    last = text[-1]
    alphabet = "0123456789" if field_index == _EXPIRY_FIELD else _URLSAFE
    replacement = alphabet[(alphabet.index(last) + 1) % len(alphabet)]
    parts[field_index] = text[:-1] + replacement
    return ".".join(parts)


def _code(outcome: object) -> ErrorCode | None:
    return outcome.code if isinstance(outcome, WriteRefusedError) else None


class WriteMachine(RuleBasedStateMachine):
    """Plans, tokens, executions and reconciliation over one store, checked every step."""

    base_store: Store

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.clock = FixedClock()
        self.downstream = Downstream()
        self.log = StoreLog()
        self.store = ObservedStore(_emptied(self.base_store), self.log, self.downstream)
        self.audit = MemoryAuditSink()
        self.ticket, self.incident = _tools(self.downstream)
        self.registry = Registry()
        self.registry.register(self.ticket)
        self.registry.register(self.incident)
        nonces = (f"nonce-{n:016d}" for n in itertools.count(1))
        self.keyring = Keyring(SigningKey("k1", b"s" * 32), nonces=lambda: next(nonces))
        self.writes = Writes(
            self.registry,
            self.store,
            self.keyring,
            clock=self.clock,
            audit=self.audit,
            worker_id="executor",
            new_id=sequential_ids("p"),
            rng=random.Random(1),  # noqa: S311 - jitter, not secrecy
        )
        self.gate = Gate(self.registry, writes=self.writes, clock=self.clock, audit=self.audit)
        self.reconciler = Reconciler(
            self.registry,
            self.store,
            clock=self.clock,
            rng=random.Random(2),  # noqa: S311 - jitter, not secrecy
        )
        self.calls = itertools.count(1)
        self.plans: list[ModelPlan] = []
        self.tokens: list[ModelToken] = []
        self.used_nonces: set[str] = set()
        # plan id -> the token of the confirm call that confirmed it.
        self.confirmed_with: dict[str, tuple[ModelToken, Principal]] = {}
        # command key -> the arguments it was first run with.
        self.intents: dict[str, dict[str, str]] = {}
        self.seen_states: dict[str, PlanState] = {}
        self.checked_moves = 0
        self._snapshot: Snapshot | None = None

    def teardown(self) -> None:
        self.loop.run_until_complete(self.loop.shutdown_default_executor())
        self.loop.close()

    def request(self, work: Coroutine[Any, Any, T]) -> T | WriteRefusedError:
        """Run one host request to its end; a refusal is returned, not raised."""
        try:
            return self.loop.run_until_complete(work)
        except WriteRefusedError as refused:
            return refused

    def record(self, plan: ModelPlan) -> PlanRecord:
        found = self.store.get_plan(plan.plan_id)
        assert found is not None
        return found

    def expire_if_live(self, plan: ModelPlan) -> None:
        # A decider that finds an open plan past its expiry moves it to EXPIRED; a
        # confirmed one stays (its execution may have started; executing it is refused).
        if plan.state in OPEN:
            plan.state = P.EXPIRED

    # --- proposing ----------------------------------------------------------------------------

    @initialize(first=st.sampled_from(PEOPLE), second=st.sampled_from(PEOPLE))
    def start_with_two_plans(self, first: Principal, second: Principal) -> None:
        self.propose(first, "asset-1", "disk", through_gate=True)
        self.propose(second, "asset-2", "network", through_gate=False)

    @precondition(
        lambda self: (
            len(self.plans) < MAX_PLANS
            and sum(p.state in LIVE for p in self.plans) < MAX_LIVE_PLANS
        )
    )
    @rule(
        who=st.sampled_from(PEOPLE),
        asset=st.sampled_from(["asset-1", "asset-2"]),
        reason=st.sampled_from(["disk", "network"]),
        through_gate=st.booleans(),
    )
    def propose(self, who: Principal, asset: str, reason: str, through_gate: bool) -> None:
        arguments = {"asset": asset, "reason": reason}
        if through_gate:
            call = ToolCall(
                id=f"call-{next(self.calls)}",
                name=self.ticket.name,
                arguments=json.dumps(arguments),
            )
            envelope = self.loop.run_until_complete(self.gate.handle(call, who))
            assert envelope.error_type is ErrorCode.NEEDS_CONFIRMATION, envelope
            assert isinstance(envelope.data, dict)
            plan_id = str(envelope.data["plan_id"])
        else:
            ctx = ToolContext(
                principal=who,
                call_id=f"call-{next(self.calls)}",
                tool=self.ticket.name,
                deadline=self.clock.monotonic() + 10,
                clock=self.clock,
            )
            plan = self.loop.run_until_complete(
                self.writes.propose(
                    self.ticket,
                    self.ticket.bind(arguments),
                    who,
                    mode=ConfirmationMode.CONFIRM,
                    ctx=ctx,
                )
            )
            plan_id = plan.plan_id
        stored = self.store.get_plan(plan_id)
        assert stored is not None
        assert stored.state is P.PROPOSED
        assert (stored.plan.user_id, stored.plan.tenant_id) == (who.user_id, who.tenant_id)
        assert stored.plan.argument_values == arguments
        self.plans.append(
            ModelPlan(
                plan_id=plan_id,
                key=plan_key(tenant_id=who.tenant_id, tool=self.ticket.name, plan_id=plan_id),
                requester=who,
                plan_hash=stored.plan.plan_hash,
                expires_at=stored.plan.expires_at,
            )
        )

    # --- tokens and confirmation ------------------------------------------------------------------

    @precondition(lambda self: self.plans)
    @rule(
        index=st.integers(0, MAX_PLANS - 1),
        relation=st.sampled_from(["self", "self", "self", "colleague", "outsider"]),
    )
    def issue_token(self, index: int, relation: str) -> None:
        plan = self.plans[index % len(self.plans)]
        who = _relative(plan.requester, relation)
        expected: ErrorCode | None = None
        if who.tenant_id != plan.requester.tenant_id:
            expected = ErrorCode.NOT_FOUND
        elif not _same(who, plan.requester):
            expected = ErrorCode.PERMISSION_DENIED
        elif self.clock.now() >= plan.expires_at:
            expected = ErrorCode.PLAN_EXPIRED
            self.expire_if_live(plan)
        elif plan.state not in OPEN:
            expected = ErrorCode.PLAN_CLOSED
        outcome = self.request(self.writes.issue_token(plan.plan_id, who))
        assert _code(outcome) == expected, (outcome, expected)
        if isinstance(outcome, WriteRefusedError):
            return
        plan.state = P.AWAITING_CONFIRMATION
        claims = outcome.claims
        assert (claims.plan_id, claims.plan_hash) == (plan.plan_id, plan.plan_hash)
        assert claims.expires_at == plan.expires_at
        self.tokens.append(
            ModelToken(
                value=outcome.value,
                plan_id=plan.plan_id,
                plan_hash=plan.plan_hash,
                holder=who,
                nonce=claims.nonce,
            )
        )

    @precondition(lambda self: self.plans)
    @rule(index=st.integers(0, MAX_PLANS - 1))
    def requester_confirms(self, index: int) -> None:
        """The usual host flow: a token for the requester, presented by them at once."""
        tokens = len(self.tokens)
        self.issue_token(index, "self")
        if len(self.tokens) > tokens:
            self.confirm(len(self.tokens) - 1, "as_issued", 0, 0, "colleague")

    def _expected_confirm(  # noqa: PLR0911 - one return per check of Writes.confirm
        self, plan: ModelPlan, token: ModelToken, presenter: Principal, *, intact: bool
    ) -> ErrorCode | None:
        """The refusal `Writes.confirm` owes, in the order of its checks; None to confirm."""
        if presenter.tenant_id != plan.requester.tenant_id:
            return ErrorCode.NOT_FOUND
        if not intact or not _same(presenter, token.holder):
            return ErrorCode.CONFIRMATION_INVALID
        if (token.plan_id, token.plan_hash) != (plan.plan_id, plan.plan_hash):
            return ErrorCode.PLAN_CHANGED
        if not _same(presenter, plan.requester):
            return ErrorCode.PERMISSION_DENIED
        if self.clock.now() >= plan.expires_at:
            self.expire_if_live(plan)
            return ErrorCode.PLAN_EXPIRED
        if token.nonce in self.used_nonces:
            return ErrorCode.CONFIRMATION_REPLAYED
        self.used_nonces.add(token.nonce)
        if plan.state not in OPEN:
            return ErrorCode.PLAN_CLOSED
        return None

    @precondition(lambda self: self.tokens)
    @rule(
        index=st.integers(0, 40),
        variant=st.sampled_from(
            ["as_issued", "as_issued", "as_issued", "tampered", "other_plan", "by_other"]
        ),
        other=st.integers(0, MAX_PLANS - 1),
        field_index=st.integers(0, 6),
        relation=st.sampled_from(["colleague", "outsider"]),
    )
    def confirm(
        self, index: int, variant: str, other: int, field_index: int, relation: str
    ) -> None:
        token = self.tokens[index % len(self.tokens)]
        plan = next(p for p in self.plans if p.plan_id == token.plan_id)
        presenter = token.holder
        value = token.value
        if variant == "tampered":
            value = _tampered(value, field_index)
        elif variant == "other_plan":
            plan = self.plans[other % len(self.plans)]
        elif variant == "by_other":
            presenter = _relative(token.holder, relation)
        before = self.record(plan)
        expected = self._expected_confirm(plan, token, presenter, intact=variant != "tampered")
        outcome = self.request(self.writes.confirm(plan.plan_id, value, presenter))
        assert _code(outcome) == expected, (outcome, expected, variant)
        after = self.record(plan)
        if expected is None:
            assert after.state is P.CONFIRMED
            plan.state = P.CONFIRMED
            self.confirmed_with[plan.plan_id] = (token, presenter)
        elif expected is ErrorCode.PLAN_EXPIRED:
            assert after.state is plan.state
        else:
            # A refused confirmation changes nothing about the plan.
            assert (after.state, after.version, after.approvals) == (
                before.state,
                before.version,
                before.approvals,
            )

    @precondition(lambda self: self.plans)
    @rule(
        index=st.integers(0, MAX_PLANS - 1),
        relation=st.sampled_from(["self", "self", "colleague", "outsider"]),
    )
    def reject(self, index: int, relation: str) -> None:
        plan = self.plans[index % len(self.plans)]
        who = _relative(plan.requester, relation)
        execution = self.store.get_execution(plan.key)
        started = execution is not None and execution.status not in {
            ExecutionStatus.PREPARED,
            ExecutionStatus.FAILED_FINAL,
        }
        outcome = self.request(self.writes.reject(plan.plan_id, who))
        code = _code(outcome)
        allowed: set[ErrorCode | None]
        if who.tenant_id != plan.requester.tenant_id:
            allowed = {ErrorCode.NOT_FOUND}
        elif not _same(who, plan.requester):
            # Only the requester decides on a CONFIRM plan, rejection included.
            allowed = {ErrorCode.PERMISSION_DENIED}
        elif plan.state in OPEN or (plan.state is P.CONFIRMED and not started):
            allowed = {None}
        else:
            # Terminal, or its execution started: it can no longer be withdrawn.
            allowed = {ErrorCode.PLAN_CLOSED}
        assert code in allowed, (outcome, plan.state, execution)
        if code is None:
            plan.state = P.REJECTED
        assert self.record(plan).state is plan.state

    @rule(seconds=st.sampled_from([1.0, 5.0, 31.0, 61.0, TTL - 1, TTL]))
    def advance_clock(self, seconds: float) -> None:
        self.clock.advance(seconds)

    # --- executing ----------------------------------------------------------------------------

    @precondition(lambda self: self.plans)
    @rule(
        index=st.integers(0, MAX_PLANS - 1),
        relation=st.sampled_from(["self", "self", "self", "colleague", "outsider"]),
        behaviour=st.sampled_from(BEHAVIOURS),
    )
    def execute_plan(self, index: int, relation: str, behaviour: Behaviour) -> None:
        plan = self.plans[index % len(self.plans)]
        who = _relative(plan.requester, relation)
        existing = self.store.get_execution(plan.key)
        calls_before = len(self.downstream.calls)
        self.downstream.behaviour = behaviour
        # Executing returns its refusals: an outcome without a record, with their code.
        outcome = self.loop.run_until_complete(self.writes.execute_plan(plan.plan_id, who))
        ran = len(self.downstream.calls) - calls_before
        assert ran in {0, 1}
        expected: ErrorCode | None = None
        if who.tenant_id != plan.requester.tenant_id:
            expected = ErrorCode.NOT_FOUND
        elif not _same(who, plan.requester):
            expected = ErrorCode.PERMISSION_DENIED
        elif existing is None or existing.status is S.PREPARED:
            # This call would run the tool (a first run, or again after a transient
            # failure that did nothing), so the plan must still be executable.
            if plan.state in OPEN:
                expected = ErrorCode.NEEDS_CONFIRMATION
            elif plan.state is P.EXPIRED or self.clock.now() >= plan.expires_at:
                expected = ErrorCode.PLAN_EXPIRED
            elif plan.state is not P.CONFIRMED:
                expected = ErrorCode.PLAN_CLOSED
        if expected is not None or outcome.record is None:
            assert outcome.code == expected, (outcome, expected)
            assert ran == 0
            assert self.store.get_execution(plan.key) == existing
            return
        if existing is not None and existing.status is not S.PREPARED:
            # A settled or UNKNOWN record answers every repeat; the tool is not called.
            assert ran == 0
            assert outcome.replayed
            assert outcome.record == existing
            return
        # A first run, or a run again after a transient failure that did nothing.
        assert ran == 1
        assert self.downstream.calls[-1] == (plan.key, behaviour)
        assert outcome.record is not None
        assert outcome.record.status is OUTCOME_OF[behaviour]
        assert outcome.envelope.error_type is ENVELOPE_CODE[behaviour]
        if behaviour == "ok":
            assert outcome.envelope.status is Status.OK
            assert outcome.envelope.data == {"ticket": self.downstream.effects[plan.key][0]}
            if plan.state is P.CONFIRMED:
                plan.state = P.EXECUTED

    @rule(
        behaviour=st.sampled_from(BEHAVIOURS),
        reachable=st.booleans(),
        wait=st.sampled_from([0.0, 5.0, 31.0]),
    )
    def reconcile(self, behaviour: Behaviour, reachable: bool, wait: float) -> None:
        self.clock.advance(wait)
        self.downstream.behaviour = behaviour
        self.downstream.reachable = reachable
        self.log.in_reconciler = True
        try:
            report = self.loop.run_until_complete(self.reconciler.run_once())
        finally:
            self.log.in_reconciler = False
            self.downstream.reachable = True
        assert report.purged == 0
        if not reachable:
            assert report.succeeded == report.retried == report.failed == ()
        for plan in self.plans:
            record = self.store.get_execution(plan.key)
            if record is not None and record.status is S.SUCCEEDED and plan.state is P.CONFIRMED:
                plan.state = P.EXECUTED

    @rule(
        who=st.sampled_from(PEOPLE),
        command=st.sampled_from(["cmd-1", "cmd-2"]),
        note=st.sampled_from(["fan", "psu"]),
        behaviour=st.sampled_from(BEHAVIOURS),
    )
    def command(self, who: Principal, command: str, note: str, behaviour: Behaviour) -> None:
        key = command_key(
            tenant_id=who.tenant_id,
            tool=self.incident.name,
            command_id=command,
            user_id=who.user_id,
            scope=self.incident.spec.idempotency.scope,
        )
        arguments = {"note": note}
        existing = self.store.get_execution(key)
        calls_before = len(self.downstream.calls)
        mismatches_before = self._mismatch_events()
        self.downstream.behaviour = behaviour
        call = ToolCall(
            id=f"call-{next(self.calls)}", name=self.incident.name, arguments=json.dumps(arguments)
        )
        envelope = self.loop.run_until_complete(self.gate.handle(call, who, command_id=command))
        ran = len(self.downstream.calls) - calls_before
        if existing is None:
            assert key not in self.intents
            self.intents[key] = arguments
        if self.intents[key] != arguments:
            # Invariant 5: refused, audited, and nothing ran or changed.
            assert envelope.error_type is ErrorCode.IDEMPOTENCY_MISMATCH
            assert ran == 0
            assert self.store.get_execution(key) == existing
            assert self._mismatch_events() > mismatches_before
            return
        if existing is not None and existing.status is not S.PREPARED:
            assert ran == 0
            return
        assert ran == 1
        assert self.downstream.calls[-1] == (key, behaviour)
        assert envelope.error_type is ENVELOPE_CODE[behaviour]
        record = self.store.get_execution(key)
        assert record is not None
        assert record.status is OUTCOME_OF[behaviour]

    def _mismatch_events(self) -> int:
        return sum(
            1
            for event in self.audit.events
            if event.kind == "write" and event.code == ErrorCode.IDEMPOTENCY_MISMATCH
        )

    # --- invariants ---------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """Every plan and execution record the machine made, read once per store change."""
        if self._snapshot is None or self._snapshot.writes != self.log.writes:
            self._snapshot = Snapshot(
                writes=self.log.writes,
                plans={plan.plan_id: self.record(plan) for plan in self.plans},
                executions={
                    key: self.store.get_execution(key)
                    for key in {move.key for move in self.log.moves}
                },
            )
        return self._snapshot

    @invariant()
    def plans_move_only_forward_and_as_modelled(self) -> None:
        for plan_id, old, new in self.log.plan_moves:
            assert new in PLAN_MOVES[old], (plan_id, old, new)
            assert plan_id in {p.plan_id for p in self.plans}
        plans = self.snapshot().plans
        for plan in self.plans:
            state = plans[plan.plan_id].state
            assert state is plan.state, (plan.plan_id, state, plan.state)
            seen = self.seen_states.get(plan.plan_id)
            if seen in TERMINAL:
                assert state is seen
            self.seen_states[plan.plan_id] = state

    @invariant()
    def invariant_3_only_the_requesters_own_token_confirms(self) -> None:
        for plan in self.plans:
            record = self.snapshot().plans[plan.plan_id]
            assert record.plan.verify_hash()
            if record.state in {P.CONFIRMED, P.EXECUTED}:
                token, presenter = self.confirmed_with[plan.plan_id]
                assert record.plan.confirmation is ConfirmationMode.CONFIRM
                assert _same(presenter, plan.requester)
                assert _same(token.holder, plan.requester)
                assert (token.plan_id, token.plan_hash) == (plan.plan_id, record.plan.plan_hash)
        used = Counter(nonce for nonce, _, _ in self.log.nonces)
        assert all(n == 1 for n in used.values()), used
        assert set(used) == self.used_nonces
        issued = {token.nonce: token for token in self.tokens}
        for nonce, plan_id, user_id in self.log.nonces:
            assert issued[nonce].plan_id == plan_id
            assert issued[nonce].holder.user_id == user_id

    @invariant()
    def invariant_4_one_key_one_effect(self) -> None:
        for key, effects in self.downstream.effects.items():
            assert len(effects) <= 1, (key, effects)
        inserted = Counter(move.key for move in self.log.moves if move.old is None)
        assert all(n == 1 for n in inserted.values()), inserted
        per_plan = Counter(
            move.plan_id for move in self.log.moves if move.old is None and move.plan_id
        )
        assert all(n == 1 for n in per_plan.values()), per_plan
        keys = {plan.plan_id: plan.key for plan in self.plans}
        for move in self.log.moves:
            if move.plan_id is not None:
                assert move.key == keys[move.plan_id]

    @invariant()
    def invariant_5_a_command_key_keeps_its_first_arguments(self) -> None:
        for key, arguments in self.intents.items():
            record = self.snapshot().executions[key]
            assert record is not None
            assert json.loads(record.arguments) == arguments
            assert len(self.downstream.effects.get(key, [])) <= 1

    @invariant()
    def invariant_6_unknown_ends_only_by_reconciliation(self) -> None:
        for move in self.log.moves[self.checked_moves :]:
            if move.old is S.UNKNOWN and move.new is not S.UNKNOWN:
                assert move.in_reconciler, move
            if move.old is S.RUNNING:
                # The record says what the downstream call did: a lost response or
                # request is UNKNOWN, never FAILED_FINAL; only a declared failure fails.
                assert move.last_call is not None
                assert move.last_call[0] == move.key
                assert move.new is OUTCOME_OF[move.last_call[1]], move
            if move.new is S.FAILED_FINAL:
                # Failed by a declared failure while running, or a released record
                # closed because its plan was withdrawn (nothing ran).
                assert move.old in {S.RUNNING, S.PREPARED}
                if move.old is S.PREPARED:
                    record = self.store.get_execution(move.key)
                    assert record is not None
                    assert record.error_code == ErrorCode.PLAN_CLOSED.value
            if move.old is not None:
                check_transition(move.old, move.new)
        self.checked_moves = len(self.log.moves)
        for key, record in self.snapshot().executions.items():
            assert record is not None
            effects = self.downstream.effects.get(key, [])
            if record.status is S.SUCCEEDED:
                assert effects
                assert record.business_id == effects[0]
                assert record.result_value == {"ticket": effects[0]}
            if record.status in {S.PREPARED, S.FAILED_FINAL}:
                assert not effects


def _machine_for(store: Store) -> type[WriteMachine]:
    return type(f"WriteMachineOn{type(store).__name__}", (WriteMachine,), {"base_store": store})


def test_the_write_path_keeps_invariants_3_to_6_under_any_sequence_of_actions(
    store: Store,
) -> None:
    examples = EXAMPLES[type(store).__name__]
    run_state_machine_as_test(
        _machine_for(store), settings=settings(SETTINGS, max_examples=examples)
    )


def test_the_plan_moves_of_this_machine_are_those_of_plans_py() -> None:
    for old, targets in PLAN_MOVES.items():
        for new in P:
            if new in targets:
                check_plan_transition(old, new)
            else:
                with pytest.raises(IllegalTransitionError):
                    check_plan_transition(old, new)


def test_a_proposed_plan_may_expire() -> None:
    check_plan_transition(P.PROPOSED, P.EXPIRED)
