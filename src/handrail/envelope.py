"""Envelope: the one result contract a model reads, for successes and refusals alike.

Stable keys, a machine status and code, a short summary Handrail wrote, bounded data,
and enough to act on (field errors, candidates, retryability). It never carries stack
traces, internal paths, exception text or secrets.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from handrail.errors import ErrorCode

__all__ = ["ENVELOPE_VERSION", "Envelope", "Status"]

ENVELOPE_VERSION = "1"
"""Version of the envelope contract itself; bumped only on an incompatible change."""


class Status(StrEnum):
    """What happened, as the model should read it."""

    OK = "ok"
    EMPTY = "empty"
    """A valid answer with nothing in it; not an error."""
    TRUNCATED = "truncated"
    """A valid answer that was cut to fit the budget."""
    ERROR = "error"
    """Refused or failed; `error_type` says which and `retryable` whether to try again."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Envelope:
    """The result of one tool call as shown to the model, keyed by its call id."""

    call_id: str
    tool: str
    status: Status
    summary: str
    data: Any = None
    error_type: ErrorCode | None = None
    retryable: bool = False
    retry_after: float | None = None
    truncated: bool = False
    cursor: str | None = None
    ref: str | None = None
    schema_version: str | None = None
    field_errors: Mapping[str, str] = field(default_factory=dict)
    candidates: tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        if (self.status is Status.ERROR) != (self.error_type is not None):
            msg = "an envelope has an error_type exactly when its status is 'error'"
            raise ValueError(msg)
        object.__setattr__(self, "field_errors", MappingProxyType(dict(self.field_errors)))

    @property
    def ok(self) -> bool:
        """True for ok, empty and truncated results."""
        return self.status is not Status.ERROR

    def to_model_dict(self) -> dict[str, Any]:
        """The JSON object the model reads. Keys are stable; optional ones appear when set."""
        out: dict[str, Any] = {
            "status": self.status.value,
            "summary": self.summary,
            "data": self.data,
            "truncated": self.truncated,
            "error_type": None if self.error_type is None else self.error_type.value,
            "retryable": self.retryable,
            "schema_version": self.schema_version,
            "envelope_version": ENVELOPE_VERSION,
        }
        if self.retry_after is not None:
            out["retry_after"] = self.retry_after
        if self.cursor is not None:
            out["cursor"] = self.cursor
        if self.ref is not None:
            out["ref"] = self.ref
        if self.field_errors:
            out["field_errors"] = dict(self.field_errors)
        if self.candidates:
            out["candidates"] = list(self.candidates)
        return out

    def to_json(self) -> str:
        """Compact JSON of `to_model_dict()`, UTF-8 characters kept as they are."""
        return json.dumps(self.to_model_dict(), ensure_ascii=False, separators=(",", ":"))
