"""The batching audit sink: events written to a store by a thread of its own.

Owns the writer thread, its batches, the isolation of a row the store refuses (stored
as a stand-in that names it) and the writer's health (running, stalled, dead, closed,
with counts for metrics). A bad row costs only itself; a stalled or dead writer is
loud. It never builds events and never decides anything.
"""

from __future__ import annotations

import collections
import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING

from handrail.clock import SystemClock
from handrail.errors import AuditSinkError, ConfigurationError, ErrorCode, StoreError
from handrail.events import AuditEvent, AuditItem, AuditSubject, CallRecord, events_of, fit_text
from handrail.record.audit import unique_ids
from handrail.text import escape_unstorable

if TYPE_CHECKING:
    from handrail.clock import Clock
    from handrail.store.base import Store


__all__ = ["AuditSinkHealth", "AuditWriterState", "BatchingAuditSink"]


_log = logging.getLogger("handrail.audit")


# How long an emit waits for room in a full queue before it says the writer is behind.
_EMIT_WAIT_S = 5.0


# What a stand-in for a refused row keeps of it: identifying text, each this short.
_KEPT_OF_REFUSED = 128


class AuditWriterState(StrEnum):
    """What the writer thread of a `BatchingAuditSink` is doing."""

    RUNNING = "running"
    """Writing, or waiting for events."""
    STALLED = "stalled"
    """One store write has taken longer than the sink's `stall_after`."""
    DEAD = "dead"
    """The thread has ended unexpectedly; nothing emitted since will be written."""
    CLOSED = "closed"
    """Closed by its owner; it takes no more events."""


@dataclass(frozen=True, kw_only=True, slots=True)
class AuditSinkHealth:
    """A snapshot of a batching sink, for a health check and for metrics.

    Counts only grow from the sink's start (export them as counters); `pending` is a
    gauge. `replaced` counts events the store refused one by one, each stored as an
    `audit`/`sink`/`replaced` event that names it; `lost` counts events not even that
    could be stored (the store was failing).
    """

    state: AuditWriterState
    pending: int
    written: int
    replaced: int
    lost: int
    failed_writes: int
    last_error: str | None

    @property
    def healthy(self) -> bool:
        """True while the writer runs and keeps up."""
        return self.state is AuditWriterState.RUNNING


@dataclass(slots=True)
class _Tally:
    """What one batch came to, added to the sink's counts under its lock."""

    written: int = 0
    replaced: int = 0
    lost: int = 0
    failed_writes: int = 0
    last_error: str | None = None


class BatchingAuditSink:
    """Writes events to a Store from one background thread, in batches.

    `emit` only enqueues, so the event loop never waits on disk. The writer writes the
    waiting events (at most `max_batch` per transaction) once `max_batch` of them wait,
    once the oldest has waited `max_delay` seconds, or at once when `flush` or `close`
    asks. At most `max_unwritten` events are ever emitted but not yet stored: beyond
    that, `emit` waits for the writer (up to 5 s, then AUDIT_WRITER_BEHIND), so a crash
    of the process loses at most `max_unwritten` events, none of them emitted before
    the last `flush` returned. A store that keeps a call's events as one row (the SQL
    stores) writes a full batch of 4096 events as some 600 rows, one transaction: the
    writer needs the GIL, so it is the number of batches, not rows, that costs the
    event loop most. A batch the store refuses is retried (`retries` times for a
    StoreError), then written event by event: an event the store still refuses is
    replaced by an event that records the failure, so one bad row costs only itself
    and the writer keeps writing. Only if that record fails too is the rest of the
    batch lost, loudly.

    `health()` says whether the writer runs, is stalled (one write longer than
    `stall_after` seconds on `clock`) or is dead, with counters for metrics. `flush`
    and `close` wait at most `flush_timeout` seconds and raise AuditSinkError when the
    writer is dead, behind, or lost events since the last report; `emit` raises it
    once the sink is closed or its writer dead, so no event is dropped silently.
    """

    def __init__(
        self,
        store: Store,
        *,
        max_batch: int = 4096,
        max_delay: float = 0.05,
        max_unwritten: int = 8192,
        max_queue: int = 100_000,
        retries: int = 3,
        flush_timeout: float = 30.0,
        stall_after: float = 30.0,
        clock: Clock | None = None,
        new_id: Callable[[], str] | None = None,
    ) -> None:
        if min(max_batch, max_unwritten, max_queue, retries) < 1 or (
            min(flush_timeout, stall_after) <= 0 or max_delay < 0
        ):
            raise ConfigurationError("audit sink sizes, retries and timeouts must be positive")
        self._store = store
        self._max_batch = max_batch
        self._max_delay = max_delay
        self._max_unwritten = max_unwritten
        self._max_queue = max_queue
        self._retries = retries
        self._flush_timeout = flush_timeout
        self._stall_after = stall_after
        self._clock = clock or SystemClock()
        self._new_id = new_id or unique_ids()
        lock = threading.Lock()
        self._work = threading.Condition(lock)  # the writer waits here for events
        self._progress = threading.Condition(lock)  # flush, close and a full emit wait here
        # Emitted events, and calls' records (made into rows or events by the writer).
        self._pending: collections.deque[Sequence[AuditEvent] | CallRecord] = collections.deque()
        # The store's way to take records as they are, else their events.
        self._append: Callable[[Sequence[AuditItem]], None] = getattr(
            store, "append_audit_items", None
        ) or (lambda items: store.append_audit(events_of(items)))
        self._waiting = 0  # events in `_pending`
        # When the oldest of them arrived, on time.monotonic: the writer waits on real
        # time (a Condition), whatever clock stamps events and times stalls.
        self._oldest = 0.0
        self._urgent = 0  # flushes and emits waiting for the writer: write now
        self._accepted = 0
        self._handled = 0
        self._count = _Tally()
        self._lost_reported = 0
        self._writing_since: float | None = None
        self._dead = False
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="handrail-audit", daemon=True)
        self._thread.start()

    def emit(self, events: Sequence[AuditEvent]) -> None:
        """Enqueue events; AuditSinkError if the sink is closed, its writer dead or 5 s behind.

        With the queue full, waits up to 5 s for room.
        """
        self._enqueue(events)

    def emit_call(self, record: CallRecord) -> None:
        """Enqueue the events of one call as its record; otherwise exactly as `emit`."""
        self._enqueue(record)

    def _enqueue(self, events: Sequence[AuditEvent] | CallRecord) -> None:
        count = len(events)
        if not count:
            return
        with self._work:
            self._refuse_if_stopped()
            if not self._has_room(count):
                self._wait_for_room(count)
            if not self._pending:
                self._oldest = time.monotonic()
                self._work.notify()  # the writer starts the batch's clock
            elif self._waiting < self._max_batch <= self._waiting + count:
                self._work.notify()  # a full batch
            self._pending.append(events)
            self._waiting += count
            self._accepted += count

    def _has_room(self, count: int) -> bool:
        """Under the lock: whether `count` more events keep within the queue and the bound.

        An emit larger than `max_unwritten` is taken once nothing else is unwritten.
        """
        unwritten = self._accepted - self._handled
        return len(self._pending) < self._max_queue and (
            unwritten + count <= self._max_unwritten or not unwritten
        )

    def _wait_for_room(self, count: int) -> None:
        """Under the lock: have the writer write now and wait up to 5 s for room."""
        self._urgent += 1
        self._work.notify()
        try:
            if not self._progress.wait_for(
                lambda: self._has_room(count) or self._dead or self._closed,
                timeout=_EMIT_WAIT_S,
            ):
                raise AuditSinkError(
                    ErrorCode.AUDIT_WRITER_BEHIND,
                    f"the audit writer is more than {_EMIT_WAIT_S:g} s behind",
                )
        finally:
            self._urgent -= 1
        self._refuse_if_stopped()

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every event emitted before this call is written (or replaced).

        Waits at most `timeout` seconds (default: the sink's `flush_timeout`). Raises
        AuditSinkError: AUDIT_WRITER_DEAD, AUDIT_WRITER_BEHIND when the wait ran out,
        AUDIT_EVENTS_LOST when events were lost since the last flush or close said so.
        """
        wait = self._flush_timeout if timeout is None else timeout
        with self._progress:
            target = self._accepted
            self._urgent += 1
            self._work.notify()
            try:
                self._progress.wait_for(lambda: self._handled >= target or self._dead, timeout=wait)
            finally:
                self._urgent -= 1
            self._raise_if_unwritten(target, wait)

    def close(self, timeout: float | None = None) -> None:
        """Refuse further events, write what is queued and stop the writer thread.

        Waits at most `timeout` seconds (default: `flush_timeout`) and raises like
        `flush` when not everything could be written. A second call does nothing.
        """
        wait = self._flush_timeout if timeout is None else timeout
        with self._work:
            if self._closed:
                return
            self._closed = True
            target = self._accepted
            self._work.notify()
            self._progress.notify_all()
        self._thread.join(wait)
        with self._progress:
            self._raise_if_unwritten(target, wait)

    def health(self) -> AuditSinkHealth:
        """The writer's state and counters, now."""
        with self._work:
            if self._dead:
                state = AuditWriterState.DEAD
            elif self._closed:
                state = AuditWriterState.CLOSED
            elif (
                self._writing_since is not None
                and self._clock.monotonic() - self._writing_since >= self._stall_after
            ):
                state = AuditWriterState.STALLED
            else:
                state = AuditWriterState.RUNNING
            count = self._count
            return AuditSinkHealth(
                state=state,
                pending=max(0, self._accepted - self._handled),
                written=count.written,
                replaced=count.replaced,
                lost=count.lost,
                failed_writes=count.failed_writes,
                last_error=count.last_error,
            )

    def _refuse_if_stopped(self) -> None:
        if self._closed:
            raise AuditSinkError(ErrorCode.AUDIT_SINK_CLOSED, "the audit sink is closed")
        if self._dead:
            raise AuditSinkError(
                ErrorCode.AUDIT_WRITER_DEAD,
                f"the audit writer has stopped ({self._count.last_error})",
            )

    def _raise_if_unwritten(self, target: int, wait: float) -> None:
        """Called under the lock once waiting is over: say what was not written."""
        if self._dead:
            raise AuditSinkError(
                ErrorCode.AUDIT_WRITER_DEAD,
                f"the audit writer has stopped ({self._count.last_error}); "
                f"{self._accepted - self._handled} events will not be written",
            )
        if self._handled < target:
            raise AuditSinkError(
                ErrorCode.AUDIT_WRITER_BEHIND,
                f"the audit writer did not write {target - self._handled} events within "
                f"{wait:g} s (last error: {self._count.last_error})",
            )
        lost = self._count.lost - self._lost_reported
        if lost:
            self._lost_reported = self._count.lost
            raise AuditSinkError(
                ErrorCode.AUDIT_EVENTS_LOST,
                f"{lost} audit events could not be stored (last error: {self._count.last_error})",
            )

    def _run(self) -> None:
        try:
            while (taken := self._take()) is not None:
                batch, count = taken
                tally = self._write(batch, count)
                with self._progress:
                    self._writing_since = None
                    self._handled += count
                    self._add(tally)
                    self._progress.notify_all()
        except BaseException as exc:  # noqa: BLE001 - the writer's top level: never end silently
            _log.critical("the audit writer stopped; no later event will be written", exc_info=True)
            with self._progress:
                self._dead = True
                self._writing_since = None
                self._count.last_error = _describe(exc)
                self._progress.notify_all()

    def _take(self) -> tuple[list[AuditItem], int] | None:
        """The next batch and how many events it holds; None once closed with nothing left."""
        with self._work:
            while not self._due():
                if self._closed:
                    return None  # nothing is waiting, and nothing more will come
                # Nothing waiting: sleep until an emit. Else until the oldest is due.
                due_in = self._oldest + self._max_delay - time.monotonic()
                self._work.wait(due_in if self._pending else None)
            batch: list[AuditItem] = []
            count = 0
            pending, most = self._pending, self._max_batch
            while pending and count < most:
                item = pending.popleft()
                count += len(item)
                if isinstance(item, CallRecord):
                    batch.append(item)
                else:
                    batch.extend(item)
            self._waiting -= count
            self._writing_since = self._clock.monotonic()
            self._progress.notify_all()  # room in the queue for a waiting emit
            return batch, count

    def _due(self) -> bool:
        """Under the lock: whether the waiting events are to be written now."""
        return bool(self._pending) and (
            self._waiting >= self._max_batch
            or self._urgent > 0
            or self._closed
            or time.monotonic() - self._oldest >= self._max_delay
        )

    def _add(self, tally: _Tally) -> None:
        count = self._count
        count.written += tally.written
        count.replaced += tally.replaced
        count.lost += tally.lost
        count.failed_writes += tally.failed_writes
        count.last_error = tally.last_error or count.last_error

    def _write(self, items: list[AuditItem], count: int) -> _Tally:
        tally = _Tally()
        if self._attempt(items, self._retries, tally):
            tally.written = count
            return tally
        # One bad row must not cost the others: write the batch event by event.
        batch = _events(items, tally)
        for index, event in enumerate(batch):
            if len(batch) > 1 and self._attempt([event], 1, tally):
                tally.written += 1
                continue
            try:
                stand_in = self._stand_in(event, tally.last_error)
            except Exception:  # noqa: BLE001 - not even an event: lose it, keep writing
                _log.exception("an audit event that is not an event was dropped")
                tally.lost += 1
                continue
            if self._attempt([stand_in], 1, tally):
                tally.replaced += 1
                _log.error(
                    "the store refused an audit event (%s); stored %s in its place",
                    tally.last_error,
                    stand_in.event_id,
                )
                continue
            # Not even the stand-in could be written: the store fails, not the row.
            tally.lost += len(batch) - index
            _log.critical("%d audit events could not be written and are lost", tally.lost)
            break
        return tally

    def _attempt(self, items: Sequence[AuditItem], times: int, tally: _Tally) -> bool:
        """Write `items`, retrying a StoreError up to `times` attempts in all."""
        for attempt in range(1, times + 1):
            try:
                self._append(items)
            except StoreError as exc:
                tally.failed_writes += 1
                tally.last_error = _describe(exc)
                _log.exception("audit write failed (attempt %d of %d)", attempt, times)
            except Exception as exc:  # noqa: BLE001 - the writer must outlive any one row
                # Not a store failure but the rows (a type, an encoding): no retry helps.
                tally.failed_writes += 1
                tally.last_error = _describe(exc)
                _log.exception("audit write failed on its rows")
                return False
            else:
                return True
        return False

    def _stand_in(self, event: AuditEvent, error: str | None) -> AuditEvent:
        """An event that records, storably, that the store refused `event`."""
        subject = event.subject
        at = event.at
        facts = {
            name: _kept(getattr(event, name)) for name in ("event_id", "kind", "stage", "decision")
        }
        facts["code"] = _kept(event.code)
        facts["error"] = error
        return AuditEvent(
            event_id=self._new_id(),
            at=at if isinstance(at, datetime) and at.tzinfo is not None else self._clock.now(),
            kind="audit",
            stage="sink",
            decision="replaced",
            subject=AuditSubject(
                request_id=_kept(subject.request_id),
                tool_call_id=_kept(subject.tool_call_id),
                tool=_kept(subject.tool),
                user_id=_kept(subject.user_id),
                tenant_id=_kept(subject.tenant_id),
            ),
            detail=json.dumps(facts, sort_keys=True),
        )


def _events(items: list[AuditItem], tally: _Tally) -> list[AuditEvent]:
    """The events of `items`; a record that cannot be made into events is lost, loudly."""
    out: list[AuditEvent] = []
    for item in items:
        if not isinstance(item, CallRecord):
            out.append(item)
            continue
        try:
            out.extend(item.events())
        except Exception:  # noqa: BLE001 - not events: lose them, keep writing
            _log.exception("the audit events of a call could not be made and are lost")
            tally.lost += len(item)
    return out


def _kept(value: object) -> str | None:
    return None if value is None else fit_text(str(value), _KEPT_OF_REFUSED)


def _describe(exc: BaseException) -> str:
    try:
        text = f"{type(exc).__name__}: {exc}"
    except Exception:  # noqa: BLE001 - an exception whose text cannot even be made
        text = type(exc).__name__
    return escape_unstorable(text[:200])
