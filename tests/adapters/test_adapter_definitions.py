import copy
import re
from typing import Any

import pytest
from inline_snapshot import snapshot

from handrail import Principal, Registry, RiskLevel, Tool, ToolSpec, tool
from handrail.adapters import (
    DefinitionFormat,
    anthropic,
    exposed_definitions,
    json_schema,
    openai_chat,
    openai_responses,
    tool_definitions,
)
from handrail.errors import ConfigurationError

WIRE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")

STOCK_SCHEMA = {
    "additionalProperties": False,
    "properties": {"book_id": {"maxLength": 16, "type": "string"}},
    "required": ["book_id"],
    "type": "object",
}


@tool(risk=RiskLevel.L4_FORBIDDEN, namespace="shop")
def wipe() -> None:
    """Remove everything; registered only to prove it is never sent."""


@tool(risk=RiskLevel.L0_PUBLIC_READ, namespace="shop", enabled=False)
def retired() -> None:
    """A tool switched off for everyone."""


@tool(risk=RiskLevel.L0_PUBLIC_READ, namespace="shop", enabled_tenants={"t2"})
def regional() -> None:
    """A tool only tenant t2 has."""


@pytest.fixture
def full_registry(registry: Registry) -> Registry:
    for extra in (wipe, retired, regional):
        registry.register(extra)
    return registry


def declarations(definitions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One dict per tool: Gemini nests its declarations inside one Tool."""
    out: list[dict[str, Any]] = []
    for definition in definitions:
        out.extend(definition.get("functionDeclarations", [definition]))
    return out


def names_in(definitions: list[dict[str, Any]]) -> list[str]:
    return [d.get("name") or d["function"]["name"] for d in declarations(definitions)]


def stock_spec(registry: Registry) -> ToolSpec:
    return registry.get("shop.stock").spec


def test_openai_chat_definitions_nest_the_function_and_say_strict_false(
    registry: Registry,
) -> None:
    spec = stock_spec(registry)
    assert openai_chat.tool_definitions([spec]) == snapshot(
        [
            {
                "type": "function",
                "function": {
                    "name": "shop__stock",
                    "description": "How many copies of a book are in stock (a sync tool).",
                    "parameters": STOCK_SCHEMA,
                    "strict": False,
                },
            },
        ],
    )


def test_openai_responses_definitions_are_flat_and_say_strict_false(registry: Registry) -> None:
    spec = stock_spec(registry)
    assert openai_responses.tool_definitions([spec]) == snapshot(
        [
            {
                "type": "function",
                "name": "shop__stock",
                "description": "How many copies of a book are in stock (a sync tool).",
                "parameters": STOCK_SCHEMA,
                "strict": False,
            },
        ],
    )


def test_anthropic_definitions_carry_an_input_schema(registry: Registry) -> None:
    spec = stock_spec(registry)
    assert anthropic.tool_definitions([spec]) == snapshot(
        [
            {
                "name": "shop__stock",
                "description": "How many copies of a book are in stock (a sync tool).",
                "input_schema": STOCK_SCHEMA,
            },
        ],
    )


def test_the_jsonschema_export_keeps_the_handrail_name_and_adds_what_handrail_knows(
    registry: Registry,
) -> None:
    spec = stock_spec(registry)
    [definition] = json_schema.tool_definitions([spec])
    assert definition == {
        "name": "shop.stock",
        "description": "How many copies of a book are in stock (a sync tool).",
        "input_schema": STOCK_SCHEMA,
        "schema_version": spec.schema_version,
        "description_version": spec.description_version,
        "risk": "L1_INTERNAL_READ",
        "side_effect": "none",
        "permissions": ["books.read"],
    }


@pytest.mark.parametrize("fmt", list(DefinitionFormat))
def test_exported_schemas_share_no_mutable_part_with_the_spec(
    registry: Registry,
    principal: Principal,
    fmt: DefinitionFormat,
) -> None:
    spec = registry.get("shop.search").spec
    before = copy.deepcopy(dict(spec.input_schema))
    for definition in declarations(exposed_definitions(registry, principal, fmt)):
        schema = (
            definition.get("parameters")
            or definition.get("parametersJsonSchema")
            or definition.get("input_schema")
            or definition["function"]["parameters"]
        )
        schema["properties"].clear()
        schema.setdefault("$defs", {}).clear()
    assert dict(spec.input_schema) == before


@pytest.mark.invariant(9)
@pytest.mark.parametrize("fmt", list(DefinitionFormat))
def test_forbidden_disabled_and_other_tenants_tools_are_never_exported(
    full_registry: Registry,
    principal: Principal,
    fmt: DefinitionFormat,
) -> None:
    definitions = exposed_definitions(full_registry, principal, fmt)
    names = names_in(definitions)
    assert sorted(names) in (["shop.search", "shop.stock"], ["shop__search", "shop__stock"])


@pytest.mark.invariant(9)
@pytest.mark.parametrize("fmt", list(DefinitionFormat))
def test_exporting_every_registered_spec_is_refused_when_one_is_forbidden(
    full_registry: Registry,
    fmt: DefinitionFormat,
) -> None:
    with pytest.raises(ConfigurationError):
        tool_definitions(full_registry.specs(), fmt)


def test_a_disabled_spec_is_refused_even_when_passed_alone() -> None:
    with pytest.raises(ConfigurationError):
        openai_chat.tool_definitions([retired.spec])


def test_provider_names_are_valid_for_every_provider(
    registry: Registry,
    principal: Principal,
) -> None:
    for fmt in (
        DefinitionFormat.OPENAI_CHAT,
        DefinitionFormat.OPENAI_RESPONSES,
        DefinitionFormat.ANTHROPIC,
        DefinitionFormat.GEMINI,
    ):
        assert all(
            WIRE.fullmatch(n) for n in names_in(exposed_definitions(registry, principal, fmt))
        )


def _named(name: str, template: Tool) -> ToolSpec:
    spec = template.spec
    return ToolSpec(
        name=name,
        description=spec.description,
        input_schema=spec.input_schema,
        schema_version=spec.schema_version,
        description_version=spec.description_version,
        risk=spec.risk,
        side_effect=spec.side_effect,
    )


def test_the_same_name_twice_is_refused_as_a_collision(registry: Registry) -> None:
    spec = stock_spec(registry)
    with pytest.raises(ConfigurationError):
        anthropic.tool_definitions([spec, spec])


def test_names_differing_only_in_case_are_refused_as_a_collision() -> None:
    specs = [_named("Shop.ping", regional), _named("shop.ping", regional)]
    with pytest.raises(ConfigurationError):
        openai_responses.tool_definitions(specs)


def test_a_name_that_cannot_map_is_refused_at_export() -> None:
    with pytest.raises(ConfigurationError):
        openai_chat.tool_definitions([_named("shop.get__book", regional)])


def test_definitions_match_the_official_openai_sdk_types(
    registry: Registry,
    principal: Principal,
) -> None:
    pydantic = pytest.importorskip("pydantic")
    chat = pytest.importorskip("openai.types.chat")
    responses = pytest.importorskip("openai.types.responses")
    chat_tool = pydantic.TypeAdapter(chat.ChatCompletionFunctionToolParam)
    responses_tool = pydantic.TypeAdapter(responses.FunctionToolParam)
    specs = registry.exposed(principal)
    for definition in openai_chat.tool_definitions(specs):
        chat_tool.validate_python(definition, strict=True)
    for definition in openai_responses.tool_definitions(specs):
        responses_tool.validate_python(definition, strict=True)
