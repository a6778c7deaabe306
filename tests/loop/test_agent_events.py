"""A streamed run: its events in order, live text, plans without tokens, and stopping it.

Every model is a ScriptedModelClient (no real model); the Gate, Writes and stores are
real. Nothing here waits on time: a slow tool waits on an asyncio.Event the test sets
or never sets, and every wait is bounded.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import anyio
import pytest
from _agent_worker import ALICE, TICKET_ARGS, World, answer, call, reply, world
from pydantic import Field

from handrail import ErrorCode, RiskLevel, ToolCall, WriteRefusedError, tool
from handrail.envelope import Status
from handrail.loop._agent_record import RunData, RunStatus
from handrail.loop.agent import AgentLoop, RunRefusedError, read_run
from handrail.loop.budgets import BudgetReason, RunBudget
from handrail.loop.events import (
    TERMINAL_EVENTS,
    BudgetStopped,
    CallEnvelope,
    CallProposed,
    LoopEvent,
    ModelTextDelta,
    PlanAwaitingConfirmation,
    RunFailed,
    RunFinished,
    RunSuspended,
)
from handrail.loop.models import (
    ModelClient,
    ModelError,
    ModelReply,
    ModelRequest,
    ScriptedModelClient,
    TextDelta,
)
from handrail.runs import RunState
from handrail.store import Store

pytestmark = pytest.mark.anyio

TASK = "Is asset-1 down? Open a ticket if it is."
BOUND = 30.0
"""Seconds any single wait may take before the test fails (a bound, never a margin)."""


@pytest.fixture
def made(store: Store, tmp_path: Path) -> World:
    return world(store, tmp_path / "effects.txt")


def _loop(made: World, model: ModelClient, budget: RunBudget | None = None) -> AgentLoop:
    return AgentLoop(
        gate=made.gate,
        model=model,
        store=made.store,
        budget=budget or RunBudget(max_steps=10, deadline_seconds=60.0),
        clock=made.clock,
        checker=made.checker,
        writes=made.writes,
    )


async def _all(events: AsyncIterator[LoopEvent]) -> list[LoopEvent]:
    with anyio.fail_after(BOUND):
        return [event async for event in events]


def _kinds(events: Sequence[LoopEvent]) -> list[str]:
    """Event type names, each run of text deltas as one."""
    kinds: list[str] = []
    for event in events:
        name = type(event).__name__
        if not (kinds and kinds[-1] == name == "ModelTextDelta"):
            kinds.append(name)
    return kinds


def _text(events: Sequence[LoopEvent], step: int) -> str:
    return "".join(e.text for e in events if isinstance(e, ModelTextDelta) and e.step == step)


def _stored(made: World, run_id: str) -> tuple[RunState, RunData]:
    record = made.store.get_run(run_id)
    assert record is not None
    return record.state, read_run(record)


@dataclass
class Slow:
    """A read tool that runs until `release` is set, and what became of it."""

    started: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    cancelled: bool = False


def _with_slow_read(made: World) -> Slow:
    slow = Slow()

    @tool(risk=RiskLevel.L1_INTERNAL_READ, permissions={"assets.read"})
    async def slow_status(asset_id: Annotated[str, Field(max_length=20)]) -> dict[str, str]:
        """The monitoring state of an asset, slowly."""
        slow.started.set()
        try:
            await slow.release.wait()
        except asyncio.CancelledError:
            slow.cancelled = True
            raise
        return {"asset_id": asset_id, "state": "down"}

    made.gate.registry.register(slow_status)
    return slow


class ClosingScript(ScriptedModelClient):
    """A scripted streaming model that records whether each stream was closed."""

    def __init__(self, steps: Sequence[ModelReply], *, delta_chars: int = 16) -> None:
        super().__init__(steps, delta_chars=delta_chars)
        self.opened = 0
        self.closed = 0

    async def stream(
        self, request: ModelRequest, *, timeout: float
    ) -> AsyncIterator[TextDelta | ModelReply]:
        self.opened += 1
        try:
            async for item in super().stream(request, timeout=timeout):
                yield item
        finally:
            self.closed += 1


@dataclass
class CompleteOnly:
    """A model client without `stream`: the loop must ask it with `complete`."""

    inner: ScriptedModelClient
    name: str = "complete-only"

    async def complete(self, request: ModelRequest, *, timeout: float) -> ModelReply:
        return await self.inner.complete(request, timeout=timeout)


# --- a run's events ---------------------------------------------------------------------------


async def test_a_read_turn_then_an_answer_streams_its_events_in_order(made: World) -> None:
    final = answer("need_information", "asset-1 is down. Shall I open a ticket?")
    model = ClosingScript(
        [reply(call("c1", "asset_status", asset_id="asset-1"), text="Let me check."), final],
        delta_chars=4,
    )
    events = await _all(_loop(made, model).stream(TASK, ALICE, run_id="r1"))
    assert _kinds(events) == [
        "ModelTextDelta",
        "CallProposed",
        "CallEnvelope",
        "ModelTextDelta",
        "RunFinished",
    ]
    assert {event.run_id for event in events} == {"r1"}
    assert _text(events, 1) == "Let me check."
    # A structured final answer streams only its message, never its JSON.
    assert _text(events, 2) == "asset-1 is down. Shall I open a ticket?"
    proposed = next(e for e in events if isinstance(e, CallProposed))
    assert (proposed.step, proposed.call.id, proposed.call.name) == (1, "c1", "asset_status")
    envelope = next(e for e in events if isinstance(e, CallEnvelope))
    assert (envelope.step, envelope.call_id) == (1, "c1")
    assert envelope.envelope.status is Status.OK
    assert envelope.envelope.data == {"asset_id": "asset-1", "state": "down"}
    last = events[-1]
    assert isinstance(last, RunFinished)
    assert sum(isinstance(e, TERMINAL_EVENTS) for e in events) == 1
    assert last.steps == 2
    assert last.answer is not None
    assert last.answer.answer.message == "asset-1 is down. Shall I open a ticket?"
    assert last.final is not None
    assert last.final.message == "asset-1 is down. Shall I open a ticket?"
    assert (model.opened, model.closed) == (2, 2)
    state, data = _stored(made, "r1")
    assert state is RunState.FINISHED
    assert len(data.replies) == 2


async def test_text_deltas_joined_are_the_final_free_text(made: World) -> None:
    text = "asset-1 is down since 09:30; no ticket was opened."
    model = ScriptedModelClient([reply(text=text)], delta_chars=3)
    events = await _all(_loop(made, model).stream(TASK, ALICE))
    deltas = [e for e in events if isinstance(e, ModelTextDelta)]
    assert len(deltas) == len(text) // 3 + 1
    last = events[-1]
    assert isinstance(last, RunFinished)
    assert last.answer is None
    assert last.text == text == _text(events, 1)
    assert last.text_check is not None


async def test_a_model_that_cannot_stream_is_asked_with_complete_and_sends_no_deltas(
    made: World,
) -> None:
    inner = ScriptedModelClient(
        [reply(call("c1", "asset_status", asset_id="asset-1"), text="Checking."), reply(text="ok")]
    )
    events = await _all(_loop(made, CompleteOnly(inner)).stream(TASK, ALICE))
    assert _kinds(events) == ["CallProposed", "CallEnvelope", "RunFinished"]
    assert inner.finished


async def test_a_write_plan_streams_awaiting_confirmation_then_suspended_without_a_token(
    made: World,
) -> None:
    model = ScriptedModelClient([reply(call("c1", "create_ticket", **TICKET_ARGS))])
    loop = _loop(made, model)
    events = await _all(loop.stream(TASK, ALICE, run_id="r1"))
    assert _kinds(events) == [
        "CallProposed",
        "CallEnvelope",
        "PlanAwaitingConfirmation",
        "RunSuspended",
    ]
    plan = events[2]
    suspended = events[3]
    assert isinstance(plan, PlanAwaitingConfirmation)
    assert isinstance(suspended, RunSuspended)
    assert suspended.plan_ids == (plan.plan_id,)
    assert (plan.call_id, plan.tool) == ("c1", "create_ticket")
    assert plan.code is ErrorCode.NEEDS_CONFIRMATION
    envelope = events[1]
    assert isinstance(envelope, CallEnvelope)
    assert plan.summary == envelope.envelope.summary
    assert plan.impact == envelope.envelope.data["impact"]
    assert plan.expires_at == envelope.envelope.data["expires_at"]
    assert _stored(made, "r1")[0] is RunState.SUSPENDED

    token = await made.writes.issue_token(plan.plan_id, ALICE)
    finish = ScriptedModelClient(
        [answer("succeeded", "Ticket opened.", tool="create_ticket", plan_id=plan.plan_id)]
    )
    resumed = await _all(
        _loop(made, finish).resume_stream("r1", ALICE, plan_id=plan.plan_id, token=token.value)
    )
    assert _kinds(resumed) == ["CallEnvelope", "ModelTextDelta", "RunFinished"]
    executed = resumed[0]
    assert isinstance(executed, CallEnvelope)
    assert executed.call_id == "c1"
    assert executed.envelope.status is Status.OK
    last = resumed[-1]
    assert isinstance(last, RunFinished)
    assert last.answer is not None
    assert last.answer.proven
    for event in [*events, *resumed]:
        assert "token" not in {f.name for f in dataclasses.fields(event)}
        assert token.value not in repr(event)
    assert len(made.effects.lines()) == 1


async def test_a_budget_trip_ends_the_stream_with_budget_stopped(made: World) -> None:
    model = ScriptedModelClient(
        [reply(call("c1", "asset_status", asset_id="asset-1")), reply(text="never asked")]
    )
    budget = RunBudget(max_steps=1, deadline_seconds=60.0)
    events = await _all(_loop(made, model, budget).stream(TASK, ALICE, run_id="r1"))
    assert _kinds(events) == ["CallProposed", "CallEnvelope", "BudgetStopped"]
    last = events[-1]
    assert isinstance(last, BudgetStopped)
    assert last.trip.reason is BudgetReason.STEPS
    state, data = _stored(made, "r1")
    assert state is RunState.FAILED
    assert data.end is not None
    assert data.end.status is RunStatus.BUDGET_EXHAUSTED


async def test_a_model_error_ends_the_stream_with_run_failed(made: World) -> None:
    def refuse(request: ModelRequest) -> ModelReply:
        raise ModelError("no", provider="scripted", code=ErrorCode.RATE_LIMITED)

    events = await _all(_loop(made, ScriptedModelClient([refuse])).stream(TASK, ALICE))
    assert len(events) == 1
    assert isinstance(events[0], RunFailed)
    assert events[0].error == "RATE_LIMITED"


async def test_a_model_stream_without_a_reply_fails_the_run_failed_final(made: World) -> None:
    class Truncated(ScriptedModelClient):
        async def stream(
            self, request: ModelRequest, *, timeout: float
        ) -> AsyncIterator[TextDelta | ModelReply]:
            yield TextDelta(text="Half an ans")

    events = await _all(_loop(made, Truncated([])).stream(TASK, ALICE, run_id="r1"))
    assert _kinds(events) == ["ModelTextDelta", "RunFailed"]
    last = events[-1]
    assert isinstance(last, RunFailed)
    assert last.error == "FAILED_FINAL"
    assert _stored(made, "r1")[0] is RunState.FAILED


async def test_a_taken_run_id_is_refused_when_the_stream_is_read(made: World) -> None:
    await _loop(made, ScriptedModelClient([reply(text="done")])).run(TASK, ALICE, run_id="r1")
    stream = _loop(made, ScriptedModelClient([reply(text="again")])).stream(
        TASK, ALICE, run_id="r1"
    )
    with pytest.raises(RunRefusedError) as caught:
        await _all(stream)
    assert caught.value.code is ErrorCode.CONFLICT


async def test_calls_in_events_are_copies_the_reader_cannot_change(made: World) -> None:
    mapped = ToolCall(id="c1", name="asset_status", arguments={"asset_id": "asset-1"})
    model = ScriptedModelClient([reply(mapped), reply(text="done")])
    seen: list[LoopEvent] = []
    with anyio.fail_after(BOUND):
        async for event in _loop(made, model).stream(TASK, ALICE):
            if isinstance(event, CallProposed):
                assert isinstance(event.call.arguments, dict)
                event.call.arguments["asset_id"] = "asset-2"
            seen.append(event)
    envelope = next(e for e in seen if isinstance(e, CallEnvelope))
    assert envelope.envelope.data == {"asset_id": "asset-1", "state": "down"}


# --- stopping a stream ------------------------------------------------------------------------


async def test_closing_the_stream_after_the_first_delta_stops_the_run_as_cancelled(
    made: World,
) -> None:
    model = ClosingScript(
        [reply(text="A long answer, streamed one character at a time."), reply(text="never")],
        delta_chars=1,
    )
    with anyio.fail_after(BOUND):
        async with aclosing(_loop(made, model).stream(TASK, ALICE, run_id="r1")) as events:
            first = await anext(events)
    assert isinstance(first, ModelTextDelta)
    assert first.text == "A"
    assert (model.opened, model.closed) == (1, 1)
    assert len(model.requests) == 1
    state, data = _stored(made, "r1")
    assert state is RunState.FAILED
    assert data.end is not None
    assert (data.end.status, data.end.error) == (RunStatus.FAILED, "CANCELLED")
    assert data.replies == ()


async def test_cancelling_the_reader_while_a_read_runs_cancels_the_read_and_the_run(
    made: World,
) -> None:
    slow = _with_slow_read(made)
    model = ScriptedModelClient(
        [reply(call("c1", "slow_status", asset_id="asset-1")), reply(text="never")]
    )
    seen: list[LoopEvent] = []

    async def read() -> None:
        async for event in _loop(made, model).stream(TASK, ALICE, run_id="r1"):
            seen.append(event)  # noqa: PERF401 - one by one: a cancelled reader keeps what it saw

    with anyio.fail_after(BOUND):
        reader = asyncio.create_task(read())
        await slow.started.wait()
        reader.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reader
    assert slow.cancelled
    assert _kinds(seen) == ["CallProposed"]
    state, data = _stored(made, "r1")
    assert state is RunState.FAILED
    assert data.end is not None
    assert data.end.error == "CANCELLED"
    assert len(model.requests) == 1


async def test_closing_the_stream_at_a_plan_leaves_the_run_suspended_and_resumable(
    made: World,
) -> None:
    model = ScriptedModelClient([reply(call("c1", "create_ticket", **TICKET_ARGS))])
    with anyio.fail_after(BOUND):
        async with aclosing(_loop(made, model).stream(TASK, ALICE, run_id="r1")) as events:
            plan = None
            async for event in events:
                if isinstance(event, PlanAwaitingConfirmation):
                    plan = event
                    break
    assert plan is not None
    assert _stored(made, "r1")[0] is RunState.SUSPENDED
    token = await made.writes.issue_token(plan.plan_id, ALICE)
    finish = ScriptedModelClient([reply(text="The ticket is open.")])
    done = await _loop(made, finish).resume("r1", ALICE, plan_id=plan.plan_id, token=token.value)
    assert done.status is RunStatus.FINISHED


async def test_a_cancelled_run_call_is_stored_failed_cancelled(made: World) -> None:
    slow = _with_slow_read(made)
    model = ScriptedModelClient([reply(call("c1", "slow_status", asset_id="asset-1"))])
    with anyio.fail_after(BOUND):
        running = asyncio.create_task(_loop(made, model).run(TASK, ALICE, run_id="r1"))
        await slow.started.wait()
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
    assert slow.cancelled
    state, data = _stored(made, "r1")
    assert state is RunState.FAILED
    assert data.end is not None
    assert data.end.error == "CANCELLED"


async def test_a_released_slow_read_streams_to_the_end(made: World) -> None:
    """The control of the cancellation tests: the same run, not cancelled, finishes."""
    slow = _with_slow_read(made)
    model = ScriptedModelClient(
        [reply(call("c1", "slow_status", asset_id="asset-1")), reply(text="asset-1 is down.")]
    )
    seen: list[LoopEvent] = []

    async def read() -> None:
        async for event in _loop(made, model).stream(TASK, ALICE, run_id="r1"):
            seen.append(event)  # noqa: PERF401 - one by one: a cancelled reader keeps what it saw

    with anyio.fail_after(BOUND):
        reader = asyncio.create_task(read())
        await slow.started.wait()
        slow.release.set()
        await reader
    assert not slow.cancelled
    last = seen[-1]
    assert isinstance(last, RunFinished)
    assert last.text == "asset-1 is down."
    assert _stored(made, "r1")[0] is RunState.FINISHED


async def test_a_refused_confirmation_raises_from_the_resume_stream_and_keeps_the_run_suspended(
    made: World,
) -> None:
    model = ScriptedModelClient([reply(call("c1", "create_ticket", **TICKET_ARGS))])
    outcome = await _loop(made, model).run(TASK, ALICE, run_id="r1")
    (plan_id,) = outcome.plan_ids
    stream = _loop(made, ScriptedModelClient([])).resume_stream(
        "r1",
        ALICE,
        plan_id=plan_id,
        token="not-a-token",  # noqa: S106 - a forged token
    )
    with pytest.raises(WriteRefusedError) as caught:
        await _all(stream)
    assert caught.value.code is ErrorCode.CONFIRMATION_INVALID
    assert _stored(made, "r1")[0] is RunState.SUSPENDED
    assert made.effects.lines() == []
