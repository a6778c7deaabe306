"""What the agent loop asks a model and what it hears: requests, replies, the protocol.

`ModelRequest` (transcript, tools, tool choice), `ModelReply` (calls with ids verbatim,
text, usage), the `ModelClient` protocol every client implements, `StreamingModelClient`
for clients that can also stream a reply (`TextDelta`s, then the `ModelReply`), and
`ModelError`.
It never talks to a provider, runs a call or retries.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from handrail.adapters.base import Definitions, ToolChoice
from handrail.adapters.transcript import Turn
from handrail.calls import ToolCall
from handrail.errors import ConfigurationError, ErrorCode, HandrailError
from handrail.spec import ToolSpec

__all__ = [
    "ModelClient",
    "ModelError",
    "ModelReply",
    "ModelRequest",
    "StreamingModelClient",
    "TextDelta",
    "Usage",
    "check_timeout",
]


# --- values --------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelRequest:
    """One request to a model: the conversation so far and the tools it may call.

    `tools` is either the specs chosen by `Registry.exposed` (the client's adapter
    renders them) or `Definitions` already rendered for the client's provider, so a
    loop can render once per run. `max_output_tokens` of None leaves the client's default.
    """

    transcript: Sequence[Turn]
    tools: Sequence[ToolSpec] | Definitions = ()
    tool_choice: ToolChoice = field(default_factory=ToolChoice)
    system: str | None = None
    max_output_tokens: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "transcript", tuple(self.transcript))
        if not isinstance(self.tools, Definitions):
            object.__setattr__(self, "tools", tuple(self.tools))
        if self.max_output_tokens is not None and self.max_output_tokens < 1:
            raise ConfigurationError("max_output_tokens must be positive")


@dataclass(frozen=True, kw_only=True, slots=True)
class Usage:
    """Tokens one reply cost, as the provider reported them (zero when it did not).

    `input_tokens` counts every token the model read, cached or not.
    """

    input_tokens: int = 0
    output_tokens: int = 0

    def __post_init__(self) -> None:
        if self.input_tokens < 0 or self.output_tokens < 0:
            raise ValueError("token counts are never negative")

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelReply:
    """What the model answered: calls (ids verbatim, cut-off ones defective) and text.

    `finish_reason` is the provider's own word (`tool_calls`, `length`, `end_turn`,
    `max_tokens`, ...). `raw` is the provider's response, for debugging only; it takes
    no part in equality.
    """

    calls: tuple[ToolCall, ...] = ()
    text: str | None = None
    usage: Usage = field(default_factory=Usage)
    finish_reason: str | None = None
    model: str
    raw: object = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, kw_only=True, slots=True)
class TextDelta:
    """A piece of the reply's text as the model streams it (never empty)."""

    text: str

    def __post_init__(self) -> None:
        if not self.text:
            raise ValueError("a text delta is never empty")


class ModelClient(Protocol):
    """A model the agent loop can ask for the next turn."""

    name: str

    async def complete(self, request: ModelRequest, *, timeout: float) -> ModelReply:
        """The model's next turn; raises ModelError when it cannot be had in `timeout` s."""
        ...


@runtime_checkable
class StreamingModelClient(ModelClient, Protocol):
    """A model client that can also stream its next turn as it is generated.

    `stream` yields zero or more `TextDelta`s, then exactly one `ModelReply`, the last
    item, equal to what `complete` would have returned for the same answer; the deltas
    joined are its text. It raises ModelError as `complete` does, the whole exchange
    ends within `timeout` seconds, and closing the iterator early (or cancelling the
    task that reads it) closes the provider's stream.
    """

    def stream(
        self, request: ModelRequest, *, timeout: float
    ) -> AsyncIterator[TextDelta | ModelReply]:
        """The model's next turn as it is generated (see the class docstring)."""
        ...


# --- errors --------------------------------------------------------------------------------


class ModelError(HandrailError):
    """A request to a model failed; `code` and `retryable` say whether to try again.

    `code` is RATE_LIMITED (429), TRANSIENT (connection lost, 408, 409, 5xx), TIMEOUT
    (no answer in time) or FAILED_FINAL (any other refusal, or an unreadable answer).
    """

    def __init__(
        self,
        message: str,
        *,
        provider: str,
        code: ErrorCode,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.provider = provider
        self.code = code
        self.status = status
        self.retry_after = retry_after

    @property
    def retryable(self) -> bool:
        """Whether the same request may succeed later."""
        return self.code is not ErrorCode.FAILED_FINAL


def check_timeout(timeout: float) -> None:
    """Refuse a timeout that is not positive and finite (ConfigurationError)."""
    if not (math.isfinite(timeout) and timeout > 0):
        raise ConfigurationError("a model request needs a positive, finite timeout")
