"""A bound on the Streamable HTTP sessions each principal holds open at once.

The SDK's session manager bounds sessions for the whole server (10 000 by default)
and keeps an idle one for half an hour: one principal with a valid key could fill
every place, and every other tenant's new session would be refused until they
expired. `cap_sessions_per_principal` adds a bound per owner (the credential's
principal, as the SDK compares owners), decided under the SDK's own admission lock.
It reaches into the manager's admission step (pinned SDK 2.3.0); a manager without
one is refused at start-up rather than served without the bound.
"""

from __future__ import annotations

from typing import Any, Final

from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from handrail.errors import ConfigurationError

__all__ = ["SESSIONS_PER_PRINCIPAL", "cap_sessions_per_principal"]

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
