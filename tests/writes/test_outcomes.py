"""What a host gets back from a write: one typed outcome on every path, and one rule.

Deciding raises, executing returns: a person's request (get a plan, its record, a
token, a confirmation) raises its refusal; an execution answers every refusal, failure
and unreachable store with a WriteOutcome whose envelope carries the code. The outcome
names the record, its status, the key, whether it was replayed and the business id.
Every test runs on each store (memory, SQLite, PostgreSQL).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

import handrail
from _write_tools import ALICE, ARGS, MALLORY, Downstream, keyring, ticket_tool
from handrail import (
    ConfirmationMode,
    ErrorCode,
    ExecutionStatus,
    Gate,
    IdempotencyMode,
    IdempotencyScope,
    Principal,
    Reconciler,
    Registry,
    Store,
    StoreError,
    Tool,
    ToolCall,
    WriteRefusedError,
    Writes,
)
from handrail.errors import NotFound
from handrail.errors import StoreError as StoreErrorItself
from handrail.execution import command_key, plan_key
from handrail.testing import FixedClock, sequential_ids

pytestmark = pytest.mark.anyio


async def _no_wait(_seconds: float) -> None:
    await asyncio.sleep(0)


class World:
    def __init__(self, store: Store, *tools: Tool) -> None:
        self.store = store
        self.downstream = Downstream()
        self.registry = Registry()
        for each in tools or (ticket_tool(self.downstream),):
            self.registry.register(each)
        self.clock = FixedClock()
        self.writes = self.writes_over(store)
        self.gate = Gate(self.registry, writes=self.writes, clock=self.clock, sleep=_no_wait)

    def writes_over(self, store: Store) -> Writes:
        return Writes(
            self.registry,
            store,
            keyring(),
            clock=self.clock,
            new_id=sequential_ids("p"),
            sleep=_no_wait,
        )

    async def proposed(
        self, principal: Principal = ALICE, *, tool: str = "create_ticket", n: int = 1
    ) -> str:
        arguments = ARGS.replace("asset-1", f"asset-{n}")
        call = ToolCall(id=f"c{n}", name=tool, arguments=arguments)
        outcome = await self.gate.handle_write(call, principal)
        assert outcome.code is ErrorCode.NEEDS_CONFIRMATION
        assert outcome.plan_id is not None
        assert (outcome.key, outcome.record, outcome.status) == (None, None, None)
        return outcome.plan_id

    async def confirmed(
        self, principal: Principal = ALICE, *, tool: str = "create_ticket", n: int = 1
    ) -> str:
        plan_id = await self.proposed(principal, tool=tool, n=n)
        token = await self.writes.issue_token(plan_id, principal)
        await self.writes.confirm(plan_id, token.value, principal)
        return plan_id


def _commands(downstream: Downstream) -> Tool:
    return ticket_tool(
        downstream, mode=ConfirmationMode.NONE, idempotency=IdempotencyMode.COMMAND_ID
    )


# --- one typed outcome ---------------------------------------------------------------------------


async def test_a_plans_outcome_names_its_record_key_business_id_and_replay(store: Store) -> None:
    world = World(store)
    plan_id = await world.confirmed()
    key = plan_key(tenant_id=ALICE.tenant_id, tool="create_ticket", plan_id=plan_id)
    assert await world.writes.record_for(plan_id, ALICE) is None

    first = await world.writes.execute_plan(plan_id, ALICE)
    again = await world.writes.execute_plan(plan_id, ALICE)

    assert (first.ok, first.code, first.key, first.plan_id) == (True, None, key, plan_id)
    assert (first.status, first.business_id, first.replayed) == (
        ExecutionStatus.SUCCEEDED,
        "TK-0001",
        False,
    )
    assert (again.key, again.business_id, again.replayed) == (key, "TK-0001", True)
    assert again.envelope.data == first.envelope.data
    assert await world.writes.record_for(plan_id, ALICE) == first.record
    assert world.downstream.calls == 1


async def test_a_command_through_the_gate_answers_with_its_outcome(store: Store) -> None:
    downstream = Downstream()
    world = World(store, _commands(downstream))
    call = ToolCall(id="c1", name="create_ticket", arguments=ARGS)
    key = command_key(
        tenant_id=ALICE.tenant_id,
        tool="create_ticket",
        command_id="cmd-1",
        user_id=ALICE.user_id,
        scope=IdempotencyScope.TENANT,
    )

    first = await world.gate.handle_write(call, ALICE, command_id="cmd-1")
    envelope = await world.gate.handle(call, ALICE, command_id="cmd-1")
    again = await world.gate.handle_write(call, ALICE, command_id="cmd-1")

    assert (first.key, first.status, first.business_id) == (
        key,
        ExecutionStatus.SUCCEEDED,
        "TK-0001",
    )
    assert (first.replayed, again.replayed, first.plan_id) == (False, True, None)
    assert envelope.to_json() == first.envelope.to_json() == again.envelope.to_json()
    assert downstream.calls == 1


async def test_a_batch_answers_with_one_outcome_per_call_in_order(store: Store) -> None:
    downstream = Downstream()
    world = World(store, _commands(downstream))
    calls = [
        ToolCall(id="c1", name="create_ticket", arguments=ARGS),
        ToolCall(id="c2", name="no_such_tool", arguments="{}"),
        ToolCall(id="c1", name="create_ticket", arguments=ARGS),
    ]

    outcomes = await world.gate.handle_batch_writes(calls, ALICE, command_ids={"c1": "cmd-1"})

    assert [o.envelope.call_id for o in outcomes] == ["c1", "c2", "c1"]
    assert [o.code for o in outcomes] == [
        None,
        ErrorCode.UNKNOWN_TOOL,
        ErrorCode.INVALID_ARGUMENTS,  # a repeated call id is refused
    ]
    assert outcomes[0].status is ExecutionStatus.SUCCEEDED
    assert outcomes[0].key is not None
    assert [(o.record, o.key) for o in outcomes[1:]] == [(None, None), (None, None)]
    assert downstream.calls == 1


async def test_a_read_or_a_refused_call_has_an_outcome_without_record_or_key(store: Store) -> None:
    world = World(store, _commands(Downstream()))
    blocked = await world.gate.handle_write(
        ToolCall(id="c1", name="create_ticket", arguments=ARGS), ALICE
    )
    assert blocked.code is ErrorCode.RISK_BLOCKED  # no command id
    assert (blocked.record, blocked.key, blocked.plan_id, blocked.replayed) == (
        None,
        None,
        None,
        False,
    )


# --- deciding raises, executing returns ----------------------------------------------------------


async def test_executing_returns_its_refusals_with_their_codes_and_runs_nothing(
    store: Store,
) -> None:
    world = World(store)
    plan_id = await world.proposed()

    early = await world.writes.execute_plan(plan_id, ALICE)
    foreign = await world.writes.execute_plan(plan_id, MALLORY)
    unknown = await world.writes.execute_plan("no-such-plan", ALICE, call_id="call-9")

    assert early.code is ErrorCode.NEEDS_CONFIRMATION
    assert (early.record, early.key, early.plan_id) == (None, None, plan_id)
    assert early.envelope.call_id == plan_id
    assert early.envelope.tool == "create_ticket"
    assert not early.envelope.retryable
    assert foreign.code is unknown.code is ErrorCode.NOT_FOUND
    assert foreign.envelope.summary == unknown.envelope.summary  # no existence leak
    assert (foreign.plan_id, unknown.plan_id) == (None, None)
    assert unknown.envelope.call_id == "call-9"
    assert world.downstream.calls == 0


async def test_deciding_raises_its_refusals_with_their_codes(store: Store) -> None:
    world = World(store)
    plan_id = await world.proposed()

    with pytest.raises(WriteRefusedError) as foreign:
        await world.writes.record_for(plan_id, MALLORY)
    with pytest.raises(WriteRefusedError) as forged:
        await world.writes.confirm(plan_id, "not-a-token", ALICE)

    assert foreign.value.code is ErrorCode.NOT_FOUND
    assert forged.value.code is ErrorCode.CONFIRMATION_INVALID


@pytest.mark.parametrize(
    ("failure", "code"),
    [
        (NotFound("The asset was retired."), ErrorCode.NOT_FOUND),
        (ConnectionError("the asset registry is down"), ErrorCode.TRANSIENT),
        (RuntimeError("a bug in the version hook"), ErrorCode.FAILED_FINAL),
    ],
)
async def test_a_version_check_that_fails_is_returned_with_its_code_and_runs_nothing(
    store: Store, failure: Exception, code: ErrorCode
) -> None:
    downstream = Downstream()
    world = World(store, ticket_tool(downstream, versioned=True))
    plan_id = await world.confirmed()
    tool = world.registry.get("create_ticket")

    def failing(_arguments: object, _ctx: object) -> str:
        raise failure

    object.__setattr__(tool, "resolve_version", failing)

    outcome = await world.writes.execute_plan(plan_id, ALICE)

    assert outcome.code is code
    assert outcome.envelope.retryable is (code is ErrorCode.TRANSIENT)
    assert (outcome.record, outcome.key) == (None, None)
    assert str(failure) not in outcome.envelope.to_json() or code is ErrorCode.NOT_FOUND
    assert downstream.calls == 0
    assert await world.writes.record_for(plan_id, ALICE) is None


def test_store_error_is_public_and_the_one_of_the_error_tree() -> None:
    assert handrail.StoreError is StoreError is StoreErrorItself
    assert "StoreError" in handrail.__all__


# --- a store that fails: TRANSIENT, nothing ran --------------------------------------------------


class FailingStore:
    """A store whose named methods raise StoreError after `ok` more successful calls."""

    def __init__(self, inner: Store) -> None:
        self._inner = inner
        self.failing: dict[str, int] = {}

    def fail(self, method: str, *, after: int = 0) -> None:
        self.failing[method] = after

    def __getattr__(self, name: str) -> Any:
        method: Callable[..., Any] = getattr(self._inner, name)
        if name not in self.failing:
            return method

        def failing(*args: Any, **kwargs: Any) -> Any:
            if self.failing[name] <= 0:
                raise StoreError(f"{name} failed: OperationalError")
            self.failing[name] -= 1
            return method(*args, **kwargs)

        return failing


def _over(world: World, failing: FailingStore) -> Writes:
    return world.writes_over(failing)  # type: ignore[arg-type]


async def test_an_unreachable_store_under_a_plan_read_is_transient_without_a_key(
    store: Store,
) -> None:
    world = World(store)
    plan_id = await world.confirmed()
    failing = FailingStore(store)
    failing.fail("get_plan")

    outcome = await _over(world, failing).execute_plan(plan_id, ALICE)

    assert outcome.code is ErrorCode.TRANSIENT
    assert outcome.envelope.retryable
    assert (outcome.key, outcome.record) == (None, None)
    assert world.downstream.calls == 0


async def test_an_unreachable_store_at_the_claim_is_transient_and_a_retry_runs_once(
    store: Store,
) -> None:
    world = World(store)
    plan_id = await world.confirmed()
    failing = FailingStore(store)
    failing.fail("insert_execution")
    writes = _over(world, failing)

    outcome = await writes.execute_plan(plan_id, ALICE)

    assert outcome.code is ErrorCode.TRANSIENT
    assert outcome.key == plan_key(tenant_id=ALICE.tenant_id, tool="create_ticket", plan_id=plan_id)
    assert outcome.record is None
    assert world.downstream.calls == 0
    assert (await world.writes.execute_plan(plan_id, ALICE)).ok
    assert world.downstream.effects() == 1


async def test_an_unreachable_store_after_a_version_moved_is_transient(store: Store) -> None:
    downstream = Downstream()
    world = World(store, ticket_tool(downstream, versioned=True))
    plan_id = await world.confirmed()
    downstream.version = "v2"
    failing = FailingStore(store)
    failing.fail("get_execution")

    outcome = await _over(world, failing).execute_plan(plan_id, ALICE)

    assert outcome.code is ErrorCode.TRANSIENT
    assert outcome.key is None
    assert downstream.calls == 0


async def test_an_unreachable_store_while_waiting_for_a_running_duplicate_is_transient(
    store: Store,
) -> None:
    downstream = Downstream(release=asyncio.Event())
    world = World(store, ticket_tool(downstream, versioned=True))
    plan_id = await world.confirmed()
    downstream.script.append("hang")
    running = asyncio.create_task(world.writes.execute_plan(plan_id, ALICE))
    try:
        while downstream.calls == 0:  # noqa: ASYNC110 - the tool's own counter
            await asyncio.sleep(0.01)
        downstream.version = "v2"  # moved on: a repeat may only replay the running record
        failing = FailingStore(store)
        failing.fail("get_execution", after=1)  # the first read finds it RUNNING
        waiting = await _over(world, failing).execute_plan(plan_id, ALICE)
    finally:
        assert downstream.release is not None
        downstream.release.set()

    assert waiting.code is ErrorCode.TRANSIENT
    assert waiting.key is not None
    assert (await asyncio.wait_for(running, 20.0)).ok
    assert downstream.calls == 1


async def test_an_unreachable_store_under_a_proposal_or_a_command_is_a_transient_envelope(
    store: Store,
) -> None:
    world = World(store)
    failing = FailingStore(store)
    failing.fail("insert_plan")
    failing.fail("insert_execution")
    writes = _over(world, failing)
    gate = Gate(world.registry, writes=writes, clock=world.clock)
    call = ToolCall(id="c1", name="create_ticket", arguments=ARGS)

    proposal = await gate.handle(call, ALICE)

    assert proposal.error_type is ErrorCode.TRANSIENT
    assert proposal.retryable
    downstream = Downstream()
    commands = World(store, _commands(downstream))
    command_gate = Gate(commands.registry, writes=_over(commands, failing), clock=commands.clock)
    envelope = await command_gate.handle(call, ALICE, command_id="cmd-1")
    assert envelope.error_type is ErrorCode.TRANSIENT
    assert downstream.calls == 0


# --- a reconciliation pass scoped by tool, tenant or key -----------------------------------------


async def test_a_reconciler_pass_scoped_by_tool_tenant_or_key_settles_only_those(
    store: Store,
) -> None:
    downstream = Downstream()
    world = World(store, ticket_tool(downstream), ticket_tool(downstream, name="open_incident"))
    keys: dict[str, str] = {}
    for label, who, tool, n in [
        ("mine", ALICE, "create_ticket", 1),
        ("key", ALICE, "create_ticket", 2),
        ("other_tool", ALICE, "open_incident", 3),
        ("other_tenant", MALLORY, "create_ticket", 4),
    ]:
        plan_id = await world.confirmed(who, tool=tool, n=n)
        downstream.script.append("lose")
        lost = await world.writes.execute_plan(plan_id, who)
        assert lost.code is ErrorCode.OUTCOME_UNKNOWN
        assert lost.key is not None
        keys[label] = lost.key
    world.clock.advance(5)
    reconciler = Reconciler(world.registry, store, clock=world.clock, sleep=_no_wait)

    by_key = await reconciler.run_once(key=keys["key"])
    by_tenant = await reconciler.run_once(tenant_id=MALLORY.tenant_id)
    by_tool = await reconciler.run_once(tool="open_incident", tenant_id=ALICE.tenant_id)
    nothing = await reconciler.run_once(tool="open_incident", key=keys["mine"])
    rest = await reconciler.run_once()

    assert by_key.succeeded == (keys["key"],)
    assert by_tenant.succeeded == (keys["other_tenant"],)
    assert by_tool.succeeded == (keys["other_tool"],)
    assert nothing.succeeded == ()
    assert rest.succeeded == (keys["mine"],)
    assert by_key.purged == by_tenant.purged == by_tool.purged == 0
    assert downstream.calls == 4
