"""Adapters: one module per provider wire format, plus a provider-neutral export.

Each adapter class (`OpenAIChatAdapter`, `OpenAIResponsesAdapter`, `AnthropicAdapter`,
`GeminiAdapter`) keeps the `Adapter` contract of `base`: definitions and tool choice
out, calls in (whole and streamed), results back, transcripts both ways. Adapters never
decide exposure: they are handed `registry.exposed(principal)`, and refuse forbidden or
disabled specs anyway. Results go back as data blocks (`handrail.shaping.marking`);
each adapter takes a `marker=` for them. `tool_definitions` here is the plain export
the CLI prints. The adapter modules load on first use (PEP 562), so importing this
package, or naming `DefinitionFormat`, costs no pydantic model.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, Any, assert_never

from handrail.adapters._names import from_wire_name, to_wire_name
from handrail.errors import ConfigurationError

if TYPE_CHECKING:
    from handrail.adapters.anthropic import AnthropicAdapter
    from handrail.adapters.base import (
        Adapter,
        Definitions,
        IssueAction,
        SchemaIssue,
        StreamAssembler,
        ToolChoice,
        ToolChoiceMode,
        UnsupportedSchemaError,
        UntranslatableError,
    )
    from handrail.adapters.gemini import GeminiAdapter
    from handrail.adapters.openai_chat import OpenAIChatAdapter
    from handrail.adapters.openai_responses import OpenAIResponsesAdapter
    from handrail.adapters.transcript import (
        AssistantTurn,
        CallIdLedger,
        ToolResult,
        ToolResultsTurn,
        Turn,
        UserTurn,
        pair_results,
    )
    from handrail.declare.exposure import ExposureRequest
    from handrail.declare.registry import Registry
    from handrail.principal import Principal
    from handrail.spec import ToolSpec

_BASE = "handrail.adapters.base"
_TRANSCRIPT = "handrail.adapters.transcript"
_LAZY = {
    "Adapter": _BASE,
    "AnthropicAdapter": "handrail.adapters.anthropic",
    "AssistantTurn": _TRANSCRIPT,
    "CallIdLedger": _TRANSCRIPT,
    "Definitions": _BASE,
    "GeminiAdapter": "handrail.adapters.gemini",
    "IssueAction": _BASE,
    "OpenAIChatAdapter": "handrail.adapters.openai_chat",
    "OpenAIResponsesAdapter": "handrail.adapters.openai_responses",
    "SchemaIssue": _BASE,
    "StreamAssembler": _BASE,
    "ToolChoice": _BASE,
    "ToolChoiceMode": _BASE,
    "ToolResult": _TRANSCRIPT,
    "ToolResultsTurn": _TRANSCRIPT,
    "Turn": _TRANSCRIPT,
    "UnsupportedSchemaError": _BASE,
    "UntranslatableError": _BASE,
    "UserTurn": _TRANSCRIPT,
    "pair_results": _TRANSCRIPT,
}
"""Names imported from their module when first asked for: the adapters load pydantic."""


def __getattr__(name: str) -> object:
    """Import an adapter name the first time it is asked for."""
    if (module := _LAZY.get(name)) is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "Adapter",
    "AnthropicAdapter",
    "AssistantTurn",
    "CallIdLedger",
    "DefinitionFormat",
    "Definitions",
    "GeminiAdapter",
    "IssueAction",
    "OpenAIChatAdapter",
    "OpenAIResponsesAdapter",
    "SchemaIssue",
    "StreamAssembler",
    "ToolChoice",
    "ToolChoiceMode",
    "ToolResult",
    "ToolResultsTurn",
    "Turn",
    "UnsupportedSchemaError",
    "UntranslatableError",
    "UserTurn",
    "exposed_definitions",
    "from_wire_name",
    "pair_results",
    "to_wire_name",
    "tool_definitions",
]


class DefinitionFormat(StrEnum):
    """The shapes tool definitions can be exported in."""

    OPENAI_CHAT = "openai-chat"
    OPENAI_RESPONSES = "openai-responses"
    ANTHROPIC = "anthropic"
    GEMINI = "gemini"
    JSONSCHEMA = "jsonschema"


def _exporter(
    fmt: DefinitionFormat,
) -> Callable[[Sequence[ToolSpec]], list[dict[str, Any]]]:
    match fmt:
        case DefinitionFormat.OPENAI_CHAT:
            from handrail.adapters import openai_chat  # noqa: PLC0415 - loaded when asked for

            return openai_chat.tool_definitions
        case DefinitionFormat.OPENAI_RESPONSES:
            from handrail.adapters import openai_responses  # noqa: PLC0415 - loaded when asked for

            return openai_responses.tool_definitions
        case DefinitionFormat.ANTHROPIC:
            from handrail.adapters import anthropic  # noqa: PLC0415 - loaded when asked for

            return anthropic.tool_definitions
        case DefinitionFormat.GEMINI:
            from handrail.adapters import gemini  # noqa: PLC0415 - loaded when asked for

            return gemini.tool_definitions
        case DefinitionFormat.JSONSCHEMA:
            from handrail.adapters import json_schema  # noqa: PLC0415 - loaded when asked for

            return json_schema.tool_definitions
        case _:  # pragma: no cover - closed by the enum
            assert_never(fmt)


def tool_definitions(specs: Sequence[ToolSpec], fmt: DefinitionFormat) -> list[dict[str, Any]]:
    """The definitions of `specs` in the given format."""
    return _exporter(fmt)(specs)


def exposed_definitions(
    registry: Registry,
    principal: Principal,
    fmt: DefinitionFormat,
    *,
    scenario: str | None = None,
    request: ExposureRequest | None = None,
) -> list[dict[str, Any]]:
    """The definitions of exactly what `registry` exposes to `principal` for a request.

    `request` (scenario, risk ceiling, model capabilities) picks the minimal toolset;
    `scenario` alone is the short form of a request that only names its scenario.
    """
    if request is None:
        return tool_definitions(registry.exposed(principal, scenario=scenario), fmt)
    if scenario is not None:
        raise ConfigurationError("give the scenario inside the request, not beside it")
    return tool_definitions(registry.exposure(principal, request).included, fmt)
