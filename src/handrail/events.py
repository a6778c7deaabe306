"""Audit events: the facts of the audit trail, and the form every store keeps them in.

Owns the event and subject values, the widths of the stored row, and fitting text to
them (escaping what no store can hold, clipping what is too long). It never decides
anything and never writes anywhere: the auditor builds events, sinks and stores keep them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from datetime import datetime
from types import MappingProxyType
from typing import Any

from handrail.text import escape_unstorable, is_storable

__all__ = [
    "NO_SUBJECT",
    "STORED_WIDTHS",
    "AuditEvent",
    "AuditSubject",
    "event_of",
    "fit_text",
    "storable_events",
]


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


NO_SUBJECT = AuditSubject()


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
    subject: AuditSubject = NO_SUBJECT
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


# The slots' setters, for `event_of`: the frozen __init__ goes through object.__setattr__
# and keyword handling for each field, at more than twice the cost.
_SET_EVENT = tuple(
    getattr(AuditEvent, name).__set__
    for name in (
        "event_id",
        "at",
        "kind",
        "stage",
        "decision",
        "subject",
        "code",
        "duration_ms",
        "detail",
    )
)
_new_object = object.__new__


def event_of(  # noqa: PLR0917 - one argument per field, positional for speed
    event_id: str,
    at: datetime,
    kind: str,
    stage: str,
    decision: str,
    subject: AuditSubject,
    code: str | None,
    duration_ms: float | None,
    detail: str | None,
) -> AuditEvent:
    """The same AuditEvent as the keyword constructor makes, built faster.

    For the auditor, which builds one event per stage of every call.
    """
    event: AuditEvent = _new_object(AuditEvent)
    e_id, e_at, e_kind, e_stage, e_decision, e_subject, e_code, e_duration, e_detail = _SET_EVENT
    e_id(event, event_id)
    e_at(event, at)
    e_kind(event, kind)
    e_stage(event, stage)
    e_decision(event, decision)
    e_subject(event, subject)
    e_code(event, code)
    e_duration(event, duration_ms)
    e_detail(event, detail)
    return event


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


def fit_text(text: str, width: int | None) -> str:
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
        if isinstance(text, str) and (fitted := fit_text(text, width)) is not text:
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
    kept = NO_SUBJECT
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
