"""The service's ASGI app: the HTTP API, health, and the console, over one `Services`.

`create_app(services)` wires the routers, the answers to refusals and the three
middlewares every request passes (`HostAllowList` against DNS rebinding, `BodyLimit`,
then `IdempotencyKeys`), and, outside them when the services have telemetry,
`TraceRequests` (a SERVER span per request, parented by its `traceparent`; health
probes untraced); it opens nothing (`open_services` does). Every refusal is
a problem body (`problems.problem`) with its stable code: AccessRefusedError and its
kin keep their code, an authentication failure is 401 UNAUTHENTICATED, a StoreError
503 UNAVAILABLE. A failure nobody expected is a 500 whose body names nothing internal.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import Response

from handrail.errors import AccessRefusedError, ErrorCode, StoreError
from handrail.server.api import audit, calls, executions, health, plans, raw, runs
from handrail.server.console import routes as console
from handrail.server.idempotency import IdempotencyKeys
from handrail.server.limits import BodyLimit, HostAllowList, allowed_hosts
from handrail.server.problems import ServiceCode, problem
from handrail.server.services import Services

__all__ = ["create_app"]

_log = logging.getLogger(__name__)


def create_app(services: Services) -> FastAPI:
    """The app serving `services`: API under /v1 (OpenAPI: /openapi.json), health, console."""
    app = FastAPI(
        title="Handrail",
        summary="Validated, authorized, audited, exactly-once tool execution for LLM agents.",
        version="1",
        # No Swagger page: FastAPI's loads its script from a CDN, which would then run
        # on the console's origin (its pages, forms and CSRF tokens). The document stays.
        docs_url=None,
        redoc_url=None,
        openapi_url="/openapi.json",
        # FastAPI's own spans (made whenever a global provider is set) would record each
        # request's path and query, which carry idempotency keys and raw references, and
        # its logs exception messages: requests are traced by TraceRequests alone.
        telemetry={"tracing": False, "logs": False},
    )
    app.state.services = services
    app.include_router(health.router)
    for part in (calls, plans, executions, audit, raw, runs):
        app.include_router(part.router, prefix="/v1")
    if services.config.console.enabled:
        app.include_router(console.router)
    _answer_refusals(app)
    # The last added runs first: bodies are bounded before any key is claimed for them.
    app.add_middleware(IdempotencyKeys, services=services)
    http = services.config.server
    app.add_middleware(
        BodyLimit, max_bytes=http.max_body_bytes, timeout_seconds=http.request_timeout_seconds
    )
    app.add_middleware(HostAllowList, hosts=allowed_hosts(http.host, http.public_url))
    if services.telemetry is not None:
        # Outermost: every answer is in its request's span, refusals included.
        from handrail.telemetry.propagation import TraceRequests  # noqa: PLC0415 - telemetry on

        app.add_middleware(TraceRequests, telemetry=services.telemetry, untraced=health.PROBES)
    return app


def _answer_refusals(app: FastAPI) -> None:
    @app.exception_handler(AccessRefusedError)
    async def refused(_request: Request, exc: AccessRefusedError) -> Response:
        return problem(exc.code, exc.message)

    @app.exception_handler(StoreError)
    async def store_down(request: Request, exc: StoreError) -> Response:
        _log.warning("store failure answering %s %s: %s", request.method, request.url.path, exc)
        return problem(ServiceCode.UNAVAILABLE, "the store cannot be reached; try again")

    @app.exception_handler(RequestValidationError)
    async def invalid(_request: Request, exc: RequestValidationError) -> Response:
        errors: list[dict[str, Any]] = [
            {"loc": [str(p) for p in error.get("loc", ())], "msg": str(error.get("msg", ""))}
            for error in exc.errors()[:20]
        ]
        return problem(
            ErrorCode.INVALID_ARGUMENTS, "the request is not valid", details={"errors": errors}
        )

    @app.exception_handler(HTTPException)
    async def http_error(_request: Request, exc: HTTPException) -> Response:
        detail = exc.detail
        if isinstance(detail, dict) and "code" in detail:
            return problem(
                str(detail["code"]),
                str(detail.get("message", "")),
                status=exc.status_code,
                headers=exc.headers,
            )
        code = ErrorCode.NOT_FOUND if exc.status_code == 404 else f"HTTP_{exc.status_code}"  # noqa: PLR2004
        return problem(code, str(detail), status=exc.status_code, headers=exc.headers)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, _exc: Exception) -> Response:
        _log.exception("unexpected failure answering %s %s", request.method, request.url.path)
        return problem("INTERNAL", "the service failed unexpectedly", status=500)
