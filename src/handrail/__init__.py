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
from handrail.context import ToolContext
from handrail.definition import Tool, tool
from handrail.envelope import Envelope, ErrorDetail, Status
from handrail.errors import (
    Conflict,
    ErrorCode,
    HandrailError,
    NeedsClarification,
    NotFound,
    RegistrationError,
    ToolFailed,
    ToolRetryable,
    ToolSignal,
)
from handrail.exposure import Exposure, ExposureRequest, ModelCapabilities
from handrail.gate import Gate
from handrail.guard import ConversationGuard, MemoryGuardState
from handrail.policy import AllowAll, Decision, Outcome, Policy, PolicyEngine, Resolved, Rule
from handrail.principal import Principal
from handrail.quota import Limiter, Quota, QuotaPolicy, Rate, RateLimiter, TenantQuota
from handrail.registry import Registry
from handrail.routing import Intent, Route, Router
from handrail.spec import (
    ConfirmationMode,
    ConfirmationPolicy,
    FromPrincipal,
    IdempotencyMode,
    IdempotencyPolicy,
    RetryPolicy,
    RiskLevel,
    SideEffect,
    ToolHints,
    ToolSpec,
)
from handrail.store import SqliteStore, Store
from handrail.validation import ArgumentLimits

__all__ = [
    "AllowAll",
    "ArgumentLimits",
    "AuditEvent",
    "AuditSink",
    "AuditSubject",
    "BatchingAuditSink",
    "Clock",
    "ConfirmationMode",
    "ConfirmationPolicy",
    "Conflict",
    "ConversationGuard",
    "Decision",
    "Envelope",
    "ErrorCode",
    "ErrorDetail",
    "Exposure",
    "ExposureRequest",
    "FromPrincipal",
    "Gate",
    "HandrailError",
    "IdempotencyMode",
    "IdempotencyPolicy",
    "Intent",
    "Limiter",
    "MemoryAuditSink",
    "MemoryGuardState",
    "ModelCapabilities",
    "NeedsClarification",
    "NotFound",
    "Outcome",
    "Policy",
    "PolicyEngine",
    "Principal",
    "Quota",
    "QuotaPolicy",
    "Rate",
    "RateLimiter",
    "RegistrationError",
    "Registry",
    "Resolved",
    "RetryPolicy",
    "RiskLevel",
    "Route",
    "Router",
    "Rule",
    "SideEffect",
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
    "tool",
]
