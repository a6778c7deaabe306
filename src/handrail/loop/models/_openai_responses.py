"""`OpenAIResponsesClient`: the Responses API through the official `openai` SDK.

Renders a ModelRequest with `OpenAIResponsesAdapter` (input items, instructions; the
turns of a growing conversation each once, by its `TranscriptRenderer`) and
reads the response's output items back into a ModelReply, whole or streamed event by
event. The SDK is imported only when a client is made. It never retries on its own
(the loop owns retries), runs a call or decides when a run ends.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

from handrail.adapters.base import Definitions, StreamAssembler, UntranslatableError
from handrail.adapters.openai_responses import OpenAIResponsesAdapter
from handrail.calls import ToolCall
from handrail.errors import ConfigurationError
from handrail.loop.models._protocol import (
    ModelError,
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
    error_event,
    sdk_events,
    text_or_none,
    tokens,
    unreadable,
    wire_field,
)
from handrail.spec import ToolSpec

if TYPE_CHECKING:
    import openai

__all__ = ["OpenAIResponsesClient"]

_TERMINAL_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})


class OpenAIResponsesClient:
    """The Responses API (`/v1/responses`) through the official `openai` SDK.

    Every request carries the whole transcript as input items, so nothing depends on
    a response the server kept; `store` is sent as given (False by default: a run's
    transcript lives in Handrail, not on the provider), or left out when None, for a
    compatible server that refuses the field. `strict` sends tools in strict mode (see
    `OpenAIResponsesAdapter`). `max_retries` is the SDK's own retrying, off by default.
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
        store: bool | None = False,
    ) -> None:
        import openai  # noqa: PLC0415 - the SDK is an optional dependency

        if max_retries < 0:
            raise ConfigurationError("max_retries cannot be negative")
        self.name = f"openai-responses/{model}"
        self.adapter = OpenAIResponsesAdapter(strict=strict)
        # One conversation grows by a few turns per request: render only those.
        self._renderer = self.adapter.renderer()
        self._model = model
        self._store = store
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
        """One response; the whole exchange ends within `timeout` seconds.

        Raises ModelError for a refused, failed, late or unreadable request (a response
        whose status is `failed` by its error's code), and ConfigurationError (or
        UnsupportedSchemaError, UntranslatableError) for one that cannot be rendered.
        """
        import openai  # noqa: PLC0415 - the SDK is an optional dependency

        check_timeout(timeout)
        definitions = definitions_for(request, self.adapter)
        response = await call_sdk(
            self.adapter.provider,
            openai,
            self._client.responses.create(**self._options(request, definitions), timeout=timeout),
            timeout,
        )
        return self._reply(response, definitions)

    async def stream(
        self, request: ModelRequest, *, timeout: float
    ) -> AsyncIterator[TextDelta | ModelReply]:
        """One response as it is generated: TextDeltas, then the ModelReply.

        Calls are assembled by the adapter's stream assembler (cut-off ones come back
        defective); usage, status and model come from the final response event. Raises
        ModelError as `complete` does, for an `error` event, and TRANSIENT for a stream
        that ends before its final event. Closing the iterator closes the HTTP stream.
        """
        import openai  # noqa: PLC0415 - the SDK is an optional dependency

        check_timeout(timeout)
        definitions = definitions_for(request, self.adapter)
        options = self._options(request, definitions)
        opening = self._client.responses.create(**options, stream=True, timeout=timeout)
        reading = _EventReader(self.adapter.stream(definitions=definitions))
        provider = self.adapter.provider
        async with aclosing(sdk_events(provider, openai, opening, timeout)) as events:
            async for event in events:
                text = reading.feed(provider, event)
                if text:
                    yield TextDelta(text=text)
                if reading.final is not None:
                    break
        final = reading.final
        if final is None:
            raise cut_off(provider)
        if wire_field(final, "status") == "failed":
            raise _failed(provider, final)
        yield ModelReply(
            calls=tuple(reading.calls()),
            text=reading.text,
            usage=_usage(final),
            finish_reason=_finish_reason(final),
            model=text_or_none(wire_field(final, "model")) or self._model,
            raw=final,
        )

    def _options(self, request: ModelRequest, definitions: Definitions) -> dict[str, Any]:
        options: dict[str, Any] = {
            "model": self._model,
            "input": self._renderer.render(request.transcript),
        }
        if request.system is not None:
            options["instructions"] = request.system
        if definitions.payload:
            options["tools"] = definitions.payload
            options["tool_choice"] = self.adapter.tool_choice(request.tool_choice)
        if request.max_output_tokens is not None:
            options["max_output_tokens"] = request.max_output_tokens
        if self._store is not None:
            options["store"] = self._store
        return options

    def _reply(self, response: object, definitions: Definitions) -> ModelReply:
        # The SDK builds responses without validating them: read every field defensively.
        provider = self.adapter.provider
        output = wire_field(response, "output")
        if not isinstance(output, list):
            raise unreadable(provider, "no output items")
        status = wire_field(response, "status")
        if status == "failed":
            raise _failed(provider, response)
        try:
            calls = self.adapter.parse_calls(response, definitions=definitions)
        except UntranslatableError as exc:
            raise unreadable(provider, "its output items cannot be read") from exc
        return ModelReply(
            calls=tuple(calls),
            text=_output_text(provider, output),
            usage=_usage(response),
            finish_reason=_finish_reason(response),
            model=text_or_none(wire_field(response, "model")) or self._model,
            raw=response,
        )

    async def aclose(self) -> None:
        """Close the SDK client this client made; one passed in is left to its owner."""
        if self._owned:
            await self._client.close()


def _output_text(provider: str, output: list[object]) -> str | None:
    """The `output_text` parts of the output's messages joined; None when there are none."""
    texts: list[str] = []
    for item in output:
        if wire_field(item, "type") != "message":
            continue
        content = wire_field(item, "content")
        for part in content if isinstance(content, list) else ():
            if wire_field(part, "type") == "output_text":
                text = wire_field(part, "text")
                if not isinstance(text, str):
                    raise unreadable(provider, "an output_text part is not text")
                texts.append(text)
    return "".join(texts) if texts else None


def _usage(response: object) -> Usage:
    """The response's usage; `input_tokens` already counts the cached ones."""
    usage = wire_field(response, "usage")
    return Usage(
        input_tokens=tokens(usage, "input_tokens"),
        output_tokens=tokens(usage, "output_tokens"),
    )


def _finish_reason(response: object) -> str | None:
    """Why the response ended: the incomplete reason when it has one, else its status."""
    status = text_or_none(wire_field(response, "status"))
    if status == "incomplete":
        reason = text_or_none(wire_field(wire_field(response, "incomplete_details"), "reason"))
        return reason or status
    return status


def _failed(provider: str, response: object) -> ModelError:
    """The ModelError for a response whose status is `failed`, by its error's code."""
    return error_event(provider, wire_field(wire_field(response, "error"), "code"))


class _EventReader:
    """What the events of one streamed response add up to: text, calls, the final one."""

    def __init__(self, assembler: StreamAssembler) -> None:
        self._assembler = assembler
        self._pieces: list[str] = []
        self.final: object = None
        """The response of the final event (completed, incomplete or failed), once seen."""

    def feed(self, provider: str, event: object) -> str | None:
        """Take one event; the text it adds, if any. Raises ModelError for an error."""
        kind = wire_field(event, "type")
        if kind == "error":
            raise error_event(provider, wire_field(event, "code"))
        try:
            self._assembler.feed(event)
        except UntranslatableError as exc:
            raise unreadable(provider, "an event is not a Responses stream event") from exc
        if kind in _TERMINAL_EVENTS:
            final = wire_field(event, "response")
            if final is None:
                raise unreadable(provider, f"a {kind} event without its response")
            self.final = final
            return None
        if kind != "response.output_text.delta":
            return None
        text = wire_field(event, "delta")
        if not isinstance(text, str):
            raise unreadable(provider, "a text delta is not text")
        if text:
            self._pieces.append(text)
        return text

    @property
    def text(self) -> str | None:
        """The streamed text; None when the response streamed none."""
        return "".join(self._pieces) if self._pieces else None

    def calls(self) -> list[ToolCall]:
        """The calls of the stream, as the adapter's assembler made them."""
        return list(self._assembler.finish())
