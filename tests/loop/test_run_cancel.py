"""`AgentLoop.cancel`: the way out of a run that waits for a person, or whose process stopped.

A SUSPENDED run's plans are rejected, the run is stored FAILED with CANCELLED, and its
conversation keeps a Handrail-worded user turn naming each plan as declined, so the
next run's model knows the person said no. A RUNNING run is cancelled only once its
deadline and the grace margin have passed since it was last stored. Every model is a
ScriptedModelClient; the Gate, Writes and stores are real.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _agent_worker import ALICE, TICKET_ARGS, World, answer, call, reply, world

from handrail import ErrorCode
from handrail.adapters.transcript import ToolResultsTurn, UserTurn
from handrail.errors import ConfigurationError
from handrail.loop._cancel import CANCEL_GRACE_SECONDS, MAX_REASON
from handrail.loop.agent import AgentLoop, RunRefusedError, RunStatus, read_run
from handrail.loop.budgets import RunBudget
from handrail.loop.models import ModelReply, ModelRequest, ScriptedModelClient
from handrail.plans import PlanState
from handrail.runs import RunState
from handrail.store import Store

pytestmark = pytest.mark.anyio

CHAT = "chat-1"
REASON = "I changed my mind: the asset came back."


@pytest.fixture
def made(store: Store, tmp_path: Path) -> World:
    return world(store, tmp_path / "effects.txt")


async def _suspended(made: World, *, calls: int = 1, chat: str | None = CHAT) -> tuple[str, ...]:
    """A run `r1` suspended on `calls` ticket plans; their plan ids."""
    tickets = [
        call(f"c{n}", "create_ticket", **{**TICKET_ARGS, "reason": f"outage number {n}"})
        for n in range(1, calls + 1)
    ]
    model = ScriptedModelClient([reply(*tickets)])
    budget = RunBudget(max_steps=10, deadline_seconds=60.0, max_same_error=calls + 1)
    loop = made.loop(model, budget)
    outcome = await loop.run("Open tickets", ALICE, run_id="r1", conversation_id=chat)
    assert outcome.status is RunStatus.SUSPENDED
    return outcome.plan_ids


def _plan_state(made: World, plan_id: str) -> PlanState:
    record = made.store.get_plan(plan_id)
    assert record is not None
    return record.state


async def test_cancelling_a_suspended_run_rejects_its_plan_and_tells_the_next_run(
    made: World,
) -> None:
    (plan_id,) = await _suspended(made)
    loop = made.loop(ScriptedModelClient([]))
    outcome = await loop.cancel("r1", ALICE, reason=REASON)
    assert (outcome.status, outcome.error, outcome.plan_ids) == (
        RunStatus.FAILED,
        "CANCELLED",
        (plan_id,),
    )
    assert _plan_state(made, plan_id) is PlanState.REJECTED
    assert made.effects.lines() == []
    record = made.store.get_run("r1")
    assert record is not None
    assert record.state is RunState.FAILED
    data = read_run(record)
    assert data.end is not None
    assert data.end.error == "CANCELLED"
    assert data.pending == ()
    # The conversation ends with Handrail's words: the plan declined, the reason.
    chat = await loop.conversation(CHAT, ALICE)
    assert chat == outcome.new_turns
    assert isinstance(chat[-2], ToolResultsTurn)
    declined = chat[-1]
    assert isinstance(declined, UserTurn)
    assert declined.text.startswith(f"[handrail] The user declined plan {plan_id} ")
    assert "create_ticket" in declined.text
    assert "not executed" in declined.text
    assert REASON in declined.text
    # The conversation is free: the next run's model sees that the person said no.
    after = ScriptedModelClient([answer("failed", "Understood, no ticket.")])
    nxt = await made.loop(after).run("Thanks", ALICE, conversation_id=CHAT, run_id="r2")
    assert nxt.status is RunStatus.FINISHED
    assert after.requests[0].transcript[-2:] == (declined, UserTurn(text="Thanks"))


async def test_cancel_declines_every_plan_of_the_run_confirmed_or_rejected_already(
    made: World,
) -> None:
    one, two, three = await _suspended(made, calls=3)
    token = await made.writes.issue_token(one, ALICE)
    await made.writes.confirm(one, token.value, ALICE)  # confirmed, not executed
    await made.writes.reject(two, ALICE, reason="no")  # rejected in the application
    outcome = await made.loop(ScriptedModelClient([])).cancel("r1", ALICE, reason=REASON)
    assert outcome.plan_ids == (one, two, three)
    assert [_plan_state(made, p) for p in (one, two, three)] == [PlanState.REJECTED] * 3
    last = outcome.new_turns[-1]
    assert isinstance(last, UserTurn)
    for plan_id in (one, two, three):
        assert f"declined plan {plan_id} " in last.text
    assert made.effects.lines() == []


async def test_cancel_of_a_run_without_a_conversation_returns_its_turns(made: World) -> None:
    (plan_id,) = await _suspended(made, chat=None)
    outcome = await made.loop(ScriptedModelClient([])).cancel("r1", ALICE, reason=REASON)
    assert outcome.status is RunStatus.FAILED
    assert outcome.new_turns[0] == UserTurn(text="Open tickets")
    last = outcome.new_turns[-1]
    assert isinstance(last, UserTurn)
    assert plan_id in last.text
    record = made.store.get_run("r1")
    assert record is not None
    assert read_run(record).transcript == outcome.new_turns


async def test_a_cancelled_run_cannot_be_resumed_or_cancelled_again(made: World) -> None:
    (plan_id,) = await _suspended(made)
    token = await made.writes.issue_token(plan_id, ALICE)
    loop = made.loop(ScriptedModelClient([answer("failed", "x")]))
    await loop.cancel("r1", ALICE, reason=REASON)
    with pytest.raises(RunRefusedError) as resumed:
        await loop.resume("r1", ALICE, plan_id=plan_id, token=token.value)
    assert resumed.value.code is ErrorCode.CONFLICT
    with pytest.raises(RunRefusedError) as again:
        await loop.cancel("r1", ALICE, reason=REASON)
    assert again.value.code is ErrorCode.CONFLICT
    assert made.effects.lines() == []


async def test_an_ended_run_is_not_cancelled(made: World) -> None:
    model = ScriptedModelClient([answer("need_information", "Which asset?")])
    await made.loop(model).run("Help", ALICE, run_id="r1", conversation_id=CHAT)
    with pytest.raises(RunRefusedError) as refused:
        await made.loop(model).cancel("r1", ALICE, reason=REASON)
    assert refused.value.code is ErrorCode.CONFLICT
    record = made.store.get_run("r1")
    assert record is not None
    assert (record.state, record.version) == (RunState.FINISHED, 2)


@pytest.mark.parametrize("reason", ["", "   \n", "x" * (MAX_REASON + 1)])
async def test_a_cancel_needs_a_reason_of_reasonable_length(made: World, reason: str) -> None:
    await _suspended(made)
    with pytest.raises(ConfigurationError):
        await made.loop(ScriptedModelClient([])).cancel("r1", ALICE, reason=reason)
    record = made.store.get_run("r1")
    assert record is not None
    assert record.state is RunState.SUSPENDED


async def test_cancelling_a_run_with_plans_needs_writes_and_leaves_it_as_it_was(
    made: World,
) -> None:
    await _suspended(made)
    bare = AgentLoop(
        gate=made.gate,
        model=ScriptedModelClient([]),
        store=made.store,
        budget=RunBudget(max_steps=10, deadline_seconds=60.0),
        clock=made.clock,
        checker=made.checker,
    )
    with pytest.raises(ConfigurationError):
        await bare.cancel("r1", ALICE, reason=REASON)
    record = made.store.get_run("r1")
    assert record is not None
    assert (record.state, record.version) == (RunState.SUSPENDED, 2)


# --- RUNNING runs: only once they cannot still be running ---------------------------------------


def _crash_while_resuming(made: World) -> None:
    """Leave run r1 as a process that claimed it for a resume and died leaves it."""
    record = made.store.get_run("r1")
    assert record is not None
    claimed = record.advanced(at=made.clock.now(), state=RunState.RUNNING)
    assert made.store.update_run(claimed, expect_version=record.version)


async def test_a_running_run_is_cancelled_only_past_its_deadline_and_the_grace_margin(
    made: World,
) -> None:
    (plan_id,) = await _suspended(made)
    _crash_while_resuming(made)
    loop = made.loop(ScriptedModelClient([]))  # a deadline of 60 s, none of it spent yet
    made.clock.advance(60.0 + CANCEL_GRACE_SECONDS - 1.0)
    with pytest.raises(RunRefusedError) as early:
        await loop.cancel("r1", ALICE, reason=REASON)
    assert early.value.code is ErrorCode.CONFLICT
    assert _plan_state(made, plan_id) is PlanState.PROPOSED
    made.clock.advance(1.0)
    outcome = await loop.cancel("r1", ALICE, reason=REASON)
    assert (outcome.status, outcome.plan_ids) == (RunStatus.FAILED, (plan_id,))
    assert _plan_state(made, plan_id) is PlanState.REJECTED


async def test_the_time_a_running_run_had_spent_counts_towards_its_deadline(
    made: World,
) -> None:
    def slow(_request: ModelRequest) -> ModelReply:
        made.clock.advance(50.0)
        return reply(call("c1", "asset_status", asset_id="asset-1"))

    def hang(_request: ModelRequest) -> ModelReply:
        msg = "the process dies here"
        raise SystemExit(msg)

    model = ScriptedModelClient([slow, hang])
    with pytest.raises(SystemExit):
        await made.loop(model).run("Look", ALICE, run_id="r1", conversation_id=CHAT)
    record = made.store.get_run("r1")
    assert record is not None
    assert record.state is RunState.RUNNING  # a process that dies stores nothing more
    loop = made.loop(ScriptedModelClient([]))
    made.clock.advance(10.0 + CANCEL_GRACE_SECONDS - 1.0)
    with pytest.raises(RunRefusedError):
        await loop.cancel("r1", ALICE, reason=REASON)
    made.clock.advance(1.0)
    outcome = await loop.cancel("r1", ALICE, reason=REASON)
    assert outcome.plan_ids == ()
    last = outcome.new_turns[-1]
    assert isinstance(last, UserTurn)
    assert last.text.startswith("[handrail] The user cancelled this run")
    assert len(await loop.conversation(CHAT, ALICE)) == 4  # task, calls, results, cancel


async def test_a_resumed_run_counts_the_longer_of_its_own_and_the_loops_deadline(
    made: World,
) -> None:
    await _suspended(made)
    _crash_while_resuming(made)
    patient = made.loop(ScriptedModelClient([]), RunBudget(max_steps=10, deadline_seconds=600.0))
    made.clock.advance(60.0 + CANCEL_GRACE_SECONDS)
    with pytest.raises(RunRefusedError) as refused:
        await patient.cancel("r1", ALICE, reason=REASON)
    assert refused.value.code is ErrorCode.CONFLICT
    made.clock.advance(540.0)
    assert (await patient.cancel("r1", ALICE, reason=REASON)).status is RunStatus.FAILED
