"""The caller's W3C trace context, read from each MCP message's `params._meta`.

Owns `TraceContext`, the server middleware that makes the `traceparent` of a message's
`_meta` current while the message is handled, so the gate's spans of a call are the
caller's children. It replaces the SDK's own middleware, which names a span after the
client's `params.name` (any length, a tool that exists or not), records exceptions'
messages and reads baggage through the global propagator (then sent on upstream).
Never makes a span and never reads baggage.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context

from handrail.telemetry.propagation import extract

if TYPE_CHECKING:
    from mcp.server.context import CallNext, HandlerResult, ServerRequestContext

__all__ = ["TraceContext"]


class TraceContext:
    """Server middleware: the message's `_meta` trace context current while it runs.

    A `_meta` that names no valid W3C parent leaves the current context as it is (over
    HTTP, the request's span). No span of its own: nothing the client wrote is named.
    """

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        """Handle the message under the parent its `_meta` names, if any."""
        meta = ctx.meta
        parent = extract(meta) if isinstance(meta, Mapping) else None
        if parent is None:
            return await call_next(ctx)
        token = otel_context.attach(parent)
        try:
            return await call_next(ctx)
        finally:
            otel_context.detach(token)
