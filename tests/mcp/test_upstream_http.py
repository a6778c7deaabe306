"""An upstream over Streamable HTTP (a real server on 127.0.0.1): served, bounded, recovered.

The test upstream runs as a subprocess serving HTTP on a free loopback port. A body
past the bound is refused without being read whole, a hang is a timeout, and after
either the next call opens a new connection and succeeds.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from _mcp_proxying import ALICE, UPSTREAM_SCRIPT, proxied
from handrail.calls import ToolCall
from handrail.errors import ErrorCode
from handrail.mcp.upstream import HttpUpstream

pytestmark = pytest.mark.anyio

WAIT = 60.0


@asynccontextmanager
async def _http_upstream(state: Path, *, flood_bytes: int) -> AsyncIterator[str]:
    command = [
        sys.executable,
        str(UPSTREAM_SCRIPT),
        "--state",
        str(state),
        "--flood-bytes",
        str(flood_bytes),
        "--http",
    ]
    async with await anyio.open_process(command, stderr=subprocess.DEVNULL) as process:
        try:
            assert process.stdout is not None
            with anyio.fail_after(WAIT):
                line = b""
                while not line.endswith(b"\n"):
                    line += await process.stdout.receive(1)
            yield f"http://127.0.0.1:{int(line)}/mcp"
        finally:
            process.terminate()
            with anyio.fail_after(WAIT):
                await process.wait()


def _call(name: str, arguments: str = "{}", call_id: str = "c1") -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=arguments)


async def test_an_http_upstream_is_served_and_recovers_from_a_hang_and_a_flood(
    tmp_path: Path,
) -> None:
    state = tmp_path / "up"
    await anyio.Path(state).mkdir()
    async with (
        _http_upstream(state, flood_bytes=5_000_000) as url,
        proxied(state, target=HttpUpstream(url=url), max_message_bytes=1_000_000) as (proxy, app),
    ):
        read = await app.handle(_call("books.lookup", '{"book_id": "b1"}'), ALICE)
        flooded = await app.handle(_call("books.flood", call_id="c2"), ALICE)
        after_flood = await app.handle(_call("books.lookup", '{"book_id": "b2"}', "c3"), ALICE)
        hung = await app.handle(_call("books.wait", call_id="c4"), ALICE)
        after_hang = await app.handle(_call("books.lookup", '{"book_id": "b3"}', "c5"), ALICE)
        connections = proxy.upstream.connections

    assert read.data == {"book_id": "b1", "title": "Dune", "stock": 3}
    assert flooded.error_type is ErrorCode.FAILED_FINAL
    assert after_flood.status == "ok"
    assert hung.error_type is ErrorCode.TIMEOUT
    assert after_hang.status == "ok"
    assert connections >= 2
