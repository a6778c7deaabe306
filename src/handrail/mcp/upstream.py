"""A connection to an upstream MCP server, as a client of the official SDK.

Owns starting the upstream (a command over stdio, or a Streamable HTTP URL), listing
its tools, calling one within a deadline, and turning every way an upstream can fail
into an `UpstreamError` with a reason: it hangs (`timeout`), dies or cannot be
reached (`unavailable`), or sends more than `max_message_bytes` in one message
(`oversize`; the connection is dropped before more is read, so a flood never fills
memory). After a failure the connection is closed and the next use opens a new one
(`on_connect` sees the tools of each new connection before anything is called). It
never decides whether a tool may run: what it lists and returns is untrusted data.
The SDK's client puts the span current at each call (the gate's, while an imported
tool runs) in the request's `params._meta` as `traceparent` (stdio and HTTP alike).
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import anyio
import mcp_types as types
from mcp.server import Server
from mcp.shared.exceptions import MCPError

from handrail.canonical import canonical_json, sha256_hex
from handrail.errors import ConfigurationError
from handrail.mcp._transports import bounded_http, bounded_stdio
from mcp import Client

if TYPE_CHECKING:
    from mcp.client._transport import TransportStreams
    from mcp.client.session import IncomingMessage

__all__ = [
    "HttpUpstream",
    "InProcessUpstream",
    "StdioUpstream",
    "Upstream",
    "UpstreamError",
    "UpstreamResult",
    "UpstreamTarget",
    "UpstreamTool",
]

MAX_MESSAGE_BYTES = 4 * 1024 * 1024
"""Default bound on one message from an upstream (a JSON-RPC line or HTTP body)."""

_STOP_GRACE = 2.0
_LIST_PAGES = 100
MAX_TOOLS = 1000
"""An upstream listing more tools than this is refused (`oversize`)."""

Reason = Literal["timeout", "unavailable", "oversize", "protocol", "disabled"]


class UpstreamError(ConnectionError):
    """An upstream did not answer as it should; `reason` says how.

    `sent` is False only when the request certainly never left this process (the
    connection could not be opened): then nothing can have happened upstream.
    `detail` is for operators' logs and audit, never for the model.
    """

    def __init__(self, reason: Reason, detail: str, *, sent: bool) -> None:
        super().__init__(f"upstream {reason}: {detail}")
        self.reason: Reason = reason
        self.detail = detail
        self.sent = sent


@dataclass(frozen=True, kw_only=True, slots=True)
class StdioUpstream:
    """An upstream started as a command (an argument list, never a shell string)."""

    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] | None = None
    cwd: str | None = None

    @classmethod
    def parse(cls, command_line: str) -> StdioUpstream:
        """Split a command line the way a POSIX shell would, without running a shell."""
        parts = shlex.split(command_line)
        if not parts:
            raise ConfigurationError("the upstream command is empty")
        return cls(command=parts[0], args=tuple(parts[1:]))


@dataclass(frozen=True, kw_only=True, slots=True)
class HttpUpstream:
    """An upstream reached over Streamable HTTP at `url`, with optional headers."""

    url: str
    headers: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise ConfigurationError("an upstream URL starts with http:// or https://")


@dataclass(frozen=True, kw_only=True, slots=True)
class InProcessUpstream:
    """An SDK server object in this process (embedding and tests; no size bound applies)."""

    server: Server[Any]


UpstreamTarget = StdioUpstream | HttpUpstream | InProcessUpstream


@dataclass(frozen=True, kw_only=True, slots=True)
class UpstreamTool:
    """One tool as the upstream lists it: untrusted text, pinned before it is used.

    `annotations` are kept to show people; nothing in Handrail reads them for risk.
    """

    name: str
    description: str
    input_schema: Mapping[str, Any]
    title: str | None = None
    annotations: Mapping[str, Any] | None = None

    def definition(self) -> dict[str, Any]:
        """The part that is pinned: what the model would see of the tool."""
        return {
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "inputSchema": dict(self.input_schema),
        }

    def canonical(self) -> str:
        """The definition as canonical JSON (RFC 8785) text."""
        return canonical_json(self.definition()).decode()

    def definition_hash(self) -> str:
        """SHA-256 of the canonical definition."""
        return sha256_hex(canonical_json(self.definition()))


@dataclass(frozen=True, kw_only=True, slots=True)
class UpstreamResult:
    """What an upstream answered to a call, as plain JSON: still untrusted data."""

    is_error: bool
    structured: Any
    content: tuple[Mapping[str, Any], ...]

    def value(self) -> object:
        """The result as one JSON value: the structured part, else the text, else blocks."""
        if self.structured is not None:
            return self.structured
        texts = [b.get("text") for b in self.content if b.get("type") == "text"]
        if len(texts) == len(self.content) and texts:
            return "\n".join(str(t) for t in texts)
        return [dict(b) for b in self.content]

    def text(self, limit: int = 500) -> str:
        """The text blocks joined, cut to `limit` characters (for error messages)."""
        texts = [str(b.get("text", "")) for b in self.content if b.get("type") == "text"]
        return " ".join(texts)[:limit]


OnConnect = Callable[[Sequence[UpstreamTool]], Awaitable[None]]


class Upstream:
    """A lazily opened, self-healing connection to one upstream MCP server.

    The connection is owned by a task of its own (the SDK's client lives in that
    task's scope); calls from any task share it. A call that fails with the
    connection (a crash, a flood) closes it, and the next call opens a new one.
    """

    def __init__(
        self,
        target: UpstreamTarget,
        *,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        connect_timeout: float = 30.0,
        on_connect: OnConnect | None = None,
        on_list_changed: Callable[[], None] | None = None,
        mode: str = "auto",
    ) -> None:
        if max_message_bytes < 1024:  # noqa: PLR2004 - no JSON-RPC answer fits in less
            raise ConfigurationError("max_message_bytes must be at least 1024")
        self.target = target
        self._max = max_message_bytes
        self._connect_timeout = connect_timeout
        self.on_connect = on_connect
        self.on_list_changed = on_list_changed
        self._mode = mode
        self._lock = asyncio.Lock()
        self._client: Client | None = None
        self._owner: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._overflow: str | None = None
        self._stderr = bytearray()
        self.connections = 0
        """How many connections were opened so far (each one re-checks the tools)."""

    # --- public -----------------------------------------------------------------------

    async def list_tools(self, *, timeout: float = 30.0) -> tuple[UpstreamTool, ...]:
        """Every tool the upstream lists now (all pages), never from a cache."""
        client = await self._connected(timeout)
        return await self._list(client, timeout)

    async def call(
        self,
        name: str,
        arguments: Mapping[str, Any],
        *,
        timeout: float,
        precheck: Callable[[], bool] | None = None,
    ) -> UpstreamResult:
        """Call one tool and wait at most `timeout` seconds for its answer.

        `precheck` runs once connected, right before the request is sent (after a new
        connection's `on_connect`); False refuses the call with reason `disabled`.
        Any failure before the request is sent (opening, checking) has `sent` False.
        """
        try:
            client = await self._connected(timeout)
        except UpstreamError as exc:
            raise UpstreamError(exc.reason, exc.detail, sent=False) from None
        if precheck is not None and not precheck():
            raise UpstreamError("disabled", f"{name!r} may not be called now", sent=False)
        try:
            with anyio.fail_after(max(timeout, 0.001)):
                result = await client.call_tool(name, dict(arguments), read_timeout_seconds=timeout)
        except TimeoutError:
            raise UpstreamError(
                "timeout", f"no answer to {name!r} in {timeout:.1f}s", sent=True
            ) from None
        except MCPError as exc:
            raise self._failed(client, exc, name) from None
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError) as exc:
            raise self._failed(client, exc, name) from None
        except ValueError as exc:
            # The SDK refused the answer: not a valid result (or not of its output schema).
            detail = f"{name!r}: an invalid answer ({type(exc).__name__})"
            raise UpstreamError("protocol", detail, sent=True) from None
        return UpstreamResult(
            is_error=bool(result.is_error),
            structured=result.structured_content,
            content=tuple(
                block.model_dump(mode="json", by_alias=True, exclude_none=True)
                for block in result.content
            ),
        )

    async def aclose(self) -> None:
        """Close the connection (and stop an upstream process this side started)."""
        async with self._lock:
            await self._drop()

    @property
    def stderr_tail(self) -> str:
        """The last bytes a stdio upstream wrote to its stderr, for operators."""
        return self._stderr.decode(errors="replace")

    # --- the connection ---------------------------------------------------------------

    def _failed(self, client: Client, exc: BaseException, name: str) -> UpstreamError:
        if self._overflow is not None:
            error = UpstreamError("oversize", self._overflow, sent=True)
        elif isinstance(exc, MCPError) and exc.code == types.REQUEST_TIMEOUT:
            return UpstreamError("timeout", f"no answer to {name!r} in time", sent=True)
        elif (
            isinstance(exc, MCPError)
            and exc.code != types.CONNECTION_CLOSED
            and self._client is client
            and self._owner_alive()
        ):
            # The upstream answered with a JSON-RPC error: the connection is fine.
            return UpstreamError("protocol", f"{name!r}: error {exc.code}", sent=True)
        else:
            error = UpstreamError("unavailable", f"{name!r}: connection lost", sent=True)
        if self._client is client:
            self._client = None  # the next call opens a new connection
            if self._stop is not None:
                self._stop.set()
        return error

    def _owner_alive(self) -> bool:
        return self._owner is not None and not self._owner.done()

    async def _connected(self, timeout: float) -> Client:
        async with self._lock:
            if self._client is not None and self._owner_alive():
                return self._client
            await self._drop()
            client = await self._open(min(timeout, self._connect_timeout))
            if self.on_connect is not None:
                try:
                    tools = await self._list(client, timeout)
                    await self.on_connect(tools)
                except UpstreamError:
                    await self._drop()
                    raise
                except Exception as exc:
                    # Nothing may go through a connection whose tools were not checked.
                    await self._drop()
                    detail = f"checking the tools failed ({type(exc).__name__})"
                    raise UpstreamError("unavailable", detail, sent=False) from exc
                except BaseException:
                    await self._drop()
                    raise
            return client

    async def _open(self, timeout: float) -> Client:
        self._overflow = None
        self._stderr.clear()
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[Client] = loop.create_future()
        stop = asyncio.Event()
        self._stop = stop
        self._owner = asyncio.create_task(self._own(ready, stop), name="handrail-mcp-upstream")
        try:
            client = await asyncio.wait_for(asyncio.shield(ready), max(timeout, 0.001))
        except TimeoutError:
            await self._drop()
            raise UpstreamError(
                "timeout", "the upstream did not start in time", sent=False
            ) from None
        except UpstreamError:
            await self._drop()
            raise
        self._client = client
        self.connections += 1
        return client

    async def _own(self, ready: asyncio.Future[Client], stop: asyncio.Event) -> None:
        """Hold the SDK client open in this task until `stop` (or the connection dies)."""
        try:
            target = self.target
            server = target.server if isinstance(target, InProcessUpstream) else self._transport()
            async with Client(
                server,
                mode=self._mode,
                cache=None,
                message_handler=self._notified,
            ) as client:
                # The SDK would check each result against the output schema the upstream
                # lists, with Python's regular expressions, on this event loop: an
                # upstream's pattern and value could hold every caller up for minutes.
                # The schema is untrusted and unpinned, the result is shaped as untrusted
                # data either way: no check is worth that.
                client.session.validate_tool_result = _no_output_check  # type: ignore[method-assign]
                ready.set_result(client)
                await stop.wait()
        except Exception as exc:  # noqa: BLE001 - reported to whoever waits, never raised here
            if not ready.done():
                detail = self._overflow or type(exc).__name__
                ready.set_exception(UpstreamError("unavailable", detail, sent=False))
        finally:
            if not ready.done():
                ready.set_exception(UpstreamError("unavailable", "closed", sent=False))

    async def _drop(self) -> None:
        self._client = None
        owner, self._owner = self._owner, None
        if self._stop is not None:
            self._stop.set()
        if owner is not None and not owner.done():
            try:
                await asyncio.wait_for(owner, 4 * _STOP_GRACE)
            except TimeoutError:
                owner.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await owner
        elif owner is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                owner.result()

    def _transport(self) -> contextlib.AbstractAsyncContextManager[TransportStreams]:
        target = self.target
        if isinstance(target, StdioUpstream):
            return bounded_stdio(
                target.command,
                target.args,
                env=target.env,
                cwd=target.cwd,
                limit=self._max,
                overflow=self._note_overflow,
                stderr=self._stderr,
            )
        assert isinstance(target, HttpUpstream)  # noqa: S101 - in-process targets need none
        return bounded_http(
            target.url,
            target.headers,
            limit=self._max,
            overflow=self._note_overflow,
        )

    async def _notified(self, message: IncomingMessage) -> None:
        """The upstream says its tool list changed: whoever follows it looks again."""
        if isinstance(message, types.ToolListChangedNotification) and self.on_list_changed:
            self.on_list_changed()

    def _note_overflow(self, detail: str) -> None:
        self._overflow = detail

    async def _list(self, client: Client, timeout: float) -> tuple[UpstreamTool, ...]:
        tools: list[UpstreamTool] = []
        cursor: str | None = None
        try:
            with anyio.fail_after(max(timeout, 0.001)):
                for _ in range(_LIST_PAGES):
                    page = await client.list_tools(cursor=cursor, cache_mode="refresh")
                    tools.extend(_tool(t) for t in page.tools)
                    cursor = page.next_cursor
                    if cursor is None or len(tools) > MAX_TOOLS:
                        break
        except TimeoutError:
            raise UpstreamError("timeout", "tools/list did not answer in time", sent=True) from None
        except (MCPError, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError) as exc:
            raise self._failed(client, exc, "tools/list") from None
        if len(tools) > MAX_TOOLS:
            raise UpstreamError("oversize", f"more than {MAX_TOOLS} tools", sent=True)
        return tuple(tools)


async def _no_output_check(name: str, result: types.CallToolResult) -> None:
    """No check of an upstream's result against the output schema it lists (see `_own`)."""
    del name, result


def _tool(tool: types.Tool) -> UpstreamTool:
    annotations = tool.annotations
    return UpstreamTool(
        name=tool.name,
        title=tool.title,
        description=tool.description or "",
        input_schema=dict(tool.input_schema),
        annotations=None
        if annotations is None
        else annotations.model_dump(mode="json", by_alias=True, exclude_none=True),
    )
