"""Handrail: the host side of LLM tool calling.

A model only proposes tool calls. Handrail decides what runs: every call passes JSON
syntax, JSON Schema, business rules and authorization, in that order, runs under a
deadline and comes back as a bounded Envelope, with an audit event for every stage.
"""

from handrail.audit import (
    AuditEvent,
    AuditSink,
    AuditSinkHealth,
    AuditSubject,
    AuditWriterState,
    BatchingAuditSink,
    MemoryAuditSink,
)
from handrail.calls import ToolCall
from handrail.clock import Clock, SystemClock
from handrail.confirmation import ConfirmationToken, Keyring, SigningKey
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
from handrail.definition import Tool, tool
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
from handrail.execution import ExecutionRecord, ExecutionStatus
from handrail.executor import WriteOutcome
from handrail.exposure import Exposure, ExposureRequest, ModelCapabilities
from handrail.gate import Gate
from handrail.guard import ConversationGuard, MemoryGuardState
from handrail.plans import Amount, Impact, Plan, PlanRecord, PlanState
from handrail.policy import AllowAll, Decision, Outcome, Policy, PolicyEngine, Resolved, Rule
from handrail.principal import Principal
from handrail.quota import Limiter, Quota, QuotaPolicy, Rate, RateLimiter, TenantQuota
from handrail.raw import RawRecord, RawResults
from handrail.reconcile import Found, NoProof, NotExecuted, Reconciler
from handrail.registry import Registry
from handrail.routing import Intent, Route, Router
from handrail.schema_store import SchemaStore
from handrail.shaping.budget import Budget, HeuristicTokens, TokenEstimator
from handrail.shaping.continuation import continuation_tool
from handrail.shaping.marking import MODEL_INSTRUCTIONS, DataMarker
from handrail.shaping.pages import Cursors
from handrail.shaping.policy import Overflow, RawKeeping, ResultPolicy
from handrail.shaping.project import Projection
from handrail.shaping.redact import IpMode, Kind, RedactionAction, RedactionPolicy, Redactor
from handrail.shaping.shaper import Shaper
from handrail.shaping.stream import StreamKind, TextStream
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
from handrail.store import PostgresStore, SqliteStore, Store, open_store
from handrail.validation import ArgumentLimits
from handrail.writes import Writes

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
