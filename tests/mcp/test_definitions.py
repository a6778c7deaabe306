"""ToolSpec -> MCP Tool: the spec's own name, description and schema; hints from effects."""

from __future__ import annotations

from typing import Annotated, Any

import mcp_types as types
import pytest

from handrail import (
    ConfirmationMode,
    ConfirmationPolicy,
    FromPrincipal,
    IdempotencyMode,
    IdempotencyPolicy,
    RiskLevel,
    SideEffect,
    Tool,
    ToolHints,
    tool,
)
from handrail.mcp._definitions import tool_annotations, tool_definition, tool_definitions


def _read(hints: ToolHints | None = None) -> Tool:
    @tool(risk=RiskLevel.L0_PUBLIC_READ, namespace="lib", hints=hints)
    def search(query: str, tenant: Annotated[str, FromPrincipal("tenant_id")]) -> list[str]:
        """Find books by title."""
        return [query, tenant]

    return search


def _write(side_effect: SideEffect, hints: ToolHints | None = None) -> Tool:
    @tool(
        risk=RiskLevel.L2_REVERSIBLE_WRITE,
        namespace="lib",
        side_effect=side_effect,
        idempotency=IdempotencyPolicy(mode=IdempotencyMode.PLAN),
        confirmation=ConfirmationPolicy(mode=ConfirmationMode.CONFIRM),
        hints=hints,
    )
    def order(title: str) -> str:
        """Order a book."""
        return title

    return order


def _hints(annotations: types.ToolAnnotations) -> dict[str, Any]:
    return {
        "read_only": annotations.read_only_hint,
        "destructive": annotations.destructive_hint,
        "idempotent": annotations.idempotent_hint,
        "open_world": annotations.open_world_hint,
    }


def test_a_definition_carries_the_specs_name_description_and_model_facing_schema() -> None:
    spec = _read().spec
    definition = tool_definition(spec)
    assert definition.name == "lib.search"
    assert definition.description == "Find books by title."
    assert definition.input_schema == dict(spec.input_schema)
    # The trusted parameter is filled from the principal: the client never sees it.
    assert "tenant" not in definition.input_schema["properties"]
    assert definition.output_schema is None


def test_a_definition_shares_nothing_with_the_spec() -> None:
    spec = _read().spec
    definition = tool_definition(spec)
    definition.input_schema["properties"]["query"]["type"] = "integer"
    assert spec.input_schema["properties"]["query"]["type"] == "string"
    assert tool_definition(spec).input_schema["properties"]["query"]["type"] == "string"


def test_a_read_is_read_only_idempotent_not_destructive_and_maybe_open_world() -> None:
    assert _hints(tool_annotations(_read().spec)) == {
        "read_only": True,
        "destructive": False,
        "idempotent": True,
        "open_world": True,
    }


def test_an_external_write_is_destructive_not_idempotent_and_open_world() -> None:
    assert _hints(tool_annotations(_write(SideEffect.EXTERNAL_WRITE).spec)) == {
        "read_only": False,
        "destructive": True,
        "idempotent": False,
        "open_world": True,
    }


def test_a_local_write_is_a_closed_world() -> None:
    assert tool_annotations(_write(SideEffect.LOCAL_WRITE).spec).open_world_hint is False


def test_declared_hints_never_make_a_write_look_safer() -> None:
    reassuring = ToolHints(destructive=False, idempotent=True, open_world=False)
    assert _hints(tool_annotations(_write(SideEffect.EXTERNAL_WRITE, reassuring).spec)) == {
        "read_only": False,
        "destructive": True,
        "idempotent": False,
        "open_world": True,
    }


@pytest.mark.parametrize(
    ("hints", "expected"),
    [
        (ToolHints(read_only=False), {"read_only": False, "idempotent": False}),
        (ToolHints(destructive=True), {"destructive": True}),
        (ToolHints(idempotent=False), {"idempotent": False}),
    ],
)
def test_declared_hints_may_make_a_read_more_cautious(
    hints: ToolHints, expected: dict[str, bool]
) -> None:
    found = _hints(tool_annotations(_read(hints).spec))
    assert {key: found[key] for key in expected} == expected


def test_declared_hints_may_open_the_world_of_a_local_write() -> None:
    spec = _write(SideEffect.LOCAL_WRITE, ToolHints(open_world=True)).spec
    assert tool_annotations(spec).open_world_hint is True


def test_definitions_keep_the_order_given() -> None:
    specs = [_write(SideEffect.LOCAL_WRITE).spec, _read().spec]
    assert [d.name for d in tool_definitions(specs)] == ["lib.order", "lib.search"]
