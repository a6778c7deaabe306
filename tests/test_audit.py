from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import pytest

from handrail.errors import AuditSinkError, ConfigurationError, ErrorCode, StoreError
from handrail.events import STORED_WIDTHS, AuditEvent, AuditSubject, storable_events
from handrail.record.audit import Auditor, MemoryAuditSink, summarize_arguments
from handrail.record.batching import AuditWriterState, BatchingAuditSink
from handrail.store import MemoryStore, SqliteStore
from handrail.testing import FixedClock, sequential_ids


def _auditor(sink: MemoryAuditSink | BatchingAuditSink | None) -> Auditor:
    return Auditor(sink, FixedClock(), new_id=sequential_ids("e"))


def test_an_auditor_stamps_events_with_injected_ids_and_time() -> None:
    sink = MemoryAuditSink()
    auditor = _auditor(sink)
    event = auditor.event(
        kind="call",
        stage="lookup",
        decision="pass",
        subject=AuditSubject(tool="x", tenant_id="t"),
    )
    auditor.emit([event])
    assert event.event_id == "e-1"
    assert event.at == FixedClock().now()
    assert sink.events == [event]
    assert (event.tool, event.tenant_id, event.request_id) == ("x", "t", None)


def test_an_auditor_without_a_sink_is_disabled_and_emits_nothing() -> None:
    auditor = _auditor(None)
    assert not auditor.enabled
    auditor.emit([auditor.event(kind="call", stage="lookup", decision="pass")])


def test_the_batching_sink_writes_everything_emitted_before_flush(tmp_path: Path) -> None:
    store = SqliteStore.open(tmp_path / "a.db")
    sink = BatchingAuditSink(store, max_batch=7)
    auditor = _auditor(sink)
    for n in range(100):
        sink.emit([auditor.event(kind="call", stage=f"s{n}", decision="pass")])
    sink.flush()
    assert len(store.read_audit(limit=1000)) == 100
    sink.close()
    store.close()


def test_closing_the_batching_sink_drains_it_and_refuses_more(tmp_path: Path) -> None:
    store = MemoryStore()
    sink = BatchingAuditSink(store)
    auditor = _auditor(sink)
    sink.emit([auditor.event(kind="call", stage="a", decision="pass")])
    sink.close()
    sink.close()
    assert len(store.read_audit()) == 1
    with pytest.raises(StoreError):
        sink.emit([auditor.event(kind="call", stage="b", decision="pass")])


class _FlakyStore(MemoryStore):
    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    def append_audit(self, events: Sequence[AuditEvent]) -> None:
        if self.failures:
            self.failures -= 1
            raise StoreError("disk full")
        super().append_audit(events)


def test_a_failed_audit_write_is_retried(caplog: pytest.LogCaptureFixture) -> None:
    store = _FlakyStore(failures=2)
    sink = BatchingAuditSink(store, retries=3)
    with caplog.at_level(logging.ERROR, logger="handrail.audit"):
        sink.emit([_auditor(None).event(kind="call", stage="a", decision="pass")])
        sink.close()
    assert len(store.read_audit()) == 1


def test_an_audit_write_that_keeps_failing_is_logged_as_lost(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = _FlakyStore(failures=10)
    sink = BatchingAuditSink(store, retries=2)
    with caplog.at_level(logging.ERROR, logger="handrail.audit"):
        sink.emit([_auditor(None).event(kind="call", stage="a", decision="pass")])
        with pytest.raises(AuditSinkError) as lost:
            sink.close()
    assert lost.value.code is ErrorCode.AUDIT_EVENTS_LOST
    assert store.read_audit() == []
    assert any(r.levelno == logging.CRITICAL for r in caplog.records)


def test_the_arguments_summary_hides_credentials_and_clips_long_values() -> None:
    summary = summarize_arguments(
        {"query": "x" * 1000, "api_key": "sk-live-123", "nested": {"Password": "hunter2"}},
    )
    assert "sk-live-123" not in summary
    assert "hunter2" not in summary
    assert len(summary) <= 512
    decoded = json.loads(summary)
    assert decoded["api_key"] == "[redacted]"
    assert decoded["query"].endswith("(1000 chars)")


def test_the_arguments_summary_bounds_wide_and_deep_values() -> None:
    wide = {f"k{i}": list(range(100)) for i in range(100)}
    deep: dict[str, object] = {}
    node = deep
    for _ in range(50):
        node["d"] = {}
        node = node["d"]  # type: ignore[assignment]
    assert len(summarize_arguments(wide)) <= 512
    assert len(summarize_arguments(deep)) <= 512


def test_note_emits_one_event_with_its_facts_as_sorted_json_without_nones() -> None:
    from handrail.clock import FixedClock  # noqa: PLC0415
    from handrail.events import AuditSubject  # noqa: PLC0415
    from handrail.record.audit import Auditor, MemoryAuditSink  # noqa: PLC0415

    sink = MemoryAuditSink()
    auditor = Auditor(sink, FixedClock())
    subject = AuditSubject(tool="t", tenant_id="t1")
    auditor.note(kind="write", stage="s", decision="d", subject=subject, facts={"b": 1, "a": None})
    auditor.note(kind="write", stage="s", decision="d", subject=subject, facts={"a": None})
    assert [e.detail for e in sink.events] == ['{"b": 1}', None]
    assert sink.events[0].subject == subject
    Auditor(None, FixedClock()).note(kind="k", stage="s", decision="d", subject=subject)


# --- a writer that outlives bad rows, and says when it cannot ----------------------------------

WAIT_S = 60.0
"""Bound of every wait on the writer thread; reached only when a test fails."""


def _events(*stages: str) -> list[AuditEvent]:
    auditor = _auditor(None)
    return [auditor.event(kind="call", stage=stage, decision="pass") for stage in stages]


class _PickyStore(MemoryStore):
    """Refuses any batch holding an event of stage "poison", as a driver would a bad row."""

    def __init__(self, error: Callable[[], Exception]) -> None:
        super().__init__()
        self.error = error

    def append_audit(self, events: Sequence[AuditEvent]) -> None:
        if any(event.stage == "poison" for event in events):
            raise self.error()
        super().append_audit(events)


@pytest.mark.parametrize(
    "error",
    [
        lambda: UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed"),
        lambda: StoreError("audit write failed: DataError"),
        lambda: TypeError("not a string"),
    ],
    ids=["unencodable", "store-error", "type-error"],
)
def test_a_row_the_store_refuses_is_replaced_and_the_writer_keeps_writing(
    error: Callable[[], Exception],
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = _PickyStore(error)
    sink = BatchingAuditSink(store, new_id=sequential_ids("sink"))
    good, poison, after = _events("good", "poison", "after")
    poison = replace(poison, subject=AuditSubject(tool_call_id="call\ud800", tenant_id="t1"))
    with caplog.at_level(logging.CRITICAL, logger="handrail.audit"):
        sink.emit([good, poison, after])
        sink.emit(_events("later"))
        sink.flush(timeout=WAIT_S)
    stored = store.read_audit()
    assert [e.stage for e in stored] == ["good", "sink", "after", "later"]
    stand_in = stored[1]
    assert (stand_in.kind, stand_in.decision, stand_in.event_id) == ("audit", "replaced", "sink-1")
    assert json.loads(stand_in.detail or "")["event_id"] == poison.event_id
    assert (stand_in.tool_call_id, stand_in.tenant_id) == ("call\\ud800", "t1")
    health = sink.health()
    assert (health.state, health.written, health.replaced, health.lost) == (
        AuditWriterState.RUNNING,
        3,
        1,
        0,
    )
    assert health.healthy
    assert health.failed_writes >= 2
    assert health.last_error is not None
    assert not [r for r in caplog.records if r.levelno >= logging.CRITICAL]
    sink.close()


def test_an_event_that_is_not_an_event_is_dropped_as_lost_and_the_rest_written() -> None:
    store = MemoryStore()
    sink = BatchingAuditSink(store)
    sink.emit([*_events("before"), "not an event", *_events("after")])  # type: ignore[list-item]
    with pytest.raises(AuditSinkError) as lost:
        sink.flush(timeout=WAIT_S)
    assert lost.value.code is ErrorCode.AUDIT_EVENTS_LOST
    assert [e.stage for e in store.read_audit()] == ["before", "after"]
    assert sink.health().lost == 1
    sink.close()


def test_events_lost_to_a_failing_store_are_reported_once_by_flush() -> None:
    store = _FlakyStore(failures=1_000)
    sink = BatchingAuditSink(store, retries=2)
    sink.emit(_events("a", "b", "c"))
    with pytest.raises(AuditSinkError) as lost:
        sink.flush(timeout=WAIT_S)
    assert lost.value.code is ErrorCode.AUDIT_EVENTS_LOST
    health = sink.health()
    assert (health.lost, health.written, health.replaced) == (3, 0, 0)
    assert health.state is AuditWriterState.RUNNING
    sink.flush(timeout=WAIT_S)  # reported already; nothing new was lost
    store.failures = 0
    sink.emit(_events("d"))
    sink.close(timeout=WAIT_S)
    assert [e.stage for e in store.read_audit()] == ["d"]


class _BlockedStore(MemoryStore):
    """Blocks every audit write until released; says when a write has begun."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def append_audit(self, events: Sequence[AuditEvent]) -> None:
        self.entered.set()
        assert self.release.wait(WAIT_S)
        super().append_audit(events)


@contextmanager
def _released(store: _BlockedStore) -> Iterator[_BlockedStore]:
    try:
        yield store
    finally:
        store.release.set()


def test_a_stalled_writer_shows_in_health_and_flush_gives_up_loudly() -> None:
    clock = FixedClock()
    with _released(_BlockedStore()) as store:
        sink = BatchingAuditSink(store, clock=clock, stall_after=10.0)
        sink.emit(_events("slow"))
        assert store.entered.wait(WAIT_S)
        assert sink.health().state is AuditWriterState.RUNNING
        assert sink.health().pending == 1
        clock.advance(10.0)
        assert sink.health().state is AuditWriterState.STALLED
        assert not sink.health().healthy
        with pytest.raises(AuditSinkError) as behind:
            sink.flush(timeout=0.01)
        assert behind.value.code is ErrorCode.AUDIT_WRITER_BEHIND
        store.release.set()
        sink.flush(timeout=WAIT_S)
    health = sink.health()
    assert (health.state, health.pending, health.written) == (AuditWriterState.RUNNING, 0, 1)
    sink.close()
    assert sink.health().state is AuditWriterState.CLOSED


def test_close_gives_up_loudly_when_the_writer_does_not_finish_in_time() -> None:
    with _released(_BlockedStore()) as store:
        sink = BatchingAuditSink(store)
        sink.emit(_events("slow"))
        assert store.entered.wait(WAIT_S)
        with pytest.raises(AuditSinkError) as behind:
            sink.close(timeout=0.01)
        assert behind.value.code is ErrorCode.AUDIT_WRITER_BEHIND
        with pytest.raises(AuditSinkError) as closed:
            sink.emit(_events("late"))
        assert closed.value.code is ErrorCode.AUDIT_SINK_CLOSED
        sink.close()  # a second close does nothing


def test_an_emit_into_a_full_queue_waits_for_room(monkeypatch: pytest.MonkeyPatch) -> None:
    with _released(_BlockedStore()) as store:
        sink = BatchingAuditSink(store, max_queue=1)
        sink.emit(_events("taken"))
        assert store.entered.wait(WAIT_S)
        sink.emit(_events("queued"))
        monkeypatch.setattr("handrail.record.batching._EMIT_WAIT_S", 0.01)
        with pytest.raises(AuditSinkError) as behind:
            sink.emit(_events("no room"))
        assert behind.value.code is ErrorCode.AUDIT_WRITER_BEHIND
        monkeypatch.setattr("handrail.record.batching._EMIT_WAIT_S", WAIT_S)
        waiting = threading.Thread(target=sink.emit, args=(_events("room"),))
        waiting.start()
        store.release.set()
        waiting.join(WAIT_S)
        assert not waiting.is_alive()
    sink.close(timeout=WAIT_S)
    assert [e.stage for e in store.read_audit()] == ["taken", "queued", "room"]


class _FatalError(BaseException):
    """Something no `except Exception` catches, raised inside the writer thread."""

    def __str__(self) -> str:
        msg = "not even its text can be made"
        raise RuntimeError(msg)


class _FatalStore(MemoryStore):
    def append_audit(self, events: Sequence[AuditEvent]) -> None:
        raise _FatalError


def test_a_dead_writer_is_reported_by_health_flush_emit_and_close(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sink = BatchingAuditSink(_FatalStore())
    with caplog.at_level(logging.CRITICAL, logger="handrail.audit"):
        sink.emit(_events("last"))
        with pytest.raises(AuditSinkError) as dead:
            sink.flush(timeout=WAIT_S)
    assert dead.value.code is ErrorCode.AUDIT_WRITER_DEAD
    health = sink.health()
    assert health.state is AuditWriterState.DEAD
    assert health.last_error == "_FatalError"
    assert [r for r in caplog.records if r.levelno == logging.CRITICAL]
    with pytest.raises(AuditSinkError) as refused:
        sink.emit(_events("after"))
    assert refused.value.code is ErrorCode.AUDIT_WRITER_DEAD
    with pytest.raises(AuditSinkError) as closing:
        sink.close(timeout=WAIT_S)
    assert closing.value.code is ErrorCode.AUDIT_WRITER_DEAD


@pytest.mark.parametrize(
    "options",
    [{"max_batch": 0}, {"max_queue": 0}, {"retries": 0}, {"flush_timeout": 0}, {"stall_after": -1}],
)
def test_a_batching_sink_needs_positive_sizes_and_timeouts(options: dict[str, float]) -> None:
    with pytest.raises(ConfigurationError):
        BatchingAuditSink(MemoryStore(), **options)  # type: ignore[arg-type]


def test_an_empty_emit_is_nothing_to_write() -> None:
    sink = BatchingAuditSink(MemoryStore())
    sink.emit([])
    sink.close(timeout=WAIT_S)
    assert sink.health().written == 0


# --- what every store keeps ----------------------------------------------------------------


def test_storable_events_escape_unstorable_text_and_clip_long_text() -> None:
    auditor = _auditor(None)
    subject = AuditSubject(
        request_id="r" * 300,
        tool_call_id="call\ud800",
        tool="shop.\x00search",
        user_id="alice",
        tenant_id="t1",
        args_summary='{"q": "\udfff"}',
    )
    first = auditor.event(kind="call", stage="lookup", decision="pass", subject=subject)
    second = auditor.event(
        kind="call", stage="gate", decision="error", subject=subject, detail="boom \udc80\x00"
    )
    stored = storable_events([first, second])
    kept = stored[0].subject
    assert kept is stored[1].subject
    assert kept.request_id == "r" * 127 + "…"
    assert (kept.tool_call_id, kept.tool) == ("call\\ud800", "shop.\\u0000search")
    assert kept.args_summary == '{"q": "\\udfff"}'
    assert (kept.user_id, kept.tenant_id) == ("alice", "t1")
    assert stored[1].detail == "boom \\udc80\\u0000"
    assert (stored[0].event_id, stored[0].at) == (first.event_id, first.at)


def test_storable_events_clip_every_field_to_its_column() -> None:
    long = "x" * 1000
    subject = AuditSubject(**dict.fromkeys(AuditSubject.__dataclass_fields__, long))
    event = AuditEvent(
        event_id=long,
        at=datetime(2026, 1, 1, tzinfo=FixedClock().now().tzinfo),
        kind=long,
        stage=long,
        decision=long,
        code=long,
        detail=long,
        subject=subject,
    )
    [stored] = storable_events([event])
    for name, width in STORED_WIDTHS.items():
        value = getattr(stored, name)
        assert len(value) == (1000 if width is None else width), name


def test_storable_events_keep_good_events_as_they_are() -> None:
    auditor = _auditor(None)
    subject = AuditSubject(tool_call_id="call_\u00e9", tool="shop.search", tenant_id="t1")
    events = [
        auditor.event(kind="call", stage=s, decision="pass", subject=subject, detail="d\u00e9")
        for s in ("lookup", "syntax")
    ]
    assert all(a is b for a, b in zip(storable_events(events), events, strict=True))


def test_storable_events_look_at_each_field_of_an_event_holding_other_than_text() -> None:
    odd = replace(_events("odd")[0], code=42)  # type: ignore[arg-type]
    odd = replace(odd, subject=AuditSubject(user_id=7, tool_call_id="c\ud800"))  # type: ignore[arg-type]
    [stored] = storable_events([odd])
    assert stored.code == 42
    assert (stored.user_id, stored.tool_call_id) == (7, "c\\ud800")
