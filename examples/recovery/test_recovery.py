"""The recovery example: its ticket service, its logs, its tools through a Gate, its demo."""

from __future__ import annotations

import asyncio
import io
import json
import re
import secrets
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from examples.recovery import CollectStatus, RecoveryApp, TicketService, build_app
from examples.recovery import demo as recovery_demo
from examples.recovery.app import MAX_RESULT_CHARS
from examples.recovery.service import (
    DEFAULT_LOG_LINES,
    DEMO_SETUP,
    CollectionMonitor,
    CollectorLogs,
    IdempotencyKeyReusedError,
    ServiceUnavailableError,
)
from examples.recovery.tools import RECONCILE_POLICY
from handrail import (
    AccessRefusedError,
    Envelope,
    ErrorCode,
    ExecutionStatus,
    Gate,
    Keyring,
    Principal,
    RawRecord,
    SigningKey,
    Status,
    ToolCall,
    Writes,
)
from handrail.adapters import AnthropicAdapter, OpenAIChatAdapter
from handrail.record.raw_results import RAW_READ_PERMISSION
from handrail.shaping.budget import json_size
from handrail.testing import FixedClock, MemoryStore

NURSE = Principal(
    user_id="u-1001",
    tenant_id="hospital-a",
    permissions=frozenset({"assets.read", "tickets.create"}),
)
READER = Principal(user_id="u-1002", tenant_id="hospital-a", permissions=frozenset())
OPERATOR = Principal(
    user_id="ops", tenant_id="hospital-a", permissions=frozenset({RAW_READ_PERMISSION})
)
OUTSIDER = Principal(
    user_id="ops", tenant_id="hospital-b", permissions=frozenset({RAW_READ_PERMISSION})
)
ASSET = "asset-lis-result"
TICKET: dict[str, object] = {
    "asset_id": ASSET,
    "reason": "connection timed out (log-801)",
    "priority": "HIGH",
}


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock()


@pytest.fixture
def app(tmp_path: Path, clock: FixedClock) -> Iterator[RecoveryApp]:
    built = build_app(service_db=tmp_path / "tickets.db", clock=clock)
    built.service.reset()
    yield built
    built.service.close()


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()


@pytest.fixture
def writes(app: RecoveryApp, store: MemoryStore) -> Writes:
    return app.writes(store, Keyring(SigningKey("test", secrets.token_bytes(32))))


@pytest.fixture
def gate(app: RecoveryApp, writes: Writes) -> Gate:
    return app.gate(writes)


def call(gate: Gate, principal: Principal, name: str, arguments: dict[str, object]) -> Envelope:
    tool_call = ToolCall(id="c1", name=f"recovery.{name}", arguments=json.dumps(arguments))
    return asyncio.run(gate.handle(tool_call, principal))


def confirmed_plan(gate: Gate, writes: Writes, arguments: dict[str, object] = TICKET) -> str:
    envelope = call(gate, NURSE, "create_recovery_ticket", arguments)
    assert envelope.error_type is ErrorCode.NEEDS_CONFIRMATION
    plan_id = str(envelope.data["plan_id"])

    async def confirm() -> None:
        token = await writes.issue_token(plan_id, NURSE)
        await writes.confirm(plan_id, token.value, NURSE)

    asyncio.run(confirm())
    return plan_id


# --- the ticket service ---------------------------------------------------------------------


@pytest.mark.invariant(4)
def test_concurrent_creates_with_one_key_make_one_ticket(app: RecoveryApp) -> None:
    service = app.service
    threads = 8
    start = threading.Barrier(threads)
    numbers: list[str] = []
    errors: list[BaseException] = []

    def create() -> None:
        try:
            start.wait(timeout=10)
            ticket = service.create("key-1", "hospital-a", ASSET, "timed out", "HIGH")
            numbers.append(ticket.ticket_no)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    workers = [threading.Thread(target=create) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=30)
    assert errors == []
    assert numbers == ["TK-0001"] * threads
    assert service.count() == 1


def test_ticket_numbers_follow_a_sequence_that_repeats_do_not_use(app: RecoveryApp) -> None:
    service = app.service
    first = service.create("key-1", "hospital-a", ASSET, "timed out", "HIGH")
    again = service.create("key-1", "hospital-a", ASSET, "timed out", "HIGH")
    second = service.create("key-2", "hospital-a", ASSET, "timed out", "LOW")
    assert (first.ticket_no, again.ticket_no, second.ticket_no) == ("TK-0001", "TK-0001", "TK-0002")
    assert again == first
    assert service.find("key-2") == second
    assert service.find("key-3") is None


def test_a_key_reused_for_another_ticket_is_refused_and_creates_nothing(app: RecoveryApp) -> None:
    service = app.service
    service.create("key-1", "hospital-a", ASSET, "timed out", "HIGH")
    with pytest.raises(IdempotencyKeyReusedError):
        service.create("key-1", "hospital-a", ASSET, "timed out", "LOW")
    assert service.count() == 1
    assert service.create("key-2", "hospital-a", ASSET, "timed out", "LOW").ticket_no == "TK-0002"


def test_a_lost_response_comes_after_the_commit(app: RecoveryApp) -> None:
    service = app.service
    with pytest.raises(TimeoutError):
        service.create("key-1", "hospital-a", ASSET, "timed out", "HIGH", lose_response=True)
    found = service.find("key-1")
    assert found is not None
    assert found.ticket_no == "TK-0001"
    assert service.count() == 1


def test_a_service_without_its_database_is_unavailable_and_creates_no_file(tmp_path: Path) -> None:
    service = TicketService.open(tmp_path / "missing.db")
    with pytest.raises(ServiceUnavailableError):
        service.find("key-1")
    with pytest.raises(ServiceUnavailableError):
        service.create("key-1", "hospital-a", ASSET, "timed out", "HIGH")
    assert not (tmp_path / "missing.db").exists()


# --- the tools through a gate ---------------------------------------------------------------


def test_collect_status_returns_codes_times_and_evidence_ids_only(gate: Gate) -> None:
    envelope = call(gate, NURSE, "get_collect_status", {"asset_id": ASSET})
    assert envelope.status is Status.OK
    assert envelope.data == {
        "assetId": ASSET,
        "status": "FAILED",
        "reasonCode": "CONNECT_TIMEOUT",
        "occurredAt": "2025-12-31T23:40:00+00:00",
        "evidenceIds": ["log-801", "alarm-992"],
        "canRetry": True,
    }


@pytest.mark.invariant(1)
def test_another_tenants_asset_looks_exactly_like_a_missing_one(gate: Gate) -> None:
    foreign = call(gate, NURSE, "get_collect_status", {"asset_id": "asset-his-orders"})
    missing = call(gate, NURSE, "get_collect_status", {"asset_id": "asset-nothing"})
    assert foreign.error_type is ErrorCode.NOT_FOUND
    assert foreign.to_model_dict() == missing.to_model_dict()


def test_reading_the_status_needs_assets_read(gate: Gate) -> None:
    envelope = call(gate, READER, "get_collect_status", {"asset_id": ASSET})
    assert envelope.error_type is ErrorCode.PERMISSION_DENIED


def test_a_ticket_proposal_is_a_plan_with_its_impact_and_creates_nothing(
    app: RecoveryApp,
    gate: Gate,
    writes: Writes,
) -> None:
    envelope = call(gate, NURSE, "create_recovery_ticket", TICKET)
    assert envelope.error_type is ErrorCode.NEEDS_CONFIRMATION
    assert envelope.data["impact"]["action"] == "create recovery ticket"
    assert envelope.data["impact"]["target"] == ASSET
    assert envelope.data["impact"]["counts"] == {"tickets": 1}
    assert envelope.data["impact"]["reversible"] is True
    record = asyncio.run(writes.get_plan(envelope.data["plan_id"], NURSE))
    assert record.plan.expected_version == "CONNECT_TIMEOUT@2025-12-31T23:40:00+00:00"
    assert app.service.count() == 0
    assert app.service.create_calls == 0


@pytest.mark.parametrize(
    ("field", "value"),
    [("asset_id", "lis-result"), ("reason", "slow"), ("priority", "URGENT")],
)
def test_ticket_arguments_outside_the_schema_name_the_field(
    gate: Gate,
    field: str,
    value: str,
) -> None:
    envelope = call(gate, NURSE, "create_recovery_ticket", {**TICKET, field: value})
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS
    assert set(envelope.field_errors) == {f"$.{field}"}


def test_a_ticket_for_a_failure_that_is_not_a_timeout_is_a_conflict(gate: Gate) -> None:
    envelope = call(
        gate, NURSE, "create_recovery_ticket", {**TICKET, "asset_id": "asset-pacs-archive"}
    )
    assert envelope.error_type is ErrorCode.CONFLICT
    assert "AUTH_REJECTED" not in envelope.summary


def test_the_authoritative_status_decides_not_the_models_earlier_read(
    app: RecoveryApp,
    gate: Gate,
) -> None:
    read = call(gate, NURSE, "get_collect_status", {"asset_id": ASSET})
    assert read.data["reasonCode"] == "CONNECT_TIMEOUT"
    app.monitor.record("hospital-a", _status("DNS_FAILURE", "2026-01-01T00:00:00+00:00"))
    envelope = call(gate, NURSE, "create_recovery_ticket", TICKET)
    assert envelope.error_type is ErrorCode.CONFLICT


def test_a_status_that_changes_after_confirmation_stops_the_write(
    app: RecoveryApp,
    gate: Gate,
    writes: Writes,
) -> None:
    plan_id = confirmed_plan(gate, writes)
    app.monitor.record("hospital-a", _status("CONNECT_TIMEOUT", "2026-01-01T00:00:30+00:00"))
    refused = asyncio.run(writes.execute_plan(plan_id, NURSE))
    assert refused.code is ErrorCode.VERSION_CONFLICT
    assert app.service.create_calls == 0


@pytest.mark.invariant(6)
def test_a_lost_response_is_unknown_until_the_ticket_is_found_by_its_key(
    app: RecoveryApp,
    gate: Gate,
    writes: Writes,
    store: MemoryStore,
    clock: FixedClock,
) -> None:
    plan_id = confirmed_plan(gate, writes)
    app.link.arm()
    first = asyncio.run(writes.execute_plan(plan_id, NURSE))
    assert first.envelope.error_type is ErrorCode.OUTCOME_UNKNOWN
    assert first.record is not None
    assert first.record.status is ExecutionStatus.UNKNOWN
    key = first.record.idempotency_key
    committed = app.service.find(key)
    assert committed is not None

    clock.advance(RECONCILE_POLICY.first_check + 1)
    report = asyncio.run(app.reconciler(store).run_once())
    assert report.succeeded == (key,)
    record = store.get_execution(key)
    assert record is not None
    assert record.status is ExecutionStatus.SUCCEEDED
    assert record.business_id == committed.ticket_no

    again = asyncio.run(writes.execute_plan(plan_id, NURSE))
    assert again.replayed
    assert again.envelope.data["ticket_no"] == committed.ticket_no
    assert app.service.create_calls == 1
    assert app.service.count() == 1


@pytest.mark.invariant(6)
def test_not_found_is_proof_only_after_the_grace_then_the_write_runs_once_by_its_key(
    tmp_path: Path,
    clock: FixedClock,
    store: MemoryStore,
) -> None:
    # The service's database does not exist yet: the first attempt fails before any
    # commit, but Handrail cannot know that, so the write is UNKNOWN.
    app = build_app(service_db=tmp_path / "late.db", clock=clock)
    writes = app.writes(store, Keyring(SigningKey("test", secrets.token_bytes(32))))
    plan_id = confirmed_plan(app.gate(writes), writes)
    first = asyncio.run(writes.execute_plan(plan_id, NURSE))
    assert first.record is not None
    assert first.record.status is ExecutionStatus.UNKNOWN
    key = first.record.idempotency_key
    reconciler = app.reconciler(store)

    clock.advance(10)
    unavailable = asyncio.run(reconciler.run_once())
    app.service.reset()
    clock.advance(10)
    too_soon = asyncio.run(reconciler.run_once())
    assert unavailable.still_unknown == (key,)
    assert too_soon.still_unknown == (key,)
    assert app.service.count() == 0

    clock.advance(RECONCILE_POLICY.not_found_grace + 10)
    proven = asyncio.run(reconciler.run_once())
    assert proven.succeeded == (key,)
    record = store.get_execution(key)
    assert record is not None
    assert record.status is ExecutionStatus.SUCCEEDED
    assert record.business_id == "TK-0001"
    assert app.service.count() == 1
    app.service.close()


# --- the collectors' logs -------------------------------------------------------------------

STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ")


@settings(max_examples=25, deadline=None)
@given(lines=st.integers(min_value=40, max_value=3_000))
def test_a_collector_log_has_the_lines_asked_for_in_time_order_with_one_crash(lines: int) -> None:
    logs = CollectorLogs(CollectionMonitor(), lines=lines)
    log = logs.lines("hospital-a", ASSET)
    assert log is not None
    text = list(log)
    assert len(text) == lines
    assert all(line.endswith("\n") and line.count("\n") == 1 for line in text)
    stamps = [line[:24] for line in text]
    assert all(STAMP.match(line) for line in text)
    assert stamps == sorted(stamps)
    crash = next(i for i, line in enumerate(text) if "ConnectionError:" in line)
    assert sum("Traceback (most recent call last)" in line for line in text) == 1
    assert sum("exit code" in line for line in text) == 1
    # The collector gives up at the time the collection system recorded the failure.
    assert text[crash - 6].startswith("2025-12-31T23:40:00.000Z ERROR")
    assert logs.size("hospital-a", ASSET) == sum(len(line.encode()) for line in text)
    assert DEMO_SETUP.source_url in text[2]


def test_a_collector_log_is_the_same_every_time_and_never_a_list() -> None:
    logs = CollectorLogs(CollectionMonitor(), lines=500)
    first, second = logs.lines("hospital-a", ASSET), logs.lines("hospital-a", ASSET)
    assert isinstance(first, Iterator)
    assert list(first) == list(second or ())


def test_a_collector_dies_of_the_exception_its_failure_calls_for() -> None:
    logs = CollectorLogs(CollectionMonitor(), lines=100)
    auth = "".join(logs.lines("hospital-a", "asset-pacs-archive") or ())
    assert "PermissionError: AUTH_REJECTED on 10.1.2.3:5432" in auth
    assert "ConnectionError" not in auth
    monitor = CollectionMonitor()
    monitor.record("hospital-a", _status("DNS_FAILURE", "2026-01-01T00:00:00+00:00"))
    other = "".join(CollectorLogs(monitor, lines=100).lines("hospital-a", ASSET) or ())
    assert "RuntimeError: DNS_FAILURE" in other


def test_another_tenants_asset_has_no_log_and_a_log_needs_forty_lines() -> None:
    logs = CollectorLogs(CollectionMonitor())
    assert logs.lines("hospital-a", "asset-his-orders") is None
    assert logs.size("hospital-a", "asset-his-orders") is None
    with pytest.raises(ValueError, match="at least 40 lines"):
        CollectorLogs(CollectionMonitor(), lines=39)


# --- what the model sees of a log, and what people keep --------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class LogRead:
    envelope: Envelope
    app: RecoveryApp
    writes: Writes
    lines: list[str]


@pytest.fixture(scope="module")
def log_read(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LogRead]:
    """One read of the full-size log through the demo's gate, shared by the tests below."""
    app = build_app(service_db=tmp_path_factory.mktemp("log") / "tickets.db", clock=FixedClock())
    writes = app.writes(MemoryStore(), Keyring(SigningKey("test", secrets.token_bytes(32))))
    envelope = call(app.gate(writes), NURSE, "read_collector_log", {"asset_id": ASSET})
    yield LogRead(
        envelope=envelope,
        app=app,
        writes=writes,
        lines=list(app.logs.lines("hospital-a", ASSET) or ()),
    )
    app.service.close()


def test_the_model_gets_a_truncated_excerpt_of_the_log_within_its_budget(
    log_read: LogRead,
) -> None:
    envelope = log_read.envelope
    assert envelope.status is Status.TRUNCATED
    assert envelope.truncated
    assert json_size(envelope.data) <= MAX_RESULT_CHARS
    assert len(envelope.to_json()) < 2 * MAX_RESULT_CHARS
    [cut] = envelope.omitted
    assert cut.path == "$.text"
    assert cut.unit == "lines"
    assert cut.total == DEFAULT_LOG_LINES == envelope.data["lines"]
    assert 20 < cut.kept < 100
    assert envelope.data["chars"] == sum(len(line) for line in log_read.lines)


def test_the_log_excerpt_shows_its_start_its_failures_its_exit_code_and_its_end(
    log_read: LogRead,
) -> None:
    data = log_read.envelope.data
    lines = log_read.lines
    assert data["exit_code"] == 3
    crash = next(i for i, line in enumerate(lines) if line.startswith("Traceback", 25))
    failures = data["failures"]
    assert [f.split(":", 1)[0] for f in failures] == [
        f"L{crash}",
        f"L{crash + 1}",
        f"L{crash + 6}",
        f"L{crash + 7}",
    ]
    assert "ConnectionError: CONNECT_TIMEOUT on [REDACTED:ip_address]:5432" in failures[2]
    assert failures[3].endswith("exited with exit code 3")
    assert data["failed_tests"] == []
    text = data["text"]
    assert text.startswith(lines[0])
    assert text.endswith(lines[-1])
    assert re.search(r"^\[\.\.\. \d+ lines \(\d+ chars\) omitted \.\.\.\]$", text, re.MULTILINE)


@pytest.mark.invariant(8)
def test_no_password_email_or_internal_ip_of_the_log_reaches_the_model(log_read: LogRead) -> None:
    envelope = log_read.envelope
    assert set(envelope.redacted) == {"credential", "email", "ip_address"}
    assert (
        "postgresql://svc:[REDACTED:credential]@[REDACTED:ip_address]/lis"
        in (envelope.data["text"])
    )
    tool_call = ToolCall(id="c1", name="recovery.read_collector_log", arguments="{}")
    blocks = [
        json.dumps(OpenAIChatAdapter(strict=True).render_results([tool_call], [envelope])),
        json.dumps(AnthropicAdapter(strict=True).render_results([tool_call], [envelope])),
    ]
    assert all("handrail-data" in block for block in blocks)
    for seen in (envelope.to_json(), *blocks):
        for secret in (
            DEMO_SETUP.source_password,
            DEMO_SETUP.on_call,
            DEMO_SETUP.source_host,
            "hospital-a.example",
        ):
            assert secret not in seen


def _raw(log_read: LogRead, who: Principal) -> RawRecord:
    ref = log_read.envelope.ref
    assert ref is not None
    return log_read.app.raw_results(log_read.writes.store).read(ref, who)


@pytest.mark.invariant(8)
def test_the_whole_log_is_kept_for_people_behind_the_envelopes_ref(log_read: LogRead) -> None:
    record = _raw(log_read, OPERATOR)
    assert record.complete
    assert record.size == len(record.body) == log_read.app.logs.size("hospital-a", ASSET)
    assert record.body == "".join(log_read.lines).encode()
    assert record.tool == "recovery.read_collector_log"
    assert (record.tenant_id, record.user_id) == ("hospital-a", NURSE.user_id)
    assert record.media_type.startswith("text/plain")
    # People read the log as it was: the redaction is the model's view only.
    assert DEMO_SETUP.source_url.encode() in record.body
    assert _raw(log_read, NURSE) == record


def test_the_raw_log_is_refused_to_another_tenant_and_to_an_unprivileged_colleague(
    log_read: LogRead,
) -> None:
    with pytest.raises(AccessRefusedError) as foreign:
        _raw(log_read, OUTSIDER)
    assert foreign.value.code is ErrorCode.NOT_FOUND
    with pytest.raises(AccessRefusedError) as colleague:
        _raw(log_read, READER)
    assert colleague.value.code is ErrorCode.PERMISSION_DENIED


def test_another_tenants_log_looks_like_a_missing_one_and_needs_assets_read(gate: Gate) -> None:
    foreign = call(gate, NURSE, "read_collector_log", {"asset_id": "asset-his-orders"})
    missing = call(gate, NURSE, "read_collector_log", {"asset_id": "asset-nothing"})
    assert foreign.error_type is ErrorCode.NOT_FOUND
    assert foreign.to_model_dict() == missing.to_model_dict()
    denied = call(gate, READER, "read_collector_log", {"asset_id": ASSET})
    assert denied.error_type is ErrorCode.PERMISSION_DENIED


def _status(code: str, occurred_at: str) -> CollectStatus:
    return CollectStatus(
        asset_id=ASSET,
        status="FAILED",
        reason_code=code,
        occurred_at=occurred_at,
        evidence_ids=("log-900",),
        can_retry=True,
    )


# --- the demo --------------------------------------------------------------------------------


def test_the_recovery_demo_follows_its_script_with_one_ticket(tmp_path: Path) -> None:
    out = io.StringIO()
    report = recovery_demo.run_recovery_demo(
        console=Console(file=out, width=120),
        store_url_or_path=tmp_path / "store.db",
        service_db=tmp_path / "tickets.db",
    )
    assert report.unexpected == ()
    assert report.tickets == 1
    assert report.service_calls == 1
    assert report.ticket_no == "TK-0001"
    assert report.log_ref is not None
    actual = {check.actual for check in report.checks}
    for code in (
        "truncated, ConnectionError, exit 3",
        "credential, email, ip_address",
        f"complete, {CollectorLogs(CollectionMonitor()).size('hospital-a', ASSET)} bytes",
        "CONFIRMATION_INVALID",
        "CONFIRMATION_REPLAYED",
        "PLAN_EXPIRED",
        "PLAN_CHANGED",
        "OUTCOME_UNKNOWN UNKNOWN",
        "SUCCEEDED TK-0001",
    ):
        assert code in actual
    text = out.getvalue()
    assert "ScriptedModel" in text
    assert "not a real LLM" in text
    command = (
        f"handrail raw show {report.log_ref} --store {tmp_path / 'store.db'} "
        "--tenant hospital-a --operator"
    )
    assert command in " ".join(text.split())
    # The screen shows what the model saw: the log's password never appears on it.
    assert DEMO_SETUP.source_password not in text


def test_a_departure_from_the_script_is_reported_as_unexpected(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Reconciling before the record is due leaves it UNKNOWN: the script says SUCCEEDED.
    monkeypatch.setattr(recovery_demo, "PAST_GRACE", 1.0)
    report = recovery_demo.run_recovery_demo(
        console=Console(file=io.StringIO()),
        store_url_or_path=tmp_path / "store.db",
        service_db=tmp_path / "tickets.db",
    )
    [check] = report.unexpected
    assert check.step == "after reconciliation"
    assert check.actual == "UNKNOWN None"
    assert report.tickets == 1


def test_the_cli_entry_starts_from_fresh_files_on_every_run(tmp_path: Path) -> None:
    audit_db = tmp_path / "handrail.db"
    first = recovery_demo.run_demo(console=Console(file=io.StringIO()), audit_db=audit_db)
    second = recovery_demo.run_demo(console=Console(file=io.StringIO()), audit_db=audit_db)
    assert first.unexpected == second.unexpected == ()
    assert second.ticket_no == "TK-0001"
    assert (tmp_path / "recovery.db").is_file()
    assert (tmp_path / "recovery-tickets.db").is_file()
    assert not audit_db.exists()


def test_the_scripted_model_files_no_ticket_unless_status_and_log_show_the_timeout() -> None:
    def answer(tool: str, data: object) -> Envelope:
        return Envelope(call_id="c1", tool=tool, status=Status.OK, summary="s", data=data)

    # The script's two decisions, tested alone: the demo only ever takes one branch.
    read_log = recovery_demo._read_log_if_timeout  # noqa: SLF001
    propose = recovery_demo._propose_if_log_shows_timeout  # noqa: SLF001
    assert read_log([answer("status", {"reasonCode": "CONNECT_TIMEOUT"})]).calls
    assert not read_log([answer("status", {"reasonCode": "AUTH_REJECTED"})]).calls
    assert not read_log([]).calls
    timeout = {"failures": ["L9: ConnectionError: CONNECT_TIMEOUT on [REDACTED:ip_address]"]}
    assert propose([answer("log", timeout)]).calls
    assert not propose([answer("log", {"failures": ["L9: PermissionError: AUTH_REJECTED"]})]).calls
    assert not propose([answer("log", "no failures here")]).calls
    assert not propose([]).calls
