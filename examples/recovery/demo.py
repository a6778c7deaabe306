"""The recovery scenario of `handrail demo`: a confirmed write whose response is lost.

A scripted model reads why an asset stopped collecting, then the asset's collector log:
200,000 lines of which it sees a bounded excerpt, with the failure lines and the exit
code, and a password, an e-mail and internal addresses redacted, while the whole log is
kept for people behind the envelope's ref. It proposes a recovery ticket; the host
shows the plan, issues a one-time token and the user confirms. The ticket
service commits but its answer is lost, so the write is UNKNOWN; one reconciler pass
finds the ticket by its idempotency key, and a repeat returns that same ticket without
calling the service. Then four confirmations are refused, each with its own code. The
model is `handrail.testing.ScriptedModel`, a script written by a person, never a real
model; the clock is a FixedClock the demo moves forward.
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa
from rich.console import Console
from rich.table import Table
from rich.text import Text

from examples.recovery.app import MAX_RESULT_CHARS, RecoveryApp, build_app
from examples.recovery.service import DEFAULT_LOG_LINES
from examples.recovery.tools import PLAN_TTL_SECONDS, RECONCILE_POLICY, TIMEOUT_CODE
from handrail import (
    AccessRefusedError,
    AuditEvent,
    AuditSink,
    BatchingAuditSink,
    Envelope,
    ExecutionRecord,
    ExecutionStatus,
    Gate,
    Keyring,
    Principal,
    SigningKey,
    SystemClock,
    ToolCall,
    WriteRefusedError,
    Writes,
    open_store,
)
from handrail.record.raw_results import RAW_READ_PERMISSION
from handrail.shaping.budget import json_size
from handrail.testing import FixedClock, ModelTurn, ScriptedModel, ScriptStep
from handrail.writes.reconcile import PassReport

__all__ = ["Check", "RecoveryReport", "run_demo", "run_recovery_demo"]

NURSE = Principal(
    user_id="u-1001",
    tenant_id="hospital-a",
    permissions=frozenset({"assets.read", "tickets.create"}),
    request_id="demo-recovery",
)
OPERATOR = Principal(
    user_id="ops-demo",
    tenant_id=NURSE.tenant_id,
    permissions=frozenset({RAW_READ_PERMISSION}),
    request_id="demo-recovery",
)
"""A person of the nurse's organisation who reads raw records, as `handrail raw show` does."""
OUTSIDER = Principal(
    user_id="ops-demo",
    tenant_id="hospital-b",
    permissions=frozenset({RAW_READ_PERMISSION}),
    request_id="demo-recovery",
)
"""The same reader name and permission, in another organisation."""
ASSET = "asset-lis-result"
STATUS_TOOL = "recovery.get_collect_status"
LOG_TOOL = "recovery.read_collector_log"
TICKET_TOOL = "recovery.create_recovery_ticket"
PAST_GRACE = RECONCILE_POLICY.not_found_grace + 10.0
"""How far the demo moves the clock before reconciling: past the check and grace times."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Check:
    """One scripted expectation and what actually happened."""

    step: str
    expected: str
    actual: str

    @property
    def ok(self) -> bool:
        """Whether the outcome was the scripted one."""
        return self.expected == self.actual


@dataclass(frozen=True, kw_only=True, slots=True)
class RecoveryReport:
    """What the recovery scenario did, for tests and for the exit code."""

    checks: tuple[Check, ...]
    ticket_no: str | None
    tickets: int
    """Tickets the service holds at the end."""
    service_calls: int
    """How often Handrail called the service's create."""
    audit_events: int
    log_ref: str | None = None
    """The ref of the collector log's raw record, kept for people."""

    @property
    def unexpected(self) -> tuple[Check, ...]:
        """Checks whose outcome differs from the script."""
        return tuple(c for c in self.checks if not c.ok)


class _OffScriptError(Exception):
    """A step went so differently that the ones after it cannot run."""


class _Checks:
    """Collects expectations and prints each as it is settled."""

    def __init__(self, console: Console) -> None:
        self._console = console
        self.items: list[Check] = []

    def expect(self, step: str, expected: str, actual: str, *, fatal: bool = False) -> None:
        check = Check(step=step, expected=expected, actual=actual)
        self.items.append(check)
        if check.ok:
            self._console.print(Text.assemble(("  ✓ ", "bold green"), f"{step}: {actual}"))
            return
        self._console.print(
            Text(f"  ✗ {step}: expected {expected}, got {actual}", style="bold red"),
        )
        if fatal:
            raise _OffScriptError(step)


class _CountingSink:
    """Forwards audit events and counts them."""

    def __init__(self, inner: AuditSink) -> None:
        self._inner = inner
        self.count = 0

    def emit(self, events: Sequence[AuditEvent]) -> None:
        self.count += len(events)
        self._inner.emit(events)


@dataclass(frozen=True, kw_only=True, slots=True)
class _Host:
    """The host application's side: the app, its write path, the clock and the output."""

    app: RecoveryApp
    writes: Writes
    gate: Gate
    clock: FixedClock
    console: Console
    checks: _Checks
    audit: AuditSink
    store_name: str
    """The Handrail store as a person passes it to the CLI (a URL's password hidden)."""


def run_demo(*, console: Console, audit_db: Path) -> RecoveryReport:
    """`handrail demo`'s entry: the scenario on fresh files next to `audit_db`.

    Handrail's store for this scenario is `recovery.db` and the ticket service's own
    database `recovery-tickets.db`, both in the folder of `audit_db` and both
    recreated, since a reset ticket service must not meet records of an old run.
    """
    folder = audit_db.parent
    store = folder / "recovery.db"
    for stale in (
        store,
        store.with_name(f"{store.name}-wal"),
        store.with_name(f"{store.name}-shm"),
    ):
        stale.unlink(missing_ok=True)
    return run_recovery_demo(
        console=console,
        store_url_or_path=store,
        service_db=folder / "recovery-tickets.db",
    )


def run_recovery_demo(
    *,
    console: Console,
    store_url_or_path: str | Path,
    service_db: Path,
    clock: FixedClock | None = None,
    keyring: Keyring | None = None,
) -> RecoveryReport:
    """Play the scenario, print every step, and return what was expected and what happened.

    Plans, executions and audit go to the Handrail store at `store_url_or_path` (a
    SQLite path, or a URL for `open_store`); the ticket service's database at
    `service_db` is recreated. Without `clock`, a FixedClock starting now; without
    `keyring`, a random key made for this run.
    """
    # Starts at the real time, so the records the demo leaves are kept and purged as a
    # real clock would; only the demo moves it on.
    clock = clock or FixedClock(SystemClock().now().replace(microsecond=0))
    # A key for this run only. Real keys come from a secret manager and rotate.
    keyring = keyring or Keyring(SigningKey("demo-run", secrets.token_bytes(32)))
    store = open_store(store_url_or_path)
    writer = BatchingAuditSink(store)
    sink = _CountingSink(writer)
    app = build_app(service_db=service_db, audit=sink, clock=clock)
    checks = _Checks(console)
    ticket_no: str | None = None
    log_ref: str | None = None
    try:
        app.service.reset()
        writes = app.writes(store, keyring, audit=sink, worker_id="demo-host")
        host = _Host(
            app=app,
            writes=writes,
            gate=app.gate(writes, audit=sink),
            clock=clock,
            console=console,
            checks=checks,
            audit=sink,
            store_name=_shown(store_url_or_path),
        )
        _header(console, store_url_or_path, service_db)
        try:
            ticket_no, log_ref = asyncio.run(_play(host))
        except _OffScriptError as stopped:
            console.print(Text(f"The scenario stopped after: {stopped}", style="bold red"))
        tickets = app.service.count()
        service_calls = app.service.create_calls
    finally:
        writer.close()
        store.close()
        app.service.close()
    report = RecoveryReport(
        checks=tuple(checks.items),
        ticket_no=ticket_no,
        tickets=tickets,
        service_calls=service_calls,
        audit_events=sink.count,
        log_ref=log_ref,
    )
    _summary(console, report, store_url_or_path, service_db)
    return report


def _header(console: Console, store: str | Path, service_db: Path) -> None:
    console.print()
    console.rule("Handrail demo: recovering a write whose response was lost")
    console.print(
        Text(
            "The model here is handrail.testing.ScriptedModel too: a script written by a "
            "person, not a real LLM. The clock is a FixedClock the demo moves forward.",
            style="bold yellow",
        ),
    )
    console.print(Text(f"Handrail store (plans, executions, raw results, audit): {_shown(store)}"))
    console.print(Text(f"ticket service's own database: {service_db} (recreated)"))
    console.print(
        Text(
            f"principal {NURSE.user_id}@{NURSE.tenant_id}, permissions: "
            f"{', '.join(sorted(NURSE.permissions))}",
            style="dim",
        ),
    )


async def _play(host: _Host) -> tuple[str, str | None]:
    """The main conversation, then the refusals; the ticket number and the log's raw ref."""
    model = ScriptedModel(_conversation())
    plan_id, token, log_ref = await _read_and_propose(host, model)
    ticket_no, key = await _execute_and_lose(host, model, plan_id)
    await _reconcile(host, key, ticket_no)
    await _replay(host, model, plan_id, ticket_no, key)
    await _refusals(host, plan_id, token)
    host.checks.expect("tickets in the service after everything", "1", str(_count(host)))
    return ticket_no, log_ref


# --- the conversation ---------------------------------------------------------------------


def _call(call_id: str, name: str, arguments: dict[str, object]) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=json.dumps(arguments), provider="scripted")


def _ticket_arguments(priority: str) -> dict[str, object]:
    return {
        "asset_id": ASSET,
        "reason": "Collection connection timed out repeatedly (log-801, alarm-992)",
        "priority": priority,
    }


def _read_log_if_timeout(previous: Sequence[Envelope]) -> ModelTurn:
    """A scripted decision: the log is read only if the status read says CONNECT_TIMEOUT."""
    status = previous[0].data if previous else None
    if not isinstance(status, dict) or status.get("reasonCode") != TIMEOUT_CODE:
        return ModelTurn(text="The failure is not a connection timeout; I will not file a ticket.")
    return ModelTurn(calls=(_call("rc-log", LOG_TOOL, {"asset_id": ASSET}),))


def _propose_if_log_shows_timeout(previous: Sequence[Envelope]) -> ModelTurn:
    """A scripted decision: a ticket only if the log's failure lines show the timeout."""
    log = previous[0].data if previous else None
    failures = log.get("failures") if isinstance(log, dict) else None
    if not isinstance(failures, list) or not any(TIMEOUT_CODE in str(f) for f in failures):
        return ModelTurn(text="The log shows no connection timeout; I will not file a ticket.")
    return ModelTurn(calls=(_call("rc-2", TICKET_TOOL, _ticket_arguments("HIGH")),))


def _wait_if_unknown(previous: Sequence[Envelope]) -> ModelTurn:
    if previous and previous[0].error_type is not None:
        return ModelTurn(
            text=(
                f"The ticket's outcome is not known yet ({previous[0].error_type.value}). "
                "It is being checked; I will not file it again."
            ),
        )
    return ModelTurn(text="The ticket was created.")


def _answer_from_ticket(previous: Sequence[Envelope]) -> ModelTurn:
    data = previous[0].data if previous else None
    if isinstance(data, dict) and "ticket_no" in data:
        return ModelTurn(
            text=(
                f"Recovery ticket {data['ticket_no']} was created for {data['asset_id']} "
                f"(priority {data['priority']}): collection failed with {TIMEOUT_CODE}, "
                f"evidence log-801 and alarm-992."
            ),
        )
    return ModelTurn(text="I cannot confirm that a ticket exists.")


def _conversation() -> tuple[ScriptStep, ...]:
    return (
        ModelTurn(calls=(_call("rc-1", STATUS_TOOL, {"asset_id": ASSET}),)),
        _read_log_if_timeout,
        _propose_if_log_shows_timeout,
        _wait_if_unknown,
        _answer_from_ticket,
    )


# --- the steps ------------------------------------------------------------------------------


async def _read_and_propose(host: _Host, model: ScriptedModel) -> tuple[str, str, str | None]:
    """Steps 1 to 4: the plan id, its token and the ref of the collector log's raw record."""
    console, checks = host.console, host.checks
    _step(console, "1. The scripted model reads why the asset stopped collecting")
    _, read = await _model_turn(host, model, ())
    status = read[0].data if isinstance(read[0].data, dict) else {}
    checks.expect(
        "status read",
        f"ok {TIMEOUT_CODE}",
        f"{read[0].status.value} {status.get('reasonCode')}",
        fatal=True,
    )

    log, log_ref = await _read_log(host, model, read)

    _step(console, "3. The scripted model proposes a recovery ticket: the gate makes a plan")
    _, proposed = await _model_turn(host, model, log)
    checks.expect("proposal", "NEEDS_CONFIRMATION", _outcome(proposed[0]), fatal=True)
    plan_id = str(proposed[0].data["plan_id"]) if isinstance(proposed[0].data, dict) else ""
    await _show_plan(host, plan_id)

    _step(console, "4. The host issues a one-time token; the user confirms in the application")
    issued = await host.writes.issue_token(plan_id, NURSE)
    console.print(
        Text(
            f"  token for plan {plan_id} signed with key {issued.claims.key_id!r}, one-time "
            f"nonce {issued.claims.nonce[:8]}…; it goes to the user's screen, never to the "
            f"model",
        ),
    )
    confirmed = await _attempt(host.writes.confirm(plan_id, issued.value, NURSE))
    checks.expect("confirmation", "CONFIRMED", confirmed, fatal=True)
    return plan_id, issued.value, log_ref


async def _read_log(
    host: _Host, model: ScriptedModel, read: Sequence[Envelope]
) -> tuple[list[Envelope], str | None]:
    """Step 2: the log as the model sees it, and as it is kept for people."""
    console, checks = host.console, host.checks
    _step(
        console,
        f"2. The scripted model reads the collector's log: what it sees of "
        f"{DEFAULT_LOG_LINES:,} lines",
    )
    _, logs = await _model_turn(host, model, read, show=_print_log_view)
    envelope = logs[0] if logs else None
    data = envelope.data if envelope is not None and isinstance(envelope.data, dict) else {}
    failures = [str(line) for line in data.get("failures") or ()]
    checks.expect(
        "collector log read",
        "truncated, ConnectionError, exit 3",
        f"{_outcome(envelope) if envelope else 'no call'}, "
        f"{', '.join(_exceptions(failures)) or 'no exception'}, exit {data.get('exit_code')}",
        fatal=True,
    )
    assert envelope is not None  # the fatal check above stops the scenario without one
    size = json_size(envelope.data)
    checks.expect(
        "the model's view of the log",
        f"within {MAX_RESULT_CHARS} chars",
        f"within {MAX_RESULT_CHARS} chars" if size <= MAX_RESULT_CHARS else f"{size} chars",
    )
    checks.expect(
        "redacted in the model's view",
        "credential, email, ip_address",
        ", ".join(sorted(envelope.redacted)) or "nothing",
    )
    setup = host.app.logs.setup
    seen = envelope.to_json()
    leaked = [
        name
        for name, value in (
            ("password", setup.source_password),
            ("e-mail", setup.on_call),
            ("internal IP", setup.source_host),
        )
        if value in seen
    ]
    checks.expect(
        "password, e-mail, internal IP the model saw", "none", ", ".join(leaked) or "none"
    )
    await _show_raw_log(host, envelope.ref)
    return logs, envelope.ref


async def _show_raw_log(host: _Host, ref: str | None) -> None:
    """The log's raw record: whole for a reader of the tenant, absent for anyone else."""
    console, checks = host.console, host.checks
    expected = f"complete, {host.app.logs.size(NURSE.tenant_id, ASSET)} bytes"
    if ref is None:
        checks.expect("raw log kept for people", expected, "no ref")
        return
    raw = host.app.raw_results(host.writes.store, audit=host.audit)
    record = await raw.aread(ref, OPERATOR)
    kept = f"{'complete' if record.complete else 'incomplete'}, {len(record.body)} bytes"
    checks.expect("raw log kept for people", expected, kept)
    try:
        await raw.aread(ref, OUTSIDER)
    except AccessRefusedError as exc:
        refused = exc.code.value
    else:
        refused = "read"
    checks.expect("raw log read from another tenant", "NOT_FOUND", refused)
    console.print(
        Text(
            f"  a person reads the whole log (audited) with: {_raw_command(host, ref)} "
            "(add -o FILE to save it)",
        ),
    )


async def _execute_and_lose(host: _Host, model: ScriptedModel, plan_id: str) -> tuple[str, str]:
    console, checks, service = host.console, host.checks, host.app.service
    _step(console, "5. Execute: the service commits, then its response is lost")
    host.app.link.arm()
    outcome = await host.writes.execute_plan(plan_id, NURSE, call_id="rc-2")
    record = outcome.record
    checks.expect(
        "first execution",
        "OUTCOME_UNKNOWN UNKNOWN",
        f"{_outcome(outcome.envelope)} {record.status.value if record else None}",
        fatal=True,
    )
    key = record.idempotency_key if record else ""
    committed = service.find(key)
    ticket_no = committed.ticket_no if committed else "none"
    console.print(
        Text(
            f"  the ticket service holds {ticket_no} under key {key[:16]}…, but Handrail "
            f"never heard back: the record is UNKNOWN, not FAILED",
        ),
    )
    checks.expect("tickets in the service", "1", str(_count(host)))
    _print_envelope(console, outcome.envelope, source="execute_plan (what the model is told)")
    await _model_turn(host, model, (outcome.envelope,))
    return ticket_no, key


async def _reconcile(host: _Host, key: str, ticket_no: str) -> None:
    console = host.console
    _step(console, "6. One reconciler pass asks the ticket service about the key")
    host.clock.advance(PAST_GRACE)
    console.print(
        Text(f"  (the clock moves {PAST_GRACE:.0f} s on, past the first check and the grace)"),
    )
    reconciler = host.app.reconciler(
        host.writes.store, audit=host.audit, worker_id="demo-reconciler"
    )
    report = await reconciler.run_once()
    console.print(_pass_table(report))
    record = await _record(host, key)
    host.checks.expect(
        "after reconciliation",
        f"SUCCEEDED {ticket_no}",
        f"{record.status.value} {record.business_id}" if record else "no record",
        fatal=True,
    )


async def _replay(
    host: _Host, model: ScriptedModel, plan_id: str, ticket_no: str, key: str
) -> None:
    console, checks, service = host.console, host.checks, host.app.service
    _step(console, "7. Executing the plan again returns the same ticket, without the service")
    calls = service.create_calls
    again = await host.writes.execute_plan(plan_id, NURSE, call_id="rc-2")
    _print_envelope(console, again.envelope, source="execute_plan")
    data = again.envelope.data if isinstance(again.envelope.data, dict) else {}
    checks.expect(
        "repeat",
        f"ok {ticket_no} replayed",
        f"{_outcome(again.envelope)} {data.get('ticket_no')} "
        f"{'replayed' if again.replayed else 'executed'}",
    )
    checks.expect("service calls during the repeat", "0", str(service.create_calls - calls))
    checks.expect("tickets in the service", "1", str(_count(host)))
    answer, _ = await _model_turn(host, model, (again.envelope,))
    # The host checks the claim against the record: an effect is claimed only when an
    # execution record in SUCCEEDED proves it.
    record = await _record(host, key)
    proven = record is not None and record.status is ExecutionStatus.SUCCEEDED
    named = record.business_id if record is not None else None
    checks.expect(
        "the answer's ticket is proven by a SUCCEEDED record",
        f"{ticket_no} proven",
        f"{named} proven"
        if proven and named is not None and named in (answer.text or "")
        else "not proven",
    )


async def _refusals(host: _Host, first_plan: str, first_token: str) -> None:
    console, checks, writes = host.console, host.checks, host.writes
    model = ScriptedModel(
        (
            ModelTurn(calls=(_call("rc-3", TICKET_TOOL, _ticket_arguments("MEDIUM")),)),
            ModelTurn(calls=(_call("rc-4", TICKET_TOOL, _ticket_arguments("HIGH")),)),
        ),
    )
    _step(console, "8. Refused: a tampered token")
    second = await _propose(host, model)
    token = await writes.issue_token(second, NURSE)
    tampered = _extend_expiry(token.value)
    console.print(Text("  the token's expiry field is pushed one day later; its MAC is kept"))
    checks.expect(
        "tampered token",
        "CONFIRMATION_INVALID",
        await _attempt(writes.confirm(second, tampered, NURSE)),
    )

    _step(console, "9. Refused: a replayed token")
    console.print(Text(f"  the token already used for plan {first_plan} is sent again"))
    checks.expect(
        "replayed token",
        "CONFIRMATION_REPLAYED",
        await _attempt(writes.confirm(first_plan, first_token, NURSE)),
    )

    _step(console, "10. Refused: an expired plan")
    host.clock.advance(PLAN_TTL_SECONDS + 1)
    console.print(
        Text(f"  the clock moves {PLAN_TTL_SECONDS + 1:.0f} s on, past the plan's expiry"),
    )
    checks.expect(
        "expired plan",
        "PLAN_EXPIRED",
        await _attempt(writes.confirm(second, token.value, NURSE)),
    )

    _step(console, "11. Refused: the plan was edited after its token was issued")
    third = await _propose(host, model)
    old_token = await writes.issue_token(third, NURSE)
    edited = json.dumps(_ticket_arguments("MEDIUM"))
    console.print(Text(f"  the user lowers the priority to MEDIUM: {edited}"))
    revised = await host.gate.revise_plan(third, edited, NURSE)
    checks.expect("revision", "NEEDS_CONFIRMATION", _outcome(revised), fatal=True)
    fourth = str(revised.data["plan_id"]) if isinstance(revised.data, dict) else ""
    await _show_plan(host, fourth)
    old = await writes.get_plan(third, NURSE)
    console.print(Text(f"  the old plan {third} is now {old.state.value}"))
    checks.expect(
        "old token on the new plan",
        "PLAN_CHANGED",
        await _attempt(writes.confirm(fourth, old_token.value, NURSE)),
    )


# --- helpers ----------------------------------------------------------------------------------


async def _model_turn(
    host: _Host,
    model: ScriptedModel,
    previous: Sequence[Envelope],
    *,
    show: Callable[[Console, Envelope], None] | None = None,
) -> tuple[ModelTurn, list[Envelope]]:
    """Play one scripted turn: print its text or calls, run the calls through the gate.

    Each envelope is printed by `show`, by default whole.
    """
    turn = model.next_turn(previous)
    if turn.text:
        host.console.print(Text(f"  scripted model says: {turn.text}", style="cyan"))
    for call in turn.calls:
        host.console.print(
            Text.assemble(
                ("  scripted model proposes ", "cyan"),
                (call.name, "bold"),
                f" {_text_of(call.arguments)}",
                (f"  [{call.id}]", "dim"),
            ),
        )
    envelopes = await host.gate.handle_batch(turn.calls, NURSE)
    for envelope in envelopes:
        (show or _print_envelope)(host.console, envelope)
    return turn, envelopes


async def _propose(host: _Host, model: ScriptedModel) -> str:
    _, proposed = await _model_turn(host, model, ())
    host.checks.expect("proposal", "NEEDS_CONFIRMATION", _outcome(proposed[0]), fatal=True)
    plan_id = str(proposed[0].data["plan_id"]) if isinstance(proposed[0].data, dict) else ""
    await _show_plan(host, plan_id)
    return plan_id


async def _show_plan(host: _Host, plan_id: str) -> None:
    record = await host.writes.get_plan(plan_id, NURSE)
    plan = record.plan
    console = host.console
    console.print(Text(f"  plan {plan.plan_id}  hash {plan.plan_hash[:16]}…  ({record.state})"))
    console.print(Text(f"    impact:    {plan.impact.describe()}"))
    console.print(Text(f"    arguments: {plan.arguments}"))
    console.print(
        Text(
            f"    based on:  status {plan.expected_version}; expires {plan.expires_at:%H:%M:%S} "
            f"UTC ({(plan.expires_at - plan.created_at).total_seconds():.0f} s)",
        ),
    )


async def _attempt(work: Awaitable[object]) -> str:
    """Run a host request: the plan state it leaves, or the refusal's code."""
    try:
        result = await work
    except WriteRefusedError as refused:
        return refused.code.value
    state = getattr(result, "state", None)
    return str(state) if state is not None else "accepted"


async def _record(host: _Host, key: str) -> ExecutionRecord | None:
    return await asyncio.to_thread(host.writes.store.get_execution, key)


def _text_of(arguments: object) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments, default=repr)


def _count(host: _Host) -> int:
    return host.app.service.count()


def _outcome(envelope: Envelope) -> str:
    error = envelope.error_type
    return error.value if error is not None else envelope.status.value


def _extend_expiry(token: str) -> str:
    """The token with its expiry field moved one day later, everything else kept."""
    parts = token.split(".")
    expiry = datetime.fromtimestamp(int(parts[4]) / 1000, tz=UTC) + timedelta(days=1)
    parts[4] = str(round(expiry.timestamp() * 1000))
    return ".".join(parts)


def _shown(store: str | Path) -> str:
    """The store for the screen: a path, or a URL with any password hidden."""
    if isinstance(store, Path) or "://" not in store:
        return str(store)
    return sa.engine.make_url(store).render_as_string(hide_password=True)


def _step(console: Console, title: str) -> None:
    console.print()
    console.rule(Text(title, style="bold"), align="left")


def _print_envelope(
    console: Console, envelope: Envelope, *, source: str = "gate", data: bool = True
) -> None:
    if envelope.error_type is None:
        head = Text.assemble((f"  {source} → ", "green"), (envelope.status.value, "bold green"))
    else:
        head = Text.assemble(
            (f"  {source} → ", "red"),
            (f"{envelope.status.value} {envelope.error_type.value}", "bold red"),
        )
    console.print(head)
    console.print(Text(f"    summary: {envelope.summary}"))
    if data and envelope.data is not None:
        console.print(Text(f"    data: {json.dumps(envelope.data, ensure_ascii=False)}"))


_EXCEPTION = re.compile(r"\b([A-Z]\w*(?:Error|Exception)):")
_SHOWN_EXCERPT = re.compile(r"\[REDACTED|^\[\.\.\. |^L\d+: ")
_EXCERPT_LINES = 6
_LAST_LINES = 2


def _exceptions(failures: Sequence[str]) -> list[str]:
    """The exception types named in failure lines, each once, in order."""
    found = (match[1] for line in failures for match in _EXCEPTION.finditer(line))
    return list(dict.fromkeys(found))


def _print_log_view(console: Console, envelope: Envelope) -> None:
    """What the model sees of a log: counts, failure lines, redactions, and a few lines."""
    data = envelope.data
    if envelope.error_type is not None or not isinstance(data, dict):
        _print_envelope(console, envelope)
        return
    _print_envelope(console, envelope, data=False)
    cut = next((o for o in envelope.omitted if o.path == "$.text"), None)
    shown = f"{cut.kept:,} of {cut.total:,}" if cut else f"all {data.get('lines', 0):,}"
    console.print(
        Text(
            f"    lines shown: {shown} ({data.get('chars', 0):,} chars in the log); "
            f"the model's data: {json_size(data):,} chars of JSON (budget {MAX_RESULT_CHARS:,})",
        ),
    )
    console.print(Text("    failure lines (found anywhere in the log):"))
    for line in data.get("failures") or ():
        console.print(Text(f"      {line}", style="yellow"))
    console.print(Text(f"    exit code: {data.get('exit_code')}"))
    redacted = ", ".join(f"{n} {kind}" for kind, n in sorted(envelope.redacted.items()))
    console.print(Text(f"    redacted, by kind: {redacted or 'nothing'}"))
    console.print(Text("    some lines of the excerpt, as the model reads them:"))
    lines = str(data.get("text", "")).splitlines()
    # Where the redactions, the cuts and the failures are, and how the excerpt ends.
    picked = [line for line in lines[:-_LAST_LINES] if _SHOWN_EXCERPT.search(line)]
    for line in [*picked[:_EXCERPT_LINES], *lines[-_LAST_LINES:]]:
        console.print(Text(f"      {line}", style="dim"))
    console.print(Text(f"    ref: {envelope.ref} (the whole log, for people only)"))


def _raw_command(host: _Host, ref: str) -> str:
    return (
        f"handrail raw show {ref} --store {host.store_name} --tenant {NURSE.tenant_id} "
        f"--operator <your name>"
    )


def _pass_table(report: PassReport) -> Table:
    """One reconciliation pass as a table: each outcome, how many, which keys."""
    table = Table("outcome", "records", "keys")
    rows = (
        ("expired leases", report.expired_leases),
        ("succeeded", report.succeeded),
        ("failed", report.failed),
        ("retried", report.retried),
        ("still unknown", report.still_unknown),
        ("escalated", report.escalated),
    )
    for label, keys in rows:
        table.add_row(label, str(len(keys)), ", ".join(f"{k[:16]}…" for k in keys))
    table.add_row("purged", str(report.purged), "")
    return table


def _summary(console: Console, report: RecoveryReport, store: str | Path, service_db: Path) -> None:
    console.print()
    console.rule("Recovery scenario: expected and actual")
    table = Table("step", "expected", "actual", "")
    for check in report.checks:
        table.add_row(check.step, check.expected, check.actual, "✓" if check.ok else "✗")
    console.print(table)
    console.print(
        Text(
            f"{report.tickets} ticket(s) in the service after {report.service_calls} create "
            f"call(s); {report.audit_events} audit events in {_shown(store)}.",
        ),
    )
    if isinstance(store, Path):
        console.print(
            Text(
                f"See them with `handrail audit tail --store {store}`; reconcile that store with "
                f"`RECOVERY_SERVICE_DB={service_db} handrail "
                f"reconcile --app examples.recovery.app:build_app --store {store}`.",
            ),
        )
    if report.log_ref is not None:
        console.print(
            Text(
                f"Read the collector log kept for people with `handrail raw show "
                f"{report.log_ref} --store {_shown(store)} --tenant {NURSE.tenant_id} "
                f"--operator <your name>`.",
            ),
        )
    if report.unexpected:
        for check in report.unexpected:
            console.print(
                Text(
                    f"UNEXPECTED: {check.step} gave {check.actual}, expected {check.expected}",
                    style="bold red",
                ),
            )
    else:
        console.print(
            Text(f"All {len(report.checks)} outcomes were as expected.", style="bold green"),
        )
