"""Provider-neutral export: each exposed tool's schema with what Handrail knows of it.

Keeps Handrail's own (dotted) names and adds versions, risk, side effect and
permissions, for review, diffing and other hosts. It is not a provider wire format and
never decides which tools are exposed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from handrail.adapters._common import plain_json, sendable
from handrail.spec import ToolSpec

__all__ = ["tool_definition", "tool_definitions"]


def tool_definition(spec: ToolSpec) -> dict[str, Any]:
    """One spec as a plain JSON object; the schema is a deep copy."""
    return {
        "name": spec.name,
        "description": spec.model_description,
        "input_schema": plain_json(spec.input_schema),
        "schema_version": spec.schema_version,
        "description_version": spec.description_version,
        "risk": spec.risk.name,
        "side_effect": spec.side_effect.value,
        "permissions": sorted(spec.permissions),
    }


def tool_definitions(specs: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """Every spec as a plain JSON object, refusing any that must never be sent."""
    return [tool_definition(spec) for spec, _ in sendable(specs)]
