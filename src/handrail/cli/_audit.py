"""`handrail audit`: the newest events of the audit trail in the SQLite store.

Reads only: the store is opened without migrating, and a missing file is an error
rather than a new, empty database.
"""

from __future__ import annotations

from datetime import UTC
from typing import Annotated

import typer

from handrail.cli._common import (
    DEFAULT_DB,
    CliError,
    DbOption,
    HelpCommand,
    HelpGroup,
    console_for_output,
    folding_table,
    one_line_errors,
)
from handrail.events import AuditEvent
from handrail.store.sqlite import SqliteStore

__all__ = ["audit_app"]

audit_app = typer.Typer(
    cls=HelpGroup, help="The audit trail in the SQLite store.", no_args_is_help=True
)

_COLUMNS = ("time (UTC)", "stage", "decision", "code", "tool", "call id", "tenant", "duration")


def _audit_row(event: AuditEvent) -> tuple[str, ...]:
    at = event.at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    duration = "" if event.duration_ms is None else f"{event.duration_ms:.1f} ms"
    return (
        at,
        event.stage,
        event.decision,
        event.code or "",
        event.tool or "",
        event.tool_call_id or "",
        event.tenant_id or "",
        duration,
    )


@audit_app.command("tail", cls=HelpCommand)
@one_line_errors
def tail_audit(
    *,
    lines: Annotated[
        int,
        typer.Option("-n", "--lines", min=1, help="How many of the newest events to show."),
    ] = 20,
    tenant: Annotated[str | None, typer.Option("--tenant", help="Only this tenant.")] = None,
    call: Annotated[str | None, typer.Option("--call", help="Only this tool call id.")] = None,
    db: DbOption = DEFAULT_DB,
) -> None:
    """Show the newest audit events, oldest first."""
    if not db.is_file():
        raise CliError(f"no audit database at {db}; run `handrail demo` or pass --db")
    store = SqliteStore.open(db, migrate=False)
    try:
        events = store.read_audit(limit=lines, tenant_id=tenant, tool_call_id=call)
    finally:
        store.close()
    console = console_for_output()
    if not events:
        console.print("no matching audit events")
        return
    table = folding_table(*_COLUMNS)
    for event in events:
        table.add_row(*_audit_row(event))
    console.print(table)
