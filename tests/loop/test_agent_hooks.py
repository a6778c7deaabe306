"""Step hooks: called in order with what the loop used, unable to change it, and a raising
hook ends the run FAILED with HOOK_FAILED (or leaves a stored suspension as it is).

Every model is a ScriptedModelClient (no real model); the Gate, Writes and stores are real.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from _agent_worker import ALICE, TICKET_ARGS, World, answer, call, reply, world

from handrail.calls import ToolCall
from handrail.envelope import Envelope, Status
from handrail.loop._agent_record import RunData, RunStatus
from handrail.loop.agent import AgentLoop, read_run
from handrail.loop.budgets import BudgetReason, RunBudget
from handrail.loop.events import CallEnvelope, LoopEvent, RunSuspended
from handrail.loop.hooks import HOOK_FAILED, HookFailedError, NoHooks, StepHooks
from handrail.loop.models import ModelClient, ModelRequest, ScriptedModelClient
from handrail.runs import RunState
from handrail.store import Store

pytestmark = pytest.mark.anyio

TASK = "Is asset-1 down? Open a ticket if it is."


@pytest.fixture
def made(store: Store, tmp_path: Path) -> World:
    return world(store, tmp_path / "effects.txt")


def _loop(made: World, model: ModelClient, hooks: StepHooks) -> AgentLoop:
    return AgentLoop(
        gate=made.gate,
        model=model,
        store=made.store,
        budget=RunBudget(max_steps=10, deadline_seconds=60.0),
        clock=made.clock,
        checker=made.checker,
        writes=made.writes,
        hooks=hooks,
    )


async def _read(stream: AsyncIterator[LoopEvent], seen: list[LoopEvent]) -> None:
    """Read `stream` into `seen` one by one, so what came before an error stays."""
    with anyio.fail_after(30):
        async for event in stream:
            seen.append(event)  # noqa: PERF401 - one by one: the stream may raise midway


def _stored(made: World, run_id: str) -> tuple[RunState, RunData]:
    record = made.store.get_run(run_id)
    assert record is not None
    return record.state, read_run(record)


class Recorder(NoHooks):
    """Hooks that write down every call, with the stored state where it matters."""

    def __init__(self, made: World) -> None:
        self.made = made
        self.seen: list[tuple[Any, ...]] = []
        self.requests: list[ModelRequest] = []

    async def before_model(self, *, run_id: str, step: int, request: ModelRequest) -> None:
        self.requests.append(request)
        self.seen.append(("before_model", run_id, step, len(request.transcript)))

    async def after_envelope(
        self, *, run_id: str, step: int, call: ToolCall, envelope: Envelope
    ) -> None:
        self.seen.append(("after_envelope", run_id, step, call.id, call.name, envelope.status))

    async def on_suspend(self, *, run_id: str, plan_ids: tuple[str, ...]) -> None:
        state, _ = _stored(self.made, run_id)
        self.seen.append(("on_suspend", run_id, plan_ids, state))


class Raising(NoHooks):
    """Hooks of which one raises."""

    def __init__(self, where: str) -> None:
        self.where = where

    async def before_model(self, *, run_id: str, step: int, request: ModelRequest) -> None:
        if self.where == "before_model":
            raise RuntimeError("the host's hook broke")

    async def after_envelope(
        self, *, run_id: str, step: int, call: ToolCall, envelope: Envelope
    ) -> None:
        if self.where == "after_envelope":
            raise RuntimeError("the host's hook broke")

    async def on_suspend(self, *, run_id: str, plan_ids: tuple[str, ...]) -> None:
        if self.where == "on_suspend":
            raise RuntimeError("the host's hook broke")


# --- called in order ---------------------------------------------------------------------------


async def test_hooks_see_each_request_and_envelope_in_order(made: World) -> None:
    hooks = Recorder(made)
    model = ScriptedModelClient(
        [
            reply(
                call("c1", "asset_status", asset_id="asset-1"),
                call("c2", "asset_status", asset_id="asset-9"),
            ),
            reply(text="asset-1 is down; asset-9 is unknown."),
        ]
    )
    outcome = await _loop(made, model, hooks).run(TASK, ALICE, run_id="r1")
    assert outcome.status is RunStatus.FINISHED
    assert hooks.seen == [
        ("before_model", "r1", 1, 1),
        ("after_envelope", "r1", 1, "c1", "asset_status", Status.OK),
        ("after_envelope", "r1", 1, "c2", "asset_status", Status.ERROR),
        ("before_model", "r1", 2, 3),
    ]
    # The request a hook sees is the one the model was sent.
    assert hooks.requests == list(model.requests)


async def test_a_suspension_calls_on_suspend_after_it_is_stored_and_a_resume_its_envelope(
    made: World,
) -> None:
    hooks = Recorder(made)
    model = ScriptedModelClient([reply(call("c1", "create_ticket", **TICKET_ARGS))])
    outcome = await _loop(made, model, hooks).run(TASK, ALICE, run_id="r1")
    (plan_id,) = outcome.plan_ids
    assert hooks.seen[1:] == [
        ("after_envelope", "r1", 1, "c1", "create_ticket", Status.ERROR),
        ("on_suspend", "r1", (plan_id,), RunState.SUSPENDED),
    ]
    hooks.seen.clear()
    token = await made.writes.issue_token(plan_id, ALICE)
    finish = ScriptedModelClient(
        [answer("succeeded", "Ticket opened.", tool="create_ticket", plan_id=plan_id)]
    )
    done = await _loop(made, finish, hooks).resume("r1", ALICE, plan_id=plan_id, token=token.value)
    assert done.status is RunStatus.FINISHED
    assert hooks.seen == [
        ("after_envelope", "r1", 1, "c1", "create_ticket", Status.OK),
        ("before_model", "r1", 2, 4),
    ]


async def test_hooks_run_before_the_events_of_a_stream(made: World) -> None:
    order: list[str] = []

    class Marking(NoHooks):
        async def after_envelope(
            self, *, run_id: str, step: int, call: ToolCall, envelope: Envelope
        ) -> None:
            order.append(f"hook {call.id}")

        async def on_suspend(self, *, run_id: str, plan_ids: tuple[str, ...]) -> None:
            order.append("hook suspend")

    model = ScriptedModelClient([reply(call("c1", "create_ticket", **TICKET_ARGS))])
    with anyio.fail_after(30):
        async for event in _loop(made, model, Marking()).stream(TASK, ALICE):
            order.append(type(event).__name__)  # noqa: PERF401 - interleaved with the hooks
    assert order == [
        "CallProposed",
        "hook c1",
        "CallEnvelope",
        "hook suspend",
        "PlanAwaitingConfirmation",
        "RunSuspended",
    ]


async def test_a_replay_calls_no_hooks(made: World) -> None:
    model = ScriptedModelClient(
        [reply(call("c1", "asset_status", asset_id="asset-1")), reply(text="down")]
    )
    await _loop(made, model, NoHooks()).run(TASK, ALICE, run_id="r1")
    hooks = Recorder(made)
    report = await _loop(made, ScriptedModelClient([]), hooks).replay("r1")
    assert report.matched
    assert hooks.seen == []


# --- hooks cannot change what the gate decided ---------------------------------------------


async def test_a_hook_that_alters_what_it_is_shown_changes_nothing_the_gate_decided(
    made: World,
) -> None:
    class Tampering(NoHooks):
        async def after_envelope(
            self, *, run_id: str, step: int, call: ToolCall, envelope: Envelope
        ) -> None:
            assert isinstance(call.arguments, dict)
            call.arguments["asset_id"] = "asset-2"
            envelope.data["plan_id"] = "p-forged"

    mapped = ToolCall(id="c1", name="create_ticket", arguments=dict(TICKET_ARGS))
    model = ScriptedModelClient([reply(mapped)])
    outcome = await _loop(made, model, Tampering()).run(TASK, ALICE, run_id="r1")
    (plan_id,) = outcome.plan_ids
    assert plan_id != "p-forged"
    _, data = _stored(made, "r1")
    assert [p.plan_id for p in data.pending] == [plan_id]
    assert data.transcript[1].calls[0].arguments == TICKET_ARGS  # type: ignore[union-attr]
    assert "p-forged" not in made.store.get_run("r1").data  # type: ignore[union-attr]


# --- a hook that raises --------------------------------------------------------------------------


async def test_a_raising_hook_before_the_model_fails_the_run_with_hook_failed(
    made: World,
) -> None:
    model = ScriptedModelClient([reply(text="never asked")])
    with pytest.raises(HookFailedError) as caught:
        await _loop(made, model, Raising("before_model")).run(TASK, ALICE, run_id="r1")
    assert caught.value.hook == "before_model"
    assert isinstance(caught.value.__cause__, RuntimeError)
    assert model.requests == ()
    state, data = _stored(made, "r1")
    assert state is RunState.FAILED
    assert data.end is not None
    assert (data.end.status, data.end.error) == (RunStatus.FAILED, HOOK_FAILED)


async def test_a_raising_envelope_hook_fails_the_streamed_run_after_the_call_ran(
    made: World,
) -> None:
    model = ScriptedModelClient(
        [reply(call("c1", "asset_status", asset_id="asset-1")), reply(text="never asked")]
    )
    seen: list[LoopEvent] = []
    stream = _loop(made, model, Raising("after_envelope")).stream(TASK, ALICE, run_id="r1")
    with pytest.raises(HookFailedError) as caught:
        await _read(stream, seen)
    assert caught.value.hook == "after_envelope"
    assert [type(e).__name__ for e in seen] == ["CallProposed"]
    assert not any(isinstance(e, CallEnvelope) for e in seen)
    assert made.reads.calls == 1
    assert len(model.requests) == 1
    state, data = _stored(made, "r1")
    assert state is RunState.FAILED
    assert data.end is not None
    assert data.end.error == HOOK_FAILED


async def test_a_raising_suspend_hook_leaves_the_stored_suspension_resumable(
    made: World,
) -> None:
    model = ScriptedModelClient([reply(call("c1", "create_ticket", **TICKET_ARGS))])
    seen: list[LoopEvent] = []
    stream = _loop(made, model, Raising("on_suspend")).stream(TASK, ALICE, run_id="r1")
    with pytest.raises(HookFailedError):
        await _read(stream, seen)
    assert not any(isinstance(e, RunSuspended) for e in seen)
    state, data = _stored(made, "r1")
    assert state is RunState.SUSPENDED
    (pending,) = data.pending
    token = await made.writes.issue_token(pending.plan_id, ALICE)
    finish = ScriptedModelClient([reply(text="The ticket is open.")])
    done = await _loop(made, finish, NoHooks()).resume(
        "r1", ALICE, plan_id=pending.plan_id, token=token.value
    )
    assert done.status is RunStatus.FINISHED


async def test_a_hook_that_outlasts_the_deadline_stops_the_run_before_the_model_is_asked(
    made: World,
) -> None:
    class Slow(NoHooks):
        async def before_model(self, *, run_id: str, step: int, request: ModelRequest) -> None:
            made.clock.advance(61.0)  # the hook's time counts against the 60 s deadline

    model = ScriptedModelClient([reply(text="never asked")])
    outcome = await _loop(made, model, Slow()).run(TASK, ALICE, run_id="r1")
    assert outcome.status is RunStatus.BUDGET_EXHAUSTED
    assert outcome.trip is not None
    assert outcome.trip.reason is BudgetReason.DEADLINE
    assert model.requests == ()
    assert _stored(made, "r1")[0] is RunState.FAILED
