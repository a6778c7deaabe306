"""The service's app on a real uvicorn, on 127.0.0.1 at a free port, inside the test's loop.

`running(services)` serves `create_app(services)` with the same server `handrail serve`
uses (`service_server`) and yields its base URL once it accepts connections; leaving
stops it and waits for it. `exchange` talks to it over a plain socket, for what httpx
will not send (bad framing, trickled headers). `READ_TURN` is an Anthropic assistant
message with one read of the payments example.
"""

from __future__ import annotations

import asyncio
import dataclasses
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from handrail.cli._mcp_http import bound_socket
from handrail.server import create_app
from handrail.server.services import Services
from handrail.server.serving import service_server

READ_TURN: dict[str, Any] = {
    "role": "assistant",
    "content": [
        {
            "type": "tool_use",
            "id": "toolu_1",
            "name": "payments__get_order",
            "input": {"order_id": "ORD-1001"},
        }
    ],
}

STARTUP_S = 60.0
"""A generous bound for the server to start or stop on a loaded machine."""


@asynccontextmanager
async def running(services: Services, **http: Any) -> AsyncIterator[str]:
    """Serve `services` (server settings changed by `http`) until the block ends."""
    sock = bound_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    settings = services.config.server.model_copy(update={"port": port, **http})
    config = services.config.model_copy(update={"server": settings})
    served = dataclasses.replace(services, config=config)
    server = service_server(create_app(served), settings)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        async with asyncio.timeout(STARTUP_S):
            while not server.started:
                if task.done():
                    task.result()
                await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        async with asyncio.timeout(STARTUP_S):
            await task
        sock.close()


async def raw_connection(url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A plain TCP connection to the server at `url`."""
    host, port = url.removeprefix("http://").split(":")
    return await asyncio.open_connection(host, int(port), family=socket.AF_INET)


async def read_until_closed(reader: asyncio.StreamReader) -> bytes:
    """Everything the server sends until it closes the connection (bounded wait)."""
    async with asyncio.timeout(STARTUP_S):
        return await reader.read()


async def exchange(url: str, data: bytes) -> bytes:
    """Send `data` on a new connection; everything the server answers until it closes."""
    reader, writer = await raw_connection(url)
    try:
        writer.write(data)
        await writer.drain()
        return await read_until_closed(reader)
    finally:
        writer.close()
