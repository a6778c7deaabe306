"""`handrail reconcile`: settle an application's UNKNOWN writes by asking downstream.

One pass by default, printed as a table; `--watch` runs a pass every `--interval`
seconds until interrupted (Ctrl-C or SIGTERM end it after the pass in progress). The
command decides nothing itself: each tool's reconcile hook asks its downstream system
about the idempotency key, and only proof of non-execution retries the write, under
the same key. Several reconcilers may run at once; each record is leased first.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from handrail.cli._common import (
    AppOption,
    CliError,
    StoreOption,
    console_for_output,
    folding_table,
    load_registry,
    one_line_errors,
)

if TYPE_CHECKING:
    from handrail.clock import Clock
    from handrail.execution import ExecutionRecord
    from handrail.store import SqlStore
    from handrail.writes.reconcile import PassReport, Reconciler

__all__ = ["open_existing_store", "reconcile"]

_ROWS = (
    ("expired leases", "expired_leases", "RUNNING records whose worker's lease ran out"),
    ("succeeded", "succeeded", "found downstream: SUCCEEDED with the original result"),
    ("failed", "failed", "retried after proof of non-execution, and failed for good"),
    ("retried", "retried", "proven not executed: run again under the same key"),
    ("still unknown", "still_unknown", "no proof either way: checked again later"),
    ("escalated", "escalated", "too many inconclusive checks: a person must decide"),
    ("skipped", "skipped", "leased by another reconciler first"),
)


_WAITING_LIMIT = 1000
"""At most this many UNKNOWN records are read to find the ones not yet due."""

_DRAIN_S = 600.0
"""How long the command waits, before it closes the store, for retries still running."""


def _sqlite_file(url: str) -> Path | None:
    """The file of a SQLite store URL or path, as `open_store` reads it; None otherwise."""
    if url.startswith("sqlite:///"):
        return Path(url.removeprefix("sqlite:///"))
    return None if "://" in url else Path(url)


def _label(url: str) -> str:
    """The store for messages: a path, or a URL with its password hidden."""
    if _sqlite_file(url) is not None:
        return url
    import sqlalchemy as sa  # noqa: PLC0415 - only once a store is open

    # Only called once `open_store` accepted the URL, so it parses.
    return sa.engine.make_url(url).render_as_string(hide_password=True)


def open_existing_store(url: str) -> SqlStore:
    """The existing store at `url`; a missing SQLite file is an error, never a new store."""
    if not url:
        raise CliError("--store must not be empty")
    file = _sqlite_file(url)
    if file is not None and not file.is_file():
        raise CliError(f"no store at {file}; pass --store (or HANDRAIL_STORE)")
    from handrail.store import open_store  # noqa: PLC0415 - not for --help

    return open_store(url, migrate=False)


def _default_worker() -> str:
    return f"reconcile-{socket.gethostname()}-{os.getpid()}"[:64]


@one_line_errors
def reconcile(
    *,
    app_target: AppOption,
    store: StoreOption,
    worker_id: Annotated[
        str | None,
        typer.Option(
            "--worker-id",
            help="Lease owner name of this reconciler (default: host name and process id).",
        ),
    ] = None,
    watch: Annotated[
        bool,
        typer.Option("--watch", help="Keep running passes until interrupted."),
    ] = False,
    interval: Annotated[
        float,
        typer.Option("--interval", min=0.1, help="Seconds between passes with --watch."),
    ] = 5.0,
    max_passes: Annotated[
        int | None,
        typer.Option("--max-passes", min=1, help="With --watch: stop after this many passes."),
    ] = None,
) -> None:
    """Settle UNKNOWN writes (and crashed RUNNING ones) by asking their tools' systems.

    The app named by --app supplies the tools and their reconcile hooks; --store is
    where their execution records are. One pass by default.
    """
    from handrail.clock import SystemClock  # noqa: PLC0415 - not for --help
    from handrail.record.batching import BatchingAuditSink  # noqa: PLC0415
    from handrail.telemetry import Telemetry  # noqa: PLC0415
    from handrail.writes.reconcile import Reconciler  # noqa: PLC0415

    if max_passes is not None and not watch:
        raise CliError("--max-passes only applies with --watch")
    registry = load_registry(app_target)
    worker = worker_id or _default_worker()
    telemetry = Telemetry.from_environment()
    opened = open_existing_store(store)
    audit = BatchingAuditSink(opened)
    console = console_for_output()
    try:
        clock = SystemClock()
        reconciler = Reconciler(
            registry, opened, clock=clock, audit=audit, worker_id=worker, telemetry=telemetry
        )
        if watch:
            asyncio.run(
                _watch(
                    reconciler,
                    store=opened,
                    console=console,
                    clock=clock,
                    interval=interval,
                    max_passes=max_passes,
                ),
            )
        else:
            report = asyncio.run(_one_pass(reconciler))
            caption = f"one pass by {worker} over {_label(store)}"
            waiting = _not_yet_due(opened, report, clock)
            console.print(_table(report, waiting, caption=caption))
            _print_settled(console, report, opened)
            _print_waiting(console, waiting)
    finally:
        audit.close()
        opened.close()
        if telemetry is not None:
            telemetry.shutdown()


async def _one_pass(reconciler: Reconciler) -> PassReport:
    """One pass; then wait for retries still running past their deadline to be recorded."""
    report = await reconciler.run_once()
    await reconciler.drain(_DRAIN_S)
    return report


def _not_yet_due(store: SqlStore, report: PassReport, clock: Clock) -> list[ExecutionRecord]:
    """UNKNOWN records this pass did not check because their next check is later.

    Soonest first. Records checked in this pass are left out: their outcome is above.
    """
    from handrail.execution import ExecutionStatus  # noqa: PLC0415 - not for --help

    now = clock.now()
    checked = {key for _, field, _ in _ROWS for key in getattr(report, field)}
    unknown = store.list_executions(status=ExecutionStatus.UNKNOWN, limit=_WAITING_LIMIT)
    waiting = [
        record
        for record in unknown
        if record.idempotency_key not in checked and _next_check(record) > now
    ]
    return sorted(waiting, key=_next_check)


def _next_check(record: ExecutionRecord) -> datetime:
    """When a reconciler may look at an UNKNOWN record next (a held lease delays it)."""
    times = [t for t in (record.next_check_at, record.lease_expires_at) if t is not None]
    return max(times, default=datetime.min.replace(tzinfo=UTC))


def _at(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _table(report: PassReport, waiting: list[ExecutionRecord], *, caption: str) -> Table:
    table = folding_table("outcome", "records", "meaning", "idempotency keys", caption=caption)
    for label, field, meaning in _ROWS:
        keys: tuple[str, ...] = getattr(report, field)
        table.add_row(label, str(len(keys)), meaning, "\n".join(keys))
    table.add_row(
        "not yet due",
        str(len(waiting)),
        "UNKNOWN records whose next check is later: not checked in this pass",
        "\n".join(f"{r.idempotency_key} (next check {_at(_next_check(r))})" for r in waiting),
    )
    table.add_row(
        "purged",
        str(report.purged),
        "settled records past their retention, kept as tombstones of their keys",
        "",
    )
    return table


def _print_settled(console: Console, report: PassReport, store: SqlStore) -> None:
    """One line per record this pass settled: its status, tool and business id."""
    for key in (*report.succeeded, *report.failed):
        record = store.get_execution(key)
        if record is None:  # pragma: no cover - a purge keeps a tombstone, never deletes
            continue
        business = f" {record.business_id}" if record.business_id else ""
        console.print(Text(f"{record.status.value} {record.tool}{business}  key {key}"))


def _print_waiting(console: Console, waiting: list[ExecutionRecord]) -> None:
    """One line when records wait: the pass did not look at them yet, and when it will."""
    if waiting:
        console.print(
            Text(
                f"{len(waiting)} UNKNOWN record(s) not yet due; the next check is at "
                f"{_at(_next_check(waiting[0]))}"
            ),
        )


async def _watch(
    reconciler: Reconciler,
    *,
    store: SqlStore,
    console: Console,
    clock: Clock,
    interval: float,
    max_passes: int | None,
) -> None:
    """Passes every `interval` seconds; SIGINT or SIGTERM stop after the current pass."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    handled: list[signal.Signals] = []
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signum, stop.set)
            handled.append(signum)
    passes = 0
    try:
        while not stop.is_set():
            report = await reconciler.run_once()
            passes += 1
            console.print(Text(_one_line(clock, passes, report)))
            await asyncio.to_thread(_print_settled, console, report, store)
            waiting = await asyncio.to_thread(_not_yet_due, store, report, clock)
            await asyncio.to_thread(_print_waiting, console, waiting)
            if max_passes is not None and passes >= max_passes:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=interval)
        await reconciler.drain(_DRAIN_S)
    finally:
        for signum in handled:
            loop.remove_signal_handler(signum)
    console.print(Text(f"stopped after {passes} pass(es)"))


def _one_line(clock: Clock, number: int, report: PassReport) -> str:
    at = clock.now().astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
    counts = ", ".join(f"{len(getattr(report, field))} {label}" for label, field, _ in _ROWS)
    return f"{at} UTC pass {number}: {counts}, {report.purged} purged"
