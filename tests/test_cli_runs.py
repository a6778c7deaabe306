"""`handrail runs list|show|cancel`: a tenant's stored agent runs in SQLite or PostgreSQL."""

from __future__ import annotations

import dataclasses
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from _cli_plans import RECOVERY_APP, propose_ticket, stored_plan
from handrail import cli
from handrail.adapters.transcript import AssistantTurn, ToolResult, ToolResultsTurn, UserTurn
from handrail.calls import ToolCall
from handrail.loop._agent_record import (
    CallOutcome,
    PendingPlan,
    RunData,
    RunEnd,
    RunStatus,
    StepLog,
)
from handrail.loop.agent import read_run
from handrail.loop.budgets import BudgetTracker, RunBudget
from handrail.plans import PlanState
from handrail.runs import RunRecord, RunState
from handrail.store import open_store
from handrail.testing import FixedClock

REPO = Path(__file__).resolve().parents[1]
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
ESC = "\x1b"
TICKET = "recovery.create_recovery_ticket"


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delenv("HANDRAIL_STORE", raising=False)
    monkeypatch.delenv("COLUMNS", raising=False)
    return CliRunner()


def _document(*, ended: bool, task: str = "Open a ticket for the LIS outage") -> RunData:
    call = ToolCall(
        id="call_1",
        name="recovery.create_recovery_ticket",
        arguments='{"asset_id": "asset-lis"}',
        provider="openai",
    )
    return RunData(
        task=task,
        principal="{}",
        limits=RunBudget(max_steps=8, deadline_seconds=120.0, max_tool_calls=20),
        budget={
            "version": 1,
            "steps": 2,
            "elapsed_seconds": 1.5,
            "input_tokens": 900,
            "output_tokens": 120,
            "cost": "0",
            "tool_calls": 1,
            "tripped": None,
        },
        transcript=(
            UserTurn(text=task),
            AssistantTurn(text="I will open one.", calls=(call,)),
            ToolResultsTurn(
                results=(
                    ToolResult(
                        call_id="call_1",
                        tool="recovery.create_recovery_ticket",
                        content="needs confirmation",
                        is_error=False,
                    ),
                ),
            ),
        ),
        steps=(
            StepLog(
                kind="model",
                calls=(
                    CallOutcome(
                        call_id="call_1",
                        tool="recovery.create_recovery_ticket",
                        status="error",
                        code="NEEDS_CONFIRMATION",
                    ),
                ),
            ),
        ),
        pending=()
        if ended
        else (
            PendingPlan(plan_id="plan_7", call_id="call_1", tool="recovery.create_recovery_ticket"),
        ),
        end=RunEnd(status=RunStatus.FINISHED, text="The ticket is open.", text_ok=True)
        if ended
        else None,
    )


def _insert(
    url: str,
    run_id: str,
    *,
    tenant: str = "hospital-a",
    user: str = "u-1",
    state: RunState = RunState.SUSPENDED,
    at: datetime = T0,
    data: str | None = None,
) -> None:
    text = data if data is not None else _document(ended=state is RunState.FINISHED).to_json()
    store = open_store(url, migrate=False)
    try:
        assert store.insert_run(
            RunRecord(
                run_id=run_id,
                tenant_id=tenant,
                user_id=user,
                state=state,
                version=1,
                created_at=T0,
                updated_at=at,
                data=text,
            ),
        )
    finally:
        store.close()


def _runs(runner: CliRunner, *arguments: str) -> tuple[int, str, str]:
    result = runner.invoke(cli.app, ["runs", *arguments])
    return result.exit_code, result.stdout, result.stderr


def test_runs_list_shows_a_tenants_runs_newest_first_with_their_state_and_plans(
    runner: CliRunner, store_url: str
) -> None:
    _insert(store_url, "run_old", state=RunState.FINISHED, at=T0)
    _insert(store_url, "run_new", at=T0 + timedelta(minutes=5))
    _insert(store_url, "run_other", tenant="hospital-b", at=T0 + timedelta(minutes=9))
    code, out, err = _runs(runner, "list", "--store", store_url, "--tenant", "hospital-a")
    assert code == 0, err
    assert out.index("run_new") < out.index("run_old")
    assert "run_other" not in out
    assert "plan_7" in out  # the suspended run waits for it
    assert "FINISHED free text, proven" in out
    assert "2 run(s)" in out


def test_runs_list_filters_by_state_and_user_and_keeps_to_its_limit(
    runner: CliRunner, store_url: str
) -> None:
    _insert(store_url, "run_a", user="alice", state=RunState.FINISHED, at=T0)
    _insert(store_url, "run_b", user="bob", at=T0 + timedelta(seconds=1))
    _insert(store_url, "run_c", user="alice", at=T0 + timedelta(seconds=2))
    base = ["list", "--store", store_url, "--tenant", "hospital-a"]
    _, suspended, _ = _runs(runner, *base, "--state", "suspended")
    assert ("run_a" in suspended, "run_b" in suspended, "run_c" in suspended) == (
        False,
        True,
        True,
    )
    _, alices, _ = _runs(runner, *base, "--user", "alice")
    assert ("run_a" in alices, "run_b" in alices, "run_c" in alices) == (True, False, True)
    _, newest, _ = _runs(runner, *base, "-n", "1")
    assert ("run_a" in newest, "run_b" in newest, "run_c" in newest) == (False, False, True)
    _, nobody, _ = _runs(runner, *base, "--user", "carol")
    assert "no matching runs in tenant hospital-a" in nobody


def test_runs_list_refuses_an_unknown_state(runner: CliRunner, store_url: str) -> None:
    code, out, err = _runs(runner, "list", "--store", store_url, "--tenant", "t", "--state", "x")
    assert code == 2
    assert err.startswith("error: unknown state 'x'")
    assert out == ""


def test_runs_show_prints_the_state_steps_pending_plan_and_budget(
    runner: CliRunner, store_url: str
) -> None:
    _insert(store_url, "run_s")
    code, out, err = _runs(runner, "show", "run_s", "--store", store_url, "--tenant", "hospital-a")
    assert code == 0, err
    assert "SUSPENDED (version 1)" in out
    assert "Open a ticket for the LIS outage" in out
    assert "NEEDS_CONFIRMATION" in out
    assert "waits for plan plan_7 (recovery.create_recovery_ticket, call call_1)" in out
    assert "(not ended)" in out
    for row in ("steps", "input tokens", "tool calls"):
        assert row in out
    assert "900" in out
    assert "no limit" in out  # output tokens are not limited
    assert "transcript" not in out


def test_runs_show_of_a_finished_run_prints_its_answer_and_with_transcript_the_turns(
    runner: CliRunner, store_url: str
) -> None:
    _insert(store_url, "run_f", state=RunState.FINISHED)
    base = ["show", "run_f", "--store", store_url, "--tenant", "hospital-a"]
    code, out, err = _runs(runner, *base, "--transcript")
    assert code == 0, err
    assert "The ticket is open." in out
    assert "transcript, 3 turn(s)" in out
    assert 'calls recovery.create_recovery_ticket [call_1] {"asset_id": "asset-lis"}' in out
    assert "result of recovery.create_recovery_ticket [call_1]:" in out
    assert "waits for plan" not in out


def test_runs_show_escapes_terminal_sequences_a_model_or_user_wrote(
    runner: CliRunner, store_url: str
) -> None:
    task = f"{ESC}[2J{ESC}]0;owned{ESC}\\ [bold]markup[/bold]\u202e"
    _insert(store_url, "run_x", data=_document(ended=False, task=task).to_json())
    code, out, err = _runs(
        runner, "show", "run_x", "--store", store_url, "--tenant", "hospital-a", "--transcript"
    )
    assert code == 0, err
    assert ESC not in out
    assert "\\x1b[2J" in out
    assert "[bold]markup[/bold]" in out  # shown literally, never as rich markup


def test_runs_show_of_a_missing_run_exits_2(runner: CliRunner, store_url: str) -> None:
    code, out, err = _runs(runner, "show", "nope", "--store", store_url, "--tenant", "hospital-a")
    assert code == 2
    assert err == "error: no run 'nope' in tenant 'hospital-a'\n"
    assert out == ""


def test_runs_show_of_a_stored_run_that_is_not_a_run_document_exits_2(
    runner: CliRunner, store_url: str
) -> None:
    _insert(store_url, "run_j", data='{"not": "a run"}')
    code, _, err = _runs(runner, "show", "run_j", "--store", store_url, "--tenant", "hospital-a")
    assert code == 2
    assert err.startswith("error: the run's data is not a run document")
    listed = _runs(runner, "list", "--store", store_url, "--tenant", "hospital-a")
    assert listed[0] == 0
    assert "(not a run document)" in listed[1]


def test_runs_commands_without_a_store_exit_2_and_create_nothing(
    runner: CliRunner, tmp_path: Path
) -> None:
    missing = tmp_path / "none.db"
    code, _, err = _runs(runner, "list", "--store", str(missing), "--tenant", "t")
    assert code == 2
    assert err.startswith("error: no store at")
    assert not missing.exists()


# --- runs cancel ---------------------------------------------------------------------------------


@pytest.fixture
def service_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "tickets.db"
    monkeypatch.setenv("RECOVERY_SERVICE_DB", str(path))
    monkeypatch.delenv("HANDRAIL_APP", raising=False)
    return path


def _waiting_for(url: str, plan_id: str, *, state: RunState = RunState.SUSPENDED) -> None:
    """Run `r-wait` of nurse u-1001, stored waiting for the plan `plan_id`."""
    shown = _document(ended=False)
    document = dataclasses.replace(
        shown,
        budget=BudgetTracker(shown.limits, FixedClock()).snapshot(),
        pending=(PendingPlan(plan_id=plan_id, call_id="call_1", tool=TICKET),),
    )
    now = datetime.now(UTC)
    _insert(url, "r-wait", user="u-1001", state=state, at=now, data=document.to_json())


def _cancel(runner: CliRunner, url: str, *more: str) -> tuple[int, str, str]:
    return _runs(
        runner,
        "cancel",
        "r-wait",
        "--app",
        RECOVERY_APP,
        "--store",
        url,
        "--tenant",
        "hospital-a",
        *more,
    )


def test_runs_cancel_rejects_the_plans_and_ends_the_run_as_its_user(
    runner: CliRunner, store_url: str, service_db: Path
) -> None:
    plan_id = propose_ticket(store_url, service_db)
    _waiting_for(store_url, plan_id)
    code, out, err = _cancel(runner, store_url, "--user", "u-1001", "--reason", "Not needed.")
    assert code == 0, err
    assert "CANCELLED run r-wait" in out
    assert plan_id in out
    assert stored_plan(store_url, plan_id).state is PlanState.REJECTED
    store = open_store(store_url, migrate=False)
    try:
        record = store.get_run("r-wait")
    finally:
        store.close()
    assert record is not None
    assert record.state is RunState.FAILED
    data = read_run(record)
    assert data.end is not None
    assert data.end.error == "CANCELLED"
    last = data.transcript[-1]
    assert isinstance(last, UserTurn)
    assert f"declined plan {plan_id}" in last.text
    assert "Not needed." in last.text


def test_runs_cancel_of_another_users_or_tenants_run_is_not_found_like_a_missing_one(
    runner: CliRunner, store_url: str, service_db: Path
) -> None:
    plan_id = propose_ticket(store_url, service_db)
    _waiting_for(store_url, plan_id)
    other_user = _cancel(runner, store_url, "--user", "u-2", "--reason", "x")
    other_tenant = _runs(
        runner, "cancel", "r-wait", "--app", RECOVERY_APP, "--store", store_url,
        "--tenant", "hospital-b", "--user", "u-1001", "--reason", "x",
    )  # fmt: skip
    missing = _runs(
        runner, "cancel", "r-none", "--app", RECOVERY_APP, "--store", store_url,
        "--tenant", "hospital-a", "--user", "u-1001", "--reason", "x",
    )  # fmt: skip
    for code, _out, err in (other_user, other_tenant, missing):
        assert code == 2
        assert err.startswith("error: no run ")
    assert stored_plan(store_url, plan_id).state is PlanState.PROPOSED


def test_runs_cancel_refuses_a_running_run_and_a_blank_reason(
    runner: CliRunner, store_url: str, service_db: Path
) -> None:
    plan_id = propose_ticket(store_url, service_db)
    # Stored RUNNING just now, under a 120 s deadline: it may still be running.
    _waiting_for(store_url, plan_id, state=RunState.RUNNING)
    running = _cancel(runner, store_url, "--user", "u-1001", "--reason", "Stuck?")
    blank = _cancel(runner, store_url, "--user", "u-1001", "--reason", "  ")
    assert (running[0], blank[0]) == (2, 2)
    assert "CONFLICT" in running[2]
    assert stored_plan(store_url, plan_id).state is PlanState.PROPOSED
