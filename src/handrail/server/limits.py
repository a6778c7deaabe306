"""What a request must be before any route sees it: for this site, its body bounded.

`HostAllowList` answers only requests whose Host names this service (the public URL's
host, or the bound host; every loopback name for a loopback one): a page of another
site whose name was re-pointed at this address (DNS rebinding) is refused 421
MISDIRECTED before anything runs, the console's login form included.
`BodyLimit` is the outermost ASGI middleware of the app. Headers over 16 KiB are
refused (431). A `Content-Length` over the
limit is refused (413 PAYLOAD_TOO_LARGE) before a byte of the body is read; a body
sent without one is read only up to the limit. The whole body must arrive within the
request timeout (a client trickling it is refused with 408 TIMEOUT), so a slow
client holds a worker for a bounded time. Routes then read the body from memory.
Slow headers are the server's to bound (`handrail.server.serving`).
"""

from __future__ import annotations

from http import HTTPStatus
from urllib.parse import urlsplit

import anyio
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from handrail.addresses import is_loopback
from handrail.errors import ErrorCode
from handrail.server.problems import ServiceCode, problem

__all__ = ["MAX_HEAD_BYTES", "BodyLimit", "HostAllowList", "allowed_hosts", "replaying"]

MAX_HEAD_BYTES = 16_384
"""The most bytes of headers a request may carry (431 beyond). The server refuses a
head it cannot parse within this much, `BodyLimit` one that came whole."""


_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
_EVERY_ADDRESS = frozenset({"", "0.0.0.0", "::"})  # noqa: S104 - names, not a bind


def allowed_hosts(host: str, public_url: str | None) -> frozenset[str] | None:
    """The host names requests may carry: `public_url`'s, else `host` (None: any).

    A loopback name allows every loopback name; a service bound to every address
    without a public URL cannot know its names and allows any.
    """
    if public_url is not None:
        name = (urlsplit(public_url).hostname or "").lower()
    elif host.strip("[]") in _EVERY_ADDRESS:
        return None
    else:
        name = host.strip("[]").lower()
    return _LOOPBACK_NAMES | {name} if is_loopback(name) else frozenset({name})


def _host_name(value: str) -> str:
    """The name of a Host header value (`name`, `name:port`, `[v6]:port`), lower case."""
    if value.startswith("["):
        return value[1 : value.find("]")].lower() if "]" in value else ""
    return value.rpartition(":")[0].lower() if ":" in value else value.lower()


class HostAllowList:
    """Refuses (421 MISDIRECTED) a request whose Host header is not one of `hosts`."""

    def __init__(self, app: ASGIApp, *, hosts: frozenset[str] | None) -> None:
        self._app = app
        self._hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the app for an allowed Host; answer 421 for any other (or none)."""
        if self._hosts is not None and scope["type"] in {"http", "websocket"}:
            name = _host_name(Headers(scope=scope).get("host", "").strip())
            if name.rstrip(".") not in self._hosts:
                answer = problem(
                    ServiceCode.MISDIRECTED,
                    "the Host header does not name this service",
                    headers={"Connection": "close"},
                )
                await answer(scope, receive, send)
                return
        await self._app(scope, receive, send)


class _TooLargeError(Exception):
    """The body grew past the limit while it was read."""


class BodyLimit:
    """Reads each HTTP request's body (bounded in size and time) before the app runs."""

    def __init__(self, app: ASGIApp, *, max_bytes: int, timeout_seconds: float) -> None:
        self._app = app
        self._max = max_bytes
        self._timeout = timeout_seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer 413/408 for a body too large or too slow; else run the app on the body read."""
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        if sum(len(name) + len(value) + 4 for name, value in scope["headers"]) > MAX_HEAD_BYTES:
            answer = problem(
                ServiceCode.PAYLOAD_TOO_LARGE,
                f"the request's headers are larger than {MAX_HEAD_BYTES} bytes",
                status=HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
                headers={"Connection": "close"},
            )
            await answer(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self._max:
            await self._too_large(scope, receive, send)
            return
        try:
            with anyio.fail_after(self._timeout):
                body = await self._read(receive)
        except _TooLargeError:
            await self._too_large(scope, receive, send)
            return
        except TimeoutError:
            answer = problem(
                ErrorCode.TIMEOUT,
                "the request body did not arrive in time",
                status=HTTPStatus.REQUEST_TIMEOUT,
                headers={"Connection": "close"},
            )
            await answer(scope, receive, send)
            return
        if body is None:
            return  # the client went away while sending
        await self._app(scope, replaying(body, receive), send)

    async def _read(self, receive: Receive) -> bytes | None:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk: bytes = message.get("body", b"")
            size += len(chunk)
            if size > self._max:
                raise _TooLargeError
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        answer = problem(
            ServiceCode.PAYLOAD_TOO_LARGE,
            f"the body is larger than {self._max} bytes",
            headers={"Connection": "close"},
        )
        await answer(scope, receive, send)


def _content_length(scope: Scope) -> int | None:
    """The declared body length; None when absent or not a plain number (the server checks)."""
    for name, value in scope["headers"]:
        if name == b"content-length" and value.isdigit():
            return int(value)
    return None


def replaying(body: bytes, receive: Receive) -> Receive:
    """A `receive` that gives the body read once, then waits for the client to leave."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
