"""Refusals as HTTP answers: one JSON problem body, the error code as the contract.

Every refusal the service gives is `{"error": {"code", "message"}}` (plus `details`
where useful) with a status chosen by its code. Another tenant's record and a missing
one give the same 404 body, so nothing tells them apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from http import HTTPStatus

from starlette.responses import JSONResponse

from handrail.errors import ErrorCode

__all__ = ["STATUS_OF", "ServiceCode", "problem", "status_of"]


class ServiceCode:
    """Codes of refusals that only the service gives (the rest are `ErrorCode`s)."""

    UNAUTHENTICATED = "UNAUTHENTICATED"
    """No credential, or one that proves nothing (forged, expired, revoked)."""
    CSRF_FAILED = "CSRF_FAILED"
    """A console form posted without its session's CSRF token."""
    LOCKED_OUT = "LOCKED_OUT"
    """Too many failed logins: the account waits out its lock."""
    PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
    """The body is longer than the service accepts."""
    UNSUPPORTED_MEDIA_TYPE = "UNSUPPORTED_MEDIA_TYPE"
    """The body is not JSON (API) or not a form (console)."""
    IDEMPOTENCY_KEY_REUSED = "IDEMPOTENCY_KEY_REUSED"
    """The Idempotency-Key was used before with another request body."""
    IDEMPOTENCY_KEY_INVALID = "IDEMPOTENCY_KEY_INVALID"
    """The Idempotency-Key header is malformed."""
    UNAVAILABLE = "UNAVAILABLE"
    """The store or Redis cannot be reached."""
    MISDIRECTED = "MISDIRECTED"
    """The Host header names a site this service is not (DNS rebinding)."""


STATUS_OF: Mapping[str, int] = {
    ErrorCode.UNKNOWN_TOOL: HTTPStatus.NOT_FOUND,
    ErrorCode.NOT_FOUND: HTTPStatus.NOT_FOUND,
    ErrorCode.INVALID_ARGUMENTS: HTTPStatus.UNPROCESSABLE_ENTITY,
    ErrorCode.NEEDS_CLARIFICATION: HTTPStatus.UNPROCESSABLE_ENTITY,
    ErrorCode.PERMISSION_DENIED: HTTPStatus.FORBIDDEN,
    ErrorCode.RISK_BLOCKED: HTTPStatus.FORBIDDEN,
    ErrorCode.CONFLICT: HTTPStatus.CONFLICT,
    ErrorCode.VERSION_CONFLICT: HTTPStatus.CONFLICT,
    ErrorCode.IN_PROGRESS: HTTPStatus.CONFLICT,
    ErrorCode.NEEDS_CONFIRMATION: HTTPStatus.CONFLICT,
    ErrorCode.NEEDS_APPROVAL: HTTPStatus.CONFLICT,
    ErrorCode.IDEMPOTENCY_MISMATCH: HTTPStatus.UNPROCESSABLE_ENTITY,
    ErrorCode.CONFIRMATION_INVALID: HTTPStatus.FORBIDDEN,
    ErrorCode.CONFIRMATION_REPLAYED: HTTPStatus.CONFLICT,
    ErrorCode.PLAN_EXPIRED: HTTPStatus.GONE,
    ErrorCode.PLAN_CHANGED: HTTPStatus.CONFLICT,
    ErrorCode.PLAN_CLOSED: HTTPStatus.CONFLICT,
    ErrorCode.RATE_LIMITED: HTTPStatus.TOO_MANY_REQUESTS,
    ErrorCode.TIMEOUT: HTTPStatus.GATEWAY_TIMEOUT,
    ErrorCode.TRANSIENT: HTTPStatus.SERVICE_UNAVAILABLE,
    ServiceCode.UNAUTHENTICATED: HTTPStatus.UNAUTHORIZED,
    ServiceCode.CSRF_FAILED: HTTPStatus.FORBIDDEN,
    ServiceCode.LOCKED_OUT: HTTPStatus.TOO_MANY_REQUESTS,
    ServiceCode.PAYLOAD_TOO_LARGE: HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
    ServiceCode.UNSUPPORTED_MEDIA_TYPE: HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
    ServiceCode.IDEMPOTENCY_KEY_REUSED: HTTPStatus.UNPROCESSABLE_ENTITY,
    ServiceCode.IDEMPOTENCY_KEY_INVALID: HTTPStatus.BAD_REQUEST,
    ServiceCode.UNAVAILABLE: HTTPStatus.SERVICE_UNAVAILABLE,
    ServiceCode.MISDIRECTED: HTTPStatus.MISDIRECTED_REQUEST,
}


def status_of(code: str) -> int:
    """The HTTP status of a refusal code (400 for a code without its own)."""
    return int(STATUS_OF.get(code, HTTPStatus.BAD_REQUEST))


def problem(
    code: str,
    message: str,
    *,
    status: int | None = None,
    details: Mapping[str, object] | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    """The JSON answer of a refusal: `{"error": {"code", "message", "details"?}}`."""
    body: dict[str, object] = {"code": str(code), "message": message}
    if details:
        body["details"] = dict(details)
    return JSONResponse(
        {"error": body},
        status_code=status if status is not None else status_of(code),
        headers=dict(headers) if headers else None,
    )
