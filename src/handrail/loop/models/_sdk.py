"""The boundary with the provider SDKs that the real model clients share.

One SDK request awaited within its timeout, every SDK error translated to ModelError
exactly here, and defensive reads of the SDKs' unvalidated response objects. It never
builds a request or decides what a reply means.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Mapping
from typing import Any, TypeVar

from handrail.adapters.anthropic import AnthropicAdapter
from handrail.adapters.base import Definitions
from handrail.adapters.openai_chat import OpenAIChatAdapter
from handrail.errors import ConfigurationError, ErrorCode
from handrail.loop.models._protocol import ModelError, ModelRequest

_T = TypeVar("_T")

__all__ = [
    "call_sdk",
    "definitions_for",
    "retry_after",
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
    """Await one SDK request within `timeout`, its errors mapped to ModelError.

    Both SDKs name their errors alike: APITimeoutError, APIStatusError,
    APIConnectionError under one base class (OpenAIError, AnthropicError).
    """
    base = sdk.OpenAIError if hasattr(sdk, "OpenAIError") else sdk.AnthropicError
    try:
        async with asyncio.timeout(timeout):
            return await work
    except (TimeoutError, sdk.APITimeoutError):
        raise _timeout_error(provider) from None
    except sdk.APIStatusError as exc:
        raise status_error(provider, exc.status_code, exc.response.headers) from exc
    except sdk.APIConnectionError as exc:
        raise ModelError(
            f"{provider} could not be reached",
            provider=provider,
            code=ErrorCode.TRANSIENT,
        ) from exc
    except base as exc:
        raise unreadable(provider, type(exc).__name__) from exc


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
    adapter: OpenAIChatAdapter | AnthropicAdapter,
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
