"""Guards of the MCP server against its clients: what one principal may hold, no internals out.

Sessions. The SDK's session manager bounds sessions for the whole server (10 000 by default)
and keeps an idle one for half an hour: one principal with a valid key could fill
every place, and every other tenant's new session would be refused until they
expired. `cap_sessions_per_principal` adds a bound per owner (the credential's
principal, as the SDK compares owners), decided under the SDK's own admission lock.
It reaches into the manager's admission step (pinned SDK 2.3.0); a manager without
one is refused at start-up rather than served without the bound.

Calls. `RunningCalls` counts the calls each principal has running, over all its
connections, so one client cannot start calls without end; one over the bound is
refused RATE_LIMITED (`busy`) and runs nothing. It counts open `subscriptions/listen`
streams per principal too.

Failures. `contained` wraps a request handler so that an unexpected exception reaches
the client as a generic INTERNAL_ERROR: the SDK would answer a handshake-era request
with the exception's text (a database address, a path), which is the operator's.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Final, ParamSpec, TypeVar

import mcp_types as types
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError

from handrail.calls import ToolCall
from handrail.envelope import HANDRAIL_SOURCE, Envelope, ErrorDetail, Status, Trust
from handrail.errors import ConfigurationError, ErrorCode
from handrail.principal import Principal
from handrail.text import escape_lone_surrogates

__all__ = [
    "LISTENS_PER_PRINCIPAL",
    "MAX_RUNNING_CALLS",
    "SESSIONS_PER_PRINCIPAL",
    "RunningCalls",
    "busy",
    "cap_sessions_per_principal",
    "contained",
]

_log = logging.getLogger("handrail.mcp.server")

MAX_RUNNING_CALLS: Final = 32
"""Calls one principal may have running at once by default (all its connections)."""
LISTENS_PER_PRINCIPAL: Final = 8
"""`subscriptions/listen` streams one principal may hold open (the SDK's bound, 1024, is
the whole server's)."""
_MAX_NAME: Final = 128
_INTERNAL: Final = "Internal error: the request could not be completed"

SESSIONS_PER_PRINCIPAL: Final = 64
"""Open sessions one principal may hold; the next is refused (503) until one ends."""


def cap_sessions_per_principal(manager: StreamableHTTPSessionManager, limit: int) -> None:
    """Refuse a principal's new session while it already holds `limit` open ones."""
    if limit < 1:
        msg = "the sessions per principal are at least 1"
        raise ConfigurationError(msg)
    admit = getattr(manager, "_admit_session", None)
    owners = getattr(manager, "_session_owners", None)
    if not callable(admit) or not isinstance(owners, dict):
        msg = "this MCP SDK's session manager cannot be bounded per principal"
        raise ConfigurationError(msg)

    def admitted(requestor: Any) -> Any:  # noqa: ANN401 - the SDK's own types, passed through
        if requestor is not None:
            held = sum(1 for owner in list(owners.values()) if owner == requestor)
            if held >= limit:
                return None  # the SDK answers 503 "Too many open sessions"
        return admit(requestor)

    manager._admit_session = admitted  # type: ignore[method-assign]  # noqa: SLF001


class RunningCalls:
    """How many calls each principal has running; a bounded count, safe across threads."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            msg = "the running calls per principal are at least 1"
            raise ConfigurationError(msg)
        self._limit = limit
        self._running: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def enter(self, principal: Principal) -> bool:
        """Count one more call of `principal`; False (nothing counted) at the bound."""
        key = (principal.tenant_id, principal.user_id)
        with self._lock:
            running = self._running.get(key, 0)
            if running >= self._limit:
                return False
            self._running[key] = running + 1
            return True

    def leave(self, principal: Principal) -> None:
        """One call of `principal` ended (it was counted by `enter`)."""
        key = (principal.tenant_id, principal.user_id)
        with self._lock:
            left = self._running.get(key, 1) - 1
            if left > 0:
                self._running[key] = left
            else:
                self._running.pop(key, None)


def refusal(call: ToolCall, code: ErrorCode, summary: str, *, tool: str | None = None) -> Envelope:
    """An envelope in Handrail's own words refusing `call` before anything ran.

    `tool` is the registered name when known; otherwise the called name, clipped and
    with lone surrogates escaped (it is the client's text).
    """
    return Envelope(
        call_id=call.id,
        tool=tool or escape_lone_surrogates(call.name[:_MAX_NAME]),
        status=Status.ERROR,
        summary=summary,
        error=ErrorDetail(code=code),
        trust=Trust.HANDRAIL,
        source=HANDRAIL_SOURCE,
    )


def busy(call: ToolCall) -> Envelope:
    """The refusal of a call over its principal's bound on running calls: nothing ran."""
    return refusal(
        call,
        ErrorCode.RATE_LIMITED,
        "Too many of your calls are running at once, so this one was not run. Wait for one "
        "to finish, then try again.",
    )


_P = ParamSpec("_P")
_R = TypeVar("_R")


def contained(handler: Callable[_P, Awaitable[_R]]) -> Callable[_P, Awaitable[_R]]:
    """`handler`, whose unexpected failure reaches the client as a generic error (logged)."""

    @functools.wraps(handler)
    async def run(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return await handler(*args, **kwargs)
        except MCPError:
            raise
        except Exception:  # noqa: BLE001 - logged here; the client gets no internals
            _log.exception("an MCP request handler failed")
            raise MCPError(code=types.INTERNAL_ERROR, message=_INTERNAL) from None

    return run
