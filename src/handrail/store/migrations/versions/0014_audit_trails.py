"""Audit trails: the events of one call kept as one row, not one row per stage.

Adds `audit_trails` (see `handrail.store._audit_rows`): per row the subject's fields,
the first event's id (unique), the kind, the events' times as µs since the epoch
(earliest and latest), each event's decision and code between bars, and the events'
own fields as a JSON array. Every row of `audit_events` moves over as a row of one
event, keeping its sequence number (so the order of the trail is kept), and
`audit_events` is dropped. Downgrading writes each event back as a row of its own.

This revision writes the JSON itself rather than importing the store's code, so that
it keeps meaning what it meant when the store's code moves on.

Revision ID: 0014
Revises: 0013
"""

import json
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

_SEQ = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_SUBJECT = (
    "request_id",
    "tool_call_id",
    "tool",
    "schema_version",
    "args_hash",
    "args_summary",
    "user_id",
    "tenant_id",
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_US = timedelta(microseconds=1)
_BATCH = 1000
_DIGITS = 8


def _subject_columns() -> list[sa.Column[Any]]:
    return [
        sa.Column("request_id", sa.String(128)),
        sa.Column("tool_call_id", sa.String(256)),
        sa.Column("tool", sa.String(128)),
        sa.Column("schema_version", sa.String(64)),
        sa.Column("args_hash", sa.String(64)),
        sa.Column("args_summary", sa.Text()),
        sa.Column("user_id", sa.String(256)),
        sa.Column("tenant_id", sa.String(256)),
    ]


def _trail_columns() -> list[sa.Column[Any]]:
    return [
        sa.Column("seq", _SEQ, primary_key=True),
        sa.Column("event_id", sa.String(64), nullable=False, unique=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("earliest_us", sa.BigInteger(), nullable=False),
        sa.Column("latest_us", sa.BigInteger(), nullable=False),
        sa.Column("decisions", sa.Text(), nullable=False),
        sa.Column("codes", sa.Text()),
        sa.Column("events", sa.Text(), nullable=False),
        *_subject_columns(),
    ]


def _event_columns() -> list[sa.Column[Any]]:
    return [
        sa.Column("seq", _SEQ, primary_key=True),
        sa.Column("event_id", sa.String(64), nullable=False, unique=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("stage", sa.String(32), nullable=False),
        sa.Column("decision", sa.String(32), nullable=False),
        sa.Column("code", sa.String(64)),
        *_subject_columns(),
        sa.Column("duration_ms", sa.Float()),
        sa.Column("detail", sa.Text()),
    ]


def _batches(connection: sa.Connection, table: sa.Table) -> Iterator[list[sa.RowMapping]]:
    """The table's rows in order of seq, a batch at a time."""
    last: int | None = None
    while True:
        query = sa.select(table).order_by(table.c.seq).limit(_BATCH)
        if last is not None:
            query = query.where(table.c.seq > last)
        rows = list(connection.execute(query).mappings())
        if not rows:
            return
        yield rows
        last = int(rows[-1]["seq"])


def _micros(at: datetime) -> int:
    if at.tzinfo is None:  # SQLite keeps times as UTC text without the offset
        at = at.replace(tzinfo=UTC)
    return (at - _EPOCH) // _ONE_US


def _trail_row(event: Mapping[Any, Any]) -> dict[str, Any]:
    at = _micros(event["at"])
    code = event["code"]
    entry = [event["stage"], event["decision"], code, event["detail"], event["duration_ms"], at]
    return {
        "seq": event["seq"],
        "event_id": event["event_id"],
        "kind": event["kind"],
        "earliest_us": at,
        "latest_us": at,
        "decisions": f"|{event['decision']}|",
        "codes": None if code is None else f"|{code}|",
        "events": json.dumps([entry], separators=(",", ":")),
        **{name: event[name] for name in _SUBJECT},
    }


def _event_rows(trail: Mapping[Any, Any]) -> Iterator[dict[str, Any]]:
    entries = json.loads(trail["events"])
    first = trail["event_id"]
    for index, (stage, decision, code, detail, duration_ms, at) in enumerate(entries):
        event_id = first
        if index:
            counter = int(first[-_DIGITS:], 16) + index
            event_id = f"{first[:-_DIGITS]}{counter:0{_DIGITS}x}"
        yield {
            "event_id": event_id,
            "at": _EPOCH + timedelta(microseconds=at),
            "kind": trail["kind"],
            "stage": stage,
            "decision": decision,
            "code": code,
            "duration_ms": duration_ms,
            "detail": detail,
            **{name: trail[name] for name in _SUBJECT},
        }


def _advance_sequence(connection: sa.Connection, table: str) -> None:
    """On PostgreSQL, the next seq after the rows copied with theirs."""
    if connection.dialect.name == "postgresql":
        connection.execute(
            sa.text(
                f"SELECT setval(pg_get_serial_sequence('{table}', 'seq'), "  # noqa: S608 - fixed names
                f"COALESCE((SELECT max(seq) FROM {table}), 0) + 1, false)"
            )
        )


def upgrade() -> None:
    trails = sa.Table("audit_trails", sa.MetaData(), *_trail_columns())
    op.create_table("audit_trails", *_trail_columns())
    op.create_index("ix_audit_trails_tenant_seq", "audit_trails", ["tenant_id", "seq"])
    op.create_index("ix_audit_trails_tool_call_id", "audit_trails", ["tool_call_id"])
    connection = op.get_bind()
    for rows in _batches(connection, sa.Table("audit_events", sa.MetaData(), *_event_columns())):
        connection.execute(trails.insert(), [_trail_row(row) for row in rows])
    _advance_sequence(connection, "audit_trails")
    op.drop_table("audit_events")


def downgrade() -> None:
    events = sa.Table("audit_events", sa.MetaData(), *_event_columns())
    op.create_table("audit_events", *_event_columns())
    op.create_index("ix_audit_events_tenant_seq", "audit_events", ["tenant_id", "seq"])
    op.create_index("ix_audit_events_tool_call_id", "audit_events", ["tool_call_id"])
    connection = op.get_bind()
    for rows in _batches(connection, sa.Table("audit_trails", sa.MetaData(), *_trail_columns())):
        connection.execute(events.insert(), [event for row in rows for event in _event_rows(row)])
    op.drop_table("audit_trails")
