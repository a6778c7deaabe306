"""Running the service's app with uvicorn, bounded against slow and greedy clients.

`service_server(app, http, sock=...)` makes the uvicorn server of `handrail serve`: a
socket bound beforehand, no access log, no `Server` header, forwarded headers not
trusted, headers at most 16 KiB, idle keep-alive connections closed after a few
seconds, and, beyond uvicorn's own settings, a deadline for a request's headers: a
connection that has not sent a whole request head within the request timeout of
connecting (or of its previous answer) is closed, so a client trickling its headers
(slowloris) holds nothing for long. The body's size and time are `BodyLimit`'s.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from handrail.server.limits import MAX_HEAD_BYTES

if TYPE_CHECKING:
    from starlette.types import ASGIApp

    from handrail.server.config import HttpConfig

__all__ = ["guarded_h11", "service_server"]
_KEEP_ALIVE_SECONDS = 5
_GRACEFUL_SECONDS = 10


def guarded_h11(header_seconds: float) -> type[H11Protocol]:
    """Uvicorn's h11 protocol, closing a connection whose request head is late."""

    class HeaderDeadlineH11(H11Protocol):
        """Closes a connection whose next request head is `header_seconds` late.

        The deadline starts when the connection opens and again after each answer.
        """

        _deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
            super().connection_lost(exc)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()

        def _arm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
            self._deadline = self.loop.call_later(header_seconds, self._late, self.cycle)

        def _late(self, cycle: Any) -> None:  # noqa: ANN401 - uvicorn's RequestResponseCycle
            # No new request began since the deadline was set: the head is late.
            if self.transport.is_closing() or self.cycle is not cycle:
                return
            if self.conn.their_state in {h11.IDLE, h11.DONE}:
                self.transport.close()

    return HeaderDeadlineH11


def service_server(app: ASGIApp, http: HttpConfig, *, log_level: str = "warning") -> uvicorn.Server:
    """A uvicorn server for `app` (not started): `await server.serve(sockets=[sock])` runs it."""
    config = uvicorn.Config(
        app,
        host=http.host,
        port=http.port,
        http=guarded_h11(http.request_timeout_seconds),
        log_level=log_level,
        lifespan="on",
        access_log=False,
        server_header=False,
        proxy_headers=False,
        timeout_keep_alive=_KEEP_ALIVE_SECONDS,
        timeout_graceful_shutdown=_GRACEFUL_SECONDS,
        h11_max_incomplete_event_size=MAX_HEAD_BYTES,
    )
    return uvicorn.Server(config)
