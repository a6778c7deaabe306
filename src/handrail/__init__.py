"""Handrail: the host side of LLM tool calling.

A model only proposes tool calls. Handrail decides what runs: every call passes JSON
syntax, JSON Schema, business rules and authorization, in that order, runs under a
deadline and comes back as a bounded Envelope, with an audit event for every stage.
"""

from handrail.audit import (
    AuditEvent,
    AuditSink,
    AuditSubject,
    BatchingAuditSink,
    MemoryAuditSink,
)
from handrail.calls import ToolCall
from handrail.clock import Clock, SystemClock
from handrail.confirmation import ConfirmationToken, Keyring, SigningKey
from handrail.context import ToolContext
from handrail.definition import Tool, tool
from handrail.envelope import Envelope, ErrorDetail, Status
from handrail.errors import (
    Conflict,
    ErrorCode,
    HandrailError,
    NeedsClarification,
    NotFound,
    RateLimited,
    RegistrationError,
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
from handrail.reconcile import Found, NoProof, NotExecuted, Reconciler
from handrail.registry import Registry
from handrail.routing import Intent, Route, Router
from handrail.spec import (
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
    "AllowAll",
    "Amount",
    "ArgumentLimits",
    "AuditEvent",
    "AuditSink",
    "AuditSubject",
    "BatchingAuditSink",
    "Clock",
    "ConfirmationMode",
    "ConfirmationPolicy",
    "ConfirmationToken",
    "Conflict",
    "ConversationGuard",
    "Decision",
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
    "IdempotencyMode",
    "IdempotencyPolicy",
    "IdempotencyScope",
    "Impact",
    "Intent",
    "Keyring",
    "Limiter",
    "MemoryAuditSink",
    "MemoryGuardState",
    "ModelCapabilities",
    "NeedsClarification",
    "NoProof",
    "NotExecuted",
    "NotFound",
    "Outcome",
    "Plan",
    "PlanRecord",
    "PlanState",
    "Policy",
    "PolicyEngine",
    "PostgresStore",
    "Principal",
    "Quota",
    "QuotaPolicy",
    "Rate",
    "RateLimited",
    "RateLimiter",
    "ReconcilePolicy",
    "Reconciler",
    "RegistrationError",
    "Registry",
    "Resolved",
    "RetryPolicy",
    "RiskLevel",
    "Route",
    "Router",
    "Rule",
    "SideEffect",
    "SigningKey",
    "SqliteStore",
    "Status",
    "Store",
    "SystemClock",
    "TenantQuota",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolFailed",
    "ToolHints",
    "ToolRetryable",
    "ToolSignal",
    "ToolSpec",
    "VersionConflict",
    "WriteOutcome",
    "WriteRefusedError",
    "Writes",
    "open_store",
    "tool",
]
