"""`AnthropicClient`: the Messages API through the official `anthropic` SDK.

Renders a ModelRequest with `AnthropicAdapter` and reads the message back into a
ModelReply. The SDK is imported only when a client is made. It never retries on its
own (the loop owns retries), runs a call or decides when a run ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from handrail.adapters.anthropic import AnthropicAdapter
from handrail.adapters.base import Definitions
from handrail.errors import ConfigurationError
from handrail.loop.models._protocol import ModelReply, ModelRequest, Usage, check_timeout
from handrail.loop.models._sdk import (
    call_sdk,
    definitions_for,
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
        definitions = definitions_for(request, self.adapter)
        options: dict[str, Any] = {
            "model": self._model,
            "max_tokens": request.max_output_tokens or self._max_tokens,
            "messages": self.adapter.to_wire(request.transcript),
        }
        if request.system is not None:
            options["system"] = request.system
        if definitions.payload:
            options["tools"] = definitions.payload
            options["tool_choice"] = self.adapter.tool_choice(request.tool_choice)
        provider = self.adapter.provider
        message = await call_sdk(
            provider,
            anthropic,
            self._client.messages.create(**options, timeout=timeout),
            timeout,
        )
        return self._reply(message)

    def _reply(self, message: object) -> ModelReply:
        # The SDK builds responses without validating them: read every field defensively.
        content = wire_field(message, "content")
        if not isinstance(content, list):
            raise unreadable(self.adapter.provider, "no content blocks")
        texts = [
            wire_field(block, "text") for block in content if wire_field(block, "type") == "text"
        ]
        text = "".join(t for t in texts if isinstance(t, str)) if texts else None
        usage = wire_field(message, "usage")
        read = sum(
            tokens(usage, name)
            for name in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
        )
        return ModelReply(
            calls=tuple(self.adapter.parse_calls(message)),
            text=text,
            usage=Usage(input_tokens=read, output_tokens=tokens(usage, "output_tokens")),
            finish_reason=text_or_none(wire_field(message, "stop_reason")),
            model=text_or_none(wire_field(message, "model")) or self._model,
            raw=message,
        )

    async def aclose(self) -> None:
        """Close the SDK client this client made; one passed in is left to its owner."""
        if self._owned:
            await self._client.close()
