"""`handrail raw`: raw results kept for people, read by an operator of their tenant.

`show` reads one record as the operator (holding the raw-read permission in the given
tenant), audits the read into the store's trail and prints it; `list` shows a tenant's
records without their bodies; `purge` deletes expired ones. Raw bodies are untrusted:
every control character, terminal escape sequence and bidirectional override in what
is printed is shown escaped, never sent to the terminal. The store is opened without
migrating; a missing SQLite file is an error.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
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
from handrail.cli._reconcile import open_existing_store
from handrail.clock import SystemClock
from handrail.errors import AccessRefusedError
from handrail.principal import Principal
from handrail.raw import RawRecord
from handrail.text import escaped_character, shown

__all__ = ["raw_app", "render_body", "shown"]

raw_app = typer.Typer(
    cls=HelpGroup,
    help="Raw results kept for people: show one, list a tenant's, purge expired ones.",
    no_args_is_help=True,
)

_UNSAFE_IN_BODY = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
    "\ud800-\udfff]",
)
_TEXTUAL = re.compile(r"text/.*|application/(?:json|xml|x-ndjson|yaml)|.*\+(?:json|xml)")
_COLUMNS = (
    "created (UTC)",
    "expires (UTC)",
    "tool",
    "call id",
    "user",
    "media type",
    "size",
    "complete",
    "ref",
)


def json_shown(value: object) -> str:
    r"""`value` as indented JSON safe for a terminal: controls and bidi marks as \u escapes.

    `json.dumps` escapes C0 controls but leaves C1 (CSI), DEL, separators and bidi
    overrides as they are; escaped the JSON way, the text stays JSON and reads the same.
    """
    text = json.dumps(value, indent=2, ensure_ascii=False)
    return _UNSAFE_IN_BODY.sub(lambda found: f"\\u{ord(found.group()):04x}", text)


def _shown_body(text: str) -> str:
    # Like `shown`, but line feeds and tabs stay: they move nothing but the cursor's line.
    return _UNSAFE_IN_BODY.sub(escaped_character, text)


def _media(record: RawRecord) -> str:
    return record.media_type.split(";", 1)[0].strip().lower()


def render_body(record: RawRecord) -> str | None:
    r"""The body as text safe for a terminal, or None when it is not text.

    JSON is pretty-printed when the stored body parses (a capped body usually does
    not, and is shown as text); other text is shown as is, invalid UTF-8 as `\xNN`.
    """
    media = _media(record)
    if media == "application/json" or media.endswith("+json"):
        try:
            text = json.dumps(json.loads(record.body), indent=2, ensure_ascii=False)
        except (ValueError, RecursionError):
            pass
        else:
            return _shown_body(text)
    try:
        text = record.body.decode("utf-8")
    except UnicodeDecodeError:
        if _TEXTUAL.fullmatch(media) is None:
            return None
        text = record.body.decode("utf-8", errors="backslashreplace")
    return _shown_body(text)


def _time(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _complete(record: RawRecord) -> str:
    if record.complete:
        return "yes"
    return f"no: {len(record.body)} of {record.size} bytes stored"


def _header(record: RawRecord) -> list[str]:
    fields = (
        ("ref", record.ref),
        ("tool", record.tool),
        ("call id", record.call_id),
        ("user", record.user_id),
        ("tenant", record.tenant_id),
        ("created", f"{_time(record.created_at)} UTC"),
        ("expires", f"{_time(record.expires_at)} UTC"),
        ("media type", record.media_type),
        ("size", f"{record.size} bytes"),
        ("complete", _complete(record)),
    )
    return [f"{name:<11} {shown(value)}" for name, value in fields]


def _not_empty(**options: str) -> None:
    for name, value in options.items():
        if not value.strip():
            raise CliError(f"--{name} must not be empty")


@raw_app.command("show", cls=HelpCommand)
@one_line_errors
def show(
    ref: Annotated[str, typer.Argument(help="The ref of the raw record (from an envelope).")],
    *,
    store: StoreOption,
    tenant: Annotated[str, typer.Option("--tenant", help="The tenant the record belongs to.")],
    operator: Annotated[str, typer.Option("--operator", help="Who reads (audited).")],
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Write the exact stored body to this new file instead of printing it.",
        ),
    ] = None,
) -> None:
    """Print one raw record: its metadata, then its body (read audited)."""
    from handrail.record.audit import Auditor  # noqa: PLC0415 - not for --help
    from handrail.record.batching import BatchingAuditSink  # noqa: PLC0415
    from handrail.record.raw_results import RAW_READ_PERMISSION, RawResults  # noqa: PLC0415

    _not_empty(tenant=tenant, operator=operator)
    reader = Principal(
        user_id=operator,
        tenant_id=tenant,
        permissions=frozenset({RAW_READ_PERMISSION}),
    )
    opened = open_existing_store(store)
    clock = SystemClock()
    sink = BatchingAuditSink(opened)
    try:
        record = RawResults(opened, clock, auditor=Auditor(sink, clock)).read(ref, reader)
    except AccessRefusedError as refused:
        raise CliError(refused.message) from None
    finally:
        sink.close()
        opened.close()
    lines = _header(record)
    if output is not None:
        # "x": never overwrite a file the operator did not mean to replace.
        with output.open("xb") as file:
            file.write(record.body)
        lines.append(f"body        written to {shown(str(output))}")
        typer.echo("\n".join(lines))
        return
    body = render_body(record)
    if body is None:
        lines.append(f"body        {len(record.body)} bytes, not text: use --output FILE")
        typer.echo("\n".join(lines))
        return
    typer.echo("\n".join([*lines, "", body]))


@raw_app.command("list", cls=HelpCommand)
@one_line_errors
def list_raw(
    *,
    store: StoreOption,
    tenant: Annotated[str, typer.Option("--tenant", help="Whose records to list.")],
    lines: Annotated[int, typer.Option("-n", "--lines", min=1, help="At most this many.")] = 50,
) -> None:
    """Show a tenant's unexpired raw records, newest first, without their bodies."""
    _not_empty(tenant=tenant)
    opened = open_existing_store(store)
    try:
        records = opened.list_raw(tenant_id=tenant, limit=lines)
    finally:
        opened.close()
    now = SystemClock().now()
    live = [record for record in records if record.expires_at > now]
    table = folding_table(
        *_COLUMNS, caption=escape(f"{len(live)} raw record(s) of {shown(tenant)}")
    )
    for record in live:
        cells = (
            _time(record.created_at),
            _time(record.expires_at),
            record.tool,
            record.call_id,
            record.user_id,
            record.media_type,
            str(record.size),
            "yes" if record.complete else "no",
            record.ref,
        )
        # Text cells: a call id is never read as Rich markup (which can emit links).
        table.add_row(*(Text(shown(cell)) for cell in cells))
    console_for_output().print(table)


@raw_app.command("purge", cls=HelpCommand)
@one_line_errors
def purge(*, store: StoreOption) -> None:
    """Delete every raw record whose retention has ended."""
    from handrail.record.raw_results import RawResults  # noqa: PLC0415 - not for --help

    opened = open_existing_store(store)
    try:
        purged = RawResults(opened, SystemClock()).purge()
    finally:
        opened.close()
    typer.echo(f"purged {purged} expired raw record(s)")
