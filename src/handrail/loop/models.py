"""Model clients behind one protocol: what the agent loop asks a model, and what it hears.

`ModelClient.complete` takes a provider-neutral `ModelRequest` (transcript, tools, tool
choice) and returns a `ModelReply` (calls with ids verbatim, text, usage). Real clients
go through the official SDKs and an adapter; the scripted client replays a cassette. A
client never runs a call, retries on its own, or decides when a run ends.

Errors, all for operators and never shown to the model:

    HandrailError
    └── ModelError            the model could not be asked or its answer not read;
                              `code` (RATE_LIMITED, TRANSIENT, TIMEOUT, FAILED_FINAL),
                              `retryable`, `status`, `retry_after`
    ConfigurationError
    └── CassetteError         a cassette that cannot be read back as replies
    ScriptExhaustedError      (from handrail.testing) the script has no more replies
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

from handrail.adapters._common import plain_json
from handrail.adapters.anthropic import AnthropicAdapter
from handrail.adapters.base import Definitions, ToolChoice
from handrail.adapters.openai_chat import OpenAIChatAdapter
from handrail.adapters.transcript import Turn
from handrail.calls import ToolCall
from handrail.errors import ConfigurationError, ErrorCode, HandrailError
from handrail.spec import ToolSpec
from handrail.testing import ModelTurn, ScriptExhaustedError

_T = TypeVar("_T")

if TYPE_CHECKING:
    import anthropic
    import openai

__all__ = [
    "SCRIPTED_MODEL",
    "AnthropicClient",
    "CassetteError",
    "ModelClient",
    "ModelError",
    "ModelReply",
    "ModelRequest",
    "OpenAICompatibleClient",
    "ScriptExhaustedError",
    "ScriptedModelClient",
    "ScriptedStep",
    "Usage",
    "cassette_items",
    "load_cassette",
    "parse_cassette",
    "record_cassette",
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


class ModelClient(Protocol):
    """A model the agent loop can ask for the next turn."""

    name: str

    async def complete(self, request: ModelRequest, *, timeout: float) -> ModelReply:
        """The model's next turn; raises ModelError when it cannot be had in `timeout` s."""
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


class CassetteError(ConfigurationError):
    """A cassette that is not a JSON list of replies in the recorded form."""


_RETRY_STATUSES = frozenset({408, 409})
"""Besides 429 and 5xx, what the SDKs themselves retry: request and lock timeouts."""


def _status_error(provider: str, status: int, headers: Mapping[str, str]) -> ModelError:
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
        retry_after=_retry_after(headers) if code is not ErrorCode.FAILED_FINAL else None,
    )


def _retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds from `retry-after-ms` or `retry-after` (seconds only; dates are ignored)."""
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        try:
            seconds = float(headers.get(name, "")) / scale
        except ValueError:
            continue
        if math.isfinite(seconds) and seconds >= 0:
            return seconds
    return None


async def _call_sdk(provider: str, sdk: Any, work: Awaitable[_T], timeout: float) -> _T:  # noqa: ANN401 - the openai or anthropic module
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
        raise _status_error(provider, exc.status_code, exc.response.headers) from exc
    except sdk.APIConnectionError as exc:
        raise ModelError(
            f"{provider} could not be reached",
            provider=provider,
            code=ErrorCode.TRANSIENT,
        ) from exc
    except base as exc:
        raise _unreadable(provider, type(exc).__name__) from exc


def _timeout_error(provider: str) -> ModelError:
    return ModelError(
        f"{provider} did not answer in time", provider=provider, code=ErrorCode.TIMEOUT
    )


def _unreadable(provider: str, detail: str) -> ModelError:
    return ModelError(
        f"{provider} sent an answer that cannot be read: {detail}",
        provider=provider,
        code=ErrorCode.FAILED_FINAL,
    )


def _check_timeout(timeout: float) -> None:
    if not (math.isfinite(timeout) and timeout > 0):
        raise ConfigurationError("a model request needs a positive, finite timeout")


def _field(obj: object, name: str) -> object:
    """A mapping's key or an SDK object's attribute; None when absent."""
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def _tokens(usage: object, name: str) -> int:
    """A token count from a usage object; zero when absent or not a count."""
    value = _field(usage, name)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _text_or_none(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _definitions(
    request: ModelRequest,
    adapter: OpenAIChatAdapter | AnthropicAdapter,
) -> Definitions:
    tools = request.tools
    if isinstance(tools, Definitions):
        if tools.provider != adapter.provider:
            raise ConfigurationError(
                f"definitions for {tools.provider!r} sent to a {adapter.provider!r} client",
            )
        return tools
    return adapter.tool_definitions(tools)


# --- OpenAI-compatible ---------------------------------------------------------------------


class OpenAICompatibleClient:
    """Chat Completions through the official `openai` SDK, at any compatible base URL.

    Works with OpenAI and with servers that speak its API (vLLM, Ollama, llama.cpp).
    `strict` sends tools in strict mode (see `OpenAIChatAdapter`). `max_retries` is the
    SDK's own retrying, off by default: the loop owns retries and their budget.
    `max_tokens_field` names the request field for `max_output_tokens`: `max_tokens`
    for compatible servers, `max_completion_tokens` for OpenAI's reasoning models.
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
    ) -> None:
        import openai  # noqa: PLC0415 - the SDK is an optional dependency

        if max_retries < 0:
            raise ConfigurationError("max_retries cannot be negative")
        self.name = f"openai-chat/{model}"
        self.adapter = OpenAIChatAdapter(strict=strict)
        self._model = model
        self._max_tokens_field = max_tokens_field
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

        _check_timeout(timeout)
        definitions = _definitions(request, self.adapter)
        messages: list[dict[str, Any]] = []
        if request.system is not None:
            messages.append({"role": "system", "content": request.system})
        messages.extend(self.adapter.to_wire(request.transcript))
        options: dict[str, Any] = {"model": self._model, "messages": messages}
        if definitions.payload:
            options["tools"] = definitions.payload
            options["tool_choice"] = self.adapter.tool_choice(request.tool_choice)
        if request.max_output_tokens is not None:
            options[self._max_tokens_field] = request.max_output_tokens
        provider = self.adapter.provider
        completion = await _call_sdk(
            provider,
            openai,
            self._client.chat.completions.create(**options, timeout=timeout),
            timeout,
        )
        return self._reply(completion, definitions)

    def _reply(self, completion: object, definitions: Definitions) -> ModelReply:
        # The SDK builds responses without validating them: read every field defensively.
        provider = self.adapter.provider
        choices = _field(completion, "choices")
        if not isinstance(choices, list) or not choices:
            raise _unreadable(provider, "no choices")
        choice = choices[0]
        text = _field(_field(choice, "message"), "content")
        if text is not None and not isinstance(text, str):
            raise _unreadable(provider, "its content is not text")
        usage = _field(completion, "usage")
        return ModelReply(
            calls=tuple(self.adapter.parse_calls(completion, definitions=definitions)),
            text=text,
            usage=Usage(
                input_tokens=_tokens(usage, "prompt_tokens"),
                output_tokens=_tokens(usage, "completion_tokens"),
            ),
            finish_reason=_text_or_none(_field(choice, "finish_reason")),
            model=_text_or_none(_field(completion, "model")) or self._model,
            raw=completion,
        )

    async def aclose(self) -> None:
        """Close the SDK client this client made; one passed in is left to its owner."""
        if self._owned:
            await self._client.close()


# --- Anthropic -----------------------------------------------------------------------------


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

        _check_timeout(timeout)
        definitions = _definitions(request, self.adapter)
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
        message = await _call_sdk(
            provider,
            anthropic,
            self._client.messages.create(**options, timeout=timeout),
            timeout,
        )
        return self._reply(message)

    def _reply(self, message: object) -> ModelReply:
        # The SDK builds responses without validating them: read every field defensively.
        content = _field(message, "content")
        if not isinstance(content, list):
            raise _unreadable(self.adapter.provider, "no content blocks")
        texts = [_field(block, "text") for block in content if _field(block, "type") == "text"]
        text = "".join(t for t in texts if isinstance(t, str)) if texts else None
        usage = _field(message, "usage")
        read = sum(
            _tokens(usage, name)
            for name in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
        )
        return ModelReply(
            calls=tuple(self.adapter.parse_calls(message)),
            text=text,
            usage=Usage(input_tokens=read, output_tokens=_tokens(usage, "output_tokens")),
            finish_reason=_text_or_none(_field(message, "stop_reason")),
            model=_text_or_none(_field(message, "model")) or self._model,
            raw=message,
        )

    async def aclose(self) -> None:
        """Close the SDK client this client made; one passed in is left to its owner."""
        if self._owned:
            await self._client.close()


# --- scripted ------------------------------------------------------------------------------

SCRIPTED_MODEL = "scripted-model"

ScriptedStep = ModelReply | ModelTurn | Callable[[ModelRequest], ModelReply | ModelTurn]
"""A recorded reply, a `handrail.testing.ModelTurn`, or a function of the request."""


class ScriptedModelClient:
    """A stand-in for a model that replays a script or a cassette, reply by reply.

    It is never a real model and says so in its `name`. Each request gets the next
    step; a step may be a function of the request, to script a repair. The requests
    it received are kept in `requests` unless `record_requests` is False.
    """

    name = SCRIPTED_MODEL

    def __init__(self, steps: Sequence[ScriptedStep], *, record_requests: bool = True) -> None:
        self._steps = tuple(steps)
        self._position = 0
        self._record = record_requests
        self._requests: list[ModelRequest] = []

    @classmethod
    def from_cassette(
        cls, path: str | Path, *, record_requests: bool = True
    ) -> ScriptedModelClient:
        """A client replaying the cassette at `path` (see `load_cassette`)."""
        return cls(load_cassette(path), record_requests=record_requests)

    @property
    def finished(self) -> bool:
        """True when every step has been played."""
        return self._position >= len(self._steps)

    @property
    def requests(self) -> tuple[ModelRequest, ...]:
        """The requests received so far, in order."""
        return tuple(self._requests)

    async def complete(self, request: ModelRequest, *, timeout: float) -> ModelReply:
        """The next scripted reply; raises ScriptExhaustedError past the end."""
        _check_timeout(timeout)
        if self._record:
            self._requests.append(request)
        if self.finished:
            raise ScriptExhaustedError(f"the script has only {len(self._steps)} replies")
        step = self._steps[self._position]
        self._position += 1
        if callable(step):
            step = step(request)
        if isinstance(step, ModelTurn):
            return ModelReply(
                calls=step.calls,
                text=step.text,
                finish_reason="tool_calls" if step.calls else "stop",
                model=SCRIPTED_MODEL,
            )
        return step


# --- cassettes -----------------------------------------------------------------------------

_REPLY_KEYS = frozenset({"calls", "text", "usage", "finish_reason", "model"})
_CALL_KEYS = frozenset({"id", "name", "arguments", "arguments_base64", "provider", "defect"})
_USAGE_KEYS = frozenset({"input_tokens", "output_tokens"})


def cassette_items(replies: Sequence[ModelReply]) -> list[dict[str, Any]]:
    """The replies as the JSON objects of a cassette, not yet encoded."""
    return [_reply_json(r) for r in replies]


def record_cassette(replies: Sequence[ModelReply]) -> str:
    """The replies as a cassette: a JSON list, one object per reply, in order.

    Each reply keeps its calls (id, name, arguments, provider, defect), text, usage,
    finish reason and model; `raw` is not recorded. Bytes arguments are kept as base64.
    Raises CassetteError for arguments that are not JSON.
    """
    try:
        return json.dumps(cassette_items(replies), indent=2, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise CassetteError("the replies hold arguments that are not JSON") from exc


def load_cassette(path: str | Path) -> tuple[ModelReply, ...]:
    """The replies of the cassette file at `path`; raises CassetteError if unreadable."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CassetteError(f"cannot read the cassette {str(path)!r}") from exc
    return parse_cassette(text)


def parse_cassette(text: str) -> tuple[ModelReply, ...]:
    """The replies of a cassette's JSON text; raises CassetteError for any other shape."""
    try:
        document = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise CassetteError("a cassette is JSON text") from exc
    if not isinstance(document, list):
        raise CassetteError("a cassette is a JSON list of replies")
    return tuple(_reply_of(index, entry) for index, entry in enumerate(document))


def _no_constant(name: str) -> object:
    raise ValueError(name)


def _reply_json(reply: ModelReply) -> dict[str, Any]:
    return {
        "calls": [_call_json(call) for call in reply.calls],
        "text": reply.text,
        "usage": {
            "input_tokens": reply.usage.input_tokens,
            "output_tokens": reply.usage.output_tokens,
        },
        "finish_reason": reply.finish_reason,
        "model": reply.model,
    }


def _call_json(call: ToolCall) -> dict[str, Any]:
    entry: dict[str, Any] = {"id": call.id, "name": call.name}
    if isinstance(call.arguments, bytes):
        entry["arguments_base64"] = base64.b64encode(call.arguments).decode("ascii")
    else:
        entry["arguments"] = plain_json(call.arguments)
    entry["provider"] = call.provider
    entry["defect"] = call.defect
    return entry


def _object(where: str, value: object, keys: frozenset[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise CassetteError(f"{where} is not a JSON object")
    unknown = set(value) - keys
    if unknown:
        raise CassetteError(f"{where} has unknown keys {sorted(unknown)}")
    return value


def _text(where: str, value: object, *, optional: bool) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise CassetteError(f"{where} is not text")
    return value


def _count(where: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CassetteError(f"{where} is not a token count")
    return value


def _reply_of(index: int, entry: object) -> ModelReply:
    where = f"reply {index}"
    reply = _object(where, entry, _REPLY_KEYS)
    calls = reply.get("calls", [])
    if not isinstance(calls, list):
        raise CassetteError(f"{where}: calls is not a list")
    usage = _object(f"{where}: usage", reply.get("usage", {}), _USAGE_KEYS)
    return ModelReply(
        calls=tuple(_call_of(f"{where}, call {n}", call) for n, call in enumerate(calls)),
        text=_text(f"{where}: text", reply.get("text"), optional=True),
        usage=Usage(
            input_tokens=_count(f"{where}: input_tokens", usage.get("input_tokens", 0)),
            output_tokens=_count(f"{where}: output_tokens", usage.get("output_tokens", 0)),
        ),
        finish_reason=_text(f"{where}: finish_reason", reply.get("finish_reason"), optional=True),
        model=str(_text(f"{where}: model", reply.get("model", SCRIPTED_MODEL), optional=False)),
        raw=entry,
    )


def _call_of(where: str, value: object) -> ToolCall:
    call = _object(where, value, _CALL_KEYS)
    arguments: str | bytes | dict[str, Any] | None
    if "arguments_base64" in call:
        if "arguments" in call:
            raise CassetteError(f"{where} has both arguments and arguments_base64")
        encoded = _text(f"{where}: arguments_base64", call["arguments_base64"], optional=False)
        try:
            arguments = base64.b64decode(str(encoded), validate=True)
        except (binascii.Error, ValueError) as exc:
            raise CassetteError(f"{where}: arguments_base64 is not base64") from exc
    else:
        arguments = call.get("arguments")
        if arguments is not None and not isinstance(arguments, str | dict):
            raise CassetteError(f"{where}: arguments are neither text nor an object")
    return ToolCall(
        id=str(_text(f"{where}: id", call.get("id"), optional=False)),
        name=str(_text(f"{where}: name", call.get("name"), optional=False)),
        arguments=arguments,
        provider=str(_text(f"{where}: provider", call.get("provider", "unknown"), optional=False)),
        defect=_text(f"{where}: defect", call.get("defect"), optional=True),
    )
