"""`handrail mcp`: serve an application's tools over MCP, through its gate.

`serve` loads the application (`--app`), opens its store and serves
`registry.exposed(principal)` over stdio to one client, every call through the gate.
Over stdio the principal is the server's configuration (`--tenant`, `--user`,
`--permission`), never anything a client sends. Nothing but protocol goes to stdout;
errors go to stderr. The SDK is imported only when a command runs, never for `--help`.
`--http HOST:PORT` serves Streamable HTTP instead (`handrail.cli._mcp_http`), where
each request's bearer token names the principal.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from handrail.cli._common import (
    AppOption,
    CliError,
    HelpCommand,
    HelpGroup,
    StoreOption,
    load_registry,
    one_line_errors,
)
from handrail.cli._mcp_http import (
    AllowOriginOption,
    ApiKeysOption,
    HttpOption,
    JwksOption,
    JwtAudienceOption,
    JwtIssuerOption,
    ResourceUrlOption,
    TenantClaimOption,
    http_settings,
    serve_over_http,
)
from handrail.errors import ConfigurationError
from handrail.principal import Principal

if TYPE_CHECKING:
    from handrail.app import Handrail
    from handrail.declare.registry import Registry
    from handrail.mcp.server import GatedServer
    from handrail.writes.confirmation import Keyring

__all__ = [
    "build_server",
    "confirmation_page",
    "mcp_app",
    "open_app",
    "serve",
    "serving_principal",
]

"""Permission bits of a key file that let anyone but its owner in."""

mcp_app = typer.Typer(
    cls=HelpGroup,
    help="Serve an application's tools over the Model Context Protocol, through its gate.",
    no_args_is_help=True,
)

ServeTenant = Annotated[
    str | None,
    typer.Option(
        "--tenant", envvar="HANDRAIL_TENANT", help="Tenant the server acts for (stdio only)."
    ),
]
ServeUser = Annotated[
    str | None,
    typer.Option(
        "--user", envvar="HANDRAIL_USER", help="User id the server acts for (stdio only)."
    ),
]
ServePermissions = Annotated[
    list[str] | None,
    typer.Option(
        "--permission",
        "-p",
        help=(
            "A permission that user holds (repeatable). None by default: tools that "
            "require a permission are not listed and not run unless it is given."
        ),
    ),
]
KeyringOption = Annotated[
    Path | None,
    typer.Option(
        "--keyring",
        "--key-file",
        envvar="HANDRAIL_KEY_FILE",
        metavar="FILE",
        help=(
            "The confirmation keys that sign plan tokens, the same in every process that "
            "shares the store: KEY_ID:SECRET lines (Keyring.from_file) in a file readable "
            "by its owner only. Without it the keys come from HANDRAIL_CONFIRMATION_KEYS "
            "when set. Needed when the application has write tools and the store is not "
            "memory://."
        ),
    ),
]
ConfirmUrlOption = Annotated[
    str | None,
    typer.Option(
        "--confirm-url",
        metavar="TEMPLATE",
        help=(
            "The application's confirmation page of a plan, with {plan_id} where its id "
            "goes. Clients that support URL-mode elicitation are offered it for writes."
        ),
    ),
]
NameOption = Annotated[
    str,
    typer.Option("--name", help="The server name clients are told."),
]


@mcp_app.command("serve", cls=HelpCommand)
@one_line_errors
def serve(
    *,
    app_target: AppOption,
    store: StoreOption,
    tenant: ServeTenant = None,
    user: ServeUser = None,
    permission: ServePermissions = None,
    keyring: KeyringOption = None,
    confirm_url: ConfirmUrlOption = None,
    name: NameOption = "handrail",
    http: HttpOption = None,
    api_keys: ApiKeysOption = True,
    jwt_issuer: JwtIssuerOption = None,
    jwt_audience: JwtAudienceOption = None,
    jwks: JwksOption = None,
    tenant_claim: TenantClaimOption = "tenant",
    resource_url: ResourceUrlOption = None,
    allow_origin: AllowOriginOption = None,
) -> None:
    """Serve the application's exposed tools over stdio, or over HTTP with --http.

    Every call goes through the gate as the configured principal: the four checks,
    the risk decision, a plan awaiting confirmation for each write, shaped and marked
    results. The store keeps the audit trail and the plans.

    With --http, it serves Streamable HTTP instead, to any number of clients; each
    request's bearer token (an API key, or a JWT of --jwt-issuer) names the principal.
    """
    settings = http_settings(
        http=http,
        api_keys=api_keys,
        jwt_issuer=jwt_issuer,
        jwt_audience=jwt_audience,
        jwks=jwks,
        tenant_claim=tenant_claim,
        resource_url=resource_url,
        allowed_origins=allow_origin,
    )
    if settings is not None and (tenant or user or permission):
        raise CliError("over --http each request's token names the principal: no --tenant/--user")
    page = None if confirm_url is None else confirmation_page(confirm_url)
    if settings is not None:
        app = open_app(store, load_registry(app_target), keyring)
        serve_over_http(app, settings, name=name, confirm_url=page)
        return
    principal = serving_principal(tenant=tenant or "", user=user or "", permissions=permission)
    registry = load_registry(app_target)
    app = open_app(store, registry, keyring)
    server = build_server(app, principal, name=name, confirm_url=page)
    asyncio.run(_serve_stdio(app, server))


def serving_principal(*, tenant: str, user: str, permissions: list[str] | None) -> Principal:
    """The principal a server acts for: exactly the permissions given, none by default."""
    if not tenant or not user:
        raise CliError("--tenant and --user must not be empty")
    try:
        return Principal(
            user_id=user,
            tenant_id=tenant,
            permissions=frozenset(p for p in permissions or () if p),
        )
    except ValueError as exc:
        raise CliError(str(exc)) from None


def open_app(store: str, registry: Registry, keyring: Path | None) -> Handrail:
    """The application over `store`, writes signed by the given (or environment) keys."""
    from handrail.app import Handrail  # noqa: PLC0415 - not for --help

    try:
        return Handrail.open(store, registry=registry, keyring=_keyring(keyring))
    except ConfigurationError as exc:
        raise CliError(str(exc)) from None


def build_server(
    app: Handrail,
    principal: Principal,
    *,
    name: str,
    confirm_url: Callable[[str], str] | None,
) -> GatedServer:
    """A GatedServer acting for `principal`, offering `confirm_url(plan_id)` for writes."""
    from handrail.mcp.server import GatedServer, fixed_principal  # noqa: PLC0415 - not for --help

    return GatedServer(
        app,
        principal=fixed_principal(principal),
        name=name,
        confirm_url=confirm_url,
    )


def _keyring(path: Path | None) -> Keyring | None:
    from handrail.server.services import keyring_from  # noqa: PLC0415 - not for --help

    try:
        return keyring_from(path, os.environ)
    except ConfigurationError as exc:
        raise CliError(str(exc).replace("the keyring", "--keyring")) from None


def confirmation_page(template: str) -> Callable[[str], str]:
    """The page of a plan from a template with `{plan_id}` in it."""
    if "{plan_id}" not in template:
        raise CliError("--confirm-url must contain {plan_id}")

    def page(plan_id: str) -> str:
        return template.replace("{plan_id}", plan_id)

    return page


async def _serve_stdio(app: Handrail, server: GatedServer) -> None:
    """Serve until the client hangs up, then close the server and the application."""
    try:
        await server.run_stdio()
    finally:
        server.close()
        await app.aclose()
