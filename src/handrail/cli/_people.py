"""`handrail people`: the people who log in to the service's console.

`add` makes a person (a login, bound to one tenant's user with permissions, roles and
a data scope); `list` shows a tenant's people (never a hash); `disable`, `enable`,
`unlock` and `password` change one. A password is read from a hidden prompt or, with
`--password-stdin`, from the first line of stdin: never from an argument, which other
users of the machine can read. A login of another tenant is "not found", like a
missing one. Every change is audited; disabling and new passwords end sessions at once.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import UTC, datetime
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

if TYPE_CHECKING:
    from handrail.server.console.directory import PeopleDirectory
    from handrail.store.base import Store

__all__ = ["people_app"]

people_app = typer.Typer(
    cls=HelpGroup,
    help="People who log in to the console: add one, list, disable, unlock, set a password.",
    no_args_is_help=True,
)

_COLUMNS = ("login", "user", "name", "permissions", "state", "failed", "updated (UTC)")

Login = Annotated[str, typer.Argument(help="The person's login (what they type to log in).")]
PeopleTenant = Annotated[str, typer.Option("--tenant", help="The tenant the person belongs to.")]
PasswordStdin = Annotated[
    bool,
    typer.Option(
        "--password-stdin", help="Read the password from the first line of stdin, not a prompt."
    ),
]
ActorOption = Annotated[
    str | None, typer.Option("--by", help="Who does this, for the audit (default: the person).")
]


def _directory(store: Store) -> PeopleDirectory:
    from handrail.server.console.directory import PeopleDirectory  # noqa: PLC0415 - not for --help

    return PeopleDirectory(store)


def _password(from_stdin: bool) -> str:
    if from_stdin:
        line = sys.stdin.readline()
        password = line.removesuffix("\n")
    else:
        password = typer.prompt("Password", hide_input=True, confirmation_prompt=True)
    if not password:
        raise CliError("the password is empty")
    return password


def _time(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


@people_app.command("add", cls=HelpCommand)
@one_line_errors
def add_person(
    login: Login,
    *,
    store: StoreOption,
    tenant: PeopleTenant,
    user: Annotated[
        str | None, typer.Option("--user", help="The user id they act as (default: the login).")
    ] = None,
    permission: Annotated[
        list[str] | None,
        typer.Option("--permission", "-p", help="A permission they hold (repeatable)."),
    ] = None,
    role: Annotated[
        list[str] | None, typer.Option("--role", help="A role they hold (repeatable).")
    ] = None,
    name: Annotated[str, typer.Option("--name", help="A name to show in the console.")] = "",
    password_stdin: PasswordStdin = False,
    by: ActorOption = None,
) -> None:
    """Add a person who logs in to the console as one user of one tenant.

    They hold exactly the permissions and roles given (none by default); plan
    approvers need the tool's approver permission. Migrates the store if it needs to.
    """
    if not tenant:
        raise CliError("--tenant must not be empty")
    password = _password(password_stdin)
    from handrail.store import open_store  # noqa: PLC0415 - not for --help

    opened = open_store(store)
    try:
        try:
            added = _directory(opened).add(
                login,
                tenant_id=tenant,
                user_id=user or login,
                password=password,
                permissions=frozenset(p for p in permission or () if p),
                roles=frozenset(r for r in role or () if r),
                display_name=name,
                actor=by,
            )
        except ValueError as exc:
            raise CliError(str(exc)) from None
    finally:
        opened.close()
    if added is None:
        raise CliError(f"the login {login!r} (or that tenant's user) is taken")
    typer.echo(f"added {shown(login)} as {shown(added.user_id)} in tenant {shown(tenant)}")


@people_app.command("list", cls=HelpCommand)
@one_line_errors
def list_people(
    *,
    store: StoreOption,
    tenant: PeopleTenant,
    lines: Annotated[int, typer.Option("-n", "--lines", min=1, help="At most this many.")] = 100,
) -> None:
    """List a tenant's people by login, with their state (never a password hash)."""
    opened = open_existing_store(store)
    try:
        people = _directory(opened).list(tenant, limit=lines)
    finally:
        opened.close()
    console = console_for_output()
    if not people:
        console.print(Text(f"no people in tenant {shown(tenant)}"))
        return
    now = datetime.now(UTC)
    table = folding_table(*_COLUMNS, caption=f"{len(people)} person(s)")
    for person in people:
        if person.disabled_at is not None:
            state = "disabled"
        else:
            state = "locked" if person.locked_at(now) else "active"
        cells = (
            shown(person.login),
            shown(person.user_id),
            shown(person.display_name),
            " ".join(shown(p) for p in sorted(person.permissions)),
            state,
            str(person.failed_logins),
            _time(person.updated_at),
        )
        table.add_row(*(Text(cell) for cell in cells))
    console.print(table)


def _change(
    store: str, login: str, tenant: str, what: str, change: Callable[[PeopleDirectory], bool]
) -> None:
    """`change` one person in an existing store; an error if there is no such person."""
    opened = open_existing_store(store)
    try:
        try:
            done = change(_directory(opened))
        except ValueError as exc:
            raise CliError(str(exc)) from None
    finally:
        opened.close()
    if not done:
        raise CliError(f"no person {login!r} in tenant {tenant!r} to {what}")
    typer.echo(f"{what}: {shown(login)}")


@people_app.command("disable", cls=HelpCommand)
@one_line_errors
def disable_person(
    login: Login, *, store: StoreOption, tenant: PeopleTenant, by: ActorOption = None
) -> None:
    """Disable a person: their sessions end at once and they cannot log in."""
    _change(store, login, tenant, "disable", lambda d: d.disable(login, tenant_id=tenant, actor=by))


@people_app.command("enable", cls=HelpCommand)
@one_line_errors
def enable_person(
    login: Login, *, store: StoreOption, tenant: PeopleTenant, by: ActorOption = None
) -> None:
    """Enable a disabled person again."""
    _change(store, login, tenant, "enable", lambda d: d.enable(login, tenant_id=tenant, actor=by))


@people_app.command("unlock", cls=HelpCommand)
@one_line_errors
def unlock_person(
    login: Login, *, store: StoreOption, tenant: PeopleTenant, by: ActorOption = None
) -> None:
    """Lift a lock-out after failed logins, and clear the count."""
    _change(store, login, tenant, "unlock", lambda d: d.unlock(login, tenant_id=tenant, actor=by))


@people_app.command("password", cls=HelpCommand)
@one_line_errors
def set_password(
    login: Login,
    *,
    store: StoreOption,
    tenant: PeopleTenant,
    password_stdin: PasswordStdin = False,
    by: ActorOption = None,
) -> None:
    """Set a person's password; their sessions end at once and any lock is lifted."""
    password = _password(password_stdin)
    _change(
        store,
        login,
        tenant,
        "password",
        lambda d: d.set_password(login, tenant_id=tenant, password=password, actor=by),
    )
