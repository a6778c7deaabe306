"""`AnthropicClient`: the Messages API through the official `anthropic` SDK.

Renders a ModelRequest with `AnthropicAdapter` (the turns of a growing conversation
each once, by its `TranscriptRenderer`) and reads the message back into a
ModelReply, whole or streamed event by event. The SDK is imported only when a client
is made. It never retries on its own (the loop owns retries), runs a call or decides
when a run ends.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

from handrail.adapters.anthropic import AnthropicAdapter
from handrail.adapters.base import Definitions, StreamAssembler, UntranslatableError
from handrail.calls import ToolCall
from handrail.errors import ConfigurationError
from handrail.loop.models._protocol import (
    ModelReply,
    ModelRequest,
    TextDelta,
    Usage,
    check_timeout,
)
from handrail.loop.models._sdk import (
    call_sdk,
    cut_off,
    definitions_for,
    sdk_events,
    text_or_none,
    tokens,
    unreadable,
    wire_field,
)
from handrail.spec import ToolSpec

if TYPE_CHECKING:
    import anthropic

__all__ = ["AnthropicClient"]


class AnthropicClient:
    """The Messages API through the official `anthropic` SDK.

    `max_tokens` is the output cap Anthropic requires on every request, used when the
    request sets none. `strict` sends tools in strict mode (see `AnthropicAdapter`).
    `max_retries` is the SDK's own retrying, off by default. A `client` passed in is
    used as it is and not closed by `aclose`.
    """

    def __init__(
        self,
        *,
        api_key: str,
        model: str,
        base_url: str | None = None,
        client: anthropic.AsyncAnthropic | None = None,
        max_tokens: int = 1024,
        strict: bool = False,
        max_retries: int = 0,
    ) -> None:
        import anthropic  # noqa: PLC0415 - the SDK is an optional dependency

        if max_tokens < 1:
            raise ConfigurationError("max_tokens must be positive")
        if max_retries < 0:
            raise ConfigurationError("max_retries cannot be negative")
        self.name = f"anthropic/{model}"
        self.adapter = AnthropicAdapter(strict=strict)
        # One conversation grows by a few turns per request: render only those.
        self._renderer = self.adapter.renderer()
        self._model = model
        self._max_tokens = max_tokens
        self._owned = client is None
        self._client = (
            client
            if client is not None
            else anthropic.AsyncAnthropic(
                api_key=api_key,
                base_url=base_url,
                max_retries=max_retries,
            )
        )

    def definitions(self, specs: Sequence[ToolSpec]) -> Definitions:
        """The tools of `specs` rendered once, to pass as `ModelRequest.tools`."""
        return self.adapter.tool_definitions(specs)

    async def complete(self, request: ModelRequest, *, timeout: float) -> ModelReply:
        """One message; the whole exchange ends within `timeout` seconds.

        Raises ModelError for a refused, failed, late or unreadable request, and
        ConfigurationError (or its subclasses) for one that cannot be rendered.
        """
        import anthropic  # noqa: PLC0415 - the SDK is an optional dependency

        check_timeout(timeout)
        message = await call_sdk(
            self.adapter.provider,
            anthropic,
            self._client.messages.create(**self._options(request), timeout=timeout),
            timeout,
        )
        return self._reply(message)

    async def stream(
        self, request: ModelRequest, *, timeout: float
    ) -> AsyncIterator[TextDelta | ModelReply]:
        """One message as it is generated: TextDeltas, then the ModelReply.

        Calls are assembled by the adapter's stream assembler (cut-off ones come back
        defective); their streamed input is decoded to the object `complete` would
        give. Raises ModelError as `complete` does, and TRANSIENT for a stream that
        ends before its stop reason. Closing the iterator closes the HTTP stream.
        """
        import anthropic  # noqa: PLC0415 - the SDK is an optional dependency

        check_timeout(timeout)
        options = self._options(request)
        opening = self._client.messages.create(**options, stream=True, timeout=timeout)
        reading = _EventReader(self.adapter.stream())
        provider = self.adapter.provider
        async with aclosing(sdk_events(provider, anthropic, opening, timeout)) as events:
            async for event in events:
                text = reading.feed(provider, event)
                if text:
                    yield TextDelta(text=text)
        yield reading.reply(provider, self._model)

    def _options(self, request: ModelRequest) -> dict[str, Any]:
        definitions = definitions_for(request, self.adapter)
        options: dict[str, Any] = {
            "model": self._model,
            "max_tokens": request.max_output_tokens or self._max_tokens,
            "messages": self._renderer.render(request.transcript),
        }
        if request.system is not None:
            options["system"] = request.system
        if definitions.payload:
            options["tools"] = definitions.payload
            options["tool_choice"] = self.adapter.tool_choice(request.tool_choice)
        return options

    def _reply(self, message: object) -> ModelReply:
        # The SDK builds responses without validating them: read every field defensively.
        content = wire_field(message, "content")
        if not isinstance(content, list):
            raise unreadable(self.adapter.provider, "no content blocks")
        texts = [
            wire_field(block, "text") for block in content if wire_field(block, "type") == "text"
        ]
        text = "".join(t for t in texts if isinstance(t, str)) if texts else None
        return ModelReply(
            calls=tuple(self.adapter.parse_calls(message)),
            text=text,
            usage=_usage(wire_field(message, "usage")),
            finish_reason=text_or_none(wire_field(message, "stop_reason")),
            model=text_or_none(wire_field(message, "model")) or self._model,
            raw=message,
        )

    async def aclose(self) -> None:
        """Close the SDK client this client made; one passed in is left to its owner."""
        if self._owned:
            await self._client.close()


_INPUT_FIELDS = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


def _usage(usage: object, later: object = None) -> Usage:
    """Usage with every input token counted, cached or not; `later` counts win."""
    counts = {
        name: tokens(later, name) if wire_field(later, name) is not None else tokens(usage, name)
        for name in (*_INPUT_FIELDS, "output_tokens")
    }
    return Usage(
        input_tokens=sum(counts[name] for name in _INPUT_FIELDS),
        output_tokens=counts["output_tokens"],
    )


class _EventReader:
    """What the events of one streamed message add up to, besides its calls."""

    def __init__(self, assembler: StreamAssembler) -> None:
        self._assembler = assembler
        self._pieces: list[str] = []
        self._texts = 0
        self._started: object = None
        self._final: object = None
        self._stop_reason: str | None = None

    def feed(self, provider: str, event: object) -> str | None:
        """Take one event; the text it adds, if any."""
        try:
            self._assembler.feed(event)
        except (UntranslatableError, TypeError) as exc:
            raise unreadable(provider, "an event is not a Messages stream event") from exc
        kind = wire_field(event, "type")
        text: object = None
        if kind == "message_start":
            self._started = wire_field(event, "message")
        elif kind == "message_delta":
            self._final = wire_field(event, "usage")
            reason = text_or_none(wire_field(wire_field(event, "delta"), "stop_reason"))
            self._stop_reason = reason or self._stop_reason
        elif kind == "content_block_start":
            block = wire_field(event, "content_block")
            if wire_field(block, "type") == "text":
                self._texts += 1
                text = wire_field(block, "text")
        elif kind == "content_block_delta":
            delta = wire_field(event, "delta")
            if wire_field(delta, "type") == "text_delta":
                text = wire_field(delta, "text")
        if text is not None and not isinstance(text, str):
            raise unreadable(provider, "a text delta is not text")
        if text:
            self._pieces.append(text)
        return text

    def reply(self, provider: str, model: str) -> ModelReply:
        """The reply the stream made; refuses one that ended before its stop reason."""
        if self._stop_reason is None:
            raise cut_off(provider)
        return ModelReply(
            calls=tuple(_decoded(call) for call in self._assembler.finish()),
            text="".join(self._pieces) if self._texts or self._pieces else None,
            usage=_usage(wire_field(self._started, "usage"), self._final),
            finish_reason=self._stop_reason,
            model=text_or_none(wire_field(self._started, "model")) or model,
        )


def _decoded(call: ToolCall) -> ToolCall:
    """A sound call's streamed input as the object a whole message carries.

    Input that is not one JSON object without repeated keys or NaN stays text, for
    the gate to refuse as it would any other.
    """
    if call.defect is not None or not isinstance(call.arguments, str):
        return call
    try:
        value = json.loads(call.arguments, object_pairs_hook=_unique, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        return call
    if not isinstance(value, Mapping):
        return call
    return dataclasses.replace(call, arguments=value)


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError("a repeated key")
    return dict(pairs)


def _no_constant(name: str) -> object:
    raise ValueError(name)
