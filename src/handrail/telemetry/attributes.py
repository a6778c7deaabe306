"""Attribute keys of Handrail's spans and metrics: the GenAI conventions, then our own.

One place for the names, so spans, metrics and their tests cannot drift apart.
"""

from __future__ import annotations

from typing import Final

from handrail.canonical import sha256_hex
from handrail.errors import ErrorCode

__all__ = [
    "ERROR_TYPE",
    "GEN_AI_AGENT_NAME",
    "GEN_AI_CONVERSATION_ID",
    "GEN_AI_OPERATION_NAME",
    "GEN_AI_REQUEST_MODEL",
    "GEN_AI_RESPONSE_MODEL",
    "GEN_AI_TOKEN_TYPE",
    "GEN_AI_TOOL_CALL_ID",
    "GEN_AI_TOOL_NAME",
    "GEN_AI_TOOL_TYPE",
    "GEN_AI_USAGE_INPUT_TOKENS",
    "GEN_AI_USAGE_OUTPUT_TOKENS",
    "HANDRAIL_ARGUMENTS_SUMMARY",
    "HANDRAIL_ATTEMPT",
    "HANDRAIL_BUDGET_REASON",
    "HANDRAIL_ERROR_CODE",
    "HANDRAIL_IDEMPOTENCY_KEY_HASH",
    "HANDRAIL_OUTCOME",
    "HANDRAIL_PLAN_ID",
    "HANDRAIL_REDACTION_KIND",
    "HANDRAIL_RISK",
    "HANDRAIL_RUN_ID",
    "HANDRAIL_STAGE",
    "HANDRAIL_STATUS",
    "HANDRAIL_TASK_ID",
    "HANDRAIL_TENANT",
    "HTTP_REQUEST_METHOD",
    "HTTP_RESPONSE_STATUS_CODE",
    "HTTP_ROUTE",
    "NETWORK_PROTOCOL_VERSION",
    "URL_SCHEME",
]

# OpenTelemetry GenAI semantic conventions.
GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"
GEN_AI_TOOL_NAME: Final = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
GEN_AI_TOOL_TYPE: Final = "gen_ai.tool.type"
GEN_AI_AGENT_NAME: Final = "gen_ai.agent.name"
GEN_AI_CONVERSATION_ID: Final = "gen_ai.conversation.id"
GEN_AI_REQUEST_MODEL: Final = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL: Final = "gen_ai.response.model"
GEN_AI_USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
GEN_AI_TOKEN_TYPE: Final = "gen_ai.token.type"  # noqa: S105 - an attribute key
ERROR_TYPE: Final = "error.type"

# Handrail's own.
HANDRAIL_STAGE: Final = "handrail.stage"
HANDRAIL_STATUS: Final = "handrail.status"
HANDRAIL_ERROR_CODE: Final = "handrail.error.code"
HANDRAIL_RISK: Final = "handrail.risk"
HANDRAIL_TENANT: Final = "handrail.tenant"
HANDRAIL_IDEMPOTENCY_KEY_HASH: Final = "handrail.idempotency_key.hash"
HANDRAIL_PLAN_ID: Final = "handrail.plan.id"
HANDRAIL_ATTEMPT: Final = "handrail.attempt"
HANDRAIL_RUN_ID: Final = "handrail.run.id"
HANDRAIL_OUTCOME: Final = "handrail.outcome"
HANDRAIL_REDACTION_KIND: Final = "handrail.redaction.kind"
HANDRAIL_BUDGET_REASON: Final = "handrail.budget.reason"
HANDRAIL_ARGUMENTS_SUMMARY: Final = "handrail.arguments.summary"

# The write path and the agent loop (tele-flow).
HANDRAIL_EXECUTION_STATUS: Final = "handrail.execution.status"
HANDRAIL_REPLAYED: Final = "handrail.replayed"
HANDRAIL_RESOLVED_BY: Final = "handrail.resolved_by"
HANDRAIL_RUN_OPERATION: Final = "handrail.run.operation"
HANDRAIL_RUN_STATUS: Final = "handrail.run.status"
GEN_AI_PROVIDER_NAME: Final = "gen_ai.provider.name"
GEN_AI_RESPONSE_FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
__all__ += [
    "GEN_AI_PROVIDER_NAME",
    "GEN_AI_RESPONSE_FINISH_REASONS",
    "HANDRAIL_EXECUTION_STATUS",
    "HANDRAIL_REPLAYED",
    "HANDRAIL_RESOLVED_BY",
    "HANDRAIL_RUN_OPERATION",
    "HANDRAIL_RUN_STATUS",
]

# Trace context across processes (tele-edge): HTTP server spans (semantic conventions)
# and the queued task a worker runs.
HTTP_REQUEST_METHOD: Final = "http.request.method"
HTTP_ROUTE: Final = "http.route"
HTTP_RESPONSE_STATUS_CODE: Final = "http.response.status_code"
URL_SCHEME: Final = "url.scheme"
NETWORK_PROTOCOL_VERSION: Final = "network.protocol.version"
HANDRAIL_TASK_ID: Final = "handrail.task.id"


FAILURES: Final = frozenset(
    {
        ErrorCode.FAILED_FINAL,
        ErrorCode.TRANSIENT,
        ErrorCode.TIMEOUT,
        ErrorCode.OUTCOME_UNKNOWN,
        ErrorCode.CANCELLED,
    }
)
"""Codes that mark a span ERROR; any other code is a refusal: the policy working."""


def key_hash(key: str) -> str:
    """What spans say of an idempotency key: its SHA-256, never the key."""
    return sha256_hex(key.encode())


__all__ += ["FAILURES", "key_hash"]
