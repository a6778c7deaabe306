"""Attacks on `AgentLoop.cancel`: another principal's run, an executed plan, a live run.

Cancelling another tenant's or user's run is NOT_FOUND exactly like a missing one, and
changes nothing. A plan that already executed is never reported to the model as
declined: the cancel is refused, the run stays suspended, and resuming it with that
plan tells the model what happened. A run that is still running (its deadline not
passed) cannot be cancelled from under its process.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from handrail import ErrorCode
from handrail.adapters.transcript import UserTurn
from handrail.loop.agent import RunRefusedError, RunStatus
from handrail.loop.models import ModelReply, ModelRequest, ScriptedModelClient
from handrail.plans import PlanState
from handrail.runs import RunState
from handrail.store import Store
from loop._agent_worker import (
    ALICE,
    BOB,
    MALLORY,
    TICKET_ARGS,
    World,
    answer,
    call,
    reply,
    world,
)

pytestmark = pytest.mark.anyio

CHAT = "chat-1"


@pytest.fixture
def made(store: Store, tmp_path: Path) -> World:
    return world(store, tmp_path / "effects.txt")


async def _suspended(made: World) -> str:
    model = ScriptedModelClient([reply(call("c1", "create_ticket", **TICKET_ARGS))])
    outcome = await made.loop(model).run("Ticket", ALICE, run_id="r1", conversation_id=CHAT)
    (plan_id,) = outcome.plan_ids
    return plan_id


def _version(made: World, run_id: str) -> tuple[RunState, int]:
    record = made.store.get_run(run_id)
    assert record is not None
    return record.state, record.version


async def test_cancelling_another_principals_run_is_not_found_like_a_missing_one(
    made: World,
) -> None:
    plan_id = await _suspended(made)
    before = _version(made, "r1")
    loop = made.loop(ScriptedModelClient([]))
    refusals = []
    for who, run_id in ((BOB, "r1"), (MALLORY, "r1"), (ALICE, "missing"), (ALICE, "bad id!")):
        with pytest.raises(RunRefusedError) as refused:
            await loop.cancel(run_id, who, reason="Mine now.")
        refusals.append((refused.value.code, refused.value.message))
    assert len(set(refusals)) == 1
    assert refusals[0][0] is ErrorCode.NOT_FOUND
    assert _version(made, "r1") == before
    record = made.store.get_plan(plan_id)
    assert record is not None
    assert record.state is PlanState.PROPOSED


async def test_a_plan_that_executed_is_never_reported_as_declined(made: World) -> None:
    plan_id = await _suspended(made)
    # The application confirmed and executed the plan, but the run was never resumed.
    token = await made.writes.issue_token(plan_id, ALICE)
    await made.writes.confirm(plan_id, token.value, ALICE)
    executed = await made.writes.execute_plan(plan_id, ALICE)
    assert executed.key is not None
    before = _version(made, "r1")
    loop = made.loop(ScriptedModelClient([]))
    with pytest.raises(RunRefusedError) as refused:
        await loop.cancel("r1", ALICE, reason="Never mind.")
    assert refused.value.code is ErrorCode.CONFLICT
    assert plan_id in refused.value.message
    state, version = _version(made, "r1")
    assert state is RunState.SUSPENDED
    assert version == before[1] + 2  # claimed, then given back as it was
    chat = await loop.conversation(CHAT, ALICE)
    assert not any(isinstance(t, UserTurn) and "declined" in t.text for t in chat)
    # Resuming with the executed plan tells the model its real outcome.
    model = ScriptedModelClient(
        [answer("succeeded", "Ticket opened.", tool="create_ticket", plan_id=plan_id)]
    )
    done = await made.loop(model).resume("r1", ALICE, plan_id=plan_id, token=None)
    assert done.status is RunStatus.FINISHED
    assert f"confirmed plan {plan_id}" in str(model.requests[0].transcript[-1])
    assert len(made.effects.lines()) == 1


@dataclass
class _Meddling:
    """A model that, while its run is RUNNING, tries to cancel it, then answers."""

    made: World
    refusals: list[RunRefusedError] = field(default_factory=list)
    name: str = "meddling"

    async def complete(self, request: ModelRequest, *, timeout: float) -> ModelReply:
        del request, timeout
        self.made.clock.advance(30.0)  # half its deadline gone, and more than any grace
        try:
            await self.made.loop(ScriptedModelClient([])).cancel("r1", ALICE, reason="Stop.")
        except RunRefusedError as exc:
            self.refusals.append(exc)
        return answer("need_information", "Which asset?")


async def test_a_run_that_is_running_cannot_be_cancelled_from_under_its_process(
    made: World,
) -> None:
    model = _Meddling(made)
    outcome = await made.loop(model).run("Help", ALICE, run_id="r1", conversation_id=CHAT)
    assert outcome.status is RunStatus.FINISHED
    (refused,) = model.refusals
    assert refused.code is ErrorCode.CONFLICT
    assert _version(made, "r1")[0] is RunState.FINISHED
    chat = await made.loop(model).conversation(CHAT, ALICE)
    assert chat == outcome.new_turns
