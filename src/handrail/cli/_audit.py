"""`handrail audit`: the newest events of the audit trail in Handrail's store.

Reads only: the store (SQLite or PostgreSQL, `--store`) is opened without migrating,
and a missing SQLite file is an error rather than a new, empty database.
"""

from __future__ import annotations

from datetime import UTC
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from handrail.cli._common import (
    DEFAULT_DB,
    STORE_OPTION,
    HelpCommand,
    HelpGroup,
    console_for_output,
    folding_table,
    one_line_errors,
)
from handrail.cli._reconcile import open_existing_store

if TYPE_CHECKING:
    from handrail.events import AuditEvent

__all__ = ["audit_app"]

audit_app = typer.Typer(cls=HelpGroup, help="The audit trail in the store.", no_args_is_help=True)

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
    store: Annotated[str | None, STORE_OPTION] = None,
    db: Annotated[
        Path | None,
        typer.Option("--db", envvar="HANDRAIL_DB", hidden=True, help="Deprecated: --store."),
    ] = None,
) -> None:
    """Show the newest audit events, oldest first, like tail.

    The window is the newest events as they were written; within it, events are in the
    order of their times (writers batch, so the two orders can differ). The store is
    the one `handrail demo` writes unless --store (or HANDRAIL_STORE) names another.
    """
    if store is None and db is not None:
        typer.echo("warning: --db (HANDRAIL_DB) is deprecated; use --store", err=True)
    url = store if store is not None else str(db or DEFAULT_DB)
    opened = open_existing_store(url)
    try:
        events = opened.read_audit(limit=lines, tenant_id=tenant, tool_call_id=call)
    finally:
        opened.close()
    console = console_for_output()
    if not events:
        console.print("no matching audit events")
        return
    table = folding_table(*_COLUMNS)
    # sorted() is stable: events of the same instant keep the order they were written in.
    for event in sorted(events, key=lambda e: e.at):
        table.add_row(*_audit_row(event))
    console.print(table)
