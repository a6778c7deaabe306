"""`handrail serve --config handrail.toml`: the HTTP gateway and console.

Loads and checks the config, binds its address (127.0.0.1:8000 unless it or
`--host`/`--port` say otherwise; port 0 picks a free one), opens the services, says on
stderr where the API, its documentation and the console are, and serves until
SIGINT or SIGTERM. Either signal stops it gracefully: no new connections, running
requests finish (up to a bound), then the services close (queued audit written)
and the command exits 0. Nothing here imports the server until the command runs.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from handrail.addresses import is_loopback
from handrail.cli._common import one_line_errors
from handrail.cli._mcp_http import bound_socket

if TYPE_CHECKING:
    import socket
    from types import FrameType

    from handrail.server.config import ServerConfig

__all__ = ["serve"]


@one_line_errors
def serve(
    *,
    config: Annotated[
        Path, typer.Option("--config", metavar="FILE", help="The service's handrail.toml.")
    ] = Path("handrail.toml"),
    host: Annotated[
        str | None,
        typer.Option(
            "--host",
            help=(
                "Listen on this address instead of the config's (127.0.0.1 by default); "
                "another than loopback only behind TLS."
            ),
        ),
    ] = None,
    port: Annotated[
        int | None,
        typer.Option("--port", min=0, max=65535, help="Listen on this port; 0 picks a free one."),
    ] = None,
) -> None:
    """Serve the HTTP API and the console of the application the config names."""
    from handrail.server.config import load_config  # noqa: PLC0415 - not for --help

    loaded = load_config(config)
    http = loaded.server
    if host is not None or port is not None:
        http = http.model_copy(
            update={"host": host or http.host, "port": http.port if port is None else port}
        )
    sock = bound_socket(http.host, http.port)
    loaded = loaded.model_copy(
        update={"server": http.model_copy(update={"port": sock.getsockname()[1]})}
    )
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        asyncio.run(_serve(loaded, sock))
    except KeyboardInterrupt:
        pass  # uvicorn re-raises the signal it stopped on, after the services closed
    finally:
        signal.signal(signal.SIGTERM, previous)
        sock.close()


def _interrupt(_signal: int, _frame: FrameType | None) -> None:
    """SIGTERM stops the service as SIGINT does, exiting 0 once everything is closed."""
    raise KeyboardInterrupt


async def _serve(config: ServerConfig, sock: socket.socket) -> None:
    from handrail.mcp.http import after_lifespan  # noqa: PLC0415
    from handrail.server import create_app, open_services  # noqa: PLC0415 - not for --help
    from handrail.server.serving import service_server  # noqa: PLC0415

    async with AsyncExitStack() as stack:
        services = await stack.enter_async_context(open_services(config))
        app = create_app(services)
        # Closed inside uvicorn's shutdown, before it re-raises the signal it caught.
        app.router.lifespan_context = after_lifespan(app.router.lifespan_context, stack.aclose)
        server = service_server(app, config.server)
        _announce(config)
        await server.serve(sockets=[sock])


def _announce(config: ServerConfig) -> None:
    url = config.server.url()
    lines = [f"handrail: serving the API on {url}/v1 (OpenAPI at {url}/openapi.json)"]
    if config.console.enabled:
        lines.append(f"handrail: console on {url}/")
    if not is_loopback(config.server.host) and not url.startswith("https://"):
        lines.append("handrail: warning: credentials over plain HTTP off this machine; use TLS")
    for line in lines:
        print(line, file=sys.stderr, flush=True)  # noqa: T201
