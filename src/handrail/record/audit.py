"""The auditor: audit events built for every stage of a call and handed to a sink.

Owns building events (id, time, scrubbed detail), the sink protocol, the in-memory sink
and the redacted arguments summary. It never decides anything; it records what the
gate, the registry and the write path decided. Sinks that persist live beside it.
"""

from __future__ import annotations

import functools
import itertools
import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from handrail.events import NO_SUBJECT, AuditEvent, AuditSubject, event_of

if TYPE_CHECKING:
    from handrail.clock import Clock


__all__ = ["AuditSink", "Auditor", "MemoryAuditSink", "summarize_arguments", "unique_ids"]


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
        stages: Sequence[tuple[str, str, str | None, str | None, float, datetime]],
        *,
        kind: str = "call",
    ) -> None:
        """Emit one event per stage, all about `subject`, in one batch.

        A stage is (stage, decision, code, detail, seconds it took, when it ended). The
        same events as `emit` of `event(...)` for each stage, built and scrubbed with
        less work: the shared subject's summary is scrubbed once.
        """
        sink = self._sink
        if sink is None or not stages:
            return
        scrub = self._scrub
        if scrub is not None:
            subject = _scrubbed_subject(subject, scrub)
        new_id = self._new_id
        sink.emit(
            [
                event_of(
                    new_id(),
                    at,
                    kind,
                    stage,
                    decision,
                    subject,
                    code,
                    round(seconds * 1000, 3),
                    detail if detail is None or scrub is None else scrub(detail),
                )
                for stage, decision, code, detail, seconds, at in stages
            ],
        )

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
    """Keeps events in a list; for tests and for `handrail.testing`."""

    def __init__(self) -> None:
        self.events: list[AuditEvent] = []

    def emit(self, events: Sequence[AuditEvent]) -> None:
        """Append the events."""
        self.events.extend(events)

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
    return _bounded(_SUMMARY_ENCODER.encode(_summarize(arguments, 0)))


def _bounded(text: str) -> str:
    return text if len(text) <= _SUMMARY_TOTAL else text[: _SUMMARY_TOTAL - 1] + "…"
