"""The agent loop: runs end checked, budgets end runs, writes suspend and resume, replay.

Every model here is a ScriptedModelClient (no real model); the Gate, Writes and stores
are real. Tests proving invariant 10 (a final answer claims only SUCCEEDED effects)
and 11 (budgets are program state) say so in their docstrings; the marker is added by
the lead when the invariants leave PENDING.
"""

from __future__ import annotations

import json
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import pytest
import typer
from _agent_worker import (
    ALICE,
    BOB,
    HERE,
    MALLORY,
    TICKET_ARGS,
    World,
    answer,
    call,
    reply,
    world,
)
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from handrail import ErrorCode, ExecutionStatus, PlanState, ToolCall, WriteRefusedError
from handrail.adapters.base import Definitions
from handrail.adapters.transcript import AssistantTurn, ToolResult, ToolResultsTurn, UserTurn
from handrail.cli._replay import replay as replay_command
from handrail.errors import ConfigurationError
from handrail.execution import plan_key
from handrail.loop._agent_record import PendingPlan, RunData, RunEnd, StepLog
from handrail.loop.agent import (
    DEFAULT_SYSTEM,
    RunRefusedError,
    RunStatus,
    read_run,
)
from handrail.loop.answers import FinalState
from handrail.loop.budgets import BudgetReason, ModelPrice, PriceTable, RunBudget
from handrail.loop.models import ModelError, ModelRequest, ScriptedModelClient, ScriptExhaustedError
from handrail.runs import RunState
from handrail.shaping.marking import MODEL_INSTRUCTIONS, read_block
from handrail.store import SqliteStore, Store

pytestmark = pytest.mark.anyio

TASK = "Is asset-1 down? Open a ticket if it is."


@pytest.fixture
def made(store: Store, tmp_path: Path) -> World:
    return world(store, tmp_path / "effects.txt")


def _budget(**changes: Any) -> RunBudget:
    options: dict[str, Any] = {"max_steps": 10, "deadline_seconds": 60.0}
    options.update(changes)
    return RunBudget(**options)


def _stored(made: World, run_id: str) -> tuple[RunState, RunData]:
    record = made.store.get_run(run_id)
    assert record is not None
    return record.state, read_run(record)


async def _suspended(made: World) -> tuple[str, str]:
    """A run suspended on one ticket plan: its run id and plan id."""
    model = ScriptedModelClient([reply(call("c1", "create_ticket", **TICKET_ARGS))])
    outcome = await made.loop(model).run(TASK, ALICE, run_id="r1")
    assert outcome.status is RunStatus.SUSPENDED
    (plan_id,) = outcome.plan_ids
    return outcome.run_id, plan_id


# --- finishing --------------------------------------------------------------------------------


async def test_a_read_then_answer_run_finishes_with_a_checked_answer(made: World) -> None:
    model = ScriptedModelClient(
        [
            reply(call("c1", "asset_status", asset_id="asset-1"), usage=(50, 10)),
            answer("need_information", "asset-1 is down. Shall I open a ticket?"),
        ]
    )
    outcome = await made.loop(model).run(TASK, ALICE)
    assert outcome.status is RunStatus.FINISHED
    assert outcome.run_id == "run-1"
    assert outcome.steps == 2
    assert outcome.answer is not None
    assert outcome.answer.answer.state is FinalState.NEED_INFORMATION
    assert not outcome.answer.downgraded
    first, second = model.requests
    assert first.system == DEFAULT_SYSTEM
    assert MODEL_INSTRUCTIONS in DEFAULT_SYSTEM
    assert not isinstance(first.tools, Definitions)
    assert {spec.name for spec in first.tools} == {"asset_status", "create_ticket", "note_ticket"}
    assert first.transcript == (UserTurn(text=TASK),)
    results = second.transcript[-1]
    assert isinstance(results, ToolResultsTurn)
    (result,) = results.results
    block = read_block(result.content)
    assert block is not None
    assert json.loads(block.body)["data"] == {"asset_id": "asset-1", "state": "down"}
    state, data = _stored(made, "run-1")
    assert state is RunState.FINISHED
    assert data.end is not None
    assert data.end.label() == "FINISHED need_information (claimed need_information)"
    assert len(data.transcript) == 4
    assert [s.calls[0].status for s in data.steps] == ["ok"]
    assert len(data.replies) == 2
    assert data.budget["steps"] == 2
    assert data.budget["input_tokens"] == 50


@pytest.mark.invariant(10)
async def test_a_false_succeeded_is_downgraded_with_the_reason(made: World) -> None:
    """Invariant 10: `succeeded` with no SUCCEEDED record behind it does not stand."""
    model = ScriptedModelClient(
        [
            reply(call("c1", "asset_status", asset_id="asset-1")),
            answer("succeeded", "Ticket TK-0001 opened.", tool="create_ticket", business_id="TK-1"),
        ]
    )
    outcome = await made.loop(model).run(TASK, ALICE)
    assert outcome.answer is not None
    assert outcome.answer.downgraded
    assert outcome.answer.claimed is FinalState.SUCCEEDED
    assert outcome.answer.answer.state is FinalState.NEED_INFORMATION
    assert outcome.answer.notice is not None
    _, data = _stored(made, outcome.run_id)
    assert data.end is not None
    assert data.end.answer is not None
    assert data.end.answer["state"] == "need_information"
    assert data.end.answer["issues"][0]["problem"] == "not_found"
    assert made.effects.lines() == []


@pytest.mark.invariant(10)
async def test_a_succeeded_claim_citing_another_runs_execution_is_downgraded(
    made: World,
) -> None:
    """Invariant 10: evidence must be an execution this run made, not an earlier one."""
    run_id, plan_id = await _suspended(made)
    token = await made.writes.issue_token(plan_id, ALICE)
    finish = ScriptedModelClient(
        [answer("succeeded", "Done.", tool="create_ticket", plan_id=plan_id)]
    )
    done = await made.loop(finish).resume(run_id, ALICE, plan_id=plan_id, token=token.value)
    assert done.answer is not None
    assert done.answer.answer.state is FinalState.SUCCEEDED
    other = ScriptedModelClient(
        [answer("succeeded", "I opened it.", tool="create_ticket", plan_id=plan_id)]
    )
    borrowed = await made.loop(other).run("Open a ticket", ALICE, run_id="r2")
    assert borrowed.answer is not None
    assert borrowed.answer.answer.state is FinalState.NEED_INFORMATION
    assert borrowed.answer.issues[0].problem.value == "not_in_run"


@pytest.mark.invariant(10)
async def test_free_text_answers_are_checked_for_unproven_claims(made: World) -> None:
    """Invariant 10 in free-text mode: success words without proof are flagged."""
    model = ScriptedModelClient([reply(text="Done, ticket TK-0042 was created.")])
    outcome = await made.loop(model).run(TASK, ALICE)
    assert outcome.status is RunStatus.FINISHED
    assert outcome.answer is None
    assert outcome.text == "Done, ticket TK-0042 was created."
    assert outcome.text_check is not None
    assert not outcome.text_check.ok
    assert outcome.text_check.unsupported_success
    _, data = _stored(made, outcome.run_id)
    assert data.end is not None
    assert data.end.text_ok is False
    assert data.end.label() == "FINISHED free text, unproven"


@pytest.mark.parametrize(
    "text",
    [
        '```json\n{"state": "failed", "message": "The asset is unknown."}\n```',
        '  {"state": "failed", "message": "The asset is unknown."}  ',
    ],
)
async def test_a_json_answer_is_read_bare_or_fenced(made: World, text: str) -> None:
    outcome = await made.loop(ScriptedModelClient([reply(text=text)])).run(TASK, ALICE)
    assert outcome.answer is not None
    assert outcome.answer.answer.state is FinalState.FAILED


@pytest.mark.parametrize(
    "text", ['{"state": "done", "message": "x"}', "{not json", "", '["state"]']
)
async def test_an_answer_that_is_not_the_schema_is_free_text(made: World, text: str) -> None:
    outcome = await made.loop(ScriptedModelClient([reply(text=text)])).run(TASK, ALICE)
    assert outcome.status is RunStatus.FINISHED
    assert outcome.answer is None
    assert outcome.text_check is not None


async def test_a_model_error_ends_the_run_failed_with_its_code(made: World) -> None:
    def refuse(_request: ModelRequest) -> Any:
        raise ModelError("down", provider="scripted", code=ErrorCode.TRANSIENT)

    model = ScriptedModelClient([reply(call("c1", "asset_status", asset_id="asset-1")), refuse])
    outcome = await made.loop(model).run(TASK, ALICE)
    assert outcome.status is RunStatus.FAILED
    assert outcome.error == "TRANSIENT"
    state, data = _stored(made, outcome.run_id)
    assert state is RunState.FAILED
    assert data.end is not None
    assert data.end.label() == "FAILED TRANSIENT"


async def test_a_taken_or_malformed_run_id_is_refused(made: World) -> None:
    await made.loop(ScriptedModelClient([reply(text="hi")])).run(TASK, ALICE, run_id="same")
    with pytest.raises(RunRefusedError) as taken:
        await made.loop(ScriptedModelClient([])).run(TASK, ALICE, run_id="same")
    assert taken.value.code is ErrorCode.CONFLICT
    with pytest.raises(ConfigurationError):
        await made.loop(ScriptedModelClient([])).run(TASK, ALICE, run_id="no spaces")


async def test_a_call_id_reused_from_an_earlier_turn_is_refused_not_run(made: World) -> None:
    model = ScriptedModelClient(
        [
            reply(call("c1", "asset_status", asset_id="asset-1")),
            reply(call("c1", "asset_status", asset_id="asset-2")),
            answer("failed", "stop"),
        ]
    )
    await made.loop(model).run(TASK, ALICE)
    assert made.reads.calls == 1
    _, data = _stored(made, "run-1")
    assert data.steps[1].calls[0].code == "INVALID_ARGUMENTS"


async def test_a_run_moved_by_another_process_stops_with_a_conflict(made: World) -> None:
    def meddle(_request: ModelRequest) -> Any:
        record = made.store.get_run("r1")
        assert record is not None
        assert made.store.update_run(
            record.advanced(at=record.updated_at), expect_version=record.version
        )
        return reply(call("c1", "asset_status", asset_id="asset-1"))

    with pytest.raises(RunRefusedError) as refused:
        await made.loop(ScriptedModelClient([meddle])).run(TASK, ALICE, run_id="r1")
    assert refused.value.code is ErrorCode.CONFLICT


# --- budgets (invariant 11) -----------------------------------------------------------------


def _advance(made: World, seconds: float) -> Any:
    def step(_request: ModelRequest) -> Any:
        made.clock.advance(seconds)
        return reply(call("c1", "asset_status", asset_id="asset-1"))

    return step


BUDGET_CASES: dict[str, tuple[dict[str, Any], Any]] = {
    "steps": ({"max_steps": 2}, BudgetReason.STEPS),
    "deadline": ({"deadline_seconds": 30.0}, BudgetReason.DEADLINE),
    "input_tokens": ({"max_input_tokens": 150}, BudgetReason.INPUT_TOKENS),
    "output_tokens": ({"max_output_tokens": 15}, BudgetReason.OUTPUT_TOKENS),
    "cost": (
        {
            "max_cost": Decimal("0.0001"),
            "prices": PriceTable(
                prices={
                    "scripted-model": ModelPrice(
                        input_per_million=Decimal(1), output_per_million=Decimal(1)
                    )
                }
            ),
        },
        BudgetReason.COST,
    ),
    "per_tool": ({"tool_call_limits": {"asset_status": 2}}, BudgetReason.TOOL_CALLS),
    "identical": ({"max_identical_calls": 2}, BudgetReason.IDENTICAL_CALLS),
    "same_error": ({"max_same_error": 2}, BudgetReason.SAME_ERROR),
}


def _script_for(case: str, made: World) -> list[Any]:
    if case == "deadline":
        return [_advance(made, 20.0), _advance(made, 20.0), answer("failed", "late")]
    if case == "same_error":
        return [
            reply(call(f"c{n}", "asset_status", asset_id=f"asset-40{n}")) for n in range(1, 4)
        ] + [answer("failed", "unknown asset")]
    if case == "identical":
        return [reply(call(f"c{n}", "asset_status", asset_id="asset-1")) for n in range(1, 4)]
    return [
        reply(call(f"c{n}", "asset_status", asset_id=f"asset-{n}"), usage=(100, 10))
        for n in range(1, 4)
    ] + [answer("failed", "never reached")]


@pytest.mark.parametrize("case", sorted(BUDGET_CASES))
@pytest.mark.invariant(11)
async def test_every_budget_ends_the_run_fail_closed_with_a_structured_reason(
    made: World, case: str
) -> None:
    """Invariant 11: limits are counted by the program and end the run, not the model."""
    limits, reason = BUDGET_CASES[case]
    model = ScriptedModelClient(_script_for(case, made))
    outcome = await made.loop(model, _budget(**limits)).run(TASK, ALICE)
    assert outcome.status is RunStatus.BUDGET_EXHAUSTED
    assert outcome.trip is not None
    assert outcome.trip.reason is reason
    assert outcome.answer is None
    state, data = _stored(made, outcome.run_id)
    assert state is RunState.FAILED
    assert data.end is not None
    assert data.end.trip is not None
    assert data.end.trip["reason"] == reason.value
    assert data.budget["tripped"]["reason"] == reason.value
    # Nothing the model wrote mentions a limit: the prompt never carried one.
    for request in model.requests:
        assert "budget" not in (request.system or "").lower()


@pytest.mark.invariant(11)
async def test_a_refused_call_stops_the_whole_turn_before_anything_runs(made: World) -> None:
    """Invariant 11: the per-tool count refuses the turn's second call; neither runs."""
    model = ScriptedModelClient(
        [
            reply(
                call("c1", "asset_status", asset_id="asset-1"),
                call("c2", "asset_status", asset_id="asset-2"),
            )
        ]
    )
    budget = _budget(tool_call_limits={"asset_status": 1})
    outcome = await made.loop(model, budget).run(TASK, ALICE)
    assert outcome.trip is not None
    assert outcome.trip.tool == "asset_status"
    assert made.reads.calls == 0
    _, data = _stored(made, outcome.run_id)
    # The unanswered turn is not in the transcript (it stays valid for adapters)...
    assert data.transcript == (UserTurn(text=TASK),)
    # ...but the reply is recorded, so a replay reproduces the trip.
    assert len(data.replies) == 1


# --- suspend and resume -----------------------------------------------------------------------


async def test_a_write_suspends_the_run_durably_in_the_store(made: World) -> None:
    run_id, plan_id = await _suspended(made)
    state, data = _stored(made, run_id)
    assert state is RunState.SUSPENDED
    assert data.pending == (PendingPlan(plan_id=plan_id, call_id="c1", tool="create_ticket"),)
    assert data.steps[0].calls[0].code == "NEEDS_CONFIRMATION"
    assert data.budget["steps"] == 1
    assert made.effects.lines() == []
    plan = await made.writes.get_plan(plan_id, ALICE)
    assert plan.state is PlanState.PROPOSED


async def test_three_writes_in_one_turn_suspend_on_three_plans_not_a_budget_trip(
    made: World,
) -> None:
    """Plans awaiting a person are no errors to the same-error breaker (default limit 3)."""
    calls = [
        call(f"c{n}", "create_ticket", **{**TICKET_ARGS, "reason": f"reason {n}"}) for n in range(3)
    ]
    model = ScriptedModelClient([reply(*calls)])
    outcome = await made.loop(model).run(TASK, ALICE, run_id="r3")
    assert outcome.status is RunStatus.SUSPENDED
    assert len(outcome.plan_ids) == 3
    assert _stored(made, "r3")[0] is RunState.SUSPENDED
    assert made.effects.lines() == []


@pytest.mark.invariant(10)
async def test_resume_confirms_executes_once_and_finishes_with_proven_success(
    made: World,
) -> None:
    """Invariant 10: `succeeded` stands when the plan's SUCCEEDED record proves it."""
    run_id, plan_id = await _suspended(made)
    token = await made.writes.issue_token(plan_id, ALICE)
    model = ScriptedModelClient(
        [answer("succeeded", "Ticket opened.", tool="create_ticket", plan_id=plan_id)]
    )
    outcome = await made.loop(model).resume(run_id, ALICE, plan_id=plan_id, token=token.value)
    assert outcome.status is RunStatus.FINISHED
    assert outcome.answer is not None
    assert outcome.answer.answer.state is FinalState.SUCCEEDED
    key = plan_key(tenant_id="t1", tool="create_ticket", plan_id=plan_id)
    assert outcome.answer.proven == (key,)
    assert len(made.effects.lines()) == 1
    execution = made.store.get_execution(key)
    assert execution is not None
    assert execution.status is ExecutionStatus.SUCCEEDED
    (request,) = model.requests
    *_, results, confirmed = request.transcript
    assert isinstance(results, ToolResultsTurn)
    assert results.results[0].call_id == "c1"
    assert isinstance(confirmed, UserTurn)
    assert f"confirmed plan {plan_id}" in confirmed.text
    block = read_block(confirmed.text.split("\n", 1)[1])
    assert block is not None
    assert json.loads(block.body)["data"]["ticket_no"] == "TK-0001"
    state, data = _stored(made, run_id)
    assert state is RunState.FINISHED
    assert data.pending == ()
    assert [step.kind for step in data.steps] == ["model", "resume"]
    assert data.keys == (key,)


async def test_a_tampered_token_is_refused_and_the_run_stays_suspended(made: World) -> None:
    run_id, plan_id = await _suspended(made)
    token = await made.writes.issue_token(plan_id, ALICE)
    tampered = token.value[:-2] + ("AA" if not token.value.endswith("AA") else "BB")
    loop = made.loop(ScriptedModelClient([answer("processing", "Waiting.")]))
    with pytest.raises(WriteRefusedError) as refused:
        await loop.resume(run_id, ALICE, plan_id=plan_id, token=tampered)
    assert refused.value.code is ErrorCode.CONFIRMATION_INVALID
    state, data = _stored(made, run_id)
    assert state is RunState.SUSPENDED
    assert len(data.pending) == 1
    assert made.effects.lines() == []
    # The genuine token was not spent by the refused attempt.
    outcome = await loop.resume(run_id, ALICE, plan_id=plan_id, token=token.value)
    assert outcome.status is RunStatus.FINISHED
    assert len(made.effects.lines()) == 1


async def test_resume_is_refused_to_others_and_for_unknown_plans_or_runs(made: World) -> None:
    run_id, plan_id = await _suspended(made)
    token = await made.writes.issue_token(plan_id, ALICE)
    loop = made.loop(ScriptedModelClient([]))
    cases = [
        (BOB, run_id, plan_id, ErrorCode.NOT_FOUND),
        (MALLORY, run_id, plan_id, ErrorCode.NOT_FOUND),
        (ALICE, "no-such-run", plan_id, ErrorCode.NOT_FOUND),
        (ALICE, "bad id!", plan_id, ErrorCode.NOT_FOUND),
        (ALICE, run_id, "p-999", ErrorCode.NOT_FOUND),
    ]
    for who, run, plan, code in cases:
        with pytest.raises(RunRefusedError) as refused:
            await loop.resume(run, who, plan_id=plan, token=token.value)
        assert refused.value.code is code
    assert _stored(made, run_id)[0] is RunState.SUSPENDED
    finished = made.loop(ScriptedModelClient([answer("failed", "x")]))
    await finished.resume(run_id, ALICE, plan_id=plan_id, token=token.value)
    with pytest.raises(RunRefusedError) as again:
        await finished.resume(run_id, ALICE, plan_id=plan_id, token=token.value)
    assert again.value.code is ErrorCode.CONFLICT
    assert len(made.effects.lines()) == 1


async def test_resume_without_a_token_needs_a_plan_confirmed_out_of_band(made: World) -> None:
    run_id, plan_id = await _suspended(made)
    loop = made.loop(ScriptedModelClient([answer("failed", "x")]))
    with pytest.raises(WriteRefusedError) as refused:
        await loop.resume(run_id, ALICE, plan_id=plan_id, token=None)
    assert refused.value.code is ErrorCode.NEEDS_CONFIRMATION
    assert _stored(made, run_id)[0] is RunState.SUSPENDED
    token = await made.writes.issue_token(plan_id, ALICE)
    await made.writes.confirm(plan_id, token.value, ALICE)
    outcome = await loop.resume(run_id, ALICE, plan_id=plan_id, token=None)
    assert outcome.status is RunStatus.FINISHED


async def test_a_plan_refused_at_execution_reaches_the_model_as_an_error(made: World) -> None:
    run_id, plan_id = await _suspended(made)
    token = await made.writes.issue_token(plan_id, ALICE)
    await made.writes.confirm(plan_id, token.value, ALICE)
    await made.writes.reject(plan_id, ALICE)
    model = ScriptedModelClient([answer("failed", "The ticket was not opened.")])
    outcome = await made.loop(model).resume(run_id, ALICE, plan_id=plan_id, token=None)
    assert outcome.status is RunStatus.FINISHED
    _, data = _stored(made, run_id)
    assert data.steps[-1].calls[0].code == "PLAN_CLOSED"
    assert data.keys == ()
    assert made.effects.lines() == []


async def test_two_writes_in_one_turn_wait_for_both_confirmations(made: World) -> None:
    other = {**TICKET_ARGS, "asset_id": "asset-2"}
    model = ScriptedModelClient(
        [
            reply(call("c1", "create_ticket", **TICKET_ARGS), call("c2", "create_ticket", **other)),
        ]
    )
    outcome = await made.loop(model).run(TASK, ALICE, run_id="r1")
    assert outcome.status is RunStatus.SUSPENDED
    first, second = outcome.plan_ids
    loop = made.loop(ScriptedModelClient([answer("processing", "Both submitted.")]))
    token = await made.writes.issue_token(first, ALICE)
    halfway = await loop.resume("r1", ALICE, plan_id=first, token=token.value)
    assert halfway.status is RunStatus.SUSPENDED
    assert halfway.plan_ids == (second,)
    token = await made.writes.issue_token(second, ALICE)
    done = await loop.resume("r1", ALICE, plan_id=second, token=token.value)
    assert done.status is RunStatus.FINISHED
    assert len(made.effects.lines()) == 2


@pytest.mark.invariant(11)
async def test_resume_keeps_the_budget_spent_before_the_suspension(made: World) -> None:
    """Invariant 11: the step count survives suspension; the resumed run cannot reset it."""
    run_id, plan_id = await _suspended(made)
    token = await made.writes.issue_token(plan_id, ALICE)
    model = ScriptedModelClient([reply(call("c2", "asset_status", asset_id="asset-1"))] * 3)
    outcome = await made.loop(model, _budget(max_steps=2)).resume(
        run_id, ALICE, plan_id=plan_id, token=token.value
    )
    assert outcome.status is RunStatus.BUDGET_EXHAUSTED
    assert outcome.trip is not None
    assert outcome.trip.reason is BudgetReason.STEPS
    assert outcome.steps == 2


async def test_a_suspension_past_the_deadline_ends_the_run_before_confirming(
    made: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    handle_batch = made.gate.handle_batch

    async def slow(*args: Any, **kwargs: Any) -> Any:
        envelopes = await handle_batch(*args, **kwargs)
        made.clock.advance(61.0)  # the turn's calls used up the deadline
        return envelopes

    monkeypatch.setattr(made.gate, "handle_batch", slow)
    model = ScriptedModelClient([reply(call("c1", "create_ticket", **TICKET_ARGS))])
    outcome = await made.loop(model).run(TASK, ALICE, run_id="r1")
    assert outcome.status is RunStatus.SUSPENDED
    (plan_id,) = outcome.plan_ids
    token = await made.writes.issue_token(plan_id, ALICE)
    resumed = await made.loop(ScriptedModelClient([])).resume(
        "r1", ALICE, plan_id=plan_id, token=token.value
    )
    assert resumed.status is RunStatus.BUDGET_EXHAUSTED
    assert resumed.trip is not None
    assert resumed.trip.reason is BudgetReason.DEADLINE
    assert made.effects.lines() == []
    assert (await made.writes.get_plan(plan_id, ALICE)).state is PlanState.AWAITING_CONFIRMATION


async def test_a_resume_that_loses_the_claim_race_is_refused(
    made: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id, plan_id = await _suspended(made)
    token = await made.writes.issue_token(plan_id, ALICE)
    monkeypatch.setattr(made.store, "update_run", lambda *_a, **_k: False)
    with pytest.raises(RunRefusedError) as refused:
        await made.loop(ScriptedModelClient([])).resume(
            run_id, ALICE, plan_id=plan_id, token=token.value
        )
    assert refused.value.code is ErrorCode.CONFLICT
    assert made.effects.lines() == []
    assert (await made.writes.get_plan(plan_id, ALICE)).state is PlanState.AWAITING_CONFIRMATION


async def test_resume_needs_writes(made: World) -> None:
    loop = made.loop(ScriptedModelClient([]))
    loop._writes = None
    with pytest.raises(ConfigurationError):
        await loop.resume("r1", ALICE, plan_id="p-1", token="t")  # noqa: S106 - no real token


async def test_an_unconfirmed_command_write_is_evidence_for_its_own_run(made: World) -> None:
    """Invariant 10: a command-keyed write of this run proves `succeeded` by business id."""
    model = ScriptedModelClient(
        [
            reply(call("c1", "note_ticket", **TICKET_ARGS)),
            answer("succeeded", "Noted.", tool="note_ticket", business_id="TK-0001"),
        ]
    )
    outcome = await made.loop(model).run(TASK, ALICE)
    assert outcome.answer is not None
    assert outcome.answer.answer.state is FinalState.SUCCEEDED
    assert len(made.effects.lines()) == 1


async def _worker(*args: str, ok: bool = True) -> dict[str, Any]:
    """Run the worker script in a process of its own; its JSON line, or its stderr."""
    done = await anyio.run_process(
        [sys.executable, str(HERE / "_agent_worker.py"), *args], check=False
    )
    stderr = done.stderr.decode()
    assert (done.returncode == 0) is ok, stderr
    if not ok:
        return {"stderr": stderr}
    return dict(json.loads(done.stdout.decode().strip().splitlines()[-1]))


async def test_a_run_suspended_in_one_process_is_resumed_in_another(tmp_path: Path) -> None:
    db, effects = tmp_path / "runs.db", tmp_path / "effects.txt"
    SqliteStore.open(db).close()
    started = await _worker("start", str(db), str(effects), "cross-1")
    assert started["status"] == "SUSPENDED"
    (plan_id,) = started["plan_ids"]
    # The application (this process) shows the plan to the person and issues the token.
    store = SqliteStore.open(db)
    try:
        app = world(store, effects, plan_prefix="app")
        token = await app.writes.issue_token(plan_id, ALICE)
        assert store.get_run("cross-1") is not None
    finally:
        store.close()
    resumed = await _worker("resume", str(db), str(effects), "cross-1", plan_id, token.value)
    assert resumed["status"] == "FINISHED"
    assert resumed["state"] == "succeeded"
    assert resumed["steps"] == 2
    # A second resume (a retry from another worker) changes nothing downstream.
    again = await _worker(
        "resume", str(db), str(effects), "cross-1", plan_id, token.value, ok=False
    )
    assert "CONFLICT" in again["stderr"]
    lines = effects.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 1
    store = SqliteStore.open(db)
    try:
        key = plan_key(tenant_id="t1", tool="create_ticket", plan_id=plan_id)
        execution = store.get_execution(key)
        assert execution is not None
        assert execution.status is ExecutionStatus.SUCCEEDED
        assert lines[0].split("\t")[0] == key
        record = store.get_run("cross-1")
        assert record is not None
        assert record.state is RunState.FINISHED
    finally:
        store.close()


# --- replay -----------------------------------------------------------------------------------


async def test_replay_of_a_finished_run_matches(made: World) -> None:
    model = ScriptedModelClient(
        [
            reply(call("c1", "asset_status", asset_id="asset-1")),
            answer("need_information", "asset-1 is down."),
        ]
    )
    loop = made.loop(model)
    await loop.run(TASK, ALICE, run_id="r1")
    before = made.store.get_run("r1")
    report = await loop.replay("r1")
    assert report.matched, report.differences
    assert report.recorded == report.replayed
    assert report.replayed_end == "FINISHED need_information (claimed need_information)"
    assert made.store.get_run("r1") == before
    assert made.reads.calls == 2


async def test_replay_of_a_resumed_run_matches_without_running_the_write_again(
    made: World,
) -> None:
    run_id, plan_id = await _suspended(made)
    token = await made.writes.issue_token(plan_id, ALICE)
    finish = ScriptedModelClient(
        [answer("succeeded", "Done.", tool="create_ticket", plan_id=plan_id)]
    )
    loop = made.loop(finish)
    await loop.resume(run_id, ALICE, plan_id=plan_id, token=token.value)
    report = await loop.replay(run_id)
    assert report.matched, report.differences
    assert [s.kind for s in report.replayed] == ["model", "resume"]
    assert len(made.effects.lines()) == 1
    assert report.replayed_end == "FINISHED succeeded (claimed succeeded)"


async def test_replay_of_a_suspended_run_ends_suspended(made: World) -> None:
    run_id, _ = await _suspended(made)
    report = await made.loop(ScriptedModelClient([])).replay(run_id)
    assert report.matched, report.differences
    assert report.replayed_end == "SUSPENDED"


@pytest.mark.parametrize("case", ["steps", "identical", "per_tool"])
async def test_replay_reproduces_a_budget_trip(made: World, case: str) -> None:
    limits, _ = BUDGET_CASES[case]
    loop = made.loop(ScriptedModelClient(_script_for(case, made)), _budget(**limits))
    await loop.run(TASK, ALICE, run_id="r1")
    report = await made.loop(ScriptedModelClient([])).replay("r1")
    assert report.matched, report.differences


async def test_replay_of_a_failed_model_matches_when_the_replies_run_out(made: World) -> None:
    def refuse(_request: ModelRequest) -> Any:
        raise ModelError("late", provider="scripted", code=ErrorCode.TIMEOUT)

    loop = made.loop(
        ScriptedModelClient([reply(call("c1", "asset_status", asset_id="asset-1")), refuse])
    )
    await loop.run(TASK, ALICE, run_id="r1")
    report = await loop.replay("r1")
    assert report.replayed_end == "FAILED SCRIPT_EXHAUSTED"
    assert report.differences == (
        "end: recorded 'FAILED TIMEOUT', replayed 'FAILED SCRIPT_EXHAUSTED'",
    )


async def test_replay_reports_a_read_whose_outcome_changed(
    made: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = ScriptedModelClient(
        [
            reply(call("c1", "asset_status", asset_id="asset-1")),
            answer("need_information", "asset-1 is down."),
        ]
    )
    loop = made.loop(model)
    await loop.run(TASK, ALICE, run_id="r1")
    monkeypatch.delitem(__import__("_agent_worker").ASSETS, "asset-1")
    report = await loop.replay("r1")
    assert not report.matched
    assert report.differences == (
        "step 1: call 'c1' (asset_status) was ok, replayed error/NOT_FOUND",
    )


async def test_replay_with_another_model_reports_diverging_steps(made: World) -> None:
    loop = made.loop(
        ScriptedModelClient(
            [reply(call("c1", "asset_status", asset_id="asset-1")), answer("failed", "x")]
        )
    )
    await loop.run(TASK, ALICE, run_id="r1")
    other = ScriptedModelClient(
        [
            reply(call("other", "asset_status", asset_id="asset-1")),
            reply(call("c2", "asset_status", asset_id="asset-1")),
            answer("failed", "x"),
        ]
    )
    report = await loop.replay("r1", model=other)
    assert "step 1: the calls differ" in report.differences
    assert "step 2: only in the replay" in report.differences
    writer = ScriptedModelClient([reply(call("w1", "create_ticket", **TICKET_ARGS))])
    written = await loop.replay("r1", model=writer)
    # A write the record does not know is never run in a replay.
    assert written.replayed[0].calls[0].code == "RISK_BLOCKED"
    assert "step 1: the calls differ" in written.differences
    assert made.effects.lines() == []
    short = await loop.replay("r1", model=ScriptedModelClient([answer("failed", "x")]))
    assert short.differences == ("step 1: only in the recorded run",)
    with pytest.raises(RunRefusedError):
        await loop.replay("missing")


async def test_a_live_run_does_not_swallow_an_exhausted_script(made: World) -> None:
    with pytest.raises(ScriptExhaustedError):
        await made.loop(ScriptedModelClient([])).run(TASK, ALICE)


# --- the stored document ----------------------------------------------------------------------

_TEXT = st.text(max_size=30)
_CALLS = st.builds(
    ToolCall,
    id=st.text(min_size=1, max_size=10),
    name=st.sampled_from(["asset_status", "create_ticket"]),
    arguments=st.one_of(
        st.none(),
        _TEXT,
        st.binary(max_size=20),
        st.dictionaries(st.text(max_size=5), st.integers() | _TEXT, max_size=3),
    ),
    provider=st.sampled_from(["openai-chat", "anthropic"]),
    defect=st.none() | _TEXT,
)
_TURNS = st.lists(
    st.one_of(
        st.builds(UserTurn, text=_TEXT),
        st.builds(AssistantTurn, text=st.none() | _TEXT, calls=st.tuples(_CALLS) | st.just(())),
        st.builds(
            ToolResultsTurn,
            results=st.tuples(
                st.builds(
                    ToolResult, call_id=_TEXT, tool=_TEXT, content=_TEXT, is_error=st.booleans()
                )
            ),
        ),
    ),
    max_size=6,
)


@given(turns=_TURNS, task=_TEXT)
def test_the_run_document_round_trips_any_transcript(turns: list[Any], task: str) -> None:
    data = RunData(
        task=task,
        principal=ALICE.snapshot(),
        limits=_budget(
            max_cost=Decimal("1.5"),
            prices=PriceTable(
                prices={
                    "m": ModelPrice(input_per_million=Decimal(1), output_per_million=Decimal(2))
                }
            ),
        ),
        budget={"steps": 1},
        transcript=tuple(turns),
        steps=(StepLog(kind="resume", plan_id="p-1"),),
        pending=(PendingPlan(plan_id="p-1", call_id="c1", tool="create_ticket"),),
        keys=("k",),
        end=RunEnd(status=RunStatus.FAILED, error="TIMEOUT"),
    )
    text = data.to_json()
    assert text.isascii()
    assert RunData.parse(text) == data


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d.update(version=3),
        lambda d: d.update(extra=1),
        lambda d: d["transcript"].append({"kind": "system", "text": "obey"}),
        lambda d: d["transcript"].append(
            {
                "kind": "assistant",
                "text": None,
                "calls": [{"id": "c", "name": "n", "arguments_base64": "!!"}],
            }
        ),
        lambda d: d["limits"].update(max_cost="lots"),
        lambda d: d["limits"].update(max_steps=0),
        lambda d: d.update(replies=[{"calls": 1}]),
    ],
)
def test_a_run_document_that_is_not_one_is_refused(mutate: Any) -> None:
    data = RunData(task="t", principal=ALICE.snapshot(), limits=_budget(), budget={})
    document = json.loads(data.to_json())
    mutate(document)
    with pytest.raises(ConfigurationError):
        RunData.parse(json.dumps(document))


# --- the replay command -----------------------------------------------------------------------


def _cli() -> typer.Typer:
    app = typer.Typer()
    app.command("replay")(replay_command)
    app.command("noop")(lambda: None)
    return app


async def _recorded_run(db: Path, effects: Path) -> str:
    """A run over the SQLite file `db`: a plan, its resume, a read, an answer."""
    store = SqliteStore.open(db)
    try:
        made = world(store, effects)
        run_id, plan_id = await _suspended(made)
        token = await made.writes.issue_token(plan_id, ALICE)
        finish = ScriptedModelClient(
            [
                reply(call("c2", "asset_status", asset_id="asset-1")),
                answer("processing", "Submitted."),
            ]
        )
        await made.loop(finish).resume(run_id, ALICE, plan_id=plan_id, token=token.value)
    finally:
        store.close()
    return run_id


def test_the_replay_command_prints_the_steps_and_the_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "runs.db"
    run_id = anyio.run(_recorded_run, db, tmp_path / "effects.txt")
    monkeypatch.chdir(HERE)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("COLUMNS", "200")
    runner = CliRunner()

    def invoke(*args: str) -> Any:
        return runner.invoke(_cli(), list(args))

    options = ["--app", "_agent_worker:replay_registry", "--store", str(db)]
    result = invoke("replay", run_id, *options)
    assert result.exit_code == 0, result.output
    assert "replay matched the recorded run" in result.output
    assert "error/NEEDS_CONFIRMATION" in result.output
    assert "create_ticket" in result.output
    assert "resume" in result.output
    monkeypatch.delitem(__import__("_agent_worker").ASSETS, "asset-1")
    changed = invoke("replay", run_id, *options)
    assert changed.exit_code == 1
    assert "difference: step 3" in changed.output, changed.output
    missing = invoke("replay", "nope", *options)
    assert missing.exit_code == 2
    assert "no run 'nope'" in missing.output
