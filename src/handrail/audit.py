"""Audit events: one row per stage transition of a call, and per registry change.

Owns the event value and the form every store keeps it in, the sinks that receive
events (none, memory, a store behind a batching writer thread that outlives any bad
row and reports its health) and the redacted arguments summary. It never decides
anything; it records what the gate and the registry decided.
"""

from __future__ import annotations

import collections
import functools
import itertools
import json
import logging
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from datetime import datetime
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

from handrail.clock import SystemClock
from handrail.errors import AuditSinkError, ConfigurationError, ErrorCode, StoreError
from handrail.text import escape_unstorable, is_storable

if TYPE_CHECKING:
    from handrail.clock import Clock
    from handrail.store.base import Store

__all__ = [
    "STORED_WIDTHS",
    "AuditEvent",
    "AuditSink",
    "AuditSinkHealth",
    "AuditSubject",
    "AuditWriterState",
    "Auditor",
    "BatchingAuditSink",
    "MemoryAuditSink",
    "storable_events",
    "summarize_arguments",
    "unique_ids",
]

_log = logging.getLogger("handrail.audit")

_SENSITIVE_KEYS = (
    "password",
    "passwd",
    "secret",
    "token",
    "apikey",
    "api_key",
    "authorization",
    "cookie",
    "credential",
    "private",
    "card",
    "cvv",
    "iban",
    "ssn",
)
_SUMMARY_STRING = 48
_SUMMARY_ITEMS = 8
_SUMMARY_DEPTH = 3
_SUMMARY_TOTAL = 512
_CACHED_KEY = 64
# How long an emit waits for room in a full queue before it says the writer is behind.
_EMIT_WAIT_S = 5.0


@dataclass(frozen=True, kw_only=True, slots=True)
class AuditSubject:
    """What the events of one call (or one registry change) are about; shared by them."""

    request_id: str | None = None
    tool_call_id: str | None = None
    tool: str | None = None
    schema_version: str | None = None
    args_hash: str | None = None
    args_summary: str | None = None
    user_id: str | None = None
    tenant_id: str | None = None


_NO_SUBJECT = AuditSubject()


@dataclass(frozen=True, kw_only=True, slots=True)
class AuditEvent:
    """One fact in the audit trail. `detail` is for operators and never reaches a model.

    The subject's fields read as the event's own (`event.tool`, `event.tenant_id`, ...).
    """

    event_id: str
    at: datetime
    kind: str
    stage: str
    decision: str
    subject: AuditSubject = _NO_SUBJECT
    code: str | None = None
    duration_ms: float | None = None
    detail: str | None = None

    @property
    def request_id(self) -> str | None:
        """The request this event belongs to."""
        return self.subject.request_id

    @property
    def tool_call_id(self) -> str | None:
        """The provider's call id, bounded."""
        return self.subject.tool_call_id

    @property
    def tool(self) -> str | None:
        """The tool name (as proposed, bounded, when it was unknown)."""
        return self.subject.tool

    @property
    def schema_version(self) -> str | None:
        """The schema version the arguments were checked against."""
        return self.subject.schema_version

    @property
    def args_hash(self) -> str | None:
        """SHA-256 of the canonical arguments (or of the raw input, if unparsable)."""
        return self.subject.args_hash

    @property
    def args_summary(self) -> str | None:
        """A short, redacted summary of the arguments."""
        return self.subject.args_summary

    @property
    def user_id(self) -> str | None:
        """The principal's user, or the actor of a registry change."""
        return self.subject.user_id

    @property
    def tenant_id(self) -> str | None:
        """The principal's tenant."""
        return self.subject.tenant_id


class AuditSink(Protocol):
    """Receives audit events. `emit` must not block the event loop for long."""

    def emit(self, events: Sequence[AuditEvent]) -> None:
        """Accept events for recording, in order."""
        ...


def unique_ids() -> Callable[[], str]:
    """Ids unique across processes: a random 96-bit prefix per source, then a counter.

    Cheaper than a uuid4 per event (no system call), and still never repeats.
    """
    prefix = uuid.uuid4().hex[:24]
    counter = itertools.count(1)
    return lambda: f"{prefix}{next(counter):08x}"


class Auditor:
    """Builds events (id, timestamp) and hands them to a sink; None means auditing is off.

    The id source and clock are injected so that tests can replay a trail exactly.
    """

    __slots__ = ("_clock", "_new_id", "_scrub", "_sink")

    def __init__(
        self,
        sink: AuditSink | None,
        clock: Clock,
        *,
        new_id: Callable[[], str] | None = None,
        scrub: Callable[[str], str] | None = None,
    ) -> None:
        self._sink = sink
        self._clock = clock
        self._new_id = new_id or unique_ids()
        # Applied to every detail and argument summary before it leaves: secret values
        # and personal data never reach the audit trail.
        self._scrub = scrub

    @property
    def enabled(self) -> bool:
        """False when events would go nowhere, so callers can skip building them."""
        return self._sink is not None

    def event(
        self,
        *,
        kind: str,
        stage: str,
        decision: str,
        subject: AuditSubject = _NO_SUBJECT,
        code: str | None = None,
        duration_ms: float | None = None,
        detail: str | None = None,
        at: datetime | None = None,
    ) -> AuditEvent:
        """A new event with a fresh id, stamped now unless `at` says when it happened."""
        return AuditEvent(
            event_id=self._new_id(),
            at=self._clock.now() if at is None else at,
            kind=kind,
            stage=stage,
            decision=decision,
            subject=subject,
            code=code,
            duration_ms=duration_ms,
            detail=detail,
        )

    def emit(self, events: Sequence[AuditEvent]) -> None:
        """Send events to the sink, if there is one, scrubbed if a scrubber is set."""
        if self._sink is not None and events:
            if self._scrub is not None:
                # The events of one call share their subject: scrub each text once.
                scrub = functools.lru_cache(maxsize=64)(self._scrub)
                events = [_scrubbed(event, scrub) for event in events]
            self._sink.emit(events)

    def note(
        self,
        *,
        kind: str,
        stage: str,
        decision: str,
        subject: AuditSubject,
        code: str | None = None,
        facts: Mapping[str, object] | None = None,
    ) -> None:
        """Emit one event now; `facts` become its detail as sorted JSON, None values left out.

        Builds nothing when auditing is off.
        """
        if self._sink is None:
            return
        present = {k: v for k, v in (facts or {}).items() if v is not None}
        detail = json.dumps(present, sort_keys=True, default=str) if present else None
        self.emit(
            [
                self.event(
                    kind=kind,
                    stage=stage,
                    decision=decision,
                    subject=subject,
                    code=code,
                    detail=detail,
                ),
            ],
        )


def _scrubbed(event: AuditEvent, scrub: Callable[[str], str]) -> AuditEvent:
    subject = event.subject
    summary = subject.args_summary
    if summary is not None and (clean := scrub(summary)) != summary:
        subject = replace(subject, args_summary=clean)
    detail = None if event.detail is None else scrub(event.detail)
    if detail == event.detail and subject is event.subject:
        return event
    return replace(event, detail=detail, subject=subject)


class MemoryAuditSink:
    """Keeps events in a list; for tests and for `handrail.testing`."""

    def __init__(self) -> None:
        self.events: list[AuditEvent] = []

    def emit(self, events: Sequence[AuditEvent]) -> None:
        """Append the events."""
        self.events.extend(events)

    def for_call(self, call_id: str) -> list[AuditEvent]:
        """The events of one tool call, in order."""
        return [e for e in self.events if e.tool_call_id == call_id]


# The widths of the stored audit row (None: unbounded text). Every store clips to them.
_ID_WIDTH, _LABEL_WIDTH, _CODE_WIDTH = 64, 32, 64
STORED_WIDTHS: Mapping[str, int | None] = MappingProxyType(
    {
        "event_id": _ID_WIDTH,
        "kind": _LABEL_WIDTH,
        "stage": _LABEL_WIDTH,
        "decision": _LABEL_WIDTH,
        "code": _CODE_WIDTH,
        "detail": None,
        "request_id": 128,
        "tool_call_id": 256,
        "tool": 128,
        "schema_version": 64,
        "args_hash": 64,
        "args_summary": None,
        "user_id": 256,
        "tenant_id": 256,
    },
)
_EVENT_TEXT = tuple(
    (f.name, STORED_WIDTHS[f.name]) for f in fields(AuditEvent) if f.name in STORED_WIDTHS
)
_SUBJECT_TEXT = tuple((f.name, STORED_WIDTHS[f.name]) for f in fields(AuditSubject))
_SUBJECT_WIDTHS = {name: width for name, width in _SUBJECT_TEXT if width is not None}
# What a stand-in for a refused row keeps of it: identifying text, each this short.
_KEPT_OF_REFUSED = 128


def _fit(text: str, width: int | None) -> str:
    """`text` as a store keeps it: unstorable characters escaped, clipped to `width`."""
    if not is_storable(text):
        text = escape_unstorable(text)
    if width is not None and len(text) > width:
        return text[: width - 1] + "…"
    return text


def _fitted(value: object, fitting: tuple[tuple[str, int | None], ...]) -> dict[str, Any]:
    changes: dict[str, Any] = {}
    for name, width in fitting:
        text = getattr(value, name)
        if isinstance(text, str) and (fitted := _fit(text, width)) is not text:
            changes[name] = fitted
    return changes


def _event_fits(event: AuditEvent) -> bool:
    """Whether the store keeps `event`'s own text as it is (the fast path, no copy)."""
    detail, code = event.detail, event.code
    if detail is not None and not is_storable(detail):
        return False
    # Written out, not looped: this runs for every event the writer stores.
    head = event.event_id + event.kind + event.stage + event.decision + (code or "")
    return (
        is_storable(head)
        and len(event.event_id) <= _ID_WIDTH
        and len(event.kind) <= _LABEL_WIDTH
        and len(event.stage) <= _LABEL_WIDTH
        and len(event.decision) <= _LABEL_WIDTH
        and (code is None or len(code) <= _CODE_WIDTH)
    )


def _subject_fits(subject: AuditSubject) -> bool:
    """Whether the store keeps the subject's text as it is (once per call)."""
    s = subject
    request_id, call_id, tool = s.request_id or "", s.tool_call_id or "", s.tool or ""
    user_id, tenant_id = s.user_id or "", s.tenant_id or ""
    version, digest = s.schema_version or "", s.args_hash or ""
    return (
        is_storable(
            request_id
            + call_id
            + tool
            + user_id
            + tenant_id
            + version
            + digest
            + (s.args_summary or ""),
        )
        and len(request_id) <= _SUBJECT_WIDTHS["request_id"]
        and len(call_id) <= _SUBJECT_WIDTHS["tool_call_id"]
        and len(tool) <= _SUBJECT_WIDTHS["tool"]
        and len(user_id) <= _SUBJECT_WIDTHS["user_id"]
        and len(tenant_id) <= _SUBJECT_WIDTHS["tenant_id"]
        and len(version) <= _SUBJECT_WIDTHS["schema_version"]
        and len(digest) <= _SUBJECT_WIDTHS["args_hash"]
    )


def _fitted_subject(subject: AuditSubject) -> AuditSubject:
    changed = _fitted(subject, _SUBJECT_TEXT)
    return replace(subject, **changed) if changed else subject


def storable_events(events: Sequence[AuditEvent]) -> list[AuditEvent]:
    r"""The events as every store keeps them; unchanged events are the same objects.

    A NUL or a lone surrogate (from a provider's call id, an exception's text, a
    principal's request id) is written as a `\uXXXX` escape, and text longer than its
    column (`STORED_WIDTHS`) is clipped, ending in "…". The subject shared by the
    events of one call is checked once.
    """
    out: list[AuditEvent] = []
    seen: AuditSubject | None = None
    kept = _NO_SUBJECT
    for event in events:
        try:
            if event.subject is not seen:  # the events of one call come together
                seen = event.subject
                kept = seen if _subject_fits(seen) else _fitted_subject(seen)
            if kept is seen and _event_fits(event):
                out.append(event)
                continue
        except TypeError:  # a field that is not text: the slow path looks at each one
            kept = _fitted_subject(event.subject)
        changes = _fitted(event, _EVENT_TEXT)
        if kept is not event.subject:
            changes["subject"] = kept
        out.append(replace(event, **changes) if changes else event)
    return out


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

    `emit` only enqueues, so the event loop never waits on disk. A batch the store
    refuses is retried (`retries` times for a StoreError), then written event by
    event: an event the store still refuses is replaced by an event that records the
    failure, so one bad row costs only itself and the writer keeps writing. Only if
    that record fails too is the rest of the batch lost, loudly.

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
        max_batch: int = 512,
        max_queue: int = 100_000,
        retries: int = 3,
        flush_timeout: float = 30.0,
        stall_after: float = 30.0,
        clock: Clock | None = None,
        new_id: Callable[[], str] | None = None,
    ) -> None:
        if min(max_batch, max_queue, retries) < 1 or min(flush_timeout, stall_after) <= 0:
            raise ConfigurationError("audit sink sizes, retries and timeouts must be positive")
        self._store = store
        self._max_batch = max_batch
        self._max_queue = max_queue
        self._retries = retries
        self._flush_timeout = flush_timeout
        self._stall_after = stall_after
        self._clock = clock or SystemClock()
        self._new_id = new_id or unique_ids()
        lock = threading.Lock()
        self._work = threading.Condition(lock)  # the writer waits here for events
        self._progress = threading.Condition(lock)  # flush, close and a full emit wait here
        self._pending: collections.deque[Sequence[AuditEvent]] = collections.deque()
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
        if not events:
            return
        with self._work:
            self._refuse_if_stopped()
            if len(self._pending) >= self._max_queue and not self._progress.wait_for(
                lambda: len(self._pending) < self._max_queue or self._dead or self._closed,
                timeout=_EMIT_WAIT_S,
            ):
                raise AuditSinkError(
                    ErrorCode.AUDIT_WRITER_BEHIND,
                    f"the audit writer is more than {_EMIT_WAIT_S:g} s behind",
                )
            self._refuse_if_stopped()
            self._pending.append(events)
            self._accepted += len(events)
            self._work.notify()

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every event emitted before this call is written (or replaced).

        Waits at most `timeout` seconds (default: the sink's `flush_timeout`). Raises
        AuditSinkError: AUDIT_WRITER_DEAD, AUDIT_WRITER_BEHIND when the wait ran out,
        AUDIT_EVENTS_LOST when events were lost since the last flush or close said so.
        """
        wait = self._flush_timeout if timeout is None else timeout
        with self._progress:
            target = self._accepted
            self._progress.wait_for(lambda: self._handled >= target or self._dead, timeout=wait)
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
            while (batch := self._take()) is not None:
                tally = self._write(batch)
                with self._progress:
                    self._writing_since = None
                    self._handled += len(batch)
                    self._add(tally)
                    self._progress.notify_all()
        except BaseException as exc:  # noqa: BLE001 - the writer's top level: never end silently
            _log.critical("the audit writer stopped; no later event will be written", exc_info=True)
            with self._progress:
                self._dead = True
                self._writing_since = None
                self._count.last_error = _describe(exc)
                self._progress.notify_all()

    def _take(self) -> list[AuditEvent] | None:
        """The next batch, waiting for one; None once closed with nothing left."""
        with self._work:
            self._work.wait_for(lambda: self._pending or self._closed)
            if not self._pending:
                return None
            batch: list[AuditEvent] = []
            while self._pending and len(batch) < self._max_batch:
                batch.extend(self._pending.popleft())
            self._writing_since = self._clock.monotonic()
            self._progress.notify_all()  # room in the queue for a waiting emit
            return batch

    def _add(self, tally: _Tally) -> None:
        count = self._count
        count.written += tally.written
        count.replaced += tally.replaced
        count.lost += tally.lost
        count.failed_writes += tally.failed_writes
        count.last_error = tally.last_error or count.last_error

    def _write(self, batch: list[AuditEvent]) -> _Tally:
        tally = _Tally()
        if self._attempt(batch, self._retries, tally):
            tally.written = len(batch)
            return tally
        # One bad row must not cost the others: write the batch event by event.
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

    def _attempt(self, events: list[AuditEvent], times: int, tally: _Tally) -> bool:
        """Write `events`, retrying a StoreError up to `times` attempts in all."""
        for attempt in range(1, times + 1):
            try:
                self._store.append_audit(events)
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


def _kept(value: object) -> str | None:
    return None if value is None else _fit(str(value), _KEPT_OF_REFUSED)


def _describe(exc: BaseException) -> str:
    try:
        text = f"{type(exc).__name__}: {exc}"
    except Exception:  # noqa: BLE001 - an exception whose text cannot even be made
        text = type(exc).__name__
    return escape_unstorable(text[:200])


def _names_credential(key: str) -> bool:
    lowered = key.lower().replace("-", "_")
    return any(marker in lowered for marker in _SENSITIVE_KEYS)


_names_credential_cached = functools.lru_cache(maxsize=4096)(_names_credential)


def _is_sensitive(key: str) -> bool:
    # The whole key is checked, never a clipped one; only short keys are cached, so the
    # cache cannot hold megabytes of model-chosen key names.
    return _names_credential_cached(key) if len(key) <= _CACHED_KEY else _names_credential(key)


_SUMMARY_ENCODER = json.JSONEncoder(ensure_ascii=False, default=repr)


def _summarize(value: object, depth: int) -> object:
    if isinstance(value, Mapping):
        if depth >= _SUMMARY_DEPTH:
            return f"{{…{len(value)} keys}}"
        out: dict[str, object] = {}
        for index, (key, item) in enumerate(value.items()):
            if index >= _SUMMARY_ITEMS:
                out["…"] = f"{len(value) - _SUMMARY_ITEMS} more keys"
                break
            name = str(key)
            shown = name[:_SUMMARY_STRING]
            out[shown] = "[redacted]" if _is_sensitive(name) else _summarize(item, depth + 1)
        return out
    if isinstance(value, list | tuple):
        if depth >= _SUMMARY_DEPTH:
            return f"[…{len(value)} items]"
        head = [_summarize(item, depth + 1) for item in value[:_SUMMARY_ITEMS]]
        if len(value) > _SUMMARY_ITEMS:
            head.append(f"…{len(value) - _SUMMARY_ITEMS} more items")
        return head
    if isinstance(value, str) and len(value) > _SUMMARY_STRING:
        return f"{value[:_SUMMARY_STRING]}…({len(value)} chars)"
    return value


def summarize_arguments(arguments: object) -> str:
    """A short, redacted JSON summary of arguments for the audit log.

    Values under credential-like keys are replaced, strings and collections are clipped,
    and the whole summary is bounded. Full pattern-based redaction is the shaping
    layer's job; this only keeps the audit log from becoming a copy of the input.
    """
    text = _SUMMARY_ENCODER.encode(_summarize(arguments, 0))
    return text if len(text) <= _SUMMARY_TOTAL else text[: _SUMMARY_TOTAL - 1] + "…"
