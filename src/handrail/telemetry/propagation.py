"""W3C Trace Context across process boundaries: HTTP requests, MCP messages, queued tasks.

Owns reading and writing `traceparent` / `tracestate` (the W3C format alone, through the
API's own propagator; baggage is neither read nor written: it is unbounded and often
carries user data) and `TraceRequests`, the ASGI middleware that makes each HTTP request
a SERVER span whose parent is the caller's `traceparent` (not FastAPI's own request
spans: they record each path and query, which carry idempotency keys and references).
A carrier that names no valid parent gives None, so the caller falls back to what is
current rather than orphaning a span. Never configures a provider or the global
propagator.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from handrail.telemetry import attributes
from handrail.telemetry.spans import failed

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

    from handrail.telemetry import Telemetry

__all__ = [
    "TRACEPARENT",
    "TRACESTATE",
    "TraceRequests",
    "context_of",
    "current",
    "extract",
    "from_headers",
]

TRACEPARENT: Final = "traceparent"
TRACESTATE: Final = "tracestate"

_W3C: Final = TraceContextTextMapPropagator()
"""Stateless: the same codec everywhere, whatever `OTEL_PROPAGATORS` says."""

_TRACEPARENT_BYTES: Final = TRACEPARENT.encode()
_TRACESTATE_BYTES: Final = TRACESTATE.encode()
_METHODS: Final = frozenset(
    {"CONNECT", "DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT", "TRACE"}
)
_SERVER_ERROR: Final = 500


def context_of(traceparent: str, tracestate: str | None = None) -> Context | None:
    """The context whose current span is the remote parent `traceparent` names, or None.

    None for anything the W3C format does not accept (the propagator also bounds the
    lengths of both values); the context holds nothing else (no ambient values).
    """
    carrier = {TRACEPARENT: traceparent}
    if tracestate:
        carrier[TRACESTATE] = tracestate
    return _valid(_W3C.extract(carrier))


def extract(carrier: Mapping[str, Any]) -> Context | None:
    """The remote parent a carrier names (an MCP `_meta`, a task's fields), or None.

    Values that are not strings are ignored: a carrier is untrusted input.
    """
    parent = carrier.get(TRACEPARENT)
    if not isinstance(parent, str):
        return None
    state = carrier.get(TRACESTATE)
    return context_of(parent, state if isinstance(state, str) else None)


def from_headers(headers: Iterable[tuple[bytes, bytes]]) -> Context | None:
    """The remote parent of an ASGI request's headers (names lower case), or None.

    Several `tracestate` fields are one list (RFC 9110); of several `traceparent`
    fields the first is read, as the propagator does.
    """
    parents: list[str] = []
    states: list[str] = []
    for name, value in headers:
        if name == _TRACEPARENT_BYTES:
            parents.append(value.decode("latin-1"))
        elif name == _TRACESTATE_BYTES:
            states.append(value.decode("latin-1"))
    if not parents:
        return None
    carrier: dict[str, list[str]] = {TRACEPARENT: parents}
    if states:
        carrier[TRACESTATE] = states
    return _valid(_W3C.extract(carrier))


def current() -> dict[str, str]:
    """The W3C fields of the current span (`traceparent`, and `tracestate` if any); {} for none."""
    carrier: dict[str, str] = {}
    _W3C.inject(carrier)
    return carrier


def _valid(context: Context) -> Context | None:
    return context if trace.get_current_span(context).get_span_context().is_valid else None


class TraceRequests:
    """A SERVER span per HTTP request, parented by its `traceparent`; pure ASGI.

    The span is current while the app answers, so what the request does (the gate's
    `execute_tool` spans) nests under it. It is named `{method} {route}` once the
    router matched (`http.route` is the template, never the path: a path may carry an
    idempotency key or a raw result's reference; nor the query), and has the response's
    status code. A 5xx or an exception is an error (the exception's type only, never
    its message). Requests to `untraced` paths (health probes) and non-HTTP scopes pass
    through untouched. Add it only when there is telemetry: without, nothing of it runs.
    """

    def __init__(self, app: ASGIApp, *, telemetry: Telemetry, untraced: Iterable[str] = ()) -> None:
        self._app = app
        self._tracer = telemetry.tracer
        self._untraced = frozenset(untraced)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer the request inside its span."""
        if scope["type"] != "http" or scope["path"] in self._untraced:
            await self._app(scope, receive, send)
            return
        method = scope["method"] if scope["method"] in _METHODS else "_OTHER"
        span = self._tracer.start_span(
            "HTTP" if method == "_OTHER" else method,
            context=from_headers(scope["headers"]),
            kind=SpanKind.SERVER,
            attributes={
                attributes.HTTP_REQUEST_METHOD: method,
                attributes.URL_SCHEME: scope.get("scheme", "http"),
                attributes.NETWORK_PROTOCOL_VERSION: scope.get("http_version", "1.1"),
            },
        )
        if not span.is_recording():
            # Sampled out (or a no-op provider): nothing to record, but the context
            # still travels on (tasks, upstreams) with the caller's trace.
            token = otel_context.attach(trace.set_span_in_context(span))
            try:
                await self._app(scope, receive, send)
            finally:
                otel_context.detach(token)
            return
        status = 0
        failure: str | None = None

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        with trace.use_span(
            span, end_on_exit=True, record_exception=False, set_status_on_exception=False
        ):
            try:
                await self._app(scope, receive, sending)
            except Exception as exc:
                failure = type(exc).__qualname__
                raise
            finally:
                _answered(span, scope, method, status, failure)


def _answered(span: Span, scope: Scope, method: str, status: int, failure: str | None) -> None:
    """Name the span by its route; record the response's status, and whether it failed.

    An exception is named by its type alone (its message may carry data); a response
    of 5xx is an error, a 4xx is the client's (status unset).
    """
    route = _route(scope)
    if route is not None:
        span.set_attribute(attributes.HTTP_ROUTE, route)
        span.update_name(f"{'HTTP' if method == '_OTHER' else method} {route}")
    if status:
        span.set_attribute(attributes.HTTP_RESPONSE_STATUS_CODE, status)
    if failure is not None:
        failed(span, failure)
    elif status >= _SERVER_ERROR:
        span.set_attribute(attributes.ERROR_TYPE, str(status))
        span.set_status(StatusCode.ERROR)


def _route(scope: Scope) -> str | None:
    """The matched route's template, prefixes included (`{param}`, no converters), or None.

    FastAPI (0.165) keeps an included router's route, whose own path lacks the
    prefixes, with its whole template in its own scope entry (the service's tests pin
    the names this gives); a Starlette router leaves the matched route in
    `scope["route"]`. A template never holds a value from the request.
    """
    fastapi = scope.get("fastapi")
    matched = fastapi.get("effective_route_context") if isinstance(fastapi, dict) else None
    template = getattr(matched, "path_format", None)
    if not isinstance(template, str):
        template = getattr(scope.get("route"), "path_format", None)
    return template if isinstance(template, str) else None
