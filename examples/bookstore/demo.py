"""`handrail demo`: the bookstore's tools driven through a Gate by a scripted model.

Five short scenarios (a valid call, a repaired invalid call, a permission denial, a
cross-tenant attempt and a forbidden tool) print what the model proposed and what the
gate answered; the audit trail is then read back from the SQLite store. The model is
`handrail.testing.ScriptedModel`, a script written by a person, never a real model.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from examples.bookstore.app import BookstoreApp, build_app
from handrail import (
    AuditEvent,
    AuditSink,
    BatchingAuditSink,
    Clock,
    Envelope,
    Principal,
    SqliteStore,
    ToolCall,
)
from handrail.testing import ModelTurn, ScriptedModel, ScriptStep

__all__ = ["DemoReport", "Exchange", "Scenario", "run_demo", "scenarios"]

ALICE = Principal(
    user_id="alice",
    tenant_id="acme",
    permissions=frozenset({"inventory.read", "orders.read"}),
    request_id="demo-alice",
)
BOB = Principal(
    user_id="bob",
    tenant_id="acme",
    permissions=frozenset({"inventory.read"}),
    request_id="demo-bob",
)


@dataclass(frozen=True, kw_only=True, slots=True)
class Scenario:
    """One conversation: who asks, what the scripted model proposes, what must happen."""

    title: str
    principal: Principal
    script: tuple[ScriptStep, ...]
    expected: tuple[str, ...]
    """The outcome of each call in order: a status (`ok`, `empty`) or an error code."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Exchange:
    """One proposed call and the envelope the gate returned for it."""

    scenario: str
    call: ToolCall
    envelope: Envelope
    expected: str

    @property
    def outcome(self) -> str:
        """The error code of a refusal, else the status."""
        error = self.envelope.error_type
        return error.value if error is not None else self.envelope.status.value


@dataclass(frozen=True, kw_only=True, slots=True)
class DemoReport:
    """What the demo did, for tests and for the exit code."""

    exchanges: tuple[Exchange, ...]
    audit: tuple[AuditEvent, ...]
    orders_left: int

    @property
    def unexpected(self) -> tuple[Exchange, ...]:
        """Exchanges whose outcome differs from the scenario's expectation."""
        return tuple(e for e in self.exchanges if e.outcome != e.expected)


def _call(call_id: str, name: str, arguments: dict[str, object]) -> ToolCall:
    # The scripted model sends JSON text, as OpenAI models do.
    return ToolCall(id=call_id, name=name, arguments=json.dumps(arguments), provider="scripted")


def _turn(call_id: str, name: str, arguments: dict[str, object]) -> ModelTurn:
    return ModelTurn(calls=(_call(call_id, name, arguments),))


def _repair_isbn(original: str, call_id: str) -> Callable[[Sequence[Envelope]], ModelTurn]:
    """A scripted repair: read the field errors of the last envelope and fix the ISBN."""

    def repair(previous: Sequence[Envelope]) -> ModelTurn:
        refused = previous[0] if previous else None
        if refused is None or "$.isbn" not in refused.field_errors:
            return ModelTurn(text="I could not work out what was wrong.")
        digits = "".join(c for c in original if c.isdigit())
        return _turn(call_id, "bookstore.check_inventory", {"isbn": digits})

    return repair


def scenarios() -> tuple[Scenario, ...]:
    """The demo's conversations, in order."""
    return (
        Scenario(
            title="1. A valid call",
            principal=ALICE,
            script=(_turn("call_1", "bookstore.search_books", {"query": "austen", "limit": 3}),),
            expected=("ok",),
        ),
        Scenario(
            title="2. Invalid arguments, then the scripted model's repair",
            principal=ALICE,
            script=(
                _turn("call_2", "bookstore.check_inventory", {"isbn": "978-0-14-143951-8"}),
                _repair_isbn("978-0-14-143951-8", "call_3"),
            ),
            expected=("INVALID_ARGUMENTS", "ok"),
        ),
        Scenario(
            title="3. A permission denial: bob lacks orders.read",
            principal=BOB,
            script=(_turn("call_4", "bookstore.order_status", {"order_id": "ORD-1001"}),),
            expected=("PERMISSION_DENIED",),
        ),
        Scenario(
            title="4. Another tenant's order: acme's alice asks for globex's ORD-2001",
            principal=ALICE,
            script=(
                _turn("call_5", "bookstore.order_status", {"order_id": "ORD-1001"}),
                _turn("call_6", "bookstore.order_status", {"order_id": "ORD-2001"}),
                _turn(
                    "call_7",
                    "bookstore.order_status",
                    {"order_id": "ORD-2001", "tenant_id": "globex"},
                ),
            ),
            expected=("ok", "NOT_FOUND", "INVALID_ARGUMENTS"),
        ),
        Scenario(
            title="5. A forbidden (L4) tool: registered, never exposed, never run",
            principal=ALICE,
            script=(_turn("call_8", "bookstore.delete_all_orders", {}),),
            expected=("UNKNOWN_TOOL",),
        ),
    )


class _CountingSink:
    """Forwards events and counts them, so the demo reads back exactly its own."""

    def __init__(self, inner: AuditSink) -> None:
        self._inner = inner
        self.count = 0

    def emit(self, events: Sequence[AuditEvent]) -> None:
        self.count += len(events)
        self._inner.emit(events)


def run_demo(
    *,
    console: Console,
    audit_db: Path,
    data_db: Path | None = None,
    clock: Clock | None = None,
    new_id: Callable[[], str] | None = None,
) -> DemoReport:
    """Play every scenario, print the trace and the audit summary, return the report.

    The bookstore data is recreated in `data_db` (default: next to `audit_db`); audit
    events are appended to the SQLite store at `audit_db`.
    """
    data_db = data_db or audit_db.parent / "bookstore-demo.db"
    store = SqliteStore.open(audit_db)
    writer = BatchingAuditSink(store)
    sink = _CountingSink(writer)
    app = build_app(database=data_db, audit=sink, clock=clock, new_id=new_id)
    try:
        app.database.reset()
        _header(console, app, audit_db, data_db)
        exchanges = asyncio.run(_play(console, app, sink))
        orders_left = app.database.for_tenant(ALICE.tenant_id).count_orders()
        console.print(
            Text(f"acme still has {orders_left} orders: the forbidden tool never ran.", "dim"),
        )
        writer.close()
        events = tuple(store.read_audit(limit=sink.count))
    finally:
        writer.close()
        store.close()
        app.database.close()
    report = DemoReport(exchanges=exchanges, audit=events, orders_left=orders_left)
    _summary(console, report, audit_db)
    return report


def _header(console: Console, app: BookstoreApp, audit_db: Path, data_db: Path) -> None:
    console.rule("Handrail demo: the bookstore example")
    console.print(
        Text(
            "The model in this demo is handrail.testing.ScriptedModel: it replays a script "
            "written by a person. It is not a real LLM.",
            style="bold yellow",
        ),
    )
    console.print(Text(f"audit store:    {audit_db}"))
    console.print(Text(f"bookstore data: {data_db} (recreated for this run)"))
    exposed = app.exposed_names(ALICE)
    hidden = [s.name for s in app.registry.specs() if s.name not in exposed]
    console.print(Text(f"tools exposed to alice@acme: {', '.join(exposed)}"))
    console.print(Text(f"registered but never exposed to her: {', '.join(hidden)}"))


async def _play(console: Console, app: BookstoreApp, sink: AuditSink) -> tuple[Exchange, ...]:
    gate = app.gate(audit=sink)
    exchanges: list[Exchange] = []
    for scenario in scenarios():
        console.print()
        console.rule(Text(scenario.title, style="bold"), align="left")
        principal = scenario.principal
        console.print(
            Text(
                f"principal {principal.user_id}@{principal.tenant_id}, permissions: "
                f"{', '.join(sorted(principal.permissions))}",
                style="dim",
            ),
        )
        model = ScriptedModel(scenario.script)
        expected = iter(scenario.expected)
        previous: Sequence[Envelope] = ()
        while not model.finished:
            turn = model.next_turn(previous)
            if turn.text:
                console.print(Text(f"scripted model says: {turn.text}", style="cyan"))
            for call in turn.calls:
                _print_call(console, call)
            previous = await gate.handle_batch(turn.calls, principal)
            for call, envelope in zip(turn.calls, previous, strict=True):
                _print_envelope(console, envelope)
                exchanges.append(
                    Exchange(
                        scenario=scenario.title,
                        call=call,
                        envelope=envelope,
                        expected=next(expected, "?"),
                    ),
                )
    return tuple(exchanges)


def _print_call(console: Console, call: ToolCall) -> None:
    arguments = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)
    console.print(
        Text.assemble(
            ("scripted model proposes ", "cyan"),
            (call.name, "bold"),
            " ",
            str(arguments),
            (f"  [{call.id}]", "dim"),
        ),
    )


def _print_envelope(console: Console, envelope: Envelope) -> None:
    if envelope.error_type is None:
        head = Text.assemble(("  gate → ", "green"), (envelope.status.value, "bold green"))
    else:
        retry = " (retryable)" if envelope.retryable else ""
        head = Text.assemble(
            ("  gate → ", "red"),
            (f"{envelope.status.value} {envelope.error_type.value}", "bold red"),
            retry,
        )
    console.print(head)
    console.print(Text(f"    summary: {envelope.summary}"))
    for path, message in envelope.field_errors.items():
        console.print(Text(f"    field error {path}: {message}", style="yellow"))
    if envelope.data is not None:
        rows = envelope.data if isinstance(envelope.data, list) else [envelope.data]
        for row in rows:
            console.print(Text(f"    data: {json.dumps(row, ensure_ascii=False)}"))


def _summary(console: Console, report: DemoReport, audit_db: Path) -> None:
    console.print()
    console.rule("Audit trail, read back from the SQLite store")
    calls: dict[str, list[AuditEvent]] = {}
    registrations = 0
    for event in report.audit:
        if event.kind == "call" and event.tool_call_id is not None:
            calls.setdefault(event.tool_call_id, []).append(event)
        elif event.kind == "registry":
            registrations += 1
    table = Table("call", "tool", "stages", "outcome")
    for call_id, events in calls.items():
        last = events[-1]
        table.add_row(
            call_id,
            last.tool or "",
            " ".join(e.stage for e in events),
            last.code if last.decision == last.code else f"{last.decision} {last.code or ''}",
        )
    console.print(table)
    console.print(
        Text(
            f"{len(report.audit)} events from {audit_db}: {registrations} registrations and "
            f"{len(report.audit) - registrations} call stages. See them with "
            f"`handrail audit tail --store {audit_db}`.",
        ),
    )
    if report.unexpected:
        for exchange in report.unexpected:
            console.print(
                Text(
                    f"UNEXPECTED: {exchange.call.id} gave {exchange.outcome}, "
                    f"expected {exchange.expected}",
                    style="bold red",
                ),
            )
    else:
        console.print(
            Text(f"All {len(report.exchanges)} outcomes were as expected.", style="bold green"),
        )
