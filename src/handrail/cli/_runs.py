"""`handrail runs`: stored agent runs of one tenant, for the people who operate them.

`list` shows a tenant's runs, most recently updated first; `show` one run: its state,
steps, the plans it waits for, how it ended and its budget, and with `--transcript`
the conversation. `cancel` ends a suspended run (or one whose process stopped) as the
person named by `--user`, through `AgentLoop.cancel`, its plans rejected; the others
only read. The store is opened without migrating. Everything a
model or a user wrote is shown with its control characters escaped, never sent to the
terminal. A run of another tenant is "not found", exactly like a missing one.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
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
from handrail.clock import SystemClock
from handrail.errors import ConfigurationError, ErrorCode
from handrail.principal import Principal
from handrail.runs import RunRecord, RunState
from handrail.signing import SigningKey

if TYPE_CHECKING:
    from handrail.adapters.transcript import Turn
    from handrail.calls import ToolCall
    from handrail.declare.registry import Registry
    from handrail.loop.agent import RunData, RunOutcome
    from handrail.record.batching import BatchingAuditSink
    from handrail.store.base import Store

__all__ = ["print_turns", "runs_app", "shown_lines"]

runs_app = typer.Typer(
    cls=HelpGroup,
    help="Stored agent runs of a tenant: list them, show one, cancel one as its person.",
    no_args_is_help=True,
)

_COLUMNS = ("updated (UTC)", "state", "user", "steps", "waits for plans", "end", "run id")

TenantRequired = Annotated[str, typer.Option("--tenant", help="The tenant whose runs these are.")]


def shown_lines(text: str) -> str:
    """Untrusted text of several lines, each shown safe for a terminal."""
    return "\n".join(shown(line) for line in text.split("\n"))


def _time(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _data(record: RunRecord) -> RunData | None:
    """The loop's document of a run, or None when it is not one (never an error here)."""
    from handrail.loop.agent import read_run  # noqa: PLC0415 - not for --help

    try:
        return read_run(record)
    except ConfigurationError:
        return None


def _end(data: RunData | None) -> str:
    if data is None:
        return "(not a run document)"
    return "" if data.end is None else data.end.label()


def _state(state: str | None) -> RunState | None:
    if state is None:
        return None
    wanted = state.upper()
    if wanted not in RunState.__members__:
        raise CliError(f"unknown state {state!r}: one of {', '.join(RunState)}")
    return RunState(wanted)


@runs_app.command("list", cls=HelpCommand)
@one_line_errors
def list_runs(
    *,
    store: StoreOption,
    tenant: TenantRequired,
    state: Annotated[
        str | None,
        typer.Option(
            "--state", help="Only runs in this state: RUNNING, SUSPENDED, FINISHED, FAILED."
        ),
    ] = None,
    user: Annotated[str | None, typer.Option("--user", help="Only this user's runs.")] = None,
    lines: Annotated[int, typer.Option("-n", "--lines", min=1, help="At most this many.")] = 50,
) -> None:
    """List a tenant's runs, most recently updated first."""
    wanted = _state(state)
    opened = open_existing_store(store)
    try:
        records = opened.list_runs(tenant_id=tenant, state=wanted, user_id=user, limit=lines)
    finally:
        opened.close()
    console = console_for_output()
    if not records:
        console.print(Text(f"no matching runs in tenant {shown(tenant)}"))
        return
    table = folding_table(*_COLUMNS, caption=f"{len(records)} run(s)")
    for record in records:
        data = _data(record)
        table.add_row(
            *(
                Text(cell)
                for cell in (
                    _time(record.updated_at),
                    record.state.value,
                    shown(record.user_id),
                    "" if data is None else str(len(data.steps)),
                    "" if data is None else "\n".join(p.plan_id for p in data.pending),
                    shown(_end(data)),
                    record.run_id,
                )
            ),
        )
    console.print(table)


@runs_app.command("show", cls=HelpCommand)
@one_line_errors
def show_run(
    run_id: Annotated[str, typer.Argument(help="The id of the run.")],
    *,
    store: StoreOption,
    tenant: TenantRequired,
    transcript: Annotated[
        bool,
        typer.Option("--transcript", help="Also print the conversation, turn by turn."),
    ] = False,
) -> None:
    """Show one run: state, steps, the plans it waits for, its end and its budget."""
    from handrail.loop.agent import read_run  # noqa: PLC0415 - not for --help

    opened = open_existing_store(store)
    try:
        record = opened.get_run(run_id)
    finally:
        opened.close()
    if record is None or record.tenant_id != tenant:
        raise CliError(f"no run {run_id!r} in tenant {tenant!r}")
    data = read_run(record)
    console = console_for_output()
    header = (
        ("run", record.run_id),
        ("tenant", record.tenant_id),
        ("user", record.user_id),
        ("state", f"{record.state.value} (version {record.version})"),
        ("created", f"{_time(record.created_at)} UTC"),
        ("updated", f"{_time(record.updated_at)} UTC"),
        ("task", data.task),
        ("end", _end(data) or "(not ended)"),
    )
    for name, value in header:
        console.print(Text(f"{name:<8} {shown(value)}"))
    _print_end(console, data)
    _print_steps(console, data)
    _print_pending(console, data)
    _print_budget(console, data)
    if transcript:
        print_turns(console, data.transcript)


@runs_app.command("cancel", cls=HelpCommand)
@one_line_errors
def cancel_run(
    run_id: Annotated[str, typer.Argument(help="The id of the run.")],
    *,
    app_target: AppOption,
    store: StoreOption,
    tenant: TenantRequired,
    user: Annotated[str, typer.Option("--user", help="The run's user, who cancels it.")],
    reason: Annotated[
        str, typer.Option("--reason", help="Why (audited, and shown to the chat's next model).")
    ],
) -> None:
    """Cancel a run as its user: a suspended one, or a running one whose process stopped.

    The plans the run waits for are rejected (never executed), the run is stored FAILED
    with CANCELLED, and its conversation, told that the user declined them, is free.

    A running run is cancelled only once its deadline and a grace margin have passed.
    A plan that already executed refuses the cancel: resume the run with it instead.
    --app supplies the plans' tools.
    """
    from handrail.record.batching import BatchingAuditSink  # noqa: PLC0415 - not for --help

    if not reason.strip():
        raise CliError("--reason must not be empty")
    if not tenant or not user:
        raise CliError("--tenant and --user must not be empty")
    registry = load_registry(app_target)
    opened = open_existing_store(store)
    audit = BatchingAuditSink(opened)
    try:
        outcome = asyncio.run(
            _cancel(opened, audit, registry, run_id, tenant=tenant, user=user, reason=reason)
        )
    finally:
        audit.close()
        opened.close()
    declined = ", ".join(outcome.plan_ids) or "none"
    console_for_output().print(
        Text(f"CANCELLED run {outcome.run_id}; declined plans: {declined}"),
    )


async def _cancel(
    opened: Store,
    audit: BatchingAuditSink,
    registry: Registry,
    run_id: str,
    *,
    tenant: str,
    user: str,
    reason: str,
) -> RunOutcome:
    """`AgentLoop.cancel` as the run's user, under the run's own recorded budget."""
    from handrail.gate import Gate  # noqa: PLC0415 - the core loads when a command runs
    from handrail.loop.agent import AgentLoop, RunRefusedError, read_run  # noqa: PLC0415
    from handrail.loop.answers import EvidenceChecker  # noqa: PLC0415
    from handrail.loop.models import ScriptedModelClient  # noqa: PLC0415
    from handrail.writes.confirmation import Keyring  # noqa: PLC0415
    from handrail.writes.service import Writes  # noqa: PLC0415

    missing = CliError(f"no run {run_id!r} of user {user!r} in tenant {tenant!r}")
    record = await asyncio.to_thread(opened.get_run, run_id)
    if record is None or (record.tenant_id, record.user_id) != (tenant, user):
        raise missing
    clock = SystemClock()
    # The token key is never used: a cancel rejects plans and confirms none.
    keyring = Keyring(SigningKey(f"cli-{secrets.token_hex(4)}", secrets.token_bytes(32)))
    writes = Writes(registry, opened, keyring, audit=audit, clock=clock)
    loop = AgentLoop(
        gate=Gate(registry, writes=writes, clock=clock),
        model=ScriptedModelClient([], record_requests=False),  # never asked: nothing runs
        store=opened,
        budget=read_run(record).limits,
        clock=clock,
        checker=EvidenceChecker(opened),
        writes=writes,
    )
    principal = Principal(user_id=user, tenant_id=tenant, permissions=frozenset())
    try:
        return await loop.cancel(run_id, principal, reason=reason)
    except RunRefusedError as exc:
        if exc.code is ErrorCode.NOT_FOUND:
            raise missing from None
        raise


def _print_end(console: Console, data: RunData) -> None:
    end = data.end
    if end is None:
        return
    if end.answer is not None:
        answer = json.dumps(dict(end.answer), indent=2, ensure_ascii=False)
        console.print(Text(f"answer\n{shown_lines(answer)}"))
    if end.text is not None:
        console.print(Text(f"answer text\n{shown_lines(end.text)}"))
    if end.trip is not None:
        console.print(Text(f"budget trip {shown(json.dumps(dict(end.trip)))}"))


def _print_steps(console: Console, data: RunData) -> None:
    table = folding_table(
        "step",
        "kind",
        "call id",
        "tool",
        "outcome",
        "plan id",
        caption=f"{len(data.steps)} step(s)",
    )
    for number, step in enumerate(data.steps, start=1):
        if not step.calls:
            table.add_row(Text(str(number)), Text(step.kind), "", "", "", Text(step.plan_id or ""))
        for call in step.calls:
            table.add_row(
                *(
                    Text(cell)
                    for cell in (
                        str(number),
                        step.kind,
                        shown(call.call_id),
                        shown(call.tool),
                        shown(call.describe()),
                        step.plan_id or "",
                    )
                ),
            )
    console.print(table)


def _print_pending(console: Console, data: RunData) -> None:
    if not data.pending:
        return
    for plan in data.pending:
        console.print(
            Text(f"waits for plan {plan.plan_id} ({shown(plan.tool)}, call {shown(plan.call_id)})"),
        )


def _limit(value: object) -> str:
    return "no limit" if value is None else str(value)


def _print_budget(console: Console, data: RunData) -> None:
    used: Mapping[str, Any] = data.budget
    limits = data.limits
    table = folding_table("budget", "used", "limit", caption="budget after the last stored step")
    rows = (
        ("steps", used.get("steps"), limits.max_steps),
        ("active seconds", used.get("elapsed_seconds"), limits.deadline_seconds),
        ("input tokens", used.get("input_tokens"), limits.max_input_tokens),
        ("output tokens", used.get("output_tokens"), limits.max_output_tokens),
        ("cost", used.get("cost"), limits.max_cost),
        ("tool calls", used.get("tool_calls"), limits.max_tool_calls),
    )
    for name, spent, limit in rows:
        table.add_row(Text(name), Text(shown(str(spent))), Text(_limit(limit)))
    console.print(table)
    tripped = used.get("tripped")
    if tripped:
        console.print(Text(f"tripped {shown(json.dumps(tripped))}"))


def _arguments(call: ToolCall) -> str:
    """A call's arguments as sent, on one line, safe for a terminal."""
    arguments = call.arguments
    if arguments is None:
        return ""
    if isinstance(arguments, bytes):
        return shown(arguments.decode("utf-8", errors="backslashreplace"))
    if isinstance(arguments, str):
        return shown(arguments)
    return shown(json.dumps(dict(arguments), ensure_ascii=False, default=str))


def print_turns(console: Console, turns: tuple[Turn, ...]) -> None:
    """Each turn, every text in it escaped for the terminal and printed as plain text."""
    from handrail.adapters.transcript import AssistantTurn, UserTurn  # noqa: PLC0415

    console.print(Text(f"transcript, {len(turns)} turn(s)"))
    for turn in turns:
        if isinstance(turn, UserTurn):
            console.print(Text(f"user:\n{shown_lines(turn.text)}"))
        elif isinstance(turn, AssistantTurn):
            console.print(Text(f"assistant:\n{shown_lines(turn.text or '')}"))
            for call in turn.calls:
                line = f"  calls {shown(call.name)} [{shown(call.id)}] {_arguments(call)}"
                console.print(Text(line))
        else:
            for result in turn.results:
                error = " (error)" if result.is_error else ""
                console.print(
                    Text(
                        f"result of {shown(result.tool)} [{shown(result.call_id)}]{error}:\n"
                        f"{shown_lines(result.content)}"
                    ),
                )
