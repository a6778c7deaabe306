"""`handrail executions`: execution records for people, and their manual resolution.

`list` shows records (UNKNOWN ones by default): the ones a reconciler could not
settle. A record past its retention is listed as a tombstone, "(purged)": its key,
status and business id stay for good; its arguments and result are gone. `resolve`
is how a person settles one after checking the downstream system by its idempotency
key; the decision, the operator and the note are stored and audited. The store is
opened without migrating; a missing SQLite file is an error.
"""

from __future__ import annotations

from datetime import UTC
from typing import TYPE_CHECKING, Annotated

import typer

from handrail.cli._common import (
    CliError,
    HelpCommand,
    HelpGroup,
    StoreOption,
    console_for_output,
    folding_table,
    one_line_errors,
)
from handrail.cli._reconcile import open_existing_store
from handrail.errors import WriteRefusedError

if TYPE_CHECKING:
    from handrail.execution import ExecutionRecord

__all__ = ["executions_app"]

executions_app = typer.Typer(
    cls=HelpGroup,
    help="Execution records: list them, resolve an UNKNOWN one by hand.",
    no_args_is_help=True,
)

_COLUMNS = (
    "updated (UTC)",
    "status",
    "tool",
    "tenant",
    "checks",
    "escalated",
    "business id",
    "key",
)


def _row(record: ExecutionRecord) -> tuple[str, ...]:
    return (
        record.updated_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S"),
        f"{record.status.value} (purged)" if record.purged else record.status.value,
        record.tool,
        record.tenant_id,
        str(record.checks),
        "yes" if record.escalated else "",
        record.business_id or "",
        record.idempotency_key,
    )


@executions_app.command("list", cls=HelpCommand)
@one_line_errors
def list_executions(
    *,
    store: StoreOption,
    status: Annotated[
        str,
        typer.Option(
            "--status", help="UNKNOWN, RUNNING, PREPARED, SUCCEEDED, FAILED_FINAL or ALL."
        ),
    ] = "UNKNOWN",
    tenant: Annotated[str | None, typer.Option("--tenant", help="Only this tenant.")] = None,
    lines: Annotated[int, typer.Option("-n", "--lines", min=1, help="At most this many.")] = 50,
) -> None:
    """Show execution records, most recently updated first (UNKNOWN ones by default)."""
    from handrail.execution import ExecutionStatus  # noqa: PLC0415 - not for --help

    wanted = status.upper()
    if wanted != "ALL" and wanted not in ExecutionStatus.__members__:
        raise CliError(f"unknown status {status!r}")
    opened = open_existing_store(store)
    try:
        records = opened.list_executions(
            status=None if wanted == "ALL" else ExecutionStatus(wanted),
            tenant_id=tenant,
            limit=lines,
        )
    finally:
        opened.close()
    table = folding_table(*_COLUMNS, caption=f"{len(records)} record(s), status {wanted}")
    for record in records:
        table.add_row(*_row(record))
    console_for_output().print(table)


@executions_app.command("resolve", cls=HelpCommand)
@one_line_errors
def resolve(
    key: Annotated[str, typer.Argument(help="The idempotency key of an UNKNOWN record.")],
    *,
    store: StoreOption,
    operator: Annotated[str, typer.Option("--operator", help="Who decides (audited).")],
    note: Annotated[str, typer.Option("--note", help="What was checked downstream.")],
    succeeded: Annotated[
        bool | None,
        typer.Option(
            "--succeeded/--failed",
            help="What the downstream system shows for this key.",
            show_default=False,
        ),
    ] = None,
    business_id: Annotated[
        str | None,
        typer.Option("--business-id", help="The downstream object's id, for --succeeded."),
    ] = None,
) -> None:
    """Settle an UNKNOWN write by hand after checking the downstream system."""
    from handrail.record.batching import BatchingAuditSink  # noqa: PLC0415 - not for --help
    from handrail.telemetry import Telemetry  # noqa: PLC0415
    from handrail.writes.reconcile import resolve_by_person  # noqa: PLC0415

    if succeeded is None:
        raise CliError("say what the downstream system shows: --succeeded or --failed")
    if business_id is not None and not succeeded:
        raise CliError("--business-id goes with --succeeded")
    telemetry = Telemetry.from_environment()
    opened = open_existing_store(store)
    audit = BatchingAuditSink(opened)
    try:
        settled = resolve_by_person(
            opened,
            key,
            succeeded=succeeded,
            operator=operator,
            note=note,
            business_id=business_id,
            audit=audit,
            telemetry=telemetry,
        )
    except WriteRefusedError as refused:
        raise CliError(refused.message) from None
    finally:
        audit.close()
        opened.close()
        if telemetry is not None:
            telemetry.shutdown()
    console_for_output().print(f"{settled.status.value} {settled.tool}  key {key}")
