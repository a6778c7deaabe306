"""Adapters: one module per provider wire format, plus a provider-neutral export.

For now each turns exposed ToolSpecs into that format's tool definitions; calls in and
results out join the same modules later. Adapters never decide exposure: they are
handed `registry.exposed(principal)`, and refuse forbidden or disabled specs anyway.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import StrEnum
from typing import Any, assert_never

from handrail.adapters import anthropic, json_schema, openai_chat, openai_responses
from handrail.adapters._names import from_wire_name, to_wire_name
from handrail.principal import Principal
from handrail.registry import Registry
from handrail.spec import ToolSpec

__all__ = [
    "DefinitionFormat",
    "exposed_definitions",
    "from_wire_name",
    "to_wire_name",
    "tool_definitions",
]


class DefinitionFormat(StrEnum):
    """The shapes tool definitions can be exported in."""

    OPENAI_CHAT = "openai-chat"
    OPENAI_RESPONSES = "openai-responses"
    ANTHROPIC = "anthropic"
    JSONSCHEMA = "jsonschema"


def _exporter(
    fmt: DefinitionFormat,
) -> Callable[[Sequence[ToolSpec]], list[dict[str, Any]]]:
    match fmt:
        case DefinitionFormat.OPENAI_CHAT:
            return openai_chat.tool_definitions
        case DefinitionFormat.OPENAI_RESPONSES:
            return openai_responses.tool_definitions
        case DefinitionFormat.ANTHROPIC:
            return anthropic.tool_definitions
        case DefinitionFormat.JSONSCHEMA:
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
) -> list[dict[str, Any]]:
    """The definitions of exactly what `registry` exposes to `principal` (and scenario)."""
    return tool_definitions(registry.exposed(principal, scenario=scenario), fmt)
