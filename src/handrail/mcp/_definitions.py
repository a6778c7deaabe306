"""ToolSpec -> MCP Tool: the definition a client lists, derived from the spec alone.

Names, descriptions and input schemas are the spec's own (deep copies). The four
annotation hints are derived from the spec's side effect; a declared `ToolHints` may
only make a hint more cautious, never less. There is no `outputSchema`: a spec does
not declare the schema of its result, and `structuredContent` is the envelope.
"""

from __future__ import annotations

from collections.abc import Sequence

import mcp_types as types

from handrail.adapters._common import plain_json
from handrail.spec import SideEffect, ToolSpec

__all__ = ["tool_annotations", "tool_definition", "tool_definitions"]


def tool_definition(spec: ToolSpec) -> types.Tool:
    """One exposed spec as an MCP Tool: name, description, input schema, annotations."""
    return types.Tool(
        name=spec.name,
        description=spec.model_description,
        input_schema=plain_json(spec.input_schema),
        annotations=tool_annotations(spec),
    )


def tool_definitions(specs: Sequence[ToolSpec]) -> list[types.Tool]:
    """Each spec as an MCP Tool, in the order given (`Registry.exposed` sorts by name)."""
    return [tool_definition(spec) for spec in specs]


def tool_annotations(spec: ToolSpec) -> types.ToolAnnotations:
    """The hints a client reads, from what the spec declares about effects.

    readOnly: only a tool with no side effect, and not if its hints say otherwise.
    destructive: every write (a spec cannot say its updates are only additive), and a
    read whose hints insist. idempotent: reads only; a write through MCP makes a new
    plan or a new key per call, so a repeated call is not proven harmless. openWorld:
    external writes and every read (a read may reach anything; nothing proves it does
    not), closed only for a local write whose hints do not say otherwise.
    """
    hints = spec.hints
    writes = not spec.read_only
    read_only = not writes and hints.read_only is not False
    return types.ToolAnnotations(
        read_only_hint=read_only,
        destructive_hint=writes or hints.destructive is True,
        idempotent_hint=read_only and hints.idempotent is not False,
        open_world_hint=spec.side_effect is not SideEffect.LOCAL_WRITE or hints.open_world is True,
    )
