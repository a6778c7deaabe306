"""Handrail: the host side of LLM tool calling.

A model only proposes tool calls. Handrail decides what runs: every call passes JSON
syntax, JSON Schema, business rules and authorization, in that order, runs under a
deadline and comes back as a bounded Envelope, with an audit event for every stage.

`import handrail` loads no database driver, HTTP client or model SDK: the names whose
modules load one (the SQL stores) are imported on first use (PEP 562, `__getattr__`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from handrail.app import Handrail
from handrail.authz.guard import ConversationGuard, MemoryGuardState
from handrail.authz.policy import AllowAll, Decision, Outcome, Policy, PolicyEngine, Resolved, Rule
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
    ToolHints,
    ToolSpec,
)
from handrail.store import Store, open_store
from handrail.writes.confirmation import ConfirmationToken, Keyring
from handrail.writes.outcome import WriteOutcome
from handrail.writes.reconcile import Reconciler
from handrail.writes.service import Writes

if TYPE_CHECKING:
    from handrail.store.postgres import PostgresStore
    from handrail.store.sqlite import SqliteStore

_LAZY = {
    "PostgresStore": "handrail.store.postgres",
    "SqliteStore": "handrail.store.sqlite",
}
"""Public names imported on first use: module that defines each."""


def __getattr__(name: str) -> object:
    """Import a lazily loaded public name the first time it is asked for."""
    if (module := _LAZY.get(name)) is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
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
    "SideEffect",
    "SigningKey",
    "SqliteStore",
    "StaticSecretProvider",
    "Status",
    "Store",
    "StoreError",
    "StreamKind",
    "SystemClock",
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
