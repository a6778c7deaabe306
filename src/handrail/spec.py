"""ToolSpec: everything Handrail knows about a tool except how to run it.

A spec is pure data — names, model-facing descriptions and schema with their versions,
risk, side effects, permissions, time and the retry, idempotency and confirmation
policies. It never executes anything; `definition.Tool` binds it to an implementation.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from enum import IntEnum, StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

from handrail.credentials import validate_handle
from handrail.errors import ConfigurationError, RegistrationError
from handrail.shaping.policy import ResultPolicy

if TYPE_CHECKING:
    from pydantic import GetJsonSchemaHandler
    from pydantic.json_schema import JsonSchemaValue
    from pydantic_core import CoreSchema

__all__ = [
    "BusinessValue",
    "ConfirmationMode",
    "ConfirmationPolicy",
    "Deprecation",
    "FromPrincipal",
    "IdempotencyMode",
    "IdempotencyPolicy",
    "IdempotencyScope",
    "ReconcilePolicy",
    "RetryPolicy",
    "RiskLevel",
    "SideEffect",
    "TaskMode",
    "ToolHints",
    "ToolSpec",
]

_SEGMENT = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")
_MAX_NAME = 128


class RiskLevel(IntEnum):
    """How much harm a wrong call can do; decides exposure and the confirmation path."""

    L0_PUBLIC_READ = 0
    L1_INTERNAL_READ = 1
    L2_REVERSIBLE_WRITE = 2
    L3_HIGH_RISK_WRITE = 3
    L4_FORBIDDEN = 4


class SideEffect(StrEnum):
    """What a call changes outside itself."""

    NONE = "none"
    """Reads only; safe to run concurrently and to repeat."""
    LOCAL_WRITE = "local_write"
    """Writes a database the store can share a transaction with."""
    EXTERNAL_WRITE = "external_write"
    """Writes a system Handrail cannot see into; a lost response means UNKNOWN."""


class IdempotencyMode(StrEnum):
    """Where a write's idempotency key comes from."""

    NONE = "none"
    PLAN = "plan"
    COMMAND_ID = "command_id"


class IdempotencyScope(StrEnum):
    """Whose intents share a key space: the tenant's, or each principal's own."""

    TENANT = "tenant"
    PRINCIPAL = "principal"


class ConfirmationMode(StrEnum):
    """Who must agree before a write runs."""

    NONE = "none"
    CONFIRM = "confirm"
    APPROVE = "approve"


@dataclass(frozen=True, kw_only=True, slots=True)
class RetryPolicy:
    """How failures are classified and retried.

    Exceptions of the `transient` types become TRANSIENT (retryable); anything else a
    tool raises without declaring it becomes FAILED_FINAL.
    """

    max_attempts: int = 1
    initial_backoff: float = 0.1
    max_backoff: float = 5.0
    transient: tuple[type[BaseException], ...] = (ConnectionError,)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise RegistrationError("RetryPolicy.max_attempts must be at least 1")
        if self.initial_backoff < 0 or self.max_backoff < self.initial_backoff:
            raise RegistrationError("RetryPolicy backoff must satisfy 0 <= initial <= max")


@dataclass(frozen=True, kw_only=True, slots=True)
class IdempotencyPolicy:
    """The source and scope of a write's idempotency key, and how long results are kept.

    PLAN keys come from a confirmed plan; COMMAND_ID keys from an id the host supplies
    for its own intent (never from the model). A key is always scoped to tenant and
    tool, and to the principal with `scope=PRINCIPAL`. A stored result answers repeats
    of its key for `retention_seconds` after it settles (24 hours by default); then the
    record is purged to a tombstone that keeps the key taken for good, so a repeat is
    refused as ALREADY_EXECUTED and never runs again.
    """

    mode: IdempotencyMode = IdempotencyMode.NONE
    scope: IdempotencyScope = IdempotencyScope.TENANT
    retention_seconds: float = 86_400.0

    def __post_init__(self) -> None:
        if self.retention_seconds < 3600:  # noqa: PLR2004 - documented floor: one hour
            raise RegistrationError("IdempotencyPolicy.retention_seconds must be at least 3600")


@dataclass(frozen=True, kw_only=True, slots=True)
class ReconcilePolicy:
    """How an UNKNOWN write is checked against the downstream system.

    `not_found_grace`: a "not found" answer this soon after the attempt is not proof of
    non-execution (replicas lag). Checks back off from `first_check` to `max_interval`;
    after `escalate_after` inconclusive checks the record is escalated to people (and
    still checked). `lease_grace` is how long past its deadline a running attempt keeps
    its lease before the record may be declared UNKNOWN; while a thread of an attempt
    that outlived its deadline is still inside a sync tool, a heartbeat renews the lease
    by that span (at least one second) every third of it.
    """

    not_found_grace: float = 60.0
    first_check: float = 5.0
    max_interval: float = 3600.0
    escalate_after: int = 8
    lease_grace: float = 30.0

    def __post_init__(self) -> None:
        if min(self.not_found_grace, self.lease_grace) < 0 or self.first_check <= 0:
            raise RegistrationError("ReconcilePolicy times must be positive")
        if self.max_interval < self.first_check or self.escalate_after < 1:
            raise RegistrationError("ReconcilePolicy needs max_interval >= first_check >= 0")


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskMode:
    """The tool runs as an asynchronous task: checked (and confirmed) now, run later.

    The gate answers QUEUED with a task id instead of running the tool inline; a
    `TaskRunner` runs it on `queue`, up to `max_attempts` times for transient errors
    (backoff from `backoff_seconds`, doubling, at most `max_backoff_seconds`). A task not
    finished `expires_after_seconds` after submission is EXPIRED. `estimate_seconds` is
    what the QUEUED answer tells the model to expect; `max_result_chars` is how much of
    the result a status answer carries (a larger result goes to the raw store).

    The same intent is one task. A write's intent is its idempotency key (one task, ever).
    A read's intent (tenant, user, tool, arguments) answers its latest task while that
    task is not terminal and, once it SUCCEEDED, for `dedupe_seconds` after it was
    submitted; after that, or at once after a task that failed, was cancelled or
    expired, the same read submitted again is a new task with a new id (the old one
    stays readable), so "export last month's orders" asked next month runs again. 0
    dedupes only while the task is active. Concurrent identical submissions
    still make one task: the store settles the intent's next generation atomically.
    """

    queue: str = "default"
    max_attempts: int = 3
    backoff_seconds: float = 1.0
    max_backoff_seconds: float = 60.0
    expires_after_seconds: float = 86_400.0
    estimate_seconds: float | None = None
    max_result_chars: int = 4_000
    dedupe_seconds: float = 900.0

    def __post_init__(self) -> None:
        if not _SEGMENT.fullmatch(self.queue):
            raise RegistrationError("TaskMode.queue is a name of [A-Za-z0-9_-], 1-64 characters")
        if self.max_attempts < 1 or self.max_result_chars < 1:
            raise RegistrationError("TaskMode needs max_attempts and max_result_chars >= 1")
        if not 0 <= self.backoff_seconds <= self.max_backoff_seconds:
            raise RegistrationError("TaskMode needs 0 <= backoff_seconds <= max_backoff_seconds")
        if self.expires_after_seconds <= 0 or (self.estimate_seconds or 0) < 0:
            raise RegistrationError("TaskMode times must be positive")
        if not 0 <= self.dedupe_seconds < float("inf"):
            raise RegistrationError("TaskMode.dedupe_seconds is finite and >= 0")


@dataclass(frozen=True, kw_only=True, slots=True)
class ConfirmationPolicy:
    """Whether a write needs its requester's confirmation or named approvers."""

    mode: ConfirmationMode = ConfirmationMode.NONE
    approver_permission: str | None = None
    distinct_approvers: int = 1
    ttl_seconds: float = 300.0

    def __post_init__(self) -> None:
        if self.mode is ConfirmationMode.APPROVE and not self.approver_permission:
            raise RegistrationError("an APPROVE confirmation policy needs approver_permission")
        if self.distinct_approvers < 1 or self.ttl_seconds <= 0:
            raise RegistrationError("distinct_approvers >= 1 and ttl_seconds > 0 are required")


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolHints:
    """MCP-style hints shown to clients. Hints are advice, never authority."""

    read_only: bool | None = None
    destructive: bool | None = None
    idempotent: bool | None = None
    open_world: bool | None = None


@dataclass(frozen=True, slots=True)
class FromPrincipal:
    """Marks a parameter as trusted: filled from the Principal, hidden from the model.

    Use as `tenant: Annotated[str, FromPrincipal("tenant_id")]`, or in the `trusted`
    mapping of a raw-schema tool.
    """

    attribute: str


_MAX_REASON = 500


@dataclass(frozen=True, kw_only=True, slots=True)
class Deprecation:
    """A tool on its way out: shown with a note until `after`, refused from that day on.

    `after` is a UTC calendar day; `replacement` names the tool to use instead (it must
    be registered when the catalogue is linted); `note` is one line for the model.
    """

    after: date
    replacement: str | None = None
    note: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.after, date) or isinstance(self.after, datetime):
            raise RegistrationError("Deprecation.after is a datetime.date (a UTC day)")
        if len(self.note) > _MAX_REASON or (self.note and not self.note.isprintable()):
            raise RegistrationError(
                f"a deprecation note is one line of at most {_MAX_REASON} printable characters",
            )
        if self.replacement is not None:
            _check_name(self.replacement)

    def notice(self) -> str:
        """The sentence the model reads after the description until the tool is refused."""
        use = f" Use {self.replacement} instead." if self.replacement else ""
        note = f" {self.note}" if self.note else ""
        return f"Deprecated: refused from {self.after.isoformat()} (UTC).{use}{note}"


@dataclass(frozen=True, kw_only=True, slots=True)
class BusinessValue:
    """Declares that an identity-like parameter is a business value, not the caller.

    Registration refuses names that ask the model who it is (`user_id`, `tenant`,
    `principal`, ...). Some tools use such names for plain data: the principal of a
    loan, the CRM customer an administrator updates. Declare each one, with the reason
    people will read in the audit trail:

        principal: Annotated[Decimal, BusinessValue(reason="the loan amount")]

    or, for a raw schema, `Tool.from_json_schema(..., business_values={"user_id":
    BusinessValue(reason=...)})`. The value stays data written by the model: identity
    and tenant still come only from the Principal, and resource policy (resolvers in
    the caller's tenant) still decides whether the caller may act on it.
    """

    reason: str

    SCHEMA_KEYWORD: ClassVar[str] = "x-handrail-business-value"
    """Where a typed signature's declaration travels in the generated schema; honoured
    only there (never in a raw schema) and removed before the model sees the schema."""

    def __post_init__(self) -> None:
        reason = self.reason
        if not isinstance(reason, str) or not reason.strip():
            raise RegistrationError("BusinessValue needs a reason: why this is not identity")
        if len(reason) > _MAX_REASON or not reason.isprintable():
            raise RegistrationError(
                f"a BusinessValue reason is one line of at most {_MAX_REASON} printable characters",
            )

    def __get_pydantic_json_schema__(
        self,
        core_schema: CoreSchema,
        handler: GetJsonSchemaHandler,
    ) -> JsonSchemaValue:
        """Carry the declaration to the schema of the parameter it annotates."""
        schema = dict(handler(core_schema))
        schema[self.SCHEMA_KEYWORD] = self.reason
        return schema


def _check_name(name: str) -> None:
    segments = name.split(".")
    if len(name) > _MAX_NAME or not all(_SEGMENT.fullmatch(s) for s in segments):
        raise RegistrationError(
            f"invalid tool name {name!r}: use dot-separated segments of letters, digits, "
            f"'_' or '-', each starting with a letter, at most 64 characters each",
        )


def _check_rate(name: str, text: str) -> None:
    """Refuse a `rate_limit` the quota could not read (`authz.quota.Rate.parse_many`).

    The quota reads the rate on every call; an unreadable one must fail when declared.
    Read here with `limits` itself, since the quota module depends on this one.
    """
    from limits import parse_many  # noqa: PLC0415 - on first use, not on import

    try:
        items = parse_many(text)
    except ValueError:
        items = []
    if not items or any(item.amount < 1 or item.get_expiry() < 1 for item in items):
        raise RegistrationError(
            f"tool {name!r}: rate_limit {text[:80]!r} is not a rate such as '10/minute' "
            f"(at least one call in at least one second; several separated by ';')",
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolSpec:
    """The single declaration of a tool: what the model sees and how Handrail treats it.

    `input_schema` is the model-facing JSON Schema (trusted parameters removed).
    `enabled_tenants` of None means every tenant. `business_values` are the declared
    exceptions to the identity check, by JSON Pointer into `input_schema`
    (`#/properties/user_id`); they are audited at registration.
    """

    name: str
    description: str
    input_schema: Mapping[str, Any]
    schema_version: str
    description_version: str
    risk: RiskLevel
    side_effect: SideEffect
    permissions: frozenset[str] = frozenset()
    timeout: float = 10.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    idempotency: IdempotencyPolicy = field(default_factory=IdempotencyPolicy)
    confirmation: ConfirmationPolicy = field(default_factory=ConfirmationPolicy)
    reconcile: ReconcilePolicy = field(default_factory=ReconcilePolicy)
    owner: str | None = None
    enabled: bool = True
    enabled_tenants: frozenset[str] | None = None
    scenarios: frozenset[str] = frozenset()
    hints: ToolHints = field(default_factory=ToolHints)
    trusted: Mapping[str, FromPrincipal] = field(default_factory=dict)
    results: ResultPolicy = field(default_factory=ResultPolicy)
    secrets: frozenset[str] = frozenset()
    """Handles of the host-side secrets the tool may read through its context."""
    business_values: Mapping[str, BusinessValue] = field(default_factory=dict)
    defer_loading: bool = False
    """Left out of the definitions a model is first shown; found through `search_tools`."""
    dependencies: frozenset[str] = frozenset()
    """Systems or tools this one needs (for owners and `handrail tools lint`)."""
    examples: tuple[Mapping[str, Any], ...] = ()
    """Example argument objects, valid against `input_schema` (lint and docs)."""
    rate_limit: str | None = None
    """A per-tool rate in the `limits` notation ("10/minute"); enforced by the quota."""
    deprecation: Deprecation | None = None
    task: TaskMode | None = None
    """Set when the tool runs as an asynchronous task (`runs_as=TaskMode(...)`)."""

    def __post_init__(self) -> None:
        _check_name(self.name)
        if not self.description.strip():
            raise RegistrationError(f"tool {self.name!r} needs a description for the model")
        if self.timeout <= 0:
            raise RegistrationError(f"tool {self.name!r}: timeout must be positive")
        writes = self.side_effect is not SideEffect.NONE
        if writes and self.risk < RiskLevel.L2_REVERSIBLE_WRITE:
            raise RegistrationError(
                f"tool {self.name!r} writes ({self.side_effect}) but is declared "
                f"{self.risk.name}; writes are L2 or higher",
            )
        if not writes and self.risk in {
            RiskLevel.L2_REVERSIBLE_WRITE,
            RiskLevel.L3_HIGH_RISK_WRITE,
        }:
            raise RegistrationError(
                f"tool {self.name!r} is declared {self.risk.name} but has no side effect",
            )
        if self.hints.read_only and writes:
            raise RegistrationError(f"tool {self.name!r}: read_only hint contradicts a write")
        self._check_write_policies(writes=writes)
        object.__setattr__(self, "permissions", frozenset(self.permissions))
        object.__setattr__(self, "scenarios", frozenset(self.scenarios))
        object.__setattr__(self, "secrets", frozenset(self.secrets))
        object.__setattr__(self, "dependencies", frozenset(self.dependencies))
        if self.rate_limit is not None:
            _check_rate(self.name, self.rate_limit)
        if self.deprecation is not None and self.deprecation.replacement == self.name:
            raise RegistrationError(f"tool {self.name!r} cannot be its own replacement")
        object.__setattr__(
            self,
            "examples",
            tuple(MappingProxyType(dict(example)) for example in self.examples),
        )
        for handle in self.secrets:
            try:
                validate_handle(handle)
            except ConfigurationError as exc:
                raise RegistrationError(f"tool {self.name!r}: {exc}") from exc
        if self.enabled_tenants is not None:
            object.__setattr__(self, "enabled_tenants", frozenset(self.enabled_tenants))
        object.__setattr__(self, "input_schema", MappingProxyType(dict(self.input_schema)))
        object.__setattr__(self, "trusted", MappingProxyType(dict(self.trusted)))
        object.__setattr__(self, "business_values", MappingProxyType(dict(self.business_values)))

    def _check_write_policies(self, *, writes: bool) -> None:
        mode = self.idempotency.mode
        if not writes:
            if mode is not IdempotencyMode.NONE or self.confirmation.mode is not (
                ConfirmationMode.NONE
            ):
                raise RegistrationError(
                    f"tool {self.name!r} reads only; idempotency and confirmation policies "
                    f"are for writes",
                )
            return
        if mode is IdempotencyMode.NONE:
            raise RegistrationError(
                f"tool {self.name!r} writes, so it needs an idempotency key: "
                f"IdempotencyPolicy(mode=PLAN) or (mode=COMMAND_ID)",
            )
        if mode is IdempotencyMode.PLAN and self.confirmation.mode is ConfirmationMode.NONE:
            # Without confirmation a plan id is fresh per proposal, so a model that
            # proposes the same write twice would get two keys and two effects.
            raise RegistrationError(
                f"tool {self.name!r}: PLAN keys need a confirmation policy; an unconfirmed "
                f"write is keyed by the host's COMMAND_ID",
            )

    @property
    def model_description(self) -> str:
        """The description every definition writer sends: with the deprecation notice, if any.

        Exposure leaves a tool out from its deprecation day on, so while a model is shown
        the tool at all, the notice is true; it is fixed text (no clock), so the same
        catalogue always renders the same definitions.
        """
        if self.deprecation is None:
            return self.description
        return f"{self.description}\n\n{self.deprecation.notice()}"

    @property
    def namespace(self) -> str | None:
        """The part of the name before the last dot, if any."""
        head, dot, _ = self.name.rpartition(".")
        return head if dot else None

    @property
    def read_only(self) -> bool:
        """True for tools that change nothing and may run concurrently."""
        return self.side_effect is SideEffect.NONE

    @property
    def forbidden(self) -> bool:
        """L4 tools are registered for the record but never exposed or run."""
        return self.risk is RiskLevel.L4_FORBIDDEN

    def enabled_for(self, tenant_id: str) -> bool:
        """Whether the tool exists at all for this tenant."""
        return self.enabled and (self.enabled_tenants is None or tenant_id in self.enabled_tenants)
