"""Audit events: the facts of the audit trail, and the form every store keeps them in.

Owns the event and subject values, the widths of the stored row, and fitting text to
them (escaping what no store can hold, clipping what is too long). It never decides
anything and never writes anywhere: the auditor builds events, sinks and stores keep them.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import Any

from handrail.text import escape_unstorable, is_storable

__all__ = [
    "NOTES_HEAD",
    "NOTE_WIDTH",
    "NO_SUBJECT",
    "STORED_WIDTHS",
    "AuditEvent",
    "AuditItem",
    "AuditSubject",
    "CallNotes",
    "CallRecord",
    "Stage",
    "SubjectFields",
    "event_of",
    "events_of",
    "fields_of",
    "fit_text",
    "record_fits",
    "storable_events",
    "subject_of",
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


_SET_SUBJECT = tuple(getattr(AuditSubject, f.name).__set__ for f in fields(AuditSubject))


def subject_of(  # noqa: PLR0917 - one argument per field, positional for speed
    request_id: str | None,
    tool_call_id: str | None,
    tool: str | None,
    schema_version: str | None,
    args_hash: str | None,
    args_summary: str | None,
    user_id: str | None,
    tenant_id: str | None,
) -> AuditSubject:
    """The same AuditSubject as the keyword constructor makes, built faster (once a call)."""
    subject: AuditSubject = _new_object(AuditSubject)
    s_req, s_call, s_tool, s_version, s_hash, s_summary, s_user, s_tenant = _SET_SUBJECT
    s_req(subject, request_id)
    s_call(subject, tool_call_id)
    s_tool(subject, tool)
    s_version(subject, schema_version)
    s_hash(subject, args_hash)
    s_summary(subject, args_summary)
    s_user(subject, user_id)
    s_tenant(subject, tenant_id)
    return subject


Stage = tuple[str, str, str | None, str | None, float, datetime | int]
"""One stage of a call: (stage, decision, code, detail, seconds it took, when it ended).

When it ended is a datetime, or an int: nanoseconds since the epoch as `time.time_ns`
read them, the same reading `datetime.now(UTC)` floors to microseconds.
"""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def wall_time(at: datetime | int) -> datetime:
    """A stage's end as a datetime (see `Stage`)."""
    if isinstance(at, int):
        return _EPOCH + timedelta(microseconds=at // 1000)
    return at


SubjectFields = tuple[
    str | None, str | None, str | None, str | None, str | None, str | None, str | None, str | None
]
"""An AuditSubject's fields, in its order: request_id, tool_call_id, tool, schema_version,
args_hash, args_summary, user_id, tenant_id."""


def fields_of(subject: AuditSubject) -> SubjectFields:
    """`subject`'s fields, in its order."""
    s = subject
    return (
        s.request_id,
        s.tool_call_id,
        s.tool,
        s.schema_version,
        s.args_hash,
        s.args_summary,
        s.user_id,
        s.tenant_id,
    )


CallNotes = tuple[Any, ...]
"""A call as its trail notes it: flat, one tuple for the whole call (cheap to keep).

`NOTES_HEAD` values first: the 8 subject fields (as `SubjectFields`), the wall clock at
the start (nanoseconds since the epoch, or None when every stage reads its own) and the
monotonic reading at the start. Then `NOTE_WIDTH` values per stage: stage, decision,
code, detail, the monotonic reading at its end and when it ended (None: the wall clock
at the start plus the monotonic time since). With a start in nanoseconds, monotonic
readings are nanoseconds (`time.monotonic_ns`), else seconds (`Clock.monotonic`).
"""

NOTES_HEAD = 10
NOTE_WIDTH = 6


def _stages_of(notes: CallNotes) -> list[Stage]:
    """The `Stage`s of a call's notes (see `CallNotes`)."""
    wall_start, start = notes[8], notes[9]
    previous = start
    stages: list[Stage] = []
    for index in range(NOTES_HEAD, len(notes), NOTE_WIDTH):
        stage, decision, code, detail, mark, at = notes[index : index + NOTE_WIDTH]
        if wall_start is None:
            seconds = mark - previous
        else:
            seconds = (mark - previous) / 1e9
            if at is None:
                at = wall_start + (mark - start)
        stages.append((stage, decision, code, detail, seconds, at))
        previous = mark
    return stages


class CallRecord:
    """The events of one call, compact: what the sink turns into AuditEvents when read.

    Taken when the call is over, with everything an event holds already decided: the
    ids (`ids`, or `id_prefix` followed by the hex counters from `id_first`, as
    `record.audit.unique_ids` makes them), each stage's clock readings, the scrubbed
    details and the fields of the shared, scrubbed subject. `events()` makes the same
    events the auditor used to build at once; a store may write rows from it directly.
    A record made by `noted` keeps the call's notes as one tuple (one object for the
    collector to track, not one per stage) and makes its stages when first read.
    """

    __slots__ = (
        "_notes",
        "_stages",
        "_subject",
        "_subject_fields",
        "id_first",
        "id_prefix",
        "ids",
        "kind",
    )

    def __init__(
        self,
        kind: str,
        subject_fields: SubjectFields,
        stages: Sequence[Stage],
        *,
        ids: Sequence[str] = (),
        id_prefix: str | None = None,
        id_first: int = 0,
    ) -> None:
        self.kind = kind
        self._subject_fields: SubjectFields | None = subject_fields
        self._stages: Sequence[Stage] | None = stages
        self._notes: CallNotes = ()
        self.ids = ids
        self.id_prefix = id_prefix
        self.id_first = id_first
        self._subject: AuditSubject | None = None

    @classmethod
    def noted(
        cls,
        kind: str,
        notes: CallNotes,
        *,
        ids: Sequence[str] = (),
        id_prefix: str | None = None,
        id_first: int = 0,
    ) -> CallRecord:
        """The record of a call's notes (see `CallNotes`), made into stages when read."""
        record: CallRecord = _new_object(cls)
        record.kind = kind
        record._subject_fields = None
        record._stages = None
        record._notes = notes
        record.ids = ids
        record.id_prefix = id_prefix
        record.id_first = id_first
        record._subject = None
        return record

    @property
    def notes(self) -> CallNotes:
        """The call's notes, if the record was made by `noted` (else empty)."""
        return self._notes

    @property
    def subject_fields(self) -> SubjectFields:
        """The fields of the subject every event of the call shares."""
        fields = self._subject_fields
        if fields is None:
            fields = self._subject_fields = self._notes[:8]
        return fields

    @property
    def stages(self) -> Sequence[Stage]:
        """The stages, in order (see `Stage`)."""
        stages = self._stages
        if stages is None:
            stages = self._stages = _stages_of(self._notes)
        return stages

    @property
    def subject(self) -> AuditSubject:
        """The subject every event of the call shares (made once)."""
        subject = self._subject
        if subject is None:
            subject = self._subject = subject_of(*self.subject_fields)
        return subject

    def __len__(self) -> int:
        stages = self._stages
        if stages is None:
            return (len(self._notes) - NOTES_HEAD) // NOTE_WIDTH
        return len(stages)

    def event_ids(self) -> Sequence[str]:
        """The ids of the events, in order."""
        prefix = self.id_prefix
        if prefix is None:
            return self.ids
        first = self.id_first
        return [f"{prefix}{first + index:08x}" for index in range(len(self))]

    def events(self) -> list[AuditEvent]:
        """The AuditEvents, one per stage, in order."""
        kind, subject = self.kind, self.subject
        return [
            event_of(
                event_id,
                wall_time(at),
                kind,
                stage,
                decision,
                subject,
                code,
                round(seconds * 1000, 3),
                detail,
            )
            for event_id, (stage, decision, code, detail, seconds, at) in zip(
                self.event_ids(), self.stages, strict=True
            )
        ]


AuditItem = AuditEvent | CallRecord
"""What a batch of audit holds: single events, and calls recorded compactly."""


def events_of(items: Sequence[AuditItem]) -> list[AuditEvent]:
    """The events of `items`, in order, each call's made from its record."""
    out: list[AuditEvent] = []
    for item in items:
        if isinstance(item, CallRecord):
            out.extend(item.events())
        else:
            out.append(item)
    return out


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
    return _fields_fit(*fields_of(subject))


def _fields_fit(  # noqa: PLR0917 - a subject's fields, as `SubjectFields` orders them
    request_id: str | None,
    tool_call_id: str | None,
    tool: str | None,
    schema_version: str | None,
    args_hash: str | None,
    args_summary: str | None,
    user_id: str | None,
    tenant_id: str | None,
) -> bool:
    """`_subject_fits` of a subject with these fields."""
    request_id, call_id, tool = request_id or "", tool_call_id or "", tool or ""
    user_id, tenant_id = user_id or "", tenant_id or ""
    version, digest = schema_version or "", args_hash or ""
    return (
        is_storable(
            request_id
            + call_id
            + tool
            + user_id
            + tenant_id
            + version
            + digest
            + (args_summary or ""),
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


def record_fits(record: CallRecord) -> bool:  # noqa: PLR0911 - one return per check
    """Whether a store keeps all of `record`'s text as it is (no `storable_events` copy).

    A store that writes rows from the record directly checks this first; when it says
    False, the record's events take `storable_events`, so the rows are the same. A
    record made by `CallRecord.noted` is checked on its notes, without making stages.
    """
    count = len(record)
    if not count:
        return True
    try:
        prefix = record.id_prefix
        if prefix is None:
            ids = record.ids
            if len(ids) != count or not all(
                is_storable(event_id) and len(event_id) <= _ID_WIDTH for event_id in ids
            ):
                return False
        else:
            last = f"{prefix}{record.id_first + count - 1:08x}"
            if not is_storable(prefix) or len(last) > _ID_WIDTH:
                return False
        kind, notes = record.kind, record.notes
        if notes:
            return _notes_fit(kind, notes)
        if not _fields_fit(*record.subject_fields) or len(kind) > _LABEL_WIDTH:
            return False
        for stage, decision, code, detail, _, _ in record.stages:
            if detail is not None and not is_storable(detail):
                return False
            if not (
                is_storable(kind + stage + decision + (code or ""))
                and len(stage) <= _LABEL_WIDTH
                and len(decision) <= _LABEL_WIDTH
                and (code is None or len(code) <= _CODE_WIDTH)
            ):
                return False
    except TypeError:  # a field that is not text: the events' slow path handles it
        return False
    return True


@functools.lru_cache(maxsize=1024)
def _labels_fit(kind: str, named: tuple[Any, ...], codes: tuple[Any, ...]) -> bool:
    """Whether a call's kind, stage names and decisions (`named`) and codes fit.

    Remembered: the labels of a call are the gate's own names and codes, so the same
    few tuples come back call after call.
    """
    try:
        return (
            is_storable(kind + "".join(named) + "".join(filter(None, codes)))
            and len(kind) <= _LABEL_WIDTH
            and all(len(label) <= _LABEL_WIDTH for label in named)
            and all(code is None or len(code) <= _CODE_WIDTH for code in codes)
        )
    except TypeError:  # a label that is not text
        return False


def _notes_fit(kind: str, notes: CallNotes) -> bool:
    """`record_fits` of a noted record but its ids: on the flat notes, the labels remembered.

    It runs for every call a store's writer keeps, so no stage is made.
    """
    named = notes[NOTES_HEAD::NOTE_WIDTH] + notes[NOTES_HEAD + 1 :: NOTE_WIDTH]
    try:
        return (
            _labels_fit(kind, named, notes[NOTES_HEAD + 2 :: NOTE_WIDTH])
            and _fields_fit(*notes[:8])
            and is_storable("".join(filter(None, notes[NOTES_HEAD + 3 :: NOTE_WIDTH])))
        )
    except TypeError:  # a value that is not text (or not hashable): the slow path
        return False


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
