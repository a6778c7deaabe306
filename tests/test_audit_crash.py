"""What a crash costs the batching audit sink: at most its bound of unwritten events.

A child process writes events through `BatchingAuditSink` into SQLite and is killed
with SIGKILL while it writes. No time margin decides anything: the child reports each
event only after `emit` returned (so at most `max_unwritten` events were unwritten then)
and one explicit `flush` point; every wait is bounded.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from handrail.errors import ConfigurationError
from handrail.events import AuditEvent
from handrail.record.batching import BatchingAuditSink
from handrail.store import MemoryStore, SqliteStore

WAIT_S = 60.0
UNWRITTEN = 40
FLUSHED = 25
KILL_AFTER = 400

_CHILD = """
import sys
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from handrail.events import AuditEvent
from handrail.record.batching import BatchingAuditSink
from handrail.store import SqliteStore

store = SqliteStore.open(sys.argv[1])
# An hour's delay: only the size bound, the unwritten bound and flush make it write.
sink = BatchingAuditSink(store, max_batch=16, max_unwritten=int(sys.argv[2]), max_delay=3600)
at = datetime(2026, 1, 1, tzinfo=UTC)

def emit(n):
    sink.emit([AuditEvent(event_id=f"ev-{n}", at=at, kind="call", stage=str(n), decision="pass")])

for n in range(1, int(sys.argv[3]) + 1):
    emit(n)
sink.flush()
print("flushed", flush=True)
n = int(sys.argv[3])
while True:
    n += 1
    emit(n)
    print(n, flush=True)
"""


def _lines(process: subprocess.Popen[str]) -> tuple[bool, int]:
    """Read the child's lines until KILL_AFTER events; (saw the flush, last event seen)."""
    assert process.stdout is not None
    flushed, last = False, 0
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while last < KILL_AFTER:
            assert selector.select(WAIT_S), "the child wrote nothing for a minute"
            line = process.stdout.readline()
            assert line, f"the child ended early: {process.wait(WAIT_S)}"
            if line.strip() == "flushed":
                flushed = True
            else:
                last = int(line)
    return flushed, last


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_a_killed_writer_loses_no_event_flushed_or_older_than_its_unwritten_bound(
    tmp_path: Path,
) -> None:
    path = tmp_path / "audit.db"
    SqliteStore.open(path).close()  # migrated before the child starts
    with subprocess.Popen(  # noqa: S603 - our own interpreter and script
        [sys.executable, "-c", _CHILD, str(path), str(UNWRITTEN), str(FLUSHED)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    ) as process:
        try:
            flushed, last = _lines(process)
        finally:
            process.send_signal(signal.SIGKILL)
            process.wait(WAIT_S)
    assert process.returncode == -signal.SIGKILL
    assert flushed
    store = SqliteStore.open(path)
    try:
        stored = [int(e.stage) for e in store.read_audit(limit=1_000_000)]
    finally:
        store.close()
    # In order, no gaps, no duplicates: a prefix of what was emitted.
    assert stored == list(range(1, len(stored) + 1))
    # Every event flushed, and every event more than UNWRITTEN behind the last emit seen.
    assert len(stored) >= max(FLUSHED, last - UNWRITTEN)


def _event(n: int) -> AuditEvent:
    at = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=n)
    return AuditEvent(event_id=f"ev-{n}", at=at, kind="call", stage=str(n), decision="pass")


class _SignallingStore(MemoryStore):
    """Tells a waiting test when a write has happened."""

    def __init__(self) -> None:
        super().__init__()
        self.wrote = threading.Event()

    def append_audit(self, events: Sequence[AuditEvent]) -> None:
        super().append_audit(events)
        self.wrote.set()


def test_the_writer_waits_for_a_full_batch_when_the_delay_is_long() -> None:
    store = MemoryStore()
    sink = BatchingAuditSink(store, max_batch=4, max_delay=3600)
    for n in range(3):
        sink.emit([_event(n)])
    assert sink.health().pending == 3
    assert store.read_audit() == []
    sink.emit([_event(3)])  # the fourth fills the batch
    sink.flush(timeout=WAIT_S)
    assert [e.stage for e in store.read_audit()] == ["0", "1", "2", "3"]
    sink.close(timeout=WAIT_S)


def test_the_writer_writes_an_event_once_it_is_max_delay_old_without_a_flush() -> None:
    store = _SignallingStore()
    sink = BatchingAuditSink(store, max_batch=1000, max_delay=0.001)
    sink.emit([_event(1)])
    assert store.wrote.wait(WAIT_S)
    assert [e.stage for e in store.read_audit()] == ["1"]
    sink.close(timeout=WAIT_S)


def test_an_emit_beyond_max_unwritten_has_the_writer_write_first() -> None:
    store = MemoryStore()
    sink = BatchingAuditSink(store, max_batch=1000, max_delay=3600, max_unwritten=5)
    for n in range(5):
        sink.emit([_event(n)])
    assert store.read_audit() == []
    sink.emit([_event(5)])  # a sixth unwritten event: the first five are stored first
    assert [e.stage for e in store.read_audit(limit=10)][:5] == ["0", "1", "2", "3", "4"]
    sink.close(timeout=WAIT_S)


@pytest.mark.parametrize("options", [{"max_unwritten": 0}, {"max_delay": -1.0}])
def test_the_bounds_of_a_batching_sink_are_checked(options: dict[str, float]) -> None:
    with pytest.raises(ConfigurationError):
        BatchingAuditSink(MemoryStore(), **options)  # type: ignore[arg-type]
