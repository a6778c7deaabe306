"""Audit rows: the events of one call kept as one row of `audit_trails`, and read back.

A row holds the subject's fields once, the first event's id and the events' own fields
as one JSON array. Writing a call as one row, not one row per stage, is what keeps a
durable audit trail cheap: each row costs an INSERT and an entry in every index,
whatever it holds. The array is one of two forms:

- a call noted on the system clock: its notes after the subject (`CallNotes`: the wall
  clock and monotonic reading at the start, then per stage its outcome and reading),
  made into events by `CallRecord.noted` when read, exactly as a sink makes them;
- any other item: one entry per event (stage, decision, code, detail, duration in ms,
  time in µs since the epoch).

- Ids: the events after the first follow its id by the 8-hex-digit counter at its end,
  as `record.audit.UniqueIds` makes a call's ids. Only a record whose ids have that form
  is written as one row; any other item is one row per event (a lone event has only
  its own id). The first id of a row is unique, so a batch written twice is refused.
- Numbers: event `index` of the row numbered `seq` is `seq << SEQ_SHIFT | index`, so
  events keep one order and a keyset page may end inside a row. A row holds at most
  `1 << SEQ_SHIFT` events; a longer record takes several rows.
- Narrowing: `decisions` and `codes` hold each event's value between bars, and
  `earliest_us`/`latest_us` bound its times (µs since the epoch), so a search narrows
  rows in SQL; the events themselves are then compared exactly.

Never runs a query: `SqlStore` writes and reads the rows, the SQLite store's writer
binds them positionally.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from handrail.errors import StoreError
from handrail.events import (
    NOTE_WIDTH,
    NOTES_HEAD,
    AuditEvent,
    AuditItem,
    CallRecord,
    Stage,
    event_of,
    fields_of,
    record_fits,
    storable_events,
    subject_of,
)
from handrail.store._rows import SUBJECT_FIELDS, aware

__all__ = ["SEQ_SHIFT", "TRAIL_COLUMNS", "TrailRow", "micros", "row_events", "trail_rows"]

SEQ_SHIFT = 8
_ROW_EVENTS = 1 << SEQ_SHIFT
_COUNTER_DIGITS = 8
_COUNTERS = 16**_COUNTER_DIGITS

TRAIL_COLUMNS = (
    "event_id",
    "kind",
    "earliest_us",
    "latest_us",
    "decisions",
    "codes",
    "events",
    *SUBJECT_FIELDS,
)
"""The columns `trail_rows` fills, in the order of its values."""

TrailRow = tuple[Any, ...]
"""One row's values, in `TRAIL_COLUMNS` order."""

_Entry = tuple[str, str, str | None, str | None, float | None, int]
"""One event in a row's JSON array: stage, decision, code, detail, duration in ms, µs."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_US = timedelta(microseconds=1)


def _dumps(value: object) -> str:
    return orjson.dumps(value).decode()


def micros(at: datetime | int) -> int:
    """Microseconds since the epoch of a time: wall nanoseconds, or a datetime (naive: UTC)."""
    if type(at) is int:
        return at // 1000
    if not isinstance(at, datetime):
        raise StoreError(f"audit write failed: a time of type {type(at).__name__}")
    return (aware(at) - _EPOCH) // _ONE_US


def _bars(values: Sequence[str]) -> str | None:
    """`|a|b|`: each value between bars, so that `|a|` is in it iff some value is `a`."""
    return f"|{'|'.join(values)}|" if values else None


def _packed(
    first_id: str,
    kind: str,
    entries: list[_Entry],
    *,
    decisions: list[str],
    codes: list[str],
    subject: Sequence[str | None],
) -> TrailRow:
    times = [entry[5] for entry in entries]
    return (
        first_id,
        kind,
        min(times),
        max(times),
        _bars(decisions),
        _bars(codes),
        _dumps(entries),
        *subject,
    )


def _record_rows(record: CallRecord, prefix: str) -> Iterator[TrailRow]:
    """The rows of a record whose ids are `prefix` and a counter (and whose text fits)."""
    kind, subject = record.kind, record.subject_fields
    stages: Sequence[Stage] = record.stages
    first = record.id_first
    for start in range(0, len(stages), _ROW_EVENTS):
        entries: list[_Entry] = []
        decisions: list[str] = []
        codes: list[str] = []
        for stage, decision, code, detail, seconds, at in stages[start : start + _ROW_EVENTS]:
            entries.append((stage, decision, code, detail, round(seconds * 1000, 3), micros(at)))
            decisions.append(decision)
            if code is not None:
                codes.append(code)
        yield _packed(
            f"{prefix}{first + start:0{_COUNTER_DIGITS}x}",
            kind,
            entries,
            decisions=decisions,
            codes=codes,
            subject=subject,
        )


def _event_row(event: AuditEvent) -> TrailRow:
    """The row of one event on its own (its text already as `storable_events` keeps it)."""
    code = event.code
    entry = (event.stage, event.decision, code, event.detail, event.duration_ms, micros(event.at))
    return _packed(
        event.event_id,
        event.kind,
        [entry],
        decisions=[event.decision],
        codes=[] if code is None else [code],
        subject=fields_of(event.subject),
    )


def _packed_prefix(record: CallRecord) -> str | None:
    """The id prefix of a record written as rows of many events; None if it is not one.

    Its ids must be a prefix and a counter that stays within its digits, and all its
    text must fit as it is (`record_fits`).
    """
    prefix = record.id_prefix
    if prefix is None or record.id_first + len(record) > _COUNTERS or not record_fits(record):
        return None
    return prefix


def _noted_row(record: CallRecord, prefix: str) -> TrailRow | None:
    """The row of a packed call noted on the system clock, its notes as they are; or None.

    Such a record's notes are its stages' outcomes and clock readings (`CallNotes`):
    storing them, not stages made from them, costs one encoder call, and the reader
    makes the events with `CallRecord.noted` as a sink would. Any other record: None.
    """
    notes = record.notes
    count = len(record)
    if (
        not notes
        or not 0 < count <= _ROW_EVENTS
        or notes[8] is None  # stage times read from another clock
        or notes[NOTES_HEAD + 5 :: NOTE_WIDTH].count(None) != count
    ):
        return None
    wall, start = notes[8], notes[9]
    codes = [code for code in notes[NOTES_HEAD + 2 :: NOTE_WIDTH] if code is not None]
    return (
        f"{prefix}{record.id_first:0{_COUNTER_DIGITS}x}",
        record.kind,
        (wall + notes[NOTES_HEAD + 4] - start) // 1000,
        (wall + notes[-2] - start) // 1000,
        _bars(notes[NOTES_HEAD + 1 :: NOTE_WIDTH]),
        _bars(codes),
        _dumps(notes[8:]),
        *notes[:8],
    )


def trail_rows(items: Sequence[AuditItem]) -> list[TrailRow]:
    """The rows of `items`, in order: a call's record as one row, any other event alone.

    Text is kept as `storable_events` keeps it: a record whose text does not fit as it
    is takes that path, one row per event.
    """
    rows: list[TrailRow] = []
    for item in items:
        if isinstance(item, CallRecord):
            prefix = _packed_prefix(item)
            if prefix is not None:
                noted = _noted_row(item, prefix)
                if noted is not None:
                    rows.append(noted)
                else:
                    rows.extend(_record_rows(item, prefix))
                continue
            events = item.events()
        else:
            events = [item]
        rows.extend(_event_row(event) for event in storable_events(events))
    return rows


def row_events(row: Mapping[Any, Any]) -> list[tuple[int, AuditEvent]]:
    """The events of a stored row with their numbers, in order.

    A row this module did not write (its events unreadable) is a StoreError.
    """
    try:
        entries = orjson.loads(row["events"])
        first: str = row["event_id"]
        base = int(row["seq"]) << SEQ_SHIFT
        kind = row["kind"]
        subject = tuple(row[name] for name in SUBJECT_FIELDS)
        noted = bool(entries) and type(entries[0]) is int  # a call's notes
        if noted or len(entries) > 1:  # the other ids count on from the first
            prefix, counter = first[:-_COUNTER_DIGITS], int(first[-_COUNTER_DIGITS:], 16)
        if noted:
            record = CallRecord.noted(
                kind, (*subject, *entries), id_prefix=prefix, id_first=counter
            )
            return [(base | index, event) for index, event in enumerate(record.events())]
        shared = subject_of(*subject)
        found: list[tuple[int, AuditEvent]] = []
        for index, (stage, decision, code, detail, duration_ms, at_us) in enumerate(entries):
            event_id = first if index == 0 else f"{prefix}{counter + index:0{_COUNTER_DIGITS}x}"
            at = _EPOCH + timedelta(microseconds=at_us)
            found.append(
                (
                    base | index,
                    event_of(
                        event_id, at, kind, stage, decision, shared, code, duration_ms, detail
                    ),
                ),
            )
    except (orjson.JSONDecodeError, ValueError, TypeError, KeyError) as exc:
        raise StoreError(f"audit read failed: an unreadable row ({type(exc).__name__})") from exc
    return found
