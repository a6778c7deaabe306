"""The operator CLI never crosses tenants and never decides a closed plan twice.

A run or plan id of another tenant reads exactly like one that does not exist, for
every command that takes one; confirming an expired or already confirmed plan fails
with its own code and changes nothing.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from _cli_plans import RECOVERY_APP, propose_ticket, stored_plan
from handrail import cli, open_store
from handrail.plans import PlanState
from handrail.runs import RunRecord, RunState

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> CliRunner:
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(sys, "path", list(sys.path))
    for name in ("HANDRAIL_STORE", "HANDRAIL_APP", "HANDRAIL_KEY_FILE", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RECOVERY_SERVICE_DB", str(tmp_path / "tickets.db"))
    return CliRunner()


def _invoke(runner: CliRunner, *arguments: str) -> Result:
    return runner.invoke(cli.app, list(arguments))


def test_another_tenants_run_reads_exactly_like_a_missing_one(
    runner: CliRunner, store_url: str
) -> None:
    store = open_store(store_url, migrate=False)
    at = datetime(2026, 1, 1, tzinfo=UTC)
    try:
        store.insert_run(
            RunRecord(
                run_id="run_b",
                tenant_id="hospital-b",
                user_id="u-9",
                state=RunState.FINISHED,
                version=1,
                created_at=at,
                updated_at=at,
                data="{}",
            ),
        )
    finally:
        store.close()
    base = ("--store", store_url, "--tenant", "hospital-a")
    foreign = _invoke(runner, "runs", "show", "run_b", *base)
    missing = _invoke(runner, "runs", "show", "run_c", *base)
    assert (foreign.exit_code, missing.exit_code) == (2, 2)
    assert foreign.stdout == missing.stdout == ""
    assert foreign.stderr.replace("run_b", "run_c") == missing.stderr
    listed = _invoke(runner, "runs", "list", *base)
    assert "run_b" not in listed.stdout


@pytest.mark.parametrize("verb", ["show", "confirm", "reject"])
def test_another_tenants_plan_reads_exactly_like_a_missing_one_and_stays_as_it_is(
    runner: CliRunner, store_url: str, tmp_path: Path, verb: str
) -> None:
    plan_id = propose_ticket(store_url, tmp_path / "tickets.db")
    before = stored_plan(store_url, plan_id)
    missing_id = "p" * len(plan_id)
    # The same user id in another tenant: only the tenant differs from the requester.
    decide = ("--app", RECOVERY_APP, "--user", "u-1001", "--reason", "no")
    extra = {"show": (), "confirm": decide[:4], "reject": decide}[verb]
    base = ("--store", store_url, "--tenant", "hospital-b", *extra)
    foreign = _invoke(runner, "plans", verb, plan_id, *base)
    missing = _invoke(runner, "plans", verb, missing_id, *base)
    assert (foreign.exit_code, missing.exit_code) == (2, 2)
    assert foreign.stdout == missing.stdout == ""
    assert foreign.stderr.replace(plan_id, missing_id) == missing.stderr
    assert stored_plan(store_url, plan_id) == before
    listed = _invoke(runner, "plans", "list", "--store", store_url, "--tenant", "hospital-b")
    assert plan_id not in listed.stdout


def test_confirming_an_expired_plan_fails_with_plan_expired_and_confirms_nothing(
    runner: CliRunner, store_url: str, tmp_path: Path
) -> None:
    plan_id = propose_ticket(store_url, tmp_path / "tickets.db", age=timedelta(hours=1))
    result = _invoke(
        runner,
        "plans",
        "confirm",
        plan_id,
        "--app",
        RECOVERY_APP,
        "--store",
        store_url,
        "--tenant",
        "hospital-a",
        "--user",
        "u-1001",
    )
    assert result.exit_code == 2
    assert result.stderr.startswith("error: PLAN_EXPIRED")
    assert result.stdout == ""
    assert stored_plan(store_url, plan_id).state is not PlanState.CONFIRMED
    store = open_store(store_url, migrate=False)
    try:
        decisions = {(e.stage, e.decision) for e in store.read_audit(limit=100)}
        assert store.list_executions(status=None) == []
    finally:
        store.close()
    assert ("token", "issued") not in decisions
    assert ("confirm", "confirmed") not in decisions


def test_confirming_a_plan_a_second_time_fails_with_plan_closed_and_changes_nothing(
    runner: CliRunner, store_url: str, tmp_path: Path
) -> None:
    plan_id = propose_ticket(store_url, tmp_path / "tickets.db")
    arguments = (
        "plans",
        "confirm",
        plan_id,
        "--app",
        RECOVERY_APP,
        "--store",
        store_url,
        "--tenant",
        "hospital-a",
        "--user",
        "u-1001",
    )
    assert _invoke(runner, *arguments).exit_code == 0
    confirmed = stored_plan(store_url, plan_id)
    assert confirmed.state is PlanState.CONFIRMED
    again = _invoke(runner, *arguments)
    assert again.exit_code == 2
    assert again.stderr == "error: PLAN_CLOSED: The plan is confirmed.\n"
    assert stored_plan(store_url, plan_id) == confirmed
    rejected = _invoke(runner, *arguments[:1], "reject", *arguments[2:], "--reason", "late")
    assert rejected.exit_code == 0, rejected.output
    after = _invoke(runner, *arguments)
    assert after.stderr == "error: PLAN_CLOSED: The plan is rejected.\n"
    assert stored_plan(store_url, plan_id).state is PlanState.REJECTED
