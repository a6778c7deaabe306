"""Error codes and the one exception hierarchy of Handrail.

Three families, never mixed:

    HandrailError                  for developers and operators; never reaches the model
    ├── RegistrationError          a tool definition Handrail refuses to register
    │   ├── SignatureError         untyped, variadic or positional-only parameters
    │   ├── IdentityParameterError the schema asks the model who it is
    │   ├── SchemaError            not a valid Draft 2020-12 schema for an object
    │   └── DuplicateToolError     the name is taken
    ├── UnknownToolError           lookup of a name the registry does not hold
    ├── ConfigurationError         the gate or store was set up wrongly
    ├── StoreError                 persistence failed
    │   └── AuditSinkError         the audit writer is closed, dead, behind or lost events
    ├── AccessRefusedError         a request of a person refused, with a code
    │   └── WriteRefusedError      a confirmation or execution request refused
    └── IllegalTransitionError     a state machine was asked for a move it does not allow

    ToolSignal                     raised by tool authors: a declared outcome with a code
    ├── NotFound, Conflict, InvalidArgument, NeedsClarification   (stage 3 validators, tools)
    ├── VersionConflict                            the target changed since confirmation
    ├── ToolFailed                                 terminal failure the tool understands
    └── ToolRetryable                              transient; carries retry_after
        └── RateLimited                            the downstream's rate limit

    Refusal                        internal to the gate: a stage said no; becomes an
                                   Envelope exactly once, in the gate

Every code is an `ErrorCode` whose value is the stable string of DESIGN.md section 4.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum

__all__ = [
    "AccessRefusedError",
    "AuditSinkError",
    "ConfigurationError",
    "Conflict",
    "DuplicateToolError",
    "ErrorCode",
    "HandrailError",
    "IdentityParameterError",
    "IllegalTransitionError",
    "InvalidArgument",
    "NeedsClarification",
    "NotFound",
    "RateLimited",
    "Refusal",
    "RegistrationError",
    "SchemaError",
    "SignatureError",
    "StoreError",
    "ToolFailed",
    "ToolRetryable",
    "ToolSignal",
    "UnknownToolError",
    "VersionConflict",
    "WriteRefusedError",
]


class ErrorCode(StrEnum):
    """Stable machine-readable codes; extend, never rename."""

    UNKNOWN_TOOL = "UNKNOWN_TOOL"
    INVALID_ARGUMENTS = "INVALID_ARGUMENTS"
    NEEDS_CLARIFICATION = "NEEDS_CLARIFICATION"
    NOT_FOUND = "NOT_FOUND"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    CONFLICT = "CONFLICT"
    VERSION_CONFLICT = "VERSION_CONFLICT"
    NEEDS_CONFIRMATION = "NEEDS_CONFIRMATION"
    NEEDS_APPROVAL = "NEEDS_APPROVAL"
    RISK_BLOCKED = "RISK_BLOCKED"
    RATE_LIMITED = "RATE_LIMITED"
    TRANSIENT = "TRANSIENT"
    TIMEOUT = "TIMEOUT"
    OUTCOME_UNKNOWN = "OUTCOME_UNKNOWN"
    IN_PROGRESS = "IN_PROGRESS"
    IDEMPOTENCY_MISMATCH = "IDEMPOTENCY_MISMATCH"
    FAILED_FINAL = "FAILED_FINAL"
    BUDGET_EXHAUSTED = "BUDGET_EXHAUSTED"
    CANCELLED = "CANCELLED"
    # Confirmation of a plan; each refusal of a token has its own code.
    CONFIRMATION_INVALID = "CONFIRMATION_INVALID"
    """The token is malformed, forged, signed by an unknown key or for another principal."""
    CONFIRMATION_REPLAYED = "CONFIRMATION_REPLAYED"
    """The token's one-time nonce was already used."""
    PLAN_EXPIRED = "PLAN_EXPIRED"
    """The plan (and so every token for it) is past its expiry."""
    PLAN_CHANGED = "PLAN_CHANGED"
    """The token was issued for a different plan hash: arguments, version or tool changed."""
    PLAN_CLOSED = "PLAN_CLOSED"
    """The plan was rejected, superseded or is not in a state that allows the request."""
    # Writes whose stored result outlived its retention.
    ALREADY_EXECUTED = "ALREADY_EXECUTED"
    """The key's write ran and succeeded before; its result is no longer kept. Not run again."""
    # The batching audit sink (operators only; never in an envelope).
    AUDIT_SINK_CLOSED = "AUDIT_SINK_CLOSED"
    """Events were emitted to an audit sink after it was closed."""
    AUDIT_WRITER_DEAD = "AUDIT_WRITER_DEAD"
    """The audit writer thread has ended; nothing emitted to it will be written."""
    AUDIT_WRITER_BEHIND = "AUDIT_WRITER_BEHIND"
    """The audit writer did not take or write the events within the allowed time."""
    AUDIT_EVENTS_LOST = "AUDIT_EVENTS_LOST"
    """Audit events could not be stored, not even as a record of the failure."""


# --- developers and operators ------------------------------------------------------------


class HandrailError(Exception):
    """Base of errors meant for the people who build and run Handrail."""


class RegistrationError(HandrailError):
    """A tool definition that Handrail refuses to register."""


class SignatureError(RegistrationError):
    """A tool function whose signature cannot become a schema."""


class IdentityParameterError(RegistrationError):
    """A schema asks the model for identity, tenant or authority."""


class SchemaError(RegistrationError):
    """A raw input schema that is not a valid object schema."""


class DuplicateToolError(RegistrationError):
    """A tool name that is already registered."""


class UnknownToolError(HandrailError, LookupError):
    """A registry lookup of a name that is not registered."""


class ConfigurationError(HandrailError):
    """The gate, registry or store was configured inconsistently."""


class StoreError(HandrailError):
    """Persistence failed; raised from the store boundary with the cause chained."""


class AuditSinkError(StoreError):
    """The audit trail is not being written as promised; `code` says how.

    AUDIT_SINK_CLOSED, AUDIT_WRITER_DEAD, AUDIT_WRITER_BEHIND or AUDIT_EVENTS_LOST.
    """

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class AccessRefusedError(HandrailError):
    """A person (through the host) asked for something Handrail refuses to give or do.

    `code` is the stable ErrorCode (PERMISSION_DENIED, NOT_FOUND, ...); the message is
    safe to show the person who asked.
    """

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class WriteRefusedError(AccessRefusedError):
    """The host asked for a confirmation, approval or execution that is refused.

    Codes: CONFIRMATION_INVALID, CONFIRMATION_REPLAYED, PLAN_EXPIRED, PLAN_CHANGED,
    PLAN_CLOSED, PERMISSION_DENIED, NOT_FOUND, ...
    """


class IllegalTransitionError(HandrailError):
    """A plan or execution record was asked to move between states that are not linked.

    A bug in the caller, never an outcome: legal moves that lose a race are reported by
    the store's compare-and-set returning False, not by this error.
    """


# --- tool signals -------------------------------------------------------------------------


class ToolSignal(Exception):  # noqa: N818 - these are signals, not failures of Handrail
    """An outcome a tool author declares; its message is written for the model.

    Only subclasses of this class carry their text to the model. Anything else a tool
    raises becomes a generic envelope and its text stays in the audit log.
    """

    code: ErrorCode = ErrorCode.FAILED_FINAL
    retryable: bool = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotFound(ToolSignal):
    """The object the arguments name does not exist (for this principal)."""

    code = ErrorCode.NOT_FOUND


class Conflict(ToolSignal):
    """The object is in a state that forbids the request."""

    code = ErrorCode.CONFLICT


class InvalidArgument(ToolSignal):
    """An argument passed the schema but the tool cannot take it.

    A value outside the declared type or constraints, a path outside the workspace or
    through a symbolic link, malformed input. The model may correct it and call again.
    """

    code = ErrorCode.INVALID_ARGUMENTS
    retryable = True


class NeedsClarification(ToolSignal):
    """The arguments are ambiguous; the model should ask or pick a candidate."""

    code = ErrorCode.NEEDS_CLARIFICATION

    def __init__(self, message: str, *, candidates: Sequence[object] = ()) -> None:
        super().__init__(message)
        self.candidates = tuple(candidates)


class ToolFailed(ToolSignal):
    """A terminal failure the tool understands; retrying will not help."""

    code = ErrorCode.FAILED_FINAL


class ToolRetryable(ToolSignal):
    """A transient failure; the same call may succeed after `retry_after` seconds."""

    code = ErrorCode.TRANSIENT
    retryable = True

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class VersionConflict(ToolSignal):
    """The target changed since the plan was confirmed; nothing was written."""

    code = ErrorCode.VERSION_CONFLICT


class RateLimited(ToolRetryable):
    """A downstream system refused the call for its rate; retry after `retry_after`."""

    code = ErrorCode.RATE_LIMITED


# --- refusals inside the gate ----------------------------------------------------------------


class Refusal(Exception):  # noqa: N818 - a refusal is an outcome, not a fault
    """A stage of the gate said no. Converted to an Envelope once, by the gate."""

    def __init__(
        self,
        code: ErrorCode,
        summary: str,
        *,
        stage: str,
        retryable: bool = False,
        retry_after: float | None = None,
        field_errors: Mapping[str, str] | None = None,
        candidates: Sequence[object] = (),
        detail: str | None = None,
        from_tool: bool = False,
    ) -> None:
        super().__init__(f"{code}: {summary}")
        self.code = code
        self.summary = summary
        self.stage = stage
        self.retryable = retryable
        self.retry_after = retry_after
        self.field_errors = dict(field_errors or {})
        self.candidates = tuple(candidates)
        # For the audit log only: never copied into an envelope.
        self.detail = detail
        # The summary (and candidates) are a tool's own words, from a signal it raised:
        # its envelope is untrusted data of the tool, never Handrail's words.
        self.from_tool = from_tool
