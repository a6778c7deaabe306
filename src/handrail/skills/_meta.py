"""How every skill meta-tool is declared: a closed object schema, read-only, untrusted results.

Owns the one shape the three tools share (every property required, nothing else
allowed; L1, no side effect, results marked untrusted). It never runs anything.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from handrail.context import ToolContext
from handrail.declare.definition import Tool
from handrail.envelope import Trust
from handrail.shaping.policy import ResultPolicy
from handrail.spec import RiskLevel, SideEffect

__all__ = ["META_OWNER", "meta_tool"]

META_OWNER = "handrail"
"""The owner declared by the catalogue tools whose names and behaviour Handrail fixes."""


def meta_tool(
    name: str,
    description: str,
    properties: Mapping[str, Mapping[str, Any]],
    fn: Callable[[dict[str, Any], ToolContext], Any],
    permissions: tuple[str, ...],
    *,
    timeout: float,
    example: Mapping[str, Any],
) -> Tool:
    """A read-only L1 tool taking exactly `properties`, all required; results untrusted.

    Owned by "handrail" (the names are fixed), with one `example` call for lint and people.
    """
    schema = {
        "type": "object",
        "properties": {key: dict(value) for key, value in properties.items()},
        "required": list(properties),
        "additionalProperties": False,
    }
    return Tool.from_json_schema(
        name=name,
        description=description,
        input_schema=schema,
        fn=fn,
        risk=RiskLevel.L1_INTERNAL_READ,
        side_effect=SideEffect.NONE,
        permissions=permissions,
        timeout=timeout,
        results=ResultPolicy(trust=Trust.UNTRUSTED),
        owner=META_OWNER,
        examples=(dict(example),),
    )
