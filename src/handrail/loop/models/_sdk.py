"""The boundary with the provider SDKs that the real model clients share.

One SDK request awaited within its timeout, or one SDK stream read event by event
within it; every SDK error translated to ModelError exactly here, and defensive reads
of the SDKs' unvalidated response objects. It never builds a request or decides what
a reply means.
"""

from __future__ import annotations

import asyncio
import math
import sys
from collections.abc import AsyncGenerator, Awaitable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

from handrail.adapters.anthropic import AnthropicAdapter
from handrail.adapters.base import Definitions
from handrail.adapters.openai_chat import OpenAIChatAdapter
from handrail.adapters.openai_responses import OpenAIResponsesAdapter
from handrail.errors import ConfigurationError, ErrorCode
from handrail.loop.models._protocol import ModelError, ModelRequest

_T = TypeVar("_T")

__all__ = [
    "call_sdk",
    "cut_off",
    "definitions_for",
    "error_event",
    "retry_after",
    "sdk_events",
    "status_error",
    "text_or_none",
    "tokens",
    "unreadable",
    "wire_field",
]

_RETRY_STATUSES = frozenset({408, 409})
"""Besides 429 and 5xx, what the SDKs themselves retry: request and lock timeouts."""


def status_error(provider: str, status: int, headers: Mapping[str, str]) -> ModelError:
    """The ModelError for an HTTP refusal: rate limited, transient or final by status."""
    if status == 429:  # noqa: PLR2004 - the HTTP status says it
        code = ErrorCode.RATE_LIMITED
    elif status >= 500 or status in _RETRY_STATUSES:  # noqa: PLR2004
        code = ErrorCode.TRANSIENT
    else:
        code = ErrorCode.FAILED_FINAL
    return ModelError(
        f"{provider} answered HTTP {status}",
        provider=provider,
        code=code,
        status=status,
        retry_after=retry_after(headers) if code is not ErrorCode.FAILED_FINAL else None,
    )


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds from `retry-after-ms` or `retry-after` (seconds only; dates are ignored)."""
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        try:
            seconds = float(headers.get(name, "")) / scale
        except ValueError:
            continue
        if math.isfinite(seconds) and seconds >= 0:
            return seconds
    return None


async def call_sdk(provider: str, sdk: Any, work: Awaitable[_T], timeout: float) -> _T:  # noqa: ANN401 - the openai or anthropic module
    """Await one SDK request within `timeout`, its errors mapped to ModelError."""
    with _translated(provider, sdk):
        async with asyncio.timeout(timeout):
            return await work


async def sdk_events(
    provider: str,
    sdk: Any,  # noqa: ANN401 - the openai or anthropic module
    opening: Awaitable[object],
    timeout: float,
) -> AsyncGenerator[object, None]:
    """The events of one SDK stream, all within `timeout`, its errors mapped to ModelError.

    `opening` is the SDK's `create(..., stream=True)`. The deadline bounds each wait
    for the next event, never a wait of the caller between events. However the
    iteration ends (done, an error, `aclose`, a cancelled reader), the SDK stream is
    closed, and with it the HTTP response.
    """
    deadline = asyncio.get_running_loop().time() + timeout
    with _translated(provider, sdk):
        async with asyncio.timeout_at(deadline):
            stream: Any = await opening
    transport = _transport_errors(stream)
    try:
        while True:
            with _translated(provider, sdk, transport):
                async with asyncio.timeout_at(deadline):
                    try:
                        event = await anext(stream)
                    except StopAsyncIteration:
                        return
            yield event
    finally:
        await stream.close()


def _transport_errors(stream: object) -> tuple[type[BaseException], type[BaseException]]:
    """The timeout and transport errors of the HTTP library under an SDK stream.

    Not every SDK maps the errors of a body read after the headers; the library is
    found from the stream's response rather than imported, since SDK versions differ
    in which one they use.
    """
    response = getattr(stream, "response", None)
    library = sys.modules.get(type(response).__module__.partition(".")[0])
    timeout = getattr(library, "TimeoutException", None)
    transport = getattr(library, "TransportError", None)
    if isinstance(timeout, type) and isinstance(transport, type):
        return timeout, transport
    return _Never, _Never


class _Never(Exception):  # noqa: N818 - raised by nothing
    """Stands in for an HTTP library's error classes when none are found."""


@contextmanager
def _translated(
    provider: str,
    sdk: Any,  # noqa: ANN401 - the openai or anthropic module
    transport: tuple[type[BaseException], type[BaseException]] = (_Never, _Never),
) -> Iterator[None]:
    """Every SDK error raised in the block as a ModelError.

    Both SDKs name their errors alike: APITimeoutError, APIStatusError,
    APIConnectionError under one base class (OpenAIError, AnthropicError). An error a
    stream reports in an event after an HTTP 200 is read by its type, not the status.
    """
    base = sdk.OpenAIError if hasattr(sdk, "OpenAIError") else sdk.AnthropicError
    timed_out, lost = transport
    try:
        yield
    except (TimeoutError, sdk.APITimeoutError, timed_out):
        raise _timeout_error(provider) from None
    except sdk.APIStatusError as exc:
        if exc.status_code < 400:  # noqa: PLR2004 - an error event inside a 200 stream
            raise error_event(provider, _error_kind(exc.body)) from exc
        raise status_error(provider, exc.status_code, exc.response.headers) from exc
    except (sdk.APIConnectionError, lost) as exc:
        raise ModelError(
            f"{provider} could not be reached",
            provider=provider,
            code=ErrorCode.TRANSIENT,
        ) from exc
    except sdk.APIResponseValidationError as exc:
        raise unreadable(provider, type(exc).__name__) from exc
    except sdk.APIError as exc:
        raise error_event(provider, _error_kind(exc.body)) from exc
    except base as exc:
        raise unreadable(provider, type(exc).__name__) from exc


_RATE_KINDS = frozenset({"rate_limit_error", "rate_limit_exceeded", "rate_limited"})
_TRANSIENT_KINDS = frozenset(
    {"overloaded_error", "api_error", "server_error", "internal_error", "timeout_error"},
)


def _error_kind(body: object) -> object:
    """The error's type or code in an error event's body, however deep it is nested."""
    inner = wire_field(body, "error")
    for holder in (inner, body):
        for name in ("code", "type"):
            kind = wire_field(holder, name)
            if isinstance(kind, str) and kind != "error":
                return kind
    return None


def error_event(provider: str, kind: object) -> ModelError:
    """The ModelError for an error reported inside a stream or a failed response.

    Its type or code says whether to try again: rate limits and server-side
    failures are retryable; anything else (an invalid request, a policy) is final.
    """
    if kind in _RATE_KINDS:
        code = ErrorCode.RATE_LIMITED
    elif kind in _TRANSIENT_KINDS:
        code = ErrorCode.TRANSIENT
    else:
        code = ErrorCode.FAILED_FINAL
    detail = kind if isinstance(kind, str) else "no type"
    return ModelError(f"{provider} reported an error: {detail:.80}", provider=provider, code=code)


def cut_off(provider: str) -> ModelError:
    """The ModelError for a stream that ended before the answer did (TRANSIENT)."""
    return ModelError(
        f"{provider} ended the stream before the answer was complete",
        provider=provider,
        code=ErrorCode.TRANSIENT,
    )


def _timeout_error(provider: str) -> ModelError:
    return ModelError(
        f"{provider} did not answer in time", provider=provider, code=ErrorCode.TIMEOUT
    )


def unreadable(provider: str, detail: str) -> ModelError:
    """The ModelError for an answer that cannot be read (FAILED_FINAL)."""
    return ModelError(
        f"{provider} sent an answer that cannot be read: {detail}",
        provider=provider,
        code=ErrorCode.FAILED_FINAL,
    )


def wire_field(obj: object, name: str) -> object:
    """A mapping's key or an SDK object's attribute; None when absent."""
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def tokens(usage: object, name: str) -> int:
    """A token count from a usage object; zero when absent or not a count."""
    value = wire_field(usage, name)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def text_or_none(value: object) -> str | None:
    """The value if it is non-empty text; else None."""
    return value if isinstance(value, str) and value else None


def definitions_for(
    request: ModelRequest,
    adapter: OpenAIChatAdapter | OpenAIResponsesAdapter | AnthropicAdapter,
) -> Definitions:
    """The request's tools rendered by `adapter`, or its Definitions if made for it."""
    tools = request.tools
    if isinstance(tools, Definitions):
        if tools.provider != adapter.provider:
            raise ConfigurationError(
                f"definitions for {tools.provider!r} sent to a {adapter.provider!r} client",
            )
        return tools
    return adapter.tool_definitions(tools)
