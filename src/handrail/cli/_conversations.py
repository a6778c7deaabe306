"""`handrail conversations`: a tenant's stored conversations, for the people who operate them.

`list` shows a tenant's conversations (one user's, with `--user`), most recently
updated first; `show` one conversation's turns. Reads only; the store is opened
without migrating. Everything a model or a user wrote is shown with its control
characters escaped and never read as markup. A conversation of another tenant is "not
found", exactly like a missing one.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

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
from handrail.cli._runs import print_turns
from handrail.errors import ConfigurationError

__all__ = ["conversations_app"]

conversations_app = typer.Typer(
    cls=HelpGroup,
    help="Stored conversations of a tenant: list them, show one's turns.",
    no_args_is_help=True,
)

_COLUMNS = ("updated (UTC)", "user", "turns", "last run", "conversation id")

TenantRequired = Annotated[
    str, typer.Option("--tenant", help="The tenant whose conversations these are.")
]


def _time(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


@conversations_app.command("list", cls=HelpCommand)
@one_line_errors
def list_conversations(
    *,
    store: StoreOption,
    tenant: TenantRequired,
    user: Annotated[
        str | None, typer.Option("--user", help="Only this user's conversations.")
    ] = None,
    lines: Annotated[int, typer.Option("-n", "--lines", min=1, help="At most this many.")] = 50,
) -> None:
    """List a tenant's conversations, most recently updated first."""
    opened = open_existing_store(store)
    try:
        records = opened.list_conversations(tenant_id=tenant, user_id=user, limit=lines)
    finally:
        opened.close()
    console = console_for_output()
    if not records:
        console.print(Text(f"no matching conversations in tenant {shown(tenant)}"))
        return
    table = folding_table(*_COLUMNS, caption=f"{len(records)} conversation(s)")
    for record in records:
        cells = (
            _time(record.updated_at),
            shown(record.user_id),
            str(record.turns),
            record.run_id or "",
            record.conversation_id,
        )
        table.add_row(*(Text(cell) for cell in cells))
    console.print(table)


@conversations_app.command("show", cls=HelpCommand)
@one_line_errors
def show_conversation(
    conversation_id: Annotated[str, typer.Argument(help="The id of the conversation.")],
    *,
    store: StoreOption,
    tenant: TenantRequired,
) -> None:
    """Show one conversation: its user, its last run and every turn."""
    opened = open_existing_store(store)
    try:
        record = opened.get_conversation(conversation_id)
        if record is None or record.tenant_id != tenant:
            raise CliError(f"no conversation {conversation_id!r} in tenant {tenant!r}")
        texts = opened.get_turns(conversation_id, stop=record.turns)
    finally:
        opened.close()
    from handrail.loop._agent_record import load_turn  # noqa: PLC0415 - not for --help

    try:
        turns = tuple(load_turn(text) for text in texts)
    except ConfigurationError as exc:
        raise CliError(f"conversation {conversation_id!r} holds a turn that is not one") from exc
    console = console_for_output()
    header = (
        ("conversation", record.conversation_id),
        ("tenant", record.tenant_id),
        ("user", record.user_id),
        ("last run", record.run_id or "(none)"),
        ("created", f"{_time(record.created_at)} UTC"),
        ("updated", f"{_time(record.updated_at)} UTC"),
    )
    for name, value in header:
        console.print(Text(f"{name:<12} {shown(value)}"))
    print_turns(console, turns)
