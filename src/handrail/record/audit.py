"""The auditor: audit events built for every stage of a call and handed to a sink.

Owns building events (id, time, scrubbed detail) and, for a tool call, its compact
record (`CallRecord`: ids taken and text scrubbed at once, events made when read), the
sink protocol, the in-memory sink and the redacted arguments summary. It never decides
anything; it records what the gate, the registry and the write path decided. Sinks
that persist live beside it.
"""

from __future__ import annotations

import functools
import json
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Final, Protocol

from handrail.canonical import canonical_json, sha256_hex
from handrail.events import (
    NO_SUBJECT,
    NOTE_WIDTH,
    NOTES_HEAD,
    AuditEvent,
    AuditSubject,
    CallNotes,
    CallRecord,
    Stage,
    SubjectFields,
    fields_of,
)

if TYPE_CHECKING:
    from handrail.clock import Clock


__all__ = [
    "AuditSink",
    "Auditor",
    "CallSink",
    "MemoryAuditSink",
    "UniqueIds",
    "summarize_arguments",
    "unique_ids",
]


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
# Argument texts up to this long have their hash and summary remembered, this many.
_CACHED_ARGUMENTS = 256
_CACHED_ARGUMENT_TEXTS = 4096


class AuditSink(Protocol):
    """Receives audit events. `emit` must not block the event loop for long.

    A sink may also have `emit_call(record: CallRecord)` (see `CallSink`): then the
    events of a tool call reach it as one compact record, to be turned into events
    when read or written. A sink with `emit` alone receives those same events.
    """

    def emit(self, events: Sequence[AuditEvent]) -> None:
        """Accept events for recording, in order."""
        ...


class CallSink(AuditSink, Protocol):
    """A sink that takes the events of a call as one `CallRecord` (cheaper to emit)."""

    def emit_call(self, record: CallRecord) -> None:
        """Accept the events of one call, in order, as a record."""
        ...


class UniqueIds:
    """Ids unique across processes: a random 96-bit prefix per source, then a counter.

    Cheaper than a uuid4 per event (no system call), and still never repeats. A call's
    ids can be reserved as a block (`reserve`) and written out only when read.
    """

    __slots__ = ("_lock", "_next", "prefix")

    def __init__(self) -> None:
        self.prefix = uuid.uuid4().hex[:24]
        self._next = 1
        self._lock = threading.Lock()

    def __call__(self) -> str:
        """The next id."""
        with self._lock:
            number = self._next
            self._next = number + 1
        return f"{self.prefix}{number:08x}"

    def reserve(self, count: int) -> int:
        """Take the next `count` counters; the first of them. Id k is `prefix` + f"{k:08x}"."""
        with self._lock:
            first = self._next
            self._next = first + count
        return first


def unique_ids() -> UniqueIds:
    """A new source of unique ids (see `UniqueIds`)."""
    return UniqueIds()


class Auditor:
    """Builds events (id, timestamp) and hands them to a sink; None means auditing is off.

    The id source and clock are injected so that tests can replay a trail exactly.
    """

    __slots__ = ("_clock", "_emit_call", "_facts", "_ids", "_new_id", "_scrub", "_sink", "enabled")

    def __init__(
        self,
        sink: AuditSink | None,
        clock: Clock,
        *,
        new_id: Callable[[], str] | None = None,
        scrub: Callable[[str], str] | None = None,
    ) -> None:
        self._sink = sink
        # False when events would go nowhere, so callers can skip building them (an
        # attribute, not a property: the gate asks once a call).
        self.enabled: Final[bool] = sink is not None
        self._clock = clock
        self._new_id = new_id or unique_ids()
        # The default id source hands out a call's ids as one block.
        self._ids = self._new_id if isinstance(self._new_id, UniqueIds) else None
        # Applied to every detail and argument summary before it leaves: secret values
        # and personal data never reach the audit trail.
        self._scrub = scrub
        self._emit_call = _call_emitter(sink) if sink is not None else None
        # Argument texts repeat (the same tool, the same arguments): see `arguments`.
        self._facts: dict[str, tuple[str | None, str]] = {}

    def event(
        self,
        *,
        kind: str,
        stage: str,
        decision: str,
        subject: AuditSubject = NO_SUBJECT,
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
                events = _scrubbed(events, self._scrub)
            self._sink.emit(events)

    def emit_stages(
        self,
        subject: AuditSubject,
        stages: Sequence[Stage],
        *,
        kind: str = "call",
    ) -> None:
        """Emit one event per stage, all about `subject`, as one `CallRecord`.

        A stage is (stage, decision, code, detail, seconds it took, when it ended; see
        `Stage`). The same events as `emit` of `event(...)` for each stage: ids are
        taken now, details and the shared subject's summary are scrubbed now, once;
        only turning the record into events is left to the sink.
        """
        self.emit_call(fields_of(subject), stages, kind=kind)

    def emit_call(
        self,
        subject: SubjectFields,
        stages: Sequence[Stage],
        *,
        kind: str = "call",
    ) -> None:
        """`emit_stages` of a subject given by its fields (see `SubjectFields`)."""
        emit_call = self._emit_call
        if emit_call is None or not stages:
            return
        scrub = self._scrub
        if scrub is not None:
            summary = subject[5]
            if summary is not None and (clean := scrub(summary)) != summary:
                subject = (*subject[:5], _bounded(clean), *subject[6:])
            for stage in stages:
                if stage[3] is not None:
                    stages = _scrubbed_stages(stages, scrub)
                    break
        ids = self._ids
        if ids is not None:
            record = CallRecord(
                kind, subject, stages, id_prefix=ids.prefix, id_first=ids.reserve(len(stages))
            )
        else:
            new_id = self._new_id
            record = CallRecord(kind, subject, stages, ids=[new_id() for _ in stages])
        emit_call(record)

    def emit_noted(self, notes: CallNotes, *, kind: str = "call") -> None:
        """`emit_call` of a call's notes (see `CallNotes`): the same events, one tuple kept.

        The subject's summary and the stages' details are scrubbed now, once, as by
        `emit_call`; the stages are made from the notes only when the record is read.
        """
        emit_call = self._emit_call
        size = len(notes)
        if emit_call is None or size <= NOTES_HEAD:
            return
        scrub = self._scrub
        if scrub is not None:
            notes = _scrubbed_notes(notes, scrub)
        count = (size - NOTES_HEAD) // NOTE_WIDTH
        ids = self._ids
        if ids is not None:
            # `ids.reserve(count)` written out, one call less (UniqueIds is this module's).
            with ids._lock:  # noqa: SLF001
                first = ids._next  # noqa: SLF001
                ids._next = first + count  # noqa: SLF001
            record = CallRecord.noted(kind, notes, id_prefix=ids.prefix, id_first=first)
        else:
            new_id = self._new_id
            record = CallRecord.noted(kind, notes, ids=[new_id() for _ in range(count)])
        emit_call(record)

    def arguments(self, raw: object, arguments: object) -> tuple[str | None, str]:
        """The hash (None if not canonical JSON) and summary of `arguments`, parsed from `raw`.

        Remembered for short argument texts (bounded), since the same text always parses
        to the same arguments; only for arguments their summary shows whole (see
        `_argument_facts`), so this memory holds nothing the summary does not say.
        """
        if type(raw) is not str or len(raw) > _CACHED_ARGUMENTS:
            return _argument_facts(arguments)[0]
        facts = self._facts.get(raw)
        if facts is None:
            facts, whole = _argument_facts(arguments)
            if whole:
                if len(self._facts) >= _CACHED_ARGUMENT_TEXTS:
                    self._facts.clear()
                self._facts[raw] = facts
        return facts

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


def _call_emitter(sink: AuditSink) -> Callable[[CallRecord], None]:
    """How records reach `sink`: its `emit_call`, or its `emit` of the record's events."""
    emit_call: Callable[[CallRecord], None] | None = getattr(sink, "emit_call", None)
    if emit_call is not None:
        return emit_call
    emit = sink.emit
    return lambda record: emit(record.events())


def _argument_facts(arguments: object) -> tuple[tuple[str | None, str], bool]:
    """`arguments`' hash and summary, and whether it shows them whole (`_summary_showing`)."""
    try:
        digest: str | None = sha256_hex(canonical_json(arguments))
    except ValueError:
        digest = None
    summary, whole = _summary_showing(arguments)
    return (digest, summary), whole


def _scrubbed_notes(notes: CallNotes, scrub: Callable[[str], str]) -> CallNotes:
    """`notes` with the subject's summary and every stage's detail scrubbed (see `CallNotes`)."""
    changed: list[object] | None = None
    summary = notes[5]
    if summary is not None and (clean := scrub(summary)) != summary:
        changed = list(notes)
        # A placeholder can be longer than what it replaced: bound the summary again.
        changed[5] = _bounded(clean)
    details = notes[NOTES_HEAD + 3 :: NOTE_WIDTH]
    if details.count(None) != len(details):
        changed = changed or list(notes)
        for index in range(NOTES_HEAD + 3, len(notes), NOTE_WIDTH):
            detail = changed[index]
            if detail is not None:
                changed[index] = scrub(detail)  # type: ignore[arg-type]  # a detail is text
    return notes if changed is None else tuple(changed)


def _scrubbed_stages(stages: Sequence[Stage], scrub: Callable[[str], str]) -> list[Stage]:
    return [
        (stage, decision, code, detail if detail is None else scrub(detail), seconds, at)
        for stage, decision, code, detail, seconds, at in stages
    ]


def _scrubbed_subject(subject: AuditSubject, scrub: Callable[[str], str]) -> AuditSubject:
    summary = subject.args_summary
    if summary is not None and (clean := scrub(summary)) != summary:
        # A placeholder can be longer than what it replaced: bound the summary again.
        return replace(subject, args_summary=_bounded(clean))
    return subject


def _scrubbed(events: Sequence[AuditEvent], scrub: Callable[[str], str]) -> list[AuditEvent]:
    """The events with their details and subjects' summaries scrubbed.

    The events of one call come together and share their subject: it is scrubbed once.
    """
    out: list[AuditEvent] = []
    seen: AuditSubject | None = None
    clean = NO_SUBJECT
    for event in events:
        subject = event.subject
        if subject is not seen:
            seen, clean = subject, _scrubbed_subject(subject, scrub)
        detail = event.detail
        if detail is not None:
            detail = scrub(detail)
        if detail == event.detail and clean is subject:
            out.append(event)
        else:
            out.append(replace(event, detail=detail, subject=clean))
    return out


class MemoryAuditSink:
    """Keeps events in a list; for tests and for `handrail.testing`.

    A call's record is kept as it came and made into events when `events` is read.
    """

    def __init__(self) -> None:
        self._events: list[AuditEvent] = []
        self._calls: list[CallRecord | Sequence[AuditEvent]] = []

    @property
    def events(self) -> list[AuditEvent]:
        """Every event, in order (the same list each time; clearing it clears the sink)."""
        if self._calls:
            self._settle()
        return self._events

    def _settle(self) -> None:
        # Taken from the front and deleted in one step each: an emit from another thread
        # meanwhile appends behind them and is settled next, never lost.
        calls, out = self._calls, self._events
        while calls:
            taken = calls[:]
            del calls[: len(taken)]
            for item in taken:
                out.extend(item.events() if isinstance(item, CallRecord) else item)

    def emit(self, events: Sequence[AuditEvent]) -> None:
        """Append the events."""
        if self._calls:
            self._calls.append(list(events))
        else:
            self._events.extend(events)

    def emit_call(self, record: CallRecord) -> None:
        """Append the events of one call (made when read)."""
        self._calls.append(record)

    def clear(self) -> None:
        """Drop every event."""
        self._calls.clear()
        self._events.clear()

    def for_call(self, call_id: str) -> list[AuditEvent]:
        """The events of one tool call, in order."""
        return [e for e in self.events if e.tool_call_id == call_id]


def _names_credential(key: str) -> bool:
    lowered = key.lower().replace("-", "_")
    return any(marker in lowered for marker in _SENSITIVE_KEYS)


_names_credential_cached = functools.lru_cache(maxsize=4096)(_names_credential)


def _is_sensitive(key: str) -> bool:
    # The whole key is checked, never a clipped one; only short keys are cached, so the
    # cache cannot hold megabytes of model-chosen key names.
    return _names_credential_cached(key) if len(key) <= _CACHED_KEY else _names_credential(key)


_SUMMARY_ENCODER = json.JSONEncoder(ensure_ascii=False, default=repr)
# The string encoder `_SUMMARY_ENCODER` uses (no ensure_ascii), for `_quick`.
_quoted: Callable[[str], str] = json.encoder.encode_basestring
_REDACTED = _quoted("[redacted]")


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


def _quick(value: object, depth: int) -> str | None:  # noqa: PLR0911 - one return per JSON type
    """`_SUMMARY_ENCODER.encode(_summarize(value, depth))` for the common case, else None.

    Common: None, bool, int, str, and dict (short str keys, at most `_SUMMARY_ITEMS` of
    them), list and tuple (at most `_SUMMARY_ITEMS` items) of those, of exactly these
    types: nothing to cut but strings, no key that clipping could make equal to another.
    One pass, without the intermediate summary.
    """
    kind = type(value)
    if kind is str:
        if len(value) > _SUMMARY_STRING:  # type: ignore[arg-type]  # a str
            value = f"{value[:_SUMMARY_STRING]}…({len(value)} chars)"  # type: ignore[index,arg-type]
        return _quoted(value)  # type: ignore[arg-type]  # a str
    if kind is int:
        return repr(value)
    if value is None:
        return "null"
    if kind is bool:
        return "true" if value else "false"
    if kind is dict:
        mapping: dict[object, object] = value  # type: ignore[assignment]  # a dict
        if depth >= _SUMMARY_DEPTH:
            return _quoted(f"{{…{len(mapping)} keys}}")
        if len(mapping) > _SUMMARY_ITEMS:
            return None
        parts: list[str] = []
        for key, item in mapping.items():
            if type(key) is not str or len(key) > _SUMMARY_STRING:
                return None
            text = _REDACTED if _is_sensitive(key) else _quick(item, depth + 1)
            if text is None:
                return None
            parts.append(f"{_quoted(key)}: {text}")
        return "{" + ", ".join(parts) + "}"
    if kind is list or kind is tuple:
        sequence: Sequence[object] = value  # type: ignore[assignment]  # a list or tuple
        if depth >= _SUMMARY_DEPTH:
            return _quoted(f"[…{len(sequence)} items]")
        if len(sequence) > _SUMMARY_ITEMS:
            return None
        items: list[str] = []
        for item in sequence:
            text = _quick(item, depth + 1)
            if text is None:
                return None
            items.append(text)
        return "[" + ", ".join(items) + "]"
    return None


def summarize_arguments(arguments: object) -> str:
    """A short, redacted JSON summary of arguments for the audit log.

    Values under credential-like keys are replaced, strings and collections are clipped,
    and the whole summary is bounded. Full pattern-based redaction is the shaping
    layer's job; this only keeps the audit log from becoming a copy of the input.
    """
    return _summary_showing(arguments)[0]


def _summary_showing(arguments: object) -> tuple[str, bool]:
    """`summarize_arguments`, and whether the summary shows the arguments whole.

    Whole: plain JSON the quick summary renders (short keys and strings, no floats, at
    most a few items, shallow), with nothing clipped or redacted.
    """
    text = _quick(arguments, 0)
    if text is None:
        return _bounded(_SUMMARY_ENCODER.encode(_summarize(arguments, 0))), False
    summary = _bounded(text)
    return summary, "…" not in summary and _REDACTED not in summary


def _bounded(text: str) -> str:
    return text if len(text) <= _SUMMARY_TOTAL else text[: _SUMMARY_TOTAL - 1] + "…"
