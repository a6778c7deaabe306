"""Bounded transports to an upstream MCP server: nothing it sends is read without a limit.

Owns the stdio transport (newline-delimited JSON-RPC over a child's pipes, each line
bounded; the SDK's own stdio client keeps an unterminated line in memory however long
it grows) and an HTTP client whose response bodies stop at the bound (SSE events are
bounded one by one by the SDK) and which takes no compressed body (a bound on bytes
sent says nothing of what they decode to). Past the bound the connection ends and `overflow` is
told why. Parsing and framing of messages are the SDK's; this module only moves bytes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING

import anyio
import httpx2
import mcp_types as types
from mcp.client.stdio import get_default_environment
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import SessionMessage

if TYPE_CHECKING:
    from anyio.abc import Process
    from mcp.client._transport import TransportStreams

__all__ = ["bounded_http", "bounded_stdio"]

_STOP_GRACE = 2.0
_STDERR_TAIL = 4096

Overflow = Callable[[str], None]


@contextlib.asynccontextmanager
async def bounded_stdio(
    command: str,
    args: tuple[str, ...],
    *,
    env: Mapping[str, str] | None,
    cwd: str | None,
    limit: int,
    overflow: Overflow,
    stderr: bytearray,
) -> AsyncIterator[TransportStreams]:
    """Start `command` and exchange messages over its pipes, every line at most `limit`.

    `stderr` keeps the last bytes the child wrote there (for operators). On leaving,
    the child's stdin is closed, then its whole process group ended if it lingers.
    """
    process = await anyio.open_process(
        [command, *args],
        env=get_default_environment() | dict(env or {}),
        cwd=cwd,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    inbound_send, inbound = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    outbound, outbound_receive = anyio.create_memory_object_stream[SessionMessage](0)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_read_stdout, process, inbound_send, limit, overflow)
            tg.start_soon(_write_stdin, process, outbound_receive)
            tg.start_soon(_drain_stderr, process, stderr)
            try:
                yield inbound, outbound
            finally:
                tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await _stop_process(process)


@contextlib.asynccontextmanager
async def bounded_http(
    url: str,
    headers: Mapping[str, str],
    *,
    limit: int,
    overflow: Overflow,
) -> AsyncIterator[TransportStreams]:
    """The SDK's Streamable HTTP transport over a client whose bodies are bounded."""
    http = httpx2.AsyncClient(
        headers=dict(headers),
        timeout=httpx2.Timeout(30.0, read=300.0),
        transport=_BoundedHttp(httpx2.AsyncHTTPTransport(), limit, overflow),
    )
    async with (
        http,
        streamable_http_client(url, http_client=http, max_sse_event_size=limit) as streams,
    ):
        yield streams


async def _read_stdout(
    process: Process,
    sink: anyio.abc.ObjectSendStream[SessionMessage | Exception],
    limit: int,
    overflow: Overflow,
) -> None:
    assert process.stdout is not None  # noqa: S101 - opened with a pipe above
    line = bytearray()

    def fits() -> bool:
        if len(line) <= limit:
            return True
        overflow(f"a message longer than {limit} bytes")
        line.clear()
        return False

    async with sink:
        try:
            async for chunk in process.stdout:
                start = 0
                while (end := chunk.find(b"\n", start)) >= 0:
                    line.extend(chunk[start:end])
                    start = end + 1
                    if not fits():
                        return
                    if line.strip():
                        await sink.send(_message(bytes(line)))
                    line.clear()
                line.extend(chunk[start:])
                if not fits():
                    return
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            return


async def _drain_stderr(process: Process, tail: bytearray) -> None:
    if process.stderr is None:
        return
    with contextlib.suppress(anyio.EndOfStream, anyio.ClosedResourceError, OSError):
        async for chunk in process.stderr:
            tail.extend(chunk)
            del tail[:-_STDERR_TAIL]


def _message(line: bytes) -> SessionMessage | Exception:
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        return exc


async def _write_stdin(
    process: Process, source: anyio.abc.ObjectReceiveStream[SessionMessage]
) -> None:
    assert process.stdin is not None  # noqa: S101 - opened with a pipe above
    with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
        async with source:
            async for message in source:
                text = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                await process.stdin.send(text.encode() + b"\n")


async def _stop_process(process: Process) -> None:
    """Close stdin, give the upstream a moment, then end its whole process group."""
    if process.stdin is not None:
        with contextlib.suppress(Exception):
            await process.stdin.aclose()
    for sig in (None, signal.SIGTERM, signal.SIGKILL):
        if sig is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, sig)
        with anyio.move_on_after(_STOP_GRACE):
            await process.wait()
            break
    with anyio.move_on_after(_STOP_GRACE), contextlib.suppress(Exception):
        await process.aclose()


class _BoundedHttp(httpx2.AsyncBaseTransport):
    """An HTTP transport whose response bodies stop at a bound (an error past it)."""

    def __init__(
        self,
        inner: httpx2.AsyncBaseTransport,
        limit: int,
        overflow: Callable[[str], None],
    ) -> None:
        self._inner = inner
        self._limit = limit
        self._overflow = overflow

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        # Bounds count bytes as sent: a compressed body could expand a thousandfold
        # past them while it is decoded. So none is asked for, and none is taken.
        request.headers["Accept-Encoding"] = "identity"
        response = await self._inner.handle_async_request(request)
        encoding = response.headers.get("content-encoding", "").strip().lower()
        if encoding not in {"", "identity"}:
            await response.aclose()
            detail = f"a compressed HTTP body ({encoding[:32]!r}) that was not asked for"
            self._overflow(detail)
            raise httpx2.ReadError(detail, request=request)
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            return response  # events are bounded one by one by the SDK (max_sse_event_size)
        return httpx2.Response(
            response.status_code,
            headers=response.headers,
            stream=_BoundedBody(response, self._limit, self._overflow),
            request=request,
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


class _BoundedBody(httpx2.AsyncByteStream):
    def __init__(
        self, response: httpx2.Response, limit: int, overflow: Callable[[str], None]
    ) -> None:
        self._response = response
        self._limit = limit
        self._overflow = overflow

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self._response.aiter_raw():
            seen += len(chunk)
            if seen > self._limit:
                detail = f"an HTTP body longer than {self._limit} bytes"
                self._overflow(detail)
                raise httpx2.ReadError(detail)
            yield chunk

    async def aclose(self) -> None:
        await self._response.aclose()
