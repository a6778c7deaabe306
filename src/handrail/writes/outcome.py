"""What a write is and what became of it: the job the executor runs and its typed outcome.

Owns `WriteJob` (the tool, validated arguments, principal and key of one intended
write) and `WriteOutcome` (the one answer of every write path: envelope, record, key,
plan, replayed). It never runs anything and never reads a store.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from handrail.execution import ExecutionRecord, ExecutionStatus

if TYPE_CHECKING:
    from handrail.declare.definition import Tool
    from handrail.envelope import Envelope
    from handrail.errors import ErrorCode
    from handrail.principal import Principal


__all__ = ["WriteJob", "WriteOutcome"]


@dataclass(frozen=True, kw_only=True, slots=True)
class WriteJob:
    """One intended write: the tool, its validated arguments, who, and under which key.

    `arguments` are the model-facing arguments after stage 2 (JSON), `plan_hash` the
    hash the key is bound to (a plan's, or the intent hash of a command).
    """

    tool: Tool
    arguments: Mapping[str, Any]
    principal: Principal
    key: str
    plan_hash: str
    plan_id: str | None = None
    expected_version: str | None = None
    call_id: str


@dataclass(frozen=True, kw_only=True, slots=True)
class WriteOutcome:
    """What became of one request to write: the typed answer of every write path.

    `envelope` is what the model reads: ok, or an error with its code, always set.
    `record` is the execution record as this request left or found it; None when the
    request never reached one (refused before the key was claimed, a plan proposed,
    the store unreachable) or when its own outcome was fenced off by a reconciler.
    `key` is the idempotency key this request ran, replayed or waited under; None when
    it was refused before reaching one (no such plan, not confirmed, expired, a moved
    target, a failed check) or was no keyed write (a plan proposed, a read).
    `plan_id` is the plan run (or proposed); None for a command. `replayed` is True
    when the outcome was read from an earlier execution and the tool was not called.
    """

    envelope: Envelope
    record: ExecutionRecord | None
    key: str | None
    plan_id: str | None = None
    replayed: bool = False

    @property
    def status(self) -> ExecutionStatus | None:
        """The record's status as this request saw it; None without a record."""
        return None if self.record is None else self.record.status

    @property
    def business_id(self) -> str | None:
        """The downstream's id of the effect (a ticket number), once it succeeded."""
        return None if self.record is None else self.record.business_id

    @property
    def code(self) -> ErrorCode | None:
        """The envelope's error code; None when it is ok."""
        return self.envelope.error_type

    @property
    def ok(self) -> bool:
        """Whether the envelope is a result, not a refusal or failure."""
        return self.envelope.ok

    def error_is(self, code: ErrorCode) -> bool:
        """Whether the envelope is a refusal or failure with this code."""
        return self.envelope.error_type is code
