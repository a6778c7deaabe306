"""Envelope: the one result contract a model reads, for successes and refusals alike.

Stable keys, a machine status and code, a short summary Handrail wrote, bounded data,
and enough to act on (field errors, candidates, retryability). It never carries stack
traces, internal paths, exception text or secrets.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Final

import pydantic_core

from handrail.errors import ErrorCode

__all__ = [
    "ENVELOPE_VERSION",
    "HANDRAIL_SOURCE",
    "Envelope",
    "ErrorDetail",
    "Omission",
    "Status",
    "Trust",
    "jsonable",
    "result_envelope",
]

ENVELOPE_VERSION = "1"
"""Version of the envelope contract itself; bumped only on an incompatible change."""

HANDRAIL_SOURCE = "handrail"
"""The source of an envelope Handrail wrote itself, with no word of a tool in it."""

_NO_FIELD_ERRORS: Mapping[str, str] = MappingProxyType({})
_NO_REDACTIONS: Mapping[str, int] = MappingProxyType({})


class Status(StrEnum):
    """What happened, as the model should read it."""

    OK = "ok"
    EMPTY = "empty"
    """A valid answer with nothing in it; not an error."""
    TRUNCATED = "truncated"
    """A valid answer that was cut to fit the budget."""
    ERROR = "error"
    """Refused or failed; `error` says why and whether to try again."""


class Trust(StrEnum):
    """How far the content of a result may be believed.

    Every level is data, never instructions; the level is shown to the model in the
    header of the result's data block. A block has one level, that of its least
    trusted words: anything a tool, its hooks or its downstream wrote (a result, a
    signal's message, candidates, an impact) makes it untrusted data of the tool, and
    Handrail's wording that quotes the model's own arguments (field errors, a default
    impact) is untrusted too, with source "handrail".
    """

    UNTRUSTED = "untrusted"
    """Content anyone may have written: web pages, e-mail, tickets, files, logs."""
    INTERNAL = "internal"
    """Records of the host's own systems; still data, still possibly user-written."""
    HANDRAIL = "handrail"
    """Handrail's fixed wording only: no word of a tool and no quoted argument in it."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Omission:
    """What was left out at one place of a result, so the model knows the whole size.

    `path` is a JSONPath into `data` ("$" for the whole). `unit` is "items" for a list
    cut to its first `kept` items, "chars" for a string cut to its first `kept`
    characters, "lines" for a text excerpt, "fields" for object members left out.
    """

    path: str
    unit: str
    kept: int
    total: int


@dataclass(frozen=True, kw_only=True, slots=True)
class ErrorDetail:
    """Why a call was refused or failed, and what the model may do about it."""

    code: ErrorCode
    retryable: bool = False
    retry_after: float | None = None
    field_errors: Mapping[str, str] = field(default_factory=lambda: _NO_FIELD_ERRORS)
    candidates: tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        if self.field_errors is not _NO_FIELD_ERRORS:
            object.__setattr__(self, "field_errors", MappingProxyType(dict(self.field_errors)))


@dataclass(frozen=True, kw_only=True, slots=True)
class Envelope:
    """The result of one tool call as shown to the model, keyed by its call id.

    `error` is set exactly when `status` is ERROR; its fields are also readable flat
    (`error_type`, `retryable`, ...), as the model reads them.
    """

    call_id: str
    tool: str
    status: Status
    summary: str
    data: Any = None
    truncated: bool = False
    cursor: str | None = None
    ref: str | None = None
    schema_version: str | None = None
    error: ErrorDetail | None = None
    trust: Trust = Trust.UNTRUSTED
    source: str | None = None
    """Where the data came from, as shown to the model; None means the tool itself,
    `HANDRAIL_SOURCE` an envelope Handrail wrote with no word of a tool in it."""
    omitted: tuple[Omission, ...] = ()
    redacted: Mapping[str, int] = field(default_factory=lambda: _NO_REDACTIONS)
    """How many values of each kind (email, credential, ...) were masked, hashed or dropped."""

    def __post_init__(self) -> None:
        if (self.status is Status.ERROR) != (self.error is not None):
            msg = "an envelope has an error exactly when its status is 'error'"
            raise ValueError(msg)
        if (self.status is Status.TRUNCATED) != self.truncated:
            msg = "an envelope is truncated exactly when its status is 'truncated'"
            raise ValueError(msg)
        if self.redacted is not _NO_REDACTIONS:
            redacted = MappingProxyType(dict(self.redacted)) if self.redacted else _NO_REDACTIONS
            object.__setattr__(self, "redacted", redacted)

    @property
    def source_label(self) -> str:
        """The source as shown in the data block header: `tool:<name>` unless set."""
        return self.source if self.source is not None else f"tool:{self.tool}"

    @property
    def ok(self) -> bool:
        """True for ok, empty and truncated results."""
        return self.error is None

    @property
    def error_type(self) -> ErrorCode | None:
        """The stable code of a refusal or failure; None for results."""
        return None if self.error is None else self.error.code

    @property
    def retryable(self) -> bool:
        """Whether the same call may succeed if made again."""
        return self.error is not None and self.error.retryable

    @property
    def retry_after(self) -> float | None:
        """Seconds to wait before a retry, when known."""
        return None if self.error is None else self.error.retry_after

    @property
    def field_errors(self) -> Mapping[str, str]:
        """Argument errors by JSONPath."""
        return _NO_FIELD_ERRORS if self.error is None else self.error.field_errors

    @property
    def candidates(self) -> tuple[Any, ...]:
        """Choices offered with NEEDS_CLARIFICATION."""
        return () if self.error is None else self.error.candidates

    def to_model_dict(self) -> dict[str, Any]:
        """The JSON object the model reads. Keys are stable; optional ones appear when set."""
        error = self.error
        out: dict[str, Any] = {
            "status": self.status._value_,  # the enum's `.value` property costs two calls
            "summary": self.summary,
            "data": self.data,
            "truncated": self.truncated,
            "error_type": None if error is None else error.code.value,
            "retryable": error is not None and error.retryable,
            "schema_version": self.schema_version,
            "envelope_version": ENVELOPE_VERSION,
        }
        if self.cursor is not None:
            out["cursor"] = self.cursor
        if self.ref is not None:
            out["ref"] = self.ref
        if self.omitted:
            out["omitted"] = [
                {"path": o.path, "unit": o.unit, "kept": o.kept, "total": o.total}
                for o in self.omitted
            ]
        if self.redacted:
            out["redacted"] = dict(self.redacted)
        if error is not None:
            if error.retry_after is not None:
                out["retry_after"] = error.retry_after
            if error.field_errors:
                out["field_errors"] = dict(error.field_errors)
            if error.candidates:
                out["candidates"] = list(error.candidates)
        return out

    def to_json(self) -> str:
        """Compact JSON of `to_model_dict()`, UTF-8 characters kept as they are.

        Always valid JSON: a NaN or infinity that slipped into `data` becomes null.
        """
        return pydantic_core.to_json(self.to_model_dict(), inf_nan_mode="null").decode()


# Looked up once: reading an enum member off its class costs a lookup every time.
_ERROR: Final = Status.ERROR
_TRUNCATED: Final = Status.TRUNCATED


class _Draft:
    """An Envelope being built: the same slots, in the same order, without the guard.

    A frozen dataclass sets every field through `object.__setattr__`, about 0.1 µs
    each; a draft's fields are plain slot stores. The finished draft becomes an
    Envelope by `__class__` assignment, which CPython allows between classes of the
    same layout, and from then on it is as frozen as any other.
    """

    __slots__ = Envelope.__slots__


def result_envelope(  # noqa: PLR0917 - one parameter per field a result sets
    call_id: str,
    tool: str,
    status: Status,
    summary: str,
    data: Any,  # noqa: ANN401 - JSON
    schema_version: str | None,
    trust: Trust,
    source: str | None,
    omitted: tuple[Omission, ...],
    redacted: Mapping[str, int],
    ref: str | None,
    /,
) -> Envelope:
    """The envelope of a result (never an error, no cursor): equal to `Envelope(...)`.

    Built as a draft, since this runs once per call of every read; the checks of
    `Envelope.__post_init__` that apply hold here too.
    """
    if status is _ERROR:
        msg = "an envelope has an error exactly when its status is 'error'"
        raise ValueError(msg)
    draft = _Draft()
    draft.call_id = call_id  # type: ignore[attr-defined]
    draft.tool = tool  # type: ignore[attr-defined]
    draft.status = status  # type: ignore[attr-defined]
    draft.summary = summary  # type: ignore[attr-defined]
    draft.data = data  # type: ignore[attr-defined]
    draft.truncated = status is _TRUNCATED  # type: ignore[attr-defined]
    draft.cursor = None  # type: ignore[attr-defined]
    draft.ref = ref  # type: ignore[attr-defined]
    draft.schema_version = schema_version  # type: ignore[attr-defined]
    draft.error = None  # type: ignore[attr-defined]
    draft.trust = trust  # type: ignore[attr-defined]
    draft.source = source  # type: ignore[attr-defined]
    draft.omitted = omitted  # type: ignore[attr-defined]
    draft.redacted = MappingProxyType(dict(redacted)) if redacted else _NO_REDACTIONS  # type: ignore[attr-defined]
    draft.__class__ = Envelope  # type: ignore[assignment]
    return draft  # type: ignore[return-value]


def jsonable(result: object) -> tuple[Any, bytes]:
    """A tool result as plain JSON data and its compact encoding.

    Raises ValueError when the result cannot be JSON: an unserialisable object, NaN or
    an infinity.
    """
    try:
        data = pydantic_core.to_jsonable_python(result)
        encoded = pydantic_core.to_json(data)
    except (pydantic_core.PydanticSerializationError, TypeError) as exc:
        raise ValueError(str(exc)) from exc
    if _has_non_finite(data, encoded):
        msg = "the result contains NaN or an infinite number"
        raise ValueError(msg)
    return data, encoded


def _has_non_finite(data: object, encoded: bytes) -> bool:
    """Whether a serialised result holds NaN or an infinity, which are not JSON.

    They serialise as bare constants; only when such a token appears can there be one,
    and serialising with them as null then tells a constant from a string's text.
    """
    if b"NaN" not in encoded and b"Infinity" not in encoded:
        return False
    return encoded != pydantic_core.to_json(data, inf_nan_mode="null")
