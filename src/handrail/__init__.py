"""Handrail: the host side of LLM tool calling.

A model only proposes tool calls. Handrail decides what runs: every call passes JSON
syntax, JSON Schema, business rules and authorization, in that order, runs under a
deadline and comes back as a bounded Envelope, with an audit event for every stage.

Every public name is imported on first use (PEP 562 `__getattr__`), so `import handrail`
and the `handrail` command load no database driver, HTTP client, model SDK or pydantic
model they do not use; `from handrail import Gate` loads what the gate needs.
"""

import importlib
import importlib.util
import typing

if typing.TYPE_CHECKING:  # the names as mypy and IDEs see them; `_LAZY` says the same
    from handrail.app import Handrail
    from handrail.authz.guard import ConversationGuard, MemoryGuardState, StoreGuardState
    from handrail.authz.policy import (
        AllowAll,
        Decision,
        Outcome,
        Policy,
        PolicyEngine,
        Resolved,
        Rule,
    )
    from handrail.authz.quota import Limiter, Quota, QuotaPolicy, Rate, RateLimiter, TenantQuota
    from handrail.authz.routing import Intent, Route, Router
    from handrail.calls import ToolCall
    from handrail.checks.syntax import ArgumentLimits
    from handrail.clock import Clock, SystemClock
    from handrail.context import ToolContext
    from handrail.credentials import (
        EnvSecretProvider,
        ScrubbingFilter,
        SecretAccessError,
        SecretLedger,
        SecretProvider,
        Secrets,
        StaticSecretProvider,
    )
    from handrail.declare.definition import Tool, tool
    from handrail.declare.exposure import Exposure, ExposureRequest, ModelCapabilities
    from handrail.declare.hooks import Found, NoProof, NotExecuted
    from handrail.declare.registry import Registry
    from handrail.declare.schema_store import SchemaStore
    from handrail.envelope import Envelope, ErrorDetail, Omission, Status, Trust
    from handrail.errors import (
        AccessRefusedError,
        AuditSinkError,
        Conflict,
        ErrorCode,
        HandrailError,
        NeedsClarification,
        NotFound,
        RateLimited,
        RegistrationError,
        StoreError,
        ToolFailed,
        ToolRetryable,
        ToolSignal,
        VersionConflict,
        WriteRefusedError,
    )
    from handrail.events import AuditEvent, AuditSubject
    from handrail.execution import ExecutionRecord, ExecutionStatus
    from handrail.gate import Gate
    from handrail.plans import Amount, Impact, Plan, PlanRecord, PlanState
    from handrail.principal import Principal
    from handrail.raw import RawRecord
    from handrail.record.audit import AuditSink, MemoryAuditSink
    from handrail.record.batching import AuditSinkHealth, AuditWriterState, BatchingAuditSink
    from handrail.record.raw_results import RawResults
    from handrail.record.shared_ledger import SharedSecretLedger
    from handrail.shaping.budget import Budget, HeuristicTokens, TokenEstimator
    from handrail.shaping.continuation import continuation_tool
    from handrail.shaping.marking import MODEL_INSTRUCTIONS, DataMarker
    from handrail.shaping.pages import Cursors
    from handrail.shaping.policy import Overflow, RawKeeping, ResultPolicy
    from handrail.shaping.project import Projection
    from handrail.shaping.redact import IpMode, Kind, RedactionAction, RedactionPolicy, Redactor
    from handrail.shaping.shaper import Shaper
    from handrail.shaping.stream import StreamKind, TextStream
    from handrail.signing import SigningKey
    from handrail.spec import (
        BusinessValue,
        ConfirmationMode,
        ConfirmationPolicy,
        FromPrincipal,
        IdempotencyMode,
        IdempotencyPolicy,
        IdempotencyScope,
        ReconcilePolicy,
        RetryPolicy,
        RiskLevel,
        SideEffect,
        TaskMode,
        ToolHints,
        ToolSpec,
    )
    from handrail.store import PostgresStore, SqliteStore, Store, open_store
    from handrail.writes.confirmation import ConfirmationToken, Keyring
    from handrail.writes.outcome import WriteOutcome
    from handrail.writes.reconcile import Reconciler
    from handrail.writes.service import Writes

_LAZY = {
    "AccessRefusedError": "handrail.errors",
    "AllowAll": "handrail.authz.policy",
    "Amount": "handrail.plans",
    "ArgumentLimits": "handrail.checks.syntax",
    "AuditEvent": "handrail.events",
    "AuditSink": "handrail.record.audit",
    "AuditSinkError": "handrail.errors",
    "AuditSinkHealth": "handrail.record.batching",
    "AuditSubject": "handrail.events",
    "AuditWriterState": "handrail.record.batching",
    "BatchingAuditSink": "handrail.record.batching",
    "Budget": "handrail.shaping.budget",
    "BusinessValue": "handrail.spec",
    "Clock": "handrail.clock",
    "ConfirmationMode": "handrail.spec",
    "ConfirmationPolicy": "handrail.spec",
    "ConfirmationToken": "handrail.writes.confirmation",
    "Conflict": "handrail.errors",
    "ConversationGuard": "handrail.authz.guard",
    "Cursors": "handrail.shaping.pages",
    "DataMarker": "handrail.shaping.marking",
    "Decision": "handrail.authz.policy",
    "EnvSecretProvider": "handrail.credentials",
    "Envelope": "handrail.envelope",
    "ErrorCode": "handrail.errors",
    "ErrorDetail": "handrail.envelope",
    "ExecutionRecord": "handrail.execution",
    "ExecutionStatus": "handrail.execution",
    "Exposure": "handrail.declare.exposure",
    "ExposureRequest": "handrail.declare.exposure",
    "Found": "handrail.declare.hooks",
    "FromPrincipal": "handrail.spec",
    "Gate": "handrail.gate",
    "Handrail": "handrail.app",
    "HandrailError": "handrail.errors",
    "HeuristicTokens": "handrail.shaping.budget",
    "IdempotencyMode": "handrail.spec",
    "IdempotencyPolicy": "handrail.spec",
    "IdempotencyScope": "handrail.spec",
    "Impact": "handrail.plans",
    "Intent": "handrail.authz.routing",
    "IpMode": "handrail.shaping.redact",
    "Keyring": "handrail.writes.confirmation",
    "Kind": "handrail.shaping.redact",
    "Limiter": "handrail.authz.quota",
    "MODEL_INSTRUCTIONS": "handrail.shaping.marking",
    "MemoryAuditSink": "handrail.record.audit",
    "MemoryGuardState": "handrail.authz.guard",
    "StoreGuardState": "handrail.authz.guard",
    "SharedSecretLedger": "handrail.record.shared_ledger",
    "ModelCapabilities": "handrail.declare.exposure",
    "NeedsClarification": "handrail.errors",
    "NoProof": "handrail.declare.hooks",
    "NotExecuted": "handrail.declare.hooks",
    "NotFound": "handrail.errors",
    "Omission": "handrail.envelope",
    "Outcome": "handrail.authz.policy",
    "Overflow": "handrail.shaping.policy",
    "Plan": "handrail.plans",
    "PlanRecord": "handrail.plans",
    "PlanState": "handrail.plans",
    "Policy": "handrail.authz.policy",
    "PolicyEngine": "handrail.authz.policy",
    "PostgresStore": "handrail.store",
    "Principal": "handrail.principal",
    "Projection": "handrail.shaping.project",
    "Quota": "handrail.authz.quota",
    "QuotaPolicy": "handrail.authz.quota",
    "Rate": "handrail.authz.quota",
    "RateLimited": "handrail.errors",
    "RateLimiter": "handrail.authz.quota",
    "RawKeeping": "handrail.shaping.policy",
    "RawRecord": "handrail.raw",
    "RawResults": "handrail.record.raw_results",
    "ReconcilePolicy": "handrail.spec",
    "Reconciler": "handrail.writes.reconcile",
    "RedactionAction": "handrail.shaping.redact",
    "RedactionPolicy": "handrail.shaping.redact",
    "Redactor": "handrail.shaping.redact",
    "RegistrationError": "handrail.errors",
    "Registry": "handrail.declare.registry",
    "Resolved": "handrail.authz.policy",
    "ResultPolicy": "handrail.shaping.policy",
    "RetryPolicy": "handrail.spec",
    "RiskLevel": "handrail.spec",
    "Route": "handrail.authz.routing",
    "Router": "handrail.authz.routing",
    "Rule": "handrail.authz.policy",
    "SchemaStore": "handrail.declare.schema_store",
    "ScrubbingFilter": "handrail.credentials",
    "SecretAccessError": "handrail.credentials",
    "SecretLedger": "handrail.credentials",
    "SecretProvider": "handrail.credentials",
    "Secrets": "handrail.credentials",
    "Shaper": "handrail.shaping.shaper",
    "SideEffect": "handrail.spec",
    "SigningKey": "handrail.signing",
    "SqliteStore": "handrail.store",
    "TaskMode": "handrail.spec",
    "StaticSecretProvider": "handrail.credentials",
    "Status": "handrail.envelope",
    "Store": "handrail.store",
    "StoreError": "handrail.errors",
    "StreamKind": "handrail.shaping.stream",
    "SystemClock": "handrail.clock",
    "TenantQuota": "handrail.authz.quota",
    "TextStream": "handrail.shaping.stream",
    "TokenEstimator": "handrail.shaping.budget",
    "Tool": "handrail.declare.definition",
    "ToolCall": "handrail.calls",
    "ToolContext": "handrail.context",
    "ToolFailed": "handrail.errors",
    "ToolHints": "handrail.spec",
    "ToolRetryable": "handrail.errors",
    "ToolSignal": "handrail.errors",
    "ToolSpec": "handrail.spec",
    "Trust": "handrail.envelope",
    "VersionConflict": "handrail.errors",
    "WriteOutcome": "handrail.writes.outcome",
    "WriteRefusedError": "handrail.errors",
    "Writes": "handrail.writes.service",
    "continuation_tool": "handrail.shaping.continuation",
    "open_store": "handrail.store",
    "tool": "handrail.declare.definition",
}
"""Each public name and the module it is imported from, when first asked for."""


def __getattr__(name: str) -> object:
    """Import a public name, or a submodule, the first time it is asked for."""
    module = _LAZY.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
    elif not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}"):
        # `import handrail; handrail.gate.Gate` worked while the names were eager.
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "MODEL_INSTRUCTIONS",
    "AccessRefusedError",
    "AllowAll",
    "Amount",
    "ArgumentLimits",
    "AuditEvent",
    "AuditSink",
    "AuditSinkError",
    "AuditSinkHealth",
    "AuditSubject",
    "AuditWriterState",
    "BatchingAuditSink",
    "Budget",
    "BusinessValue",
    "Clock",
    "ConfirmationMode",
    "ConfirmationPolicy",
    "ConfirmationToken",
    "Conflict",
    "ConversationGuard",
    "Cursors",
    "DataMarker",
    "Decision",
    "EnvSecretProvider",
    "Envelope",
    "ErrorCode",
    "ErrorDetail",
    "ExecutionRecord",
    "ExecutionStatus",
    "Exposure",
    "ExposureRequest",
    "Found",
    "FromPrincipal",
    "Gate",
    "Handrail",
    "HandrailError",
    "HeuristicTokens",
    "IdempotencyMode",
    "IdempotencyPolicy",
    "IdempotencyScope",
    "Impact",
    "Intent",
    "IpMode",
    "Keyring",
    "Kind",
    "Limiter",
    "MemoryAuditSink",
    "MemoryGuardState",
    "ModelCapabilities",
    "NeedsClarification",
    "NoProof",
    "NotExecuted",
    "NotFound",
    "Omission",
    "Outcome",
    "Overflow",
    "Plan",
    "PlanRecord",
    "PlanState",
    "Policy",
    "PolicyEngine",
    "PostgresStore",
    "Principal",
    "Projection",
    "Quota",
    "QuotaPolicy",
    "Rate",
    "RateLimited",
    "RateLimiter",
    "RawKeeping",
    "RawRecord",
    "RawResults",
    "ReconcilePolicy",
    "Reconciler",
    "RedactionAction",
    "RedactionPolicy",
    "Redactor",
    "RegistrationError",
    "Registry",
    "Resolved",
    "ResultPolicy",
    "RetryPolicy",
    "RiskLevel",
    "Route",
    "Router",
    "Rule",
    "SchemaStore",
    "ScrubbingFilter",
    "SecretAccessError",
    "SecretLedger",
    "SecretProvider",
    "Secrets",
    "Shaper",
    "SharedSecretLedger",
    "SideEffect",
    "SigningKey",
    "SqliteStore",
    "StaticSecretProvider",
    "Status",
    "Store",
    "StoreError",
    "StoreGuardState",
    "StreamKind",
    "SystemClock",
    "TaskMode",
    "TenantQuota",
    "TextStream",
    "TokenEstimator",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolFailed",
    "ToolHints",
    "ToolRetryable",
    "ToolSignal",
    "ToolSpec",
    "Trust",
    "VersionConflict",
    "WriteOutcome",
    "WriteRefusedError",
    "Writes",
    "continuation_tool",
    "open_store",
    "tool",
]
