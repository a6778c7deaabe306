"""`OpenAICompatibleClient`: Chat Completions through the official `openai` SDK.

Renders a ModelRequest with `OpenAIChatAdapter` (the turns of a growing conversation
each once, by its `TranscriptRenderer`) and reads the completion back into a
ModelReply, whole or streamed chunk by chunk. The SDK is imported only when a client is
made. It never retries on its own (the loop owns retries), runs a call or decides when
a run ends.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing
from typing import TYPE_CHECKING, Any, Literal

from handrail.adapters.base import Definitions, StreamAssembler, UntranslatableError
from handrail.adapters.openai_chat import OpenAIChatAdapter
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
    import openai

__all__ = ["OpenAICompatibleClient"]


class OpenAICompatibleClient:
    """Chat Completions through the official `openai` SDK, at any compatible base URL.

    Works with OpenAI and with servers that speak its API (vLLM, Ollama, llama.cpp).
    `strict` sends tools in strict mode (see `OpenAIChatAdapter`). `max_retries` is the
    SDK's own retrying, off by default: the loop owns retries and their budget.
    `max_tokens_field` names the request field for `max_output_tokens`: `max_tokens`
    for compatible servers, `max_completion_tokens` for OpenAI's reasoning models.
    `stream_usage` asks a stream for its token usage (`stream_options.include_usage`);
    turn it off for a server that refuses the option (usage then reads as zero).
    A `client` passed in is used as it is and not closed by `aclose`.
    """

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        model: str,
        strict: bool = True,
        client: openai.AsyncOpenAI | None = None,
        max_retries: int = 0,
        max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens",
        stream_usage: bool = True,
    ) -> None:
        import openai  # noqa: PLC0415 - the SDK is an optional dependency

        if max_retries < 0:
            raise ConfigurationError("max_retries cannot be negative")
        self.name = f"openai-chat/{model}"
        self.adapter = OpenAIChatAdapter(strict=strict)
        # One conversation grows by a few turns per request: render only those.
        self._renderer = self.adapter.renderer()
        self._model = model
        self._max_tokens_field = max_tokens_field
        self._stream_usage = stream_usage
        self._owned = client is None
        self._client = (
            client
            if client is not None
            else openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=max_retries)
        )

    def definitions(self, specs: Sequence[ToolSpec]) -> Definitions:
        """The tools of `specs` rendered once, to pass as `ModelRequest.tools`."""
        return self.adapter.tool_definitions(specs)

    async def complete(self, request: ModelRequest, *, timeout: float) -> ModelReply:
        """One chat completion; the whole exchange ends within `timeout` seconds.

        Raises ModelError for a refused, failed, late or unreadable request, and
        ConfigurationError (or UnsupportedSchemaError, UntranslatableError) for a
        request that cannot be rendered.
        """
        import openai  # noqa: PLC0415 - the SDK is an optional dependency

        check_timeout(timeout)
        definitions = definitions_for(request, self.adapter)
        completion = await call_sdk(
            self.adapter.provider,
            openai,
            self._client.chat.completions.create(
                **self._options(request, definitions), timeout=timeout
            ),
            timeout,
        )
        return self._reply(completion, definitions)

    async def stream(
        self, request: ModelRequest, *, timeout: float
    ) -> AsyncIterator[TextDelta | ModelReply]:
        """One chat completion as it is generated: TextDeltas, then the ModelReply.

        Calls are assembled by the adapter's stream assembler (cut-off ones come back
        defective). Raises ModelError as `complete` does, and TRANSIENT for a stream
        that ends before its finish reason. Closing the iterator closes the HTTP stream.
        """
        import openai  # noqa: PLC0415 - the SDK is an optional dependency

        check_timeout(timeout)
        definitions = definitions_for(request, self.adapter)
        options = self._options(request, definitions)
        if self._stream_usage:
            options["stream_options"] = {"include_usage": True}
        opening = self._client.chat.completions.create(**options, stream=True, timeout=timeout)
        reading = _ChunkReader(self.adapter.stream(definitions=definitions))
        provider = self.adapter.provider
        async with aclosing(sdk_events(provider, openai, opening, timeout)) as chunks:
            async for chunk in chunks:
                text = reading.feed(provider, chunk)
                if text:
                    yield TextDelta(text=text)
        yield reading.reply(provider, self._model)

    def _options(self, request: ModelRequest, definitions: Definitions) -> dict[str, Any]:
        messages: list[dict[str, Any]] = []
        if request.system is not None:
            messages.append({"role": "system", "content": request.system})
        messages.extend(self._renderer.render(request.transcript))
        options: dict[str, Any] = {"model": self._model, "messages": messages}
        if definitions.payload:
            options["tools"] = definitions.payload
            options["tool_choice"] = self.adapter.tool_choice(request.tool_choice)
        if request.max_output_tokens is not None:
            options[self._max_tokens_field] = request.max_output_tokens
        return options

    def _reply(self, completion: object, definitions: Definitions) -> ModelReply:
        # The SDK builds responses without validating them: read every field defensively.
        provider = self.adapter.provider
        choices = wire_field(completion, "choices")
        if not isinstance(choices, list) or not choices:
            raise unreadable(provider, "no choices")
        choice = choices[0]
        text = wire_field(wire_field(choice, "message"), "content")
        if text is not None and not isinstance(text, str):
            raise unreadable(provider, "its content is not text")
        usage = wire_field(completion, "usage")
        return ModelReply(
            calls=tuple(self.adapter.parse_calls(completion, definitions=definitions)),
            text=text,
            usage=Usage(
                input_tokens=tokens(usage, "prompt_tokens"),
                output_tokens=tokens(usage, "completion_tokens"),
            ),
            finish_reason=text_or_none(wire_field(choice, "finish_reason")),
            model=text_or_none(wire_field(completion, "model")) or self._model,
            raw=completion,
        )

    async def aclose(self) -> None:
        """Close the SDK client this client made; one passed in is left to its owner."""
        if self._owned:
            await self._client.close()


class _ChunkReader:
    """What the chunks of one streamed completion add up to, besides its calls."""

    def __init__(self, assembler: StreamAssembler) -> None:
        self._assembler = assembler
        self._pieces: list[str] = []
        self._usage = Usage()
        self._finish_reason: str | None = None
        self._model: str | None = None

    def feed(self, provider: str, chunk: object) -> str | None:
        """Take one chunk; the text it adds, if any."""
        try:
            self._assembler.feed(chunk)
        except UntranslatableError as exc:
            raise unreadable(provider, "a chunk is not a completion chunk") from exc
        self._model = self._model or text_or_none(wire_field(chunk, "model"))
        usage = wire_field(chunk, "usage")
        if usage is not None:
            self._usage = Usage(
                input_tokens=tokens(usage, "prompt_tokens"),
                output_tokens=tokens(usage, "completion_tokens"),
            )
        choices = wire_field(chunk, "choices")
        first = (
            next(
                (c for c in choices if wire_field(c, "index") in (0, None)),
                None,
            )
            if isinstance(choices, list)
            else None
        )
        reason = text_or_none(wire_field(first, "finish_reason"))
        self._finish_reason = reason or self._finish_reason
        text = wire_field(wire_field(first, "delta"), "content")
        if text is not None and not isinstance(text, str):
            raise unreadable(provider, "its content is not text")
        if text:
            self._pieces.append(text)
        return text

    def reply(self, provider: str, model: str) -> ModelReply:
        """The reply the stream made; refuses one that ended before its finish reason."""
        if self._finish_reason is None:
            raise cut_off(provider)
        return ModelReply(
            calls=tuple(self._assembler.finish()),
            text="".join(self._pieces) if self._pieces else None,
            usage=self._usage,
            finish_reason=self._finish_reason,
            model=self._model or model,
        )
