"""Handrail's MCP server over Streamable HTTP: every request authenticated, Host and Origin checked.

`http_app` builds the SDK's Starlette app (`Server.streamable_http_app`) with a bearer
TokenVerifier over an Authenticator: no token, a bad one, one for another audience or
an expired one is a 401 with `WWW-Authenticate`, and nothing runs. Host and Origin are
checked before the token is even read (DNS-rebinding protection: 421 for a Host and
403 for an Origin that is not allowed). `serve_http` runs it with uvicorn, bound to
127.0.0.1 unless told otherwise. No protocol code here: the SDK does all of it.

Trace context: with `telemetry`, each HTTP request is a SERVER span whose parent is
its `traceparent` header (`TraceRequests`), current while the SDK handles the message
(the SDK runs a request's handler in the context of the HTTP request that carried it).
A `traceparent` in the request's `params._meta` wins: the SDK's own middleware reads
it. Without telemetry nothing of this runs.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

from mcp.server.auth.settings import AuthSettings
from mcp.server.lowlevel.server import Server
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from starlette.requests import Request

from handrail.addresses import is_loopback
from handrail.errors import ConfigurationError
from handrail.mcp._guards import SESSIONS_PER_PRINCIPAL, cap_sessions_per_principal
from handrail.mcp.auth import Authenticator, AuthenticatorVerifier, UnavailableAs503

if TYPE_CHECKING:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.types import ASGIApp, Receive, Scope, Send

    from handrail.telemetry import Telemetry

__all__ = [
    "after_lifespan",
    "default_resource_url",
    "http_app",
    "serve_http",
    "uvicorn_server",
]

_LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


class _ServesLowlevel(Protocol):
    # GatedServer, or anything else that wraps an SDK server.
    @property
    def lowlevel(self) -> Server[Any]: ...


def default_resource_url(host: str, port: int, path: str = "/mcp") -> str:
    """The URL clients reach the server at, and the audience its tokens must name."""
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}{path}"


def http_app(
    server: _ServesLowlevel | Server[Any],
    authenticator: Authenticator,
    *,
    resource_url: str,
    host: str = "127.0.0.1",
    allowed_hosts: Sequence[str] | None = None,
    allowed_origins: Sequence[str] = (),
    authorization_server: str | None = None,
    json_response: bool = False,
    telemetry: Telemetry | None = None,
) -> Starlette:
    """The Starlette app serving `server` at the path of `resource_url`, behind `authenticator`.

    `resource_url` is this server's URL and the audience tokens must be for. By default
    the Host header must be that URL's host and port (for a loopback host, any loopback
    name with that port); browsers' Origins are refused unless listed in
    `allowed_origins` (requests without an Origin, such as non-browser clients, pass).
    `authorization_server` is announced in the protected-resource metadata (default:
    the resource itself, for API keys, which have no authorization server).
    `telemetry` traces each request under its caller's `traceparent` (see above).
    """
    parts = urlsplit(resource_url)
    if parts.scheme not in {"http", "https"} or not parts.hostname or not parts.path:
        msg = f"the resource URL must be http(s)://host[:port]/path, not {resource_url!r}"
        raise ConfigurationError(msg)
    lowlevel = server if isinstance(server, Server) else server.lowlevel
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=list(allowed_hosts) if allowed_hosts is not None else _hosts_of(parts),
        allowed_origins=list(allowed_origins),
    )
    try:
        auth = AuthSettings(
            issuer_url=authorization_server or resource_url,
            resource_server_url=resource_url,
            validate_token_resource=True,
        )
    except ValueError as exc:  # pydantic's ValidationError
        msg = f"the resource URL and the authorization server must be http(s) URLs: {exc}"
        raise ConfigurationError(msg) from None
    app = lowlevel.streamable_http_app(
        streamable_http_path=parts.path,
        json_response=json_response,
        transport_security=security,
        host=host,
        auth=auth,
        token_verifier=AuthenticatorVerifier(authenticator, resource_url=resource_url),
    )
    cap_sessions_per_principal(lowlevel.session_manager, SESSIONS_PER_PRINCIPAL)
    app.add_middleware(UnavailableAs503)  # an authenticator that failed: 503, not 500
    # Outside the rest: Host and Origin are refused before any token is looked at.
    app.add_middleware(_HostOriginGuard, settings=security)
    if telemetry is not None:
        # Outermost: every answer is in its request's span, refusals included.
        from handrail.telemetry.propagation import TraceRequests  # noqa: PLC0415 - telemetry on

        app.add_middleware(TraceRequests, telemetry=telemetry)
    return app


def _hosts_of(parts: Any) -> list[str]:  # noqa: ANN401 - a urllib SplitResult
    port = parts.port or (443 if parts.scheme == "https" else 80)
    hosts = [parts.netloc.rpartition("@")[2], f"{_bracketed(parts.hostname)}:{port}"]
    if is_loopback(parts.hostname):
        hosts.extend(f"{name}:{port}" for name in _LOOPBACK_NAMES)
    return sorted(set(hosts))


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


class _HostOriginGuard:
    """Refuses a request whose Host or Origin is not allowed, before authentication.

    Uses the SDK's own checks (TransportSecurityMiddleware); they run again inside the
    transport, so this only moves them ahead of the bearer middleware.
    """

    def __init__(self, app: ASGIApp, *, settings: TransportSecuritySettings) -> None:
        self._app = app
        self._check = TransportSecurityMiddleware(settings)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refused = await self._check.validate_request(Request(scope), is_post=False)
            if refused is not None:
                await refused(scope, receive, send)
                return
        await self._app(scope, receive, send)


def uvicorn_server(
    app: ASGIApp,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    log_level: str = "warning",
    graceful_seconds: int = 10,
) -> uvicorn.Server:
    """A uvicorn server for `app` (not started): `await server.serve(sockets=...)` runs it.

    On shutdown, open streams get `graceful_seconds` to finish before they are closed.
    """
    import uvicorn  # noqa: PLC0415 - only when serving

    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        lifespan="on",
        access_log=False,
        timeout_graceful_shutdown=graceful_seconds,
    )
    return uvicorn.Server(config)


async def serve_http(
    server: _ServesLowlevel | Server[Any],
    authenticator: Authenticator,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    resource_url: str | None = None,
    allowed_hosts: Sequence[str] | None = None,
    allowed_origins: Sequence[str] = (),
    authorization_server: str | None = None,
    sock: socket.socket | None = None,
    log_level: str = "warning",
    on_shutdown: Callable[[], Awaitable[None]] | None = None,
    stop: asyncio.Event | None = None,
    telemetry: Telemetry | None = None,
) -> None:
    """Serve over Streamable HTTP until interrupted (or `stop` is set); 127.0.0.1 by default.

    `sock` is an already bound socket to serve on (its port then wins over `port`).
    `resource_url` defaults to http://host:port/mcp. `on_shutdown` runs once the last
    connection is closed, inside the server's lifespan: uvicorn re-raises the signal
    that stopped it only after that, so the work is not cut short. `telemetry` traces
    each request (`http_app`).
    """
    if sock is not None:
        host, port = sock.getsockname()[:2]
    url = resource_url or default_resource_url(host, port)
    app = http_app(
        server,
        authenticator,
        resource_url=url,
        host=host,
        allowed_hosts=allowed_hosts,
        allowed_origins=allowed_origins,
        authorization_server=authorization_server,
        telemetry=telemetry,
    )
    if on_shutdown is not None:
        app.router.lifespan_context = after_lifespan(app.router.lifespan_context, on_shutdown)
    runner = uvicorn_server(app, host=host, port=port, log_level=log_level)
    sockets = None if sock is None else [sock]
    if stop is None:
        await runner.serve(sockets=sockets)
        return

    async def stop_when_asked() -> None:
        await stop.wait()
        runner.should_exit = True

    watcher = asyncio.create_task(stop_when_asked())
    try:
        await runner.serve(sockets=sockets)
    finally:
        watcher.cancel()


def after_lifespan(
    lifespan: Callable[[Any], AbstractAsyncContextManager[Any]],
    shutdown: Callable[[], Awaitable[None]],
) -> Callable[[Any], AbstractAsyncContextManager[Any]]:
    """`lifespan`, then `shutdown` once the app's own shutdown is done (or failed)."""

    @asynccontextmanager
    async def wrapped(app: Any) -> AsyncIterator[Any]:  # noqa: ANN401 - Starlette's lifespan
        try:
            async with lifespan(app) as state:
                yield state
        finally:
            await shutdown()

    return wrapped
