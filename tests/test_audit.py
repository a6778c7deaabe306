from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

import pytest

from handrail.audit import (
    AuditEvent,
    Auditor,
    AuditSubject,
    BatchingAuditSink,
    MemoryAuditSink,
    summarize_arguments,
)
from handrail.errors import StoreError
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
        sink.close()
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
    from handrail.audit import Auditor, AuditSubject, MemoryAuditSink  # noqa: PLC0415
    from handrail.clock import FixedClock  # noqa: PLC0415

    sink = MemoryAuditSink()
    auditor = Auditor(sink, FixedClock())
    subject = AuditSubject(tool="t", tenant_id="t1")
    auditor.note(kind="write", stage="s", decision="d", subject=subject, facts={"b": 1, "a": None})
    auditor.note(kind="write", stage="s", decision="d", subject=subject, facts={"a": None})
    assert [e.detail for e in sink.events] == ['{"b": 1}', None]
    assert sink.events[0].subject == subject
    Auditor(None, FixedClock()).note(kind="k", stage="s", decision="d", subject=subject)
