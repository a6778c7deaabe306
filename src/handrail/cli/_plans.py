"""`handrail plans`: plans awaiting people, and their decision by an operator at a terminal.

`list` and `show` read a tenant's plans; a plan of another tenant is "not found",
exactly like a missing one. `confirm` and `reject` decide through `Writes`, as the
person named by `--user`, with every check the application's own UI gets: a token is
issued to that person and used at once, in this process; it is never printed, stored
or shown to a model. Confirming only confirms: executing the plan is the application's
job. Arguments and impact texts are shown with control characters escaped.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import os
import secrets
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.text import Text

from handrail.cli._common import (
    AppOption,
    CliError,
    HelpCommand,
    HelpGroup,
    StoreOption,
    console_for_output,
    folding_table,
    load_registry,
    one_line_errors,
)
from handrail.cli._raw import shown
from handrail.cli._reconcile import open_existing_store
from handrail.cli._runs import TenantRequired, shown_lines
from handrail.errors import ConfigurationError
from handrail.principal import Principal
from handrail.signing import SigningKey

if TYPE_CHECKING:
    from handrail.plans import PlanRecord, PlanState
    from handrail.writes.confirmation import Keyring

__all__ = ["plans_app", "read_key_file"]

plans_app = typer.Typer(
    cls=HelpGroup,
    help="Plans of writes: list a tenant's, show one, confirm or reject one as a person.",
    no_args_is_help=True,
)

_COLUMNS = ("created (UTC)", "expires (UTC)", "state", "tool", "user", "approvals", "impact", "id")
_PRIVATE = 0o077

UserRequired = Annotated[
    str,
    typer.Option(
        "--user",
        help=(
            "Who decides (audited): the plan's requester for CONFIRM plans, another holder "
            "of the approver permission for APPROVE plans."
        ),
    ),
]
DecidingPermissions = Annotated[
    list[str] | None,
    typer.Option(
        "--permission",
        "-p",
        help="A permission the person holds (repeatable), such as an approver permission.",
    ),
]
KeyFileOption = Annotated[
    Path | None,
    typer.Option(
        "--key-file",
        envvar="HANDRAIL_KEY_FILE",
        help=(
            "A file whose first line is KEY_ID:SECRET (base64url, at least 32 bytes), readable "
            "by its owner only, to sign the one-time token with. Without it, a fresh key held "
            "only in memory signs it: the token never leaves this command either way."
        ),
    ),
]


def _time(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _approvals(record: PlanRecord) -> str:
    from handrail.spec import ConfirmationMode  # noqa: PLC0415 - not for --help

    plan = record.plan
    if plan.confirmation is ConfirmationMode.APPROVE:
        return f"{len(record.approvals)} of {plan.required_approvals}"
    return "by requester"


def _state(state: str) -> PlanState | None:
    from handrail.plans import PlanState  # noqa: PLC0415 - not for --help

    wanted = state.upper()
    if wanted == "ALL":
        return None
    if wanted not in PlanState.__members__:
        raise CliError(f"unknown state {state!r}: one of {', '.join(PlanState)} or ALL")
    return PlanState(wanted)


def _tenants_plan(store: str, plan_id: str, tenant: str) -> PlanRecord:
    """The plan if it is the tenant's; a missing and a foreign plan fail alike."""
    opened = open_existing_store(store)
    try:
        record = opened.get_plan(plan_id)
    finally:
        opened.close()
    if record is None or record.plan.tenant_id != tenant:
        raise CliError(f"no plan {plan_id!r} in tenant {tenant!r}")
    return record


@plans_app.command("list", cls=HelpCommand)
@one_line_errors
def list_plans(
    *,
    store: StoreOption,
    tenant: TenantRequired,
    state: Annotated[
        str,
        typer.Option(
            "--state",
            help=(
                "PROPOSED, AWAITING_CONFIRMATION, CONFIRMED, REJECTED, EXPIRED, EXECUTED or ALL."
            ),
        ),
    ] = "ALL",
    lines: Annotated[int, typer.Option("-n", "--lines", min=1, help="At most this many.")] = 50,
) -> None:
    """List a tenant's plans, newest first."""
    wanted = _state(state)
    opened = open_existing_store(store)
    try:
        records = opened.list_plans(tenant_id=tenant, state=wanted, limit=lines)
    finally:
        opened.close()
    console = console_for_output()
    if not records:
        console.print(Text(f"no matching plans in tenant {shown(tenant)}"))
        return
    table = folding_table(*_COLUMNS, caption=f"{len(records)} plan(s)")
    for record in records:
        plan = record.plan
        cells = (
            _time(plan.created_at),
            _time(plan.expires_at),
            record.state.value,
            shown(plan.tool),
            shown(plan.user_id),
            _approvals(record),
            shown(plan.impact.describe()),
            plan.plan_id,
        )
        table.add_row(*(Text(cell) for cell in cells))
    console.print(table)


@plans_app.command("show", cls=HelpCommand)
@one_line_errors
def show_plan(
    plan_id: Annotated[str, typer.Argument(help="The id of the plan.")],
    *,
    store: StoreOption,
    tenant: TenantRequired,
) -> None:
    """Show one plan: tool, impact, arguments, state, expiry and approvals."""
    record = _tenants_plan(store, plan_id, tenant)
    plan = record.plan
    expired = datetime.now(UTC) >= plan.expires_at
    approvers = ", ".join(shown(user) for user in sorted(record.approvals))
    fields = (
        ("plan", plan.plan_id),
        ("tool", f"{shown(plan.tool)} (schema {shown(plan.schema_version)})"),
        ("state", f"{record.state.value} (version {record.version})"),
        ("requester", f"{shown(plan.user_id)} in {shown(plan.tenant_id)}"),
        ("risk", plan.risk.name),
        ("decided by", _decided_by(record)),
        ("approvals", f"{_approvals(record)}{': ' + approvers if approvers else ''}"),
        ("created", f"{_time(plan.created_at)} UTC"),
        ("expires", f"{_time(plan.expires_at)} UTC{' (passed)' if expired else ''}"),
        ("impact", shown(plan.impact.describe())),
        *(("note", shown(note)) for note in plan.impact.notes),
        ("version", shown(plan.expected_version or "(none expected)")),
        ("revises", plan.revises or ""),
        ("hash", plan.plan_hash),
    )
    console = console_for_output()
    for name, value in fields:
        console.print(Text(f"{name:<10} {value}"))
    arguments = json.dumps(plan.argument_values, indent=2, ensure_ascii=False, sort_keys=True)
    console.print(Text(f"arguments\n{shown_lines(arguments)}"))


def _decided_by(record: PlanRecord) -> str:
    from handrail.spec import ConfirmationMode  # noqa: PLC0415 - not for --help

    plan = record.plan
    if plan.confirmation is ConfirmationMode.APPROVE:
        return f"approvers holding {shown(plan.approver_permission or '?')}, not the requester"
    return "the requester"


def read_key_file(path: Path) -> SigningKey:
    """The signing key of a key file: `KEY_ID:SECRET` on its first line, owner-only."""
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CliError(f"cannot read --key-file {path}: {exc.strerror}") from None
    if os.name == "posix" and mode & _PRIVATE:
        raise CliError(f"--key-file {path} is readable by others; chmod 600 it")
    key_id, colon, secret = (text.splitlines() or [""])[0].strip().partition(":")
    try:
        raw = base64.urlsafe_b64decode(secret + "=" * (-len(secret) % 4))
    except (binascii.Error, ValueError):
        raw = b""
    if not colon or not raw:
        raise CliError(f"--key-file {path}: the first line must be KEY_ID:BASE64URL_SECRET")
    try:
        return SigningKey(key_id, raw)
    except ConfigurationError as exc:
        raise CliError(f"--key-file {path}: {exc}") from None


def _keyring(key_file: Path | None) -> Keyring:
    from handrail.writes.confirmation import Keyring  # noqa: PLC0415 - not for --help

    if key_file is not None:
        return Keyring(read_key_file(key_file))
    return Keyring(SigningKey(f"cli-{secrets.token_hex(4)}", secrets.token_bytes(32)))


def _decide(
    app_target: str,
    store: str,
    key_file: Path | None,
    principal: Principal,
    plan_id: str,
    *,
    reason: str | None,
) -> PlanRecord:
    """Confirm (reason None) or reject the plan through Writes, audited in the store."""
    from handrail.record.batching import BatchingAuditSink  # noqa: PLC0415 - not for --help
    from handrail.writes.service import Writes  # noqa: PLC0415

    registry = load_registry(app_target)
    keyring = _keyring(key_file)
    opened = open_existing_store(store)
    audit = BatchingAuditSink(opened)
    writes = Writes(registry, opened, keyring, audit=audit)

    async def confirm() -> PlanRecord:
        # Issued to this person and used at once: the token is never printed or stored.
        token = await writes.issue_token(plan_id, principal)
        return await writes.confirm(plan_id, token.value, principal)

    try:
        if reason is None:
            return asyncio.run(confirm())
        return asyncio.run(writes.reject(plan_id, principal, reason=reason))
    finally:
        audit.close()
        opened.close()


def _principal(tenant: str, user: str, permissions: list[str] | None) -> Principal:
    if not tenant or not user:
        raise CliError("--tenant and --user must not be empty")
    granted = frozenset(p for p in permissions or () if p)
    return Principal(user_id=user, tenant_id=tenant, permissions=granted)


@plans_app.command("confirm", cls=HelpCommand)
@one_line_errors
def confirm_plan(
    plan_id: Annotated[str, typer.Argument(help="The id of the plan.")],
    *,
    app_target: AppOption,
    store: StoreOption,
    tenant: TenantRequired,
    user: UserRequired,
    permission: DecidingPermissions = None,
    key_file: KeyFileOption = None,
) -> None:
    """Confirm (or, for an APPROVE plan, approve) a plan as the person named by --user.

    This only confirms: executing the confirmed plan is the application's job (its
    Writes.execute_plan), never this command's. A one-time token is issued to that
    person and used at once, with every check the application's own confirmation gets
    (requester or approver, expiry, one use); it is never printed, and never reaches a
    model. --app supplies the plan's tool; the decision is audited in --store.
    """
    from handrail.plans import PlanState  # noqa: PLC0415 - not for --help

    principal = _principal(tenant, user, permission)
    record = _decide(app_target, store, key_file, principal, plan_id, reason=None)
    plan = record.plan
    console = console_for_output()
    if record.state is PlanState.CONFIRMED:
        console.print(
            Text(
                f"CONFIRMED plan {plan.plan_id} ({shown(plan.tool)}); the application executes "
                f"it (the plan expires {_time(plan.expires_at)} UTC)"
            ),
        )
        return
    console.print(
        Text(f"approved plan {plan.plan_id} by {shown(user)}: {_approvals(record)} approvals"),
    )


@plans_app.command("reject", cls=HelpCommand)
@one_line_errors
def reject_plan(
    plan_id: Annotated[str, typer.Argument(help="The id of the plan.")],
    *,
    app_target: AppOption,
    store: StoreOption,
    tenant: TenantRequired,
    user: UserRequired,
    reason: Annotated[str, typer.Option("--reason", help="Why (audited with the rejection).")],
    permission: DecidingPermissions = None,
) -> None:
    """Reject a plan that has not started to execute, as the person named by --user.

    The requester may reject their own plan; for an APPROVE plan, so may a holder of
    the approver permission. The reason is stored in the audit event.
    """
    if not reason.strip():
        raise CliError("--reason must not be empty")
    principal = _principal(tenant, user, permission)
    record = _decide(app_target, store, None, principal, plan_id, reason=reason)
    console_for_output().print(
        Text(f"{record.state.value} plan {record.plan.plan_id} ({shown(record.plan.tool)})"),
    )
