"""`handrail tasks`: a tenant's long tasks — list them, show one, cancel one.

Reads and writes only the task records in the store: `cancel` marks a running task so
that its worker (any process) stops it at its next step boundary, and cancels a queued
one at once. A task of another tenant is "not found", exactly like a missing one. The
progress message and result are the tool's words: shown escaped, never interpreted.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text

from handrail.cli._common import (
    CliError,
    HelpCommand,
    HelpGroup,
    StoreOption,
    console_for_output,
    folding_table,
    one_line_errors,
)
from handrail.cli._raw import shown
from handrail.cli._reconcile import open_existing_store
from handrail.principal import Principal

if TYPE_CHECKING:
    from handrail.store.sql import SqlStore
    from handrail.tasks.records import TaskRecords

__all__ = ["tasks_app"]

tasks_app = typer.Typer(
    cls=HelpGroup,
    help="A tenant's long tasks: list, show one, cancel one.",
    no_args_is_help=True,
)

_COLUMNS = ("created (UTC)", "task id", "tool", "user", "state", "progress", "attempts")

TaskTenant = Annotated[str, typer.Option("--tenant", help="The tenant the tasks belong to.")]
TaskId = Annotated[str, typer.Argument(help="The task's id (see `tasks list`).")]


def _time(at: datetime | None) -> str:
    return "" if at is None else at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _records(store: SqlStore) -> TaskRecords:
    from handrail.clock import SystemClock  # noqa: PLC0415 - not for --help
    from handrail.tasks.records import TaskRecords  # noqa: PLC0415 - not for --help

    return TaskRecords(store, clock=SystemClock())


def _operator(tenant: str, by: str) -> Principal:
    from handrail.tasks.records import TASK_MANAGE_PERMISSION  # noqa: PLC0415 - not for --help

    if not tenant or not by:
        raise CliError("--tenant and --by must not be empty")
    return Principal(user_id=by, tenant_id=tenant, permissions=frozenset({TASK_MANAGE_PERMISSION}))


def _refused(exc: Exception, task_id: str, tenant: str) -> CliError:
    from handrail.errors import AccessRefusedError, ErrorCode  # noqa: PLC0415 - not for --help

    if isinstance(exc, AccessRefusedError) and exc.code is ErrorCode.CONFLICT:
        return CliError(f"task {shown(task_id)} has already finished")
    return CliError(f"no task {shown(task_id)} in tenant {shown(tenant)}")


@tasks_app.command("list", cls=HelpCommand)
@one_line_errors
def list_tasks(
    *,
    store: StoreOption,
    tenant: TaskTenant,
    state: Annotated[
        str | None,
        typer.Option("--state", help="Only tasks in this state (queued, running, ...)."),
    ] = None,
    lines: Annotated[int, typer.Option("-n", "--lines", min=1, help="At most this many.")] = 100,
) -> None:
    """List a tenant's tasks, newest first."""
    from handrail.tasking import TaskState  # noqa: PLC0415 - not for --help

    try:
        wanted = None if state is None else TaskState(state.lower())
    except ValueError:
        raise CliError(f"--state is one of {', '.join(s.value for s in TaskState)}") from None
    opened = open_existing_store(store)
    try:
        records = opened.list_tasks(tenant_id=tenant, state=wanted, limit=lines)
    finally:
        opened.close()
    console = console_for_output()
    if not records:
        console.print(Text(f"no tasks in tenant {shown(tenant)}"))
        return
    table = folding_table(*_COLUMNS, caption=f"{len(records)} task(s)")
    for record in records:
        cells = (
            _time(record.created_at),
            record.task_id,
            shown(record.tool),
            shown(record.user_id),
            record.state.value,
            f"{record.progress:.0%}",
            f"{record.attempts}/{record.max_attempts}",
        )
        table.add_row(*(Text(cell) for cell in cells))
    console.print(table)


@tasks_app.command("show", cls=HelpCommand)
@one_line_errors
def show_task(task_id: TaskId, *, store: StoreOption, tenant: TaskTenant) -> None:
    """Show one task of the tenant as JSON: state, progress, attempts, lease, result or error."""
    from handrail.tasks.service import describe  # noqa: PLC0415 - not for --help

    opened = open_existing_store(store)
    try:
        viewer = Principal(user_id="operator", tenant_id=tenant)
        try:
            record = asyncio.run(_records(opened).get(task_id, viewer))
        except Exception as exc:  # noqa: BLE001 - every refusal is the same "not found"
            raise _refused(exc, task_id, tenant) from None
    finally:
        opened.close()
    view: dict[str, Any] = describe(record, people=True)
    view |= {
        "user": record.user_id,
        "queue": record.queue,
        "lease_holder": record.lease_holder,
        "heartbeat_at": None if record.heartbeat_at is None else record.heartbeat_at.isoformat(),
        "cancel_requested": record.cancel_requested,
    }
    # ASCII JSON: every control or non-ASCII character of the tool's words is escaped.
    typer.echo(json.dumps(view, indent=2, sort_keys=True, ensure_ascii=True))


@tasks_app.command("cancel", cls=HelpCommand)
@one_line_errors
def cancel_task(
    task_id: TaskId,
    *,
    store: StoreOption,
    tenant: TaskTenant,
    by: Annotated[str, typer.Option("--by", help="Who cancels it (an operator of the tenant).")],
) -> None:
    """Cancel a task of the tenant: a queued one at once, a running one at its next step."""
    principal = _operator(tenant, by)
    opened = open_existing_store(store)
    try:
        try:
            record = asyncio.run(_records(opened).request_cancel(task_id, principal))
        except Exception as exc:  # noqa: BLE001 - refusals become one line each
            raise _refused(exc, task_id, tenant) from None
    finally:
        opened.close()
    if record.cancel_requested and not record.terminal:
        typer.echo(f"task {task_id} will stop at its next step")
    else:
        typer.echo(f"cancelled task {task_id}")
