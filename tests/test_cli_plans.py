"""`handrail plans list|show|confirm|reject`: an operator's view and decisions, in each store."""

from __future__ import annotations

import base64
import json
import secrets
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from _cli_plans import RECOVERY_APP, TICKET_TOOL, propose_ticket, stored_plan
from handrail import cli, open_store
from handrail.events import AuditEvent
from handrail.plans import PlanState

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(sys, "path", list(sys.path))
    for name in ("HANDRAIL_STORE", "HANDRAIL_APP", "HANDRAIL_KEY_FILE", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)
    return CliRunner()


@pytest.fixture
def service_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "tickets.db"
    monkeypatch.setenv("RECOVERY_SERVICE_DB", str(path))
    return path


def _plans(runner: CliRunner, *arguments: str) -> Result:
    return runner.invoke(cli.app, ["plans", *arguments])


def _decide(runner: CliRunner, verb: str, url: str, plan_id: str, *more: str) -> Result:
    return _plans(
        runner,
        verb,
        plan_id,
        "--app",
        RECOVERY_APP,
        "--store",
        url,
        "--tenant",
        "hospital-a",
        *more,
    )


def _events(url: str) -> list[AuditEvent]:
    store = open_store(url, migrate=False)
    try:
        return store.read_audit(limit=500)
    finally:
        store.close()


def test_plans_list_shows_the_tenants_plans_with_their_state_and_impact(
    runner: CliRunner, store_url: str, service_db: Path
) -> None:
    plan_id = propose_ticket(store_url, service_db)
    listed = _plans(runner, "list", "--store", store_url, "--tenant", "hospital-a")
    assert listed.exit_code == 0, listed.output
    assert plan_id in listed.stdout
    assert TICKET_TOOL in listed.stdout
    assert "PROPOSED" in listed.stdout
    assert "by requester" in listed.stdout
    other = _plans(runner, "list", "--store", store_url, "--tenant", "hospital-b")
    assert other.exit_code == 0
    assert plan_id not in other.stdout
    assert "no matching plans in tenant hospital-b" in other.stdout
    confirmed = _plans(
        runner, "list", "--store", store_url, "--tenant", "hospital-a", "--state", "confirmed"
    )
    assert plan_id not in confirmed.stdout


def test_plans_list_refuses_an_unknown_state(runner: CliRunner, store_url: str) -> None:
    result = _plans(runner, "list", "--store", store_url, "--tenant", "t", "--state", "done")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: unknown state 'done'")


def test_plans_show_prints_tool_impact_arguments_expiry_and_who_decides(
    runner: CliRunner, store_url: str, service_db: Path
) -> None:
    plan_id = propose_ticket(store_url, service_db)
    shown = _plans(runner, "show", plan_id, "--store", store_url, "--tenant", "hospital-a")
    assert shown.exit_code == 0, shown.output
    out = shown.stdout
    assert f"plan       {plan_id}" in out
    assert TICKET_TOOL in out
    assert "PROPOSED (version 1)" in out
    assert "u-1001 in hospital-a" in out
    assert "decided by the requester" in out
    assert '"asset_id": "asset-lis-result"' in out
    assert "expires" in out
    assert "(passed)" not in out


def test_confirm_confirms_as_the_requester_prints_no_token_and_executes_nothing(
    runner: CliRunner, store_url: str, service_db: Path
) -> None:
    plan_id = propose_ticket(store_url, service_db)
    result = _decide(runner, "confirm", store_url, plan_id, "--user", "u-1001")
    assert result.exit_code == 0, result.output
    assert f"CONFIRMED plan {plan_id}" in result.stdout
    assert "the application executes it" in result.stdout
    assert "hrc1." not in result.output
    assert stored_plan(store_url, plan_id).state is PlanState.CONFIRMED
    store = open_store(store_url, migrate=False)
    try:
        assert store.list_executions(status=None) == []
    finally:
        store.close()
    decisions = [(e.stage, e.decision) for e in _events(store_url) if e.tool == TICKET_TOOL]
    assert ("token", "issued") in decisions
    assert ("confirm", "confirmed") in decisions
    assert all("hrc1." not in (e.detail or "") for e in _events(store_url))


def test_confirm_as_someone_other_than_the_requester_is_refused_and_changes_nothing(
    runner: CliRunner, store_url: str, service_db: Path
) -> None:
    plan_id = propose_ticket(store_url, service_db)
    before = stored_plan(store_url, plan_id)
    result = _decide(runner, "confirm", store_url, plan_id, "--user", "operator")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: PERMISSION_DENIED")
    assert stored_plan(store_url, plan_id) == before


def test_reject_with_a_reason_rejects_and_audits_the_reason(
    runner: CliRunner, store_url: str, service_db: Path
) -> None:
    plan_id = propose_ticket(store_url, service_db)
    reason = "duplicate of TK-0042"
    result = _decide(runner, "reject", store_url, plan_id, "--user", "u-1001", "--reason", reason)
    assert result.exit_code == 0, result.output
    assert f"REJECTED plan {plan_id}" in result.stdout
    assert stored_plan(store_url, plan_id).state is PlanState.REJECTED
    [event] = [e for e in _events(store_url) if e.decision == "rejected"]
    assert json.loads(event.detail or "{}")["reason"] == reason


def test_reject_needs_a_reason(runner: CliRunner, store_url: str, service_db: Path) -> None:
    plan_id = propose_ticket(store_url, service_db)
    missing = _decide(runner, "reject", store_url, plan_id, "--user", "u-1001")
    blank = _decide(runner, "reject", store_url, plan_id, "--user", "u-1001", "--reason", " ")
    assert (missing.exit_code, blank.exit_code) == (2, 2)
    assert stored_plan(store_url, plan_id).state is PlanState.PROPOSED


def _key_file(tmp_path: Path, line: str, mode: int = 0o600) -> Path:
    path = tmp_path / "confirm.key"
    path.write_text(line + "\n", encoding="utf-8")
    path.chmod(mode)
    return path


def test_confirm_signs_with_the_key_of_a_key_file(
    runner: CliRunner, store_url: str, service_db: Path, tmp_path: Path
) -> None:
    plan_id = propose_ticket(store_url, service_db)
    secret = base64.urlsafe_b64encode(secrets.token_bytes(32)).decode().rstrip("=")
    key = _key_file(tmp_path, f"ops-2026:{secret}")
    result = _decide(
        runner, "confirm", store_url, plan_id, "--user", "u-1001", "--key-file", str(key)
    )
    assert result.exit_code == 0, result.output
    [issued] = [e for e in _events(store_url) if (e.stage, e.decision) == ("token", "issued")]
    assert json.loads(issued.detail or "{}")["kid"] == "ops-2026"
    assert secret not in result.output


@pytest.mark.parametrize(
    ("line", "mode", "says"),
    [
        ("ops:" + "A" * 43, 0o644, "is readable by others"),
        ("no-colon-here", 0o600, "the first line must be KEY_ID:BASE64URL_SECRET"),
        ("ops:c2hvcnQ", 0o600, "at least 32 bytes"),
        ("bad key id!:" + "A" * 43, 0o600, "a key id is"),
    ],
    ids=["readable-by-others", "malformed", "short-secret", "bad-key-id"],
)
def test_a_bad_key_file_is_refused_before_anything_is_decided(
    runner: CliRunner,
    store_url: str,
    service_db: Path,
    tmp_path: Path,
    line: str,
    mode: int,
    says: str,
) -> None:
    plan_id = propose_ticket(store_url, service_db)
    key = _key_file(tmp_path, line, mode)
    result = _decide(
        runner, "confirm", store_url, plan_id, "--user", "u-1001", "--key-file", str(key)
    )
    assert result.exit_code == 2
    assert says in result.stderr
    assert stored_plan(store_url, plan_id).state is PlanState.PROPOSED
