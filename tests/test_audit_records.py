"""A call's audit as a compact record: every reader gets exactly the events it always got.

The auditor hands a sink one `CallRecord` per call (ids taken, clocks read, secrets
scrubbed when the call ends); a sink with only `emit` receives the record's events,
`MemoryAuditSink` makes them when read, and SQLite writes rows from the record. These
tests compare each of those with the events built one by one.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from handrail import Gate, Principal, Registry, RiskLevel, ToolCall, tool
from handrail.clock import SystemClock
from handrail.errors import AuditSinkError, ErrorCode
from handrail.events import (
    AuditEvent,
    AuditSubject,
    CallRecord,
    event_of,
    record_fits,
    storable_events,
)
from handrail.record.audit import Auditor, MemoryAuditSink, UniqueIds
from handrail.record.batching import BatchingAuditSink
from handrail.store import MemoryStore, SqliteStore, SqlStore
from handrail.testing import FixedClock, sequential_ids

PRINCIPAL = Principal(user_id="u1", tenant_id="t1", request_id="r1")


class EmitOnly:
    """A sink that implements only `emit`, as sinks written before records do."""

    def __init__(self) -> None:
        self.events: list[AuditEvent] = []

    def emit(self, events: Sequence[AuditEvent]) -> None:
        self.events.extend(events)


def _registry() -> Registry:
    async def echo(x: int) -> dict[str, int]:
        """Return x."""
        return {"x": x}

    async def boom(x: int) -> dict[str, int]:
        """Fail."""
        raise ValueError(f"password=hunter2 {x}")

    registry = Registry()
    registry.register(tool(risk=RiskLevel.L0_PUBLIC_READ, name="echo")(echo))
    registry.register(tool(risk=RiskLevel.L0_PUBLIC_READ, name="boom")(boom))
    return registry


CALLS = [
    ToolCall(id="c1", name="echo", arguments='{"x": 7}'),
    ToolCall(id="c2", name="echo", arguments='{"x": "seven"}'),
    ToolCall(id="c3", name="nope\x00" + "n" * 300, arguments="{}"),
    ToolCall(id="c4", name="echo", arguments="{not json"),
    ToolCall(id="c5", name="boom", arguments='{"x": 1}'),
    ToolCall(id="c6\ud800", name="echo", arguments='{"x": 1.5e3, "api_key": "k"}'),
]


def _trail(sink: object, clock: object) -> None:
    gate = Gate(_registry(), audit=sink, clock=clock, new_id=sequential_ids("e"))  # type: ignore[arg-type]

    async def run() -> None:
        for call in CALLS:
            await gate.handle(call, PRINCIPAL)

    asyncio.run(run())


def test_a_sink_with_only_emit_gets_the_same_events_as_the_memory_sink() -> None:
    plain, memory = EmitOnly(), MemoryAuditSink()
    _trail(plain, FixedClock())
    _trail(memory, FixedClock())
    assert len(plain.events) > len(CALLS)
    assert memory.events == plain.events
    assert [e.event_id for e in memory.events] == [
        f"e-{n}" for n in range(1, len(memory.events) + 1)
    ]
    # Scrubbed before anything was kept: the tool's exception named a password.
    assert not any("hunter2" in (e.detail or "") for e in memory.events)
    # The events of one call share one subject.
    first = memory.for_call("c1")
    assert len({id(e.subject) for e in first}) == 1


def test_the_memory_sink_keeps_the_order_of_events_and_records() -> None:
    sink = MemoryAuditSink()
    auditor = Auditor(sink, FixedClock(), new_id=sequential_ids("e"))
    single = auditor.event(kind="registry", stage="register", decision="pass")
    stages = [("lookup", "pass", None, None, 0.001, datetime(2026, 1, 1, tzinfo=UTC))]
    auditor.emit([single])
    auditor.emit_stages(AuditSubject(tool="a"), stages)
    auditor.emit([single])
    auditor.emit_stages(AuditSubject(tool="b"), stages)
    assert [(e.kind, e.tool) for e in sink.events] == [
        ("registry", None),
        ("call", "a"),
        ("registry", None),
        ("call", "b"),
    ]
    sink.emit_call(CallRecord("call", (None,) * 8, stages, ids=["x"]))
    sink.events.clear()
    assert sink.events == []
    sink.emit_call(CallRecord("call", (None,) * 8, stages, ids=["y"]))
    sink.clear()
    assert sink.events == []


def test_a_record_holds_scrubbed_text_and_its_ids_before_any_sink_reads_it() -> None:
    received: list[CallRecord] = []

    class Keeps:
        def emit(self, events: Sequence[AuditEvent]) -> None:
            raise AssertionError("records only")

        def emit_call(self, record: CallRecord) -> None:
            received.append(record)

    auditor = Auditor(Keeps(), FixedClock(), scrub=lambda text: text.replace("s3cret", "[x]"))
    at = datetime(2026, 1, 1, tzinfo=UTC)
    auditor.emit_stages(
        AuditSubject(tool="t", args_summary='{"p": "s3cret"}'),
        [("lookup", "pass", None, None, 0.5, at), ("gate", "error", None, "s3cret!", 0.25, at)],
    )
    (record,) = received
    assert record.subject_fields[5] == '{"p": "[x]"}'
    assert [stage[3] for stage in record.stages] == [None, "[x]!"]
    ids = record.event_ids()
    assert len(set(ids)) == 2
    assert [e.event_id for e in record.events()] == list(ids)
    assert [e.duration_ms for e in record.events()] == [500.0, 250.0]


def test_unique_ids_reserved_as_a_block_continue_the_same_sequence() -> None:
    ids = UniqueIds()
    first = ids()
    start = ids.reserve(3)
    after = ids()
    assert first == f"{ids.prefix}{1:08x}"
    assert start == 2
    assert after == f"{ids.prefix}{5:08x}"


def test_system_clock_stages_are_read_as_now_and_made_into_utc_datetimes() -> None:
    sink = MemoryAuditSink()
    before = datetime.now(UTC)
    _trail(sink, SystemClock())
    after = datetime.now(UTC)
    times = [e.at for e in sink.events]
    assert all(t.tzinfo is UTC for t in times)
    assert all(before <= t <= after for t in times)
    assert times == sorted(times)


def _items() -> list[AuditEvent | CallRecord]:
    at = datetime(2026, 3, 4, 5, 6, 7, 890123, tzinfo=UTC)
    ns = 1_767_225_600_123_456_789  # 2026-01-01 00:00:00.123456789 UTC
    good = ("r", "c", "tool", "sha256:1", "ab" * 32, '{"x": 1}', "u", "t")
    return [
        CallRecord(
            "call",
            good,
            [
                ("lookup", "pass", None, None, 0.0011, ns),
                ("execute", "ok", "ok", "done", 0.02, ns + 999_999_999),
                ("gate", "error", None, "late", 1.5, ns + 2_000_000_000),
            ],
            id_prefix="p" * 24,
            id_first=1,
        ),
        event_of("single", at, "registry", "register", "pass", AuditSubject(), None, None, None),
        CallRecord(
            "call",
            ("r\x00", "c" * 300, "t" * 200, None, None, "s\ud800", None, "t"),
            [("s" * 40, "refused", "C" * 70, "nul\x00", 0.5, at)],
            ids=["custom-1"],
        ),
        CallRecord("call", good, [("lookup", "pass", None, None, 0.1, at)], ids=["i" * 80]),
    ]


def _rows(path: Path) -> list[tuple[object, ...]]:
    with sqlite3.connect(path) as connection:
        return connection.execute("SELECT * FROM audit_trails ORDER BY seq").fetchall()


def test_sqlite_rows_from_records_are_the_rows_of_their_events(tmp_path: Path) -> None:
    direct = SqliteStore.open(tmp_path / "direct.db")
    general = SqliteStore.open(tmp_path / "general.db")
    items = _items()
    # The first record is written as one row; the others take storable_events.
    assert [record_fits(i) for i in items if isinstance(i, CallRecord)] == [True, False, False]
    direct.append_audit_items(items)
    events: list[AuditEvent] = []
    for item in items:
        events.extend(item.events() if isinstance(item, CallRecord) else [item])
    general.append_audit(events)
    assert direct.read_audit(limit=100) == general.read_audit(limit=100)
    assert [e.event_id for e in direct.read_audit(limit=2)] == [
        "custom-1",
        "i" * 63 + "…",
    ]
    direct.close()
    general.close()
    rows = _rows(tmp_path / "direct.db")
    assert len(rows) == 4
    assert len(_rows(tmp_path / "general.db")) == 6
    seq, event_id, kind, earliest, latest, decisions, codes = rows[0][:7]
    assert (seq, event_id, kind) == (1, "p" * 24 + "00000001", "call")
    assert (earliest, latest) == (1_767_225_600_123_456, 1_767_225_602_123_456)
    assert (decisions, codes) == ("|pass|ok|error|", "|ok|")


def test_the_sqlite_writer_and_sqlalchemy_write_the_same_rows(tmp_path: Path) -> None:
    direct = SqliteStore.open(tmp_path / "direct.db")
    engine = sa.create_engine(f"sqlite+pysqlite:///{tmp_path / 'general.db'}")
    general = SqlStore(engine)
    general.migrate()
    direct.append_audit_items(_items())
    general.append_audit_items(_items())
    assert direct.read_audit(limit=100) == general.read_audit(limit=100)
    direct.close()
    engine.dispose()
    assert _rows(tmp_path / "direct.db") == _rows(tmp_path / "general.db")


def test_the_batching_sink_gives_a_store_without_records_their_events() -> None:
    store = MemoryStore()
    sink = BatchingAuditSink(store)
    items = _items()
    for item in items:
        if isinstance(item, CallRecord):
            sink.emit_call(item)
        else:
            sink.emit([item])
    sink.close()
    expected: list[AuditEvent] = []
    for item in items:
        expected.extend(item.events() if isinstance(item, CallRecord) else [item])
    assert store.read_audit(limit=100) == storable_events(expected)
    assert sink.health().written == 6


def test_a_record_that_cannot_be_made_into_events_is_lost_loudly_and_the_rest_written(
    tmp_path: Path,
) -> None:
    store = SqliteStore.open(tmp_path / "a.db")
    sink = BatchingAuditSink(store)
    at = datetime(2026, 1, 1, tzinfo=UTC)
    good = CallRecord("call", (None,) * 8, [("lookup", "pass", None, None, 0.1, at)], ids=["a"])
    bad = CallRecord("call", (None,) * 8, [("lookup", "pass", None, None, "x", at)], ids=["b"])  # type: ignore[list-item]
    sink.emit_call(good)
    sink.emit_call(bad)
    sink.emit_call(CallRecord("call", (None,) * 8, good.stages, ids=["c"]))
    with pytest.raises(AuditSinkError) as raised:
        sink.flush()
    assert raised.value.code is ErrorCode.AUDIT_EVENTS_LOST
    health = sink.health()
    assert (health.written, health.lost) == (2, 1)
    assert [e.event_id for e in store.read_audit(limit=10)] == ["a", "c"]
    sink.close()
    store.close()


def test_wall_time_of_nanoseconds_is_the_microsecond_floor() -> None:
    from handrail.events import wall_time  # noqa: PLC0415 - the one helper under test

    assert wall_time(1_999) == datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=1)
    at = datetime(2026, 1, 1, tzinfo=UTC)
    assert wall_time(at) is at
