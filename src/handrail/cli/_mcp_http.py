"""The HTTP half of `handrail mcp serve`: `--http HOST:PORT` and who may call.

Over HTTP the principal is never the server's configuration: each request's bearer
token is turned into one, by API keys from the store (`--api-keys`, on by default)
and/or JWTs from one issuer checked against a JWKS file (`--jwt-issuer`, `--jwks`,
`--jwt-audience`, `--tenant-claim`). The server binds the address given (127.0.0.1
unless told otherwise), announces its URL on stderr once it listens, and serves
until interrupted. Nothing here imports the SDK until a command runs.
"""

from __future__ import annotations

import asyncio
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from handrail.addresses import is_loopback
from handrail.cli._common import CliError
from handrail.errors import ConfigurationError

if TYPE_CHECKING:
    from collections.abc import Callable

    from handrail.app import Handrail
    from handrail.mcp.auth import Authenticator

__all__ = [
    "AllowOriginOption",
    "ApiKeysOption",
    "HttpOption",
    "HttpSettings",
    "JwksOption",
    "JwtAudienceOption",
    "JwtIssuerOption",
    "ResourceUrlOption",
    "TenantClaimOption",
    "authenticator_for",
    "bound_socket",
    "http_settings",
    "parse_address",
    "serve_over_http",
]

HttpOption = Annotated[
    str | None,
    typer.Option(
        "--http",
        metavar="HOST:PORT",
        help=(
            "Serve over Streamable HTTP at this address instead of stdio; every request "
            "then needs a bearer token (an API key or a JWT). A PORT alone means "
            "127.0.0.1:PORT; use another host only when clients on other machines must "
            "reach it, behind TLS. Port 0 picks a free one."
        ),
    ),
]
ApiKeysOption = Annotated[
    bool,
    typer.Option(
        "--api-keys/--no-api-keys",
        help="Over HTTP, accept API keys from the store (`handrail keys create`).",
    ),
]
JwtIssuerOption = Annotated[
    str | None,
    typer.Option("--jwt-issuer", metavar="URL", help="Over HTTP, accept JWTs of this issuer."),
]
JwtAudienceOption = Annotated[
    str | None,
    typer.Option(
        "--jwt-audience",
        metavar="URL",
        help="The audience those JWTs must name (default: this server's resource URL).",
    ),
]
JwksOption = Annotated[
    Path | None,
    typer.Option("--jwks", metavar="FILE", help="The JWKS file whose keys sign those JWTs."),
]
TenantClaimOption = Annotated[
    str,
    typer.Option("--tenant-claim", help="The JWT claim that names the caller's tenant."),
]
ResourceUrlOption = Annotated[
    str | None,
    typer.Option(
        "--resource-url",
        metavar="URL",
        help=(
            "The URL clients reach this server at (default: http://HOST:PORT/mcp); "
            "its host and port are the only Host accepted."
        ),
    ),
]
AllowOriginOption = Annotated[
    list[str] | None,
    typer.Option(
        "--allow-origin",
        metavar="ORIGIN",
        help=(
            "A browser Origin allowed to call (repeatable). None by default: requests "
            "with any Origin header are refused (DNS-rebinding protection)."
        ),
    ),
]


@dataclass(frozen=True, kw_only=True, slots=True)
class HttpSettings:
    """What `--http` and its options asked for, checked."""

    host: str
    port: int
    api_keys: bool
    jwt_issuer: str | None
    jwt_audience: str | None
    jwks: Path | None
    tenant_claim: str
    resource_url: str | None
    allowed_origins: tuple[str, ...]


def parse_address(text: str) -> tuple[str, int]:
    """HOST:PORT (IPv6 in brackets), or PORT alone for 127.0.0.1, as a host and a port."""
    host, colon, port = text.rpartition(":") if ":" in text else ("127.0.0.1", ":", text)
    bracketed = host.startswith("[") and host.endswith("]")
    host = host[1:-1] if bracketed else host
    # An IPv6 host is bracketed: "::1" would read as host "::" (every interface), port 1.
    unbracketed_v6 = ":" in host and not bracketed
    if not colon or not host or unbracketed_v6 or not port.isdigit() or int(port) > 65535:  # noqa: PLR2004
        raise CliError(f"--http takes HOST:PORT (e.g. 127.0.0.1:8000, [::1]:8000), not {text!r}")
    return host, int(port)


def http_settings(
    *,
    http: str | None,
    api_keys: bool,
    jwt_issuer: str | None,
    jwt_audience: str | None,
    jwks: Path | None,
    tenant_claim: str,
    resource_url: str | None,
    allowed_origins: list[str] | None,
) -> HttpSettings | None:
    """The HTTP settings, or None for stdio; HTTP options without `--http` are an error."""
    if http is None:
        if jwt_issuer or jwt_audience or jwks or resource_url or allowed_origins:
            raise CliError("--jwt-*, --jwks, --resource-url and --allow-origin need --http")
        return None
    host, port = parse_address(http)
    if (jwt_issuer is None) != (jwks is None):
        raise CliError("--jwt-issuer and --jwks go together")
    if jwt_audience is not None and jwt_issuer is None:
        raise CliError("--jwt-audience needs --jwt-issuer and --jwks")
    if not api_keys and jwt_issuer is None:
        raise CliError("over --http, accept API keys or JWTs (--jwt-issuer, --jwks), or both")
    return HttpSettings(
        host=host,
        port=port,
        api_keys=api_keys,
        jwt_issuer=jwt_issuer,
        jwt_audience=jwt_audience,
        jwks=jwks,
        tenant_claim=tenant_claim,
        resource_url=resource_url,
        allowed_origins=tuple(allowed_origins or ()),
    )


def authenticator_for(settings: HttpSettings, app: Handrail, resource_url: str) -> Authenticator:
    """The authenticators the settings ask for, API keys from the application's store."""
    from handrail.mcp.auth import bearer_authenticator  # noqa: PLC0415 - not for --help

    try:
        return bearer_authenticator(
            app,
            api_keys=settings.api_keys,
            jwt_issuer=settings.jwt_issuer,
            jwks=settings.jwks,
            jwt_audience=settings.jwt_audience or resource_url,
            tenant_claim=settings.tenant_claim,
        )
    except ConfigurationError as exc:
        raise CliError(str(exc)) from None


def _url_or_none(issuer: str | None) -> str | None:
    # Announced as the authorization server only when the issuer is a URL.
    return issuer if issuer and issuer.startswith(("https://", "http://")) else None


def bound_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to host:port and listening; CliError naming why it cannot be."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP spelled out: asyncio sets TCP_NODELAY only on sockets whose proto says
    # TCP, and without it every answer written in two parts waits ~40 ms for an ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise CliError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(128)
    return sock


def serve_over_http(
    app: Handrail,
    settings: HttpSettings,
    *,
    name: str,
    confirm_url: Callable[[str], str] | None,
) -> None:
    """Serve the application's tools over Streamable HTTP until interrupted, then close it."""
    from handrail.mcp.auth import principal_from_request  # noqa: PLC0415 - not for --help
    from handrail.mcp.http import default_resource_url, serve_http  # noqa: PLC0415
    from handrail.mcp.server import GatedServer  # noqa: PLC0415

    sock = bound_socket(settings.host, settings.port)
    port = sock.getsockname()[1]
    resource_url = settings.resource_url or default_resource_url(settings.host, port)
    authenticator = authenticator_for(settings, app, resource_url)
    server = GatedServer(app, principal=principal_from_request, name=name, confirm_url=confirm_url)

    async def close() -> None:
        server.close()
        await app.aclose()

    serving = serve_http(
        server,
        authenticator,
        host=settings.host,
        port=port,
        resource_url=resource_url,
        allowed_origins=settings.allowed_origins,
        authorization_server=_url_or_none(settings.jwt_issuer),
        sock=sock,
        on_shutdown=close,
        telemetry=app.telemetry,
    )
    if not is_loopback(settings.host) and not resource_url.startswith("https://"):
        warning = "handrail: warning: bearer tokens over plain HTTP off this machine; use TLS"
        print(warning, file=sys.stderr, flush=True)  # noqa: T201
    # The socket listens already: a client that connects now waits for the server.
    print(f"handrail: serving MCP on {resource_url}", file=sys.stderr, flush=True)  # noqa: T201
    try:
        asyncio.run(serving)
    except KeyboardInterrupt:
        # uvicorn re-raises the SIGINT it shut down on, after the application closed.
        pass
    except ConfigurationError as exc:
        raise CliError(str(exc)) from None
    finally:
        sock.close()
        app.close()  # does nothing when the shutdown closed it
