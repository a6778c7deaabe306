"""`handrail keys`: the API keys HTTP clients of `handrail mcp serve --http` present.

`create` makes a key bound to one principal (tenant, user, permissions, roles, data
scope) and prints it once, on stdout alone, so a script can capture it; the store
keeps only its hash. `list` shows a tenant's keys (never a secret, never a hash);
`revoke` ends one of that tenant's keys at once. A key of another tenant is "not
found", exactly like a missing one. Creating and revoking are audited.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Annotated

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
    from handrail.mcp.keys import ApiKeys
    from handrail.store.sql import SqlStore

__all__ = ["keys_app"]

keys_app = typer.Typer(
    cls=HelpGroup,
    help="API keys for MCP clients over HTTP: create one (shown once), list, revoke.",
    no_args_is_help=True,
)

_COLUMNS = ("created (UTC)", "key id", "user", "label", "permissions", "expires", "state")

KeyTenant = Annotated[str, typer.Option("--tenant", help="The tenant the key belongs to.")]
ActorOption = Annotated[
    str | None,
    typer.Option("--by", help="Who does this, for the audit (default: the key's user)."),
]


def _time(at: datetime | None) -> str:
    return "" if at is None else at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _keys(store: SqlStore) -> ApiKeys:
    from handrail.mcp.keys import ApiKeys  # noqa: PLC0415 - not for --help

    return ApiKeys(store)


def _scope(pairs: list[str] | None) -> dict[str, object]:
    scope: dict[str, object] = {}
    for pair in pairs or ():
        name, equals, value = pair.partition("=")
        if not equals or not name:
            raise CliError(f"--scope takes NAME=VALUE, not {pair!r}")
        scope[name] = value
    return scope


@keys_app.command("create", cls=HelpCommand)
@one_line_errors
def create_key(
    *,
    store: StoreOption,
    tenant: KeyTenant,
    user: Annotated[str, typer.Option("--user", help="The user the key acts as.")],
    permission: Annotated[
        list[str] | None,
        typer.Option("--permission", "-p", help="A permission the key holds (repeatable)."),
    ] = None,
    role: Annotated[
        list[str] | None, typer.Option("--role", help="A role the key holds (repeatable).")
    ] = None,
    scope: Annotated[
        list[str] | None,
        typer.Option(
            "--scope", metavar="NAME=VALUE", help="A data scope entry of the key (repeatable)."
        ),
    ] = None,
    label: Annotated[str, typer.Option("--label", help="What the key is for.")] = "",
    expires_in_days: Annotated[
        float | None,
        typer.Option("--expires-in-days", min=0.001, help="The key stops working after this."),
    ] = None,
    by: ActorOption = None,
) -> None:
    """Create a key and print it once on stdout; the store keeps only its hash.

    The key acts as exactly this principal: tenant, user, the permissions and roles
    given (none by default) and the data scope. Migrates the store if it needs to.
    """
    if not tenant or not user:
        raise CliError("--tenant and --user must not be empty")
    try:
        principal = Principal(
            user_id=user,
            tenant_id=tenant,
            permissions=frozenset(p for p in permission or () if p),
            roles=frozenset(r for r in role or () if r),
            data_scope=_scope(scope),
        )
    except ValueError as exc:
        raise CliError(str(exc)) from None
    from handrail.store import open_store  # noqa: PLC0415 - not for --help

    opened = open_store(store)
    try:
        keys = _keys(opened)
        expires = None
        if expires_in_days is not None:
            expires = keys.clock.now() + timedelta(days=expires_in_days)
        try:
            created = keys.create(principal, label=label, expires_at=expires, actor=by)
        except ValueError as exc:
            raise CliError(str(exc)) from None
    finally:
        opened.close()
    typer.echo(created.key)
    note = f"key {created.record.key_id} for {shown(user)} in tenant {shown(tenant)}"
    typer.echo(f"{note}; shown once: it cannot be read again", err=True)


@keys_app.command("list", cls=HelpCommand)
@one_line_errors
def list_keys(
    *,
    store: StoreOption,
    tenant: KeyTenant,
    user: Annotated[str | None, typer.Option("--user", help="Only this user's keys.")] = None,
    lines: Annotated[int, typer.Option("-n", "--lines", min=1, help="At most this many.")] = 100,
) -> None:
    """List a tenant's keys, newest first, revoked and expired ones too (never a secret)."""
    opened = open_existing_store(store)
    try:
        keys = _keys(opened)
        records = keys.list(tenant, user_id=user, limit=lines)
        now = keys.clock.now()
    finally:
        opened.close()
    console = console_for_output()
    if not records:
        console.print(Text(f"no API keys in tenant {shown(tenant)}"))
        return
    table = folding_table(*_COLUMNS, caption=f"{len(records)} key(s)")
    for record in records:
        if record.revoked_at is not None:
            state = f"revoked {_time(record.revoked_at)}"
        else:
            state = "active" if record.usable_at(now) else "expired"
        cells = (
            _time(record.created_at),
            record.key_id,
            shown(record.user_id),
            shown(record.label),
            " ".join(shown(p) for p in sorted(record.permissions)),
            _time(record.expires_at) or "never",
            state,
        )
        table.add_row(*(Text(cell) for cell in cells))
    console.print(table)


@keys_app.command("revoke", cls=HelpCommand)
@one_line_errors
def revoke_key(
    key_id: Annotated[str, typer.Argument(help="The id of the key (see `keys list`).")],
    *,
    store: StoreOption,
    tenant: KeyTenant,
    by: ActorOption = None,
) -> None:
    """Revoke one of the tenant's keys; it stops working at once, on every server."""
    opened = open_existing_store(store)
    try:
        if not _keys(opened).revoke(key_id, tenant_id=tenant, actor=by):
            raise CliError(f"no active API key {key_id!r} in tenant {tenant!r}")
    finally:
        opened.close()
    typer.echo(f"revoked key {key_id}")
