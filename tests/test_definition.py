"""Declaring tools: signatures and raw schemas, metadata, versions."""

from __future__ import annotations

import enum
from typing import Annotated, Any, Literal

import pytest
from pydantic import AfterValidator, BaseModel, Field

from handrail import (
    ConfirmationMode,
    ConfirmationPolicy,
    ErrorCode,
    FromPrincipal,
    Gate,
    Principal,
    Registry,
    RiskLevel,
    SideEffect,
    Status,
    Tool,
    ToolCall,
    ToolContext,
    ToolHints,
    tool,
)
from handrail.errors import RegistrationError, SchemaError, SignatureError

P = Principal(user_id="u", tenant_id="t")


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Address(BaseModel):
    city: Annotated[str, Field(max_length=40)]
    zip: str | None = None


def _declare(fn: Any, **options: Any) -> Tool:
    options.setdefault("risk", RiskLevel.L0_PUBLIC_READ)
    return tool(**options)(fn)


def test_a_typed_signature_becomes_a_closed_schema_without_titles_or_context() -> None:
    async def ship(
        ctx: ToolContext,
        address: Address,
        colour: Colour = Colour.RED,
        speed: Literal["slow", "fast"] = "slow",
        tags: Annotated[list[str], Field(max_length=3)] = [],  # noqa: B006 - pydantic copies
        count: Annotated[int, Field(ge=1, le=9, description="How many")] = 1,
    ) -> None:
        """Ship things."""

    schema = _declare(ship, name="ship").spec.input_schema
    assert schema["type"] == "object"
    assert schema["additionalProperties"] is False
    assert schema["required"] == ["address"]
    assert set(schema["properties"]) == {"address", "colour", "speed", "tags", "count"}
    assert schema["properties"]["count"] == {
        "default": 1,
        "description": "How many",
        "maximum": 9,
        "minimum": 1,
        "type": "integer",
    }
    assert schema["properties"]["tags"]["maxItems"] == 3
    assert "title" not in schema
    assert "title" not in schema["properties"]["count"]


@pytest.mark.parametrize(
    "source",
    [
        "def f(*args: int) -> None: ...",
        "def f(**kwargs: int) -> None: ...",
        "def f(x: int, /) -> None: ...",
        "def f(x) -> None: ...",
        "def f(_x: int) -> None: ...",
        "def f(a: ToolContext, b: ToolContext) -> None: ...",
        "def f(x: 'Missing') -> None: ...",
        "def f(x: object) -> None: ...",
        "def f(x: Any) -> None: ...",
        "def f(x: Annotated[Any, 1]) -> None: ...",
    ],
)
def test_signatures_that_cannot_be_a_schema_are_refused(source: str) -> None:
    namespace: dict[str, Any] = {"ToolContext": ToolContext, "Any": Any, "Annotated": Annotated}
    exec(source, namespace)  # noqa: S102 - building test signatures
    fn = namespace["f"]
    fn.__doc__ = "A tool."
    with pytest.raises(SignatureError):
        _declare(fn)


def test_a_tool_needs_a_description_and_a_valid_name() -> None:
    async def nodoc() -> None:
        pass

    with pytest.raises(RegistrationError):
        _declare(nodoc)
    with pytest.raises(RegistrationError):
        _declare(nodoc, description="x", name="bad name")
    with pytest.raises(RegistrationError):
        _declare(nodoc, description="x", name="a" * 65)


def test_a_write_must_state_its_confirmation_policy() -> None:
    async def write() -> None:
        """Write."""

    with pytest.raises(RegistrationError):
        _declare(write, risk=RiskLevel.L2_REVERSIBLE_WRITE, side_effect=SideEffect.LOCAL_WRITE)
    spec = _declare(
        write,
        risk=RiskLevel.L2_REVERSIBLE_WRITE,
        side_effect=SideEffect.LOCAL_WRITE,
        confirmation=ConfirmationPolicy(mode=ConfirmationMode.CONFIRM),
    ).spec
    assert not spec.read_only
    assert spec.hints.read_only is False


@pytest.mark.parametrize(
    ("risk", "side_effect", "hints"),
    [
        (RiskLevel.L1_INTERNAL_READ, SideEffect.EXTERNAL_WRITE, None),
        (RiskLevel.L3_HIGH_RISK_WRITE, SideEffect.NONE, None),
        (RiskLevel.L2_REVERSIBLE_WRITE, SideEffect.LOCAL_WRITE, ToolHints(read_only=True)),
    ],
)
def test_contradictory_risk_side_effect_and_hints_are_refused(
    risk: RiskLevel,
    side_effect: SideEffect,
    hints: ToolHints | None,
) -> None:
    async def f() -> None:
        """F."""

    with pytest.raises(RegistrationError):
        _declare(
            f,
            risk=risk,
            side_effect=side_effect,
            hints=hints,
            confirmation=ConfirmationPolicy(mode=ConfirmationMode.CONFIRM),
        )


def test_versions_are_content_hashes_unless_given() -> None:
    async def f(x: int) -> None:
        """Version one."""

    async def g(x: int) -> None:
        """Version two."""

    async def h(x: str) -> None:
        """Version one."""

    a, b, c = (_declare(fn, name="v").spec for fn in (f, g, h))
    assert a.schema_version == b.schema_version != c.schema_version
    assert a.description_version == c.description_version != b.description_version
    assert a.schema_version.startswith("sha256:")
    pinned = _declare(f, name="v", schema_version="3", description_version="7").spec
    assert (pinned.schema_version, pinned.description_version) == ("3", "7")


def even(value: int) -> int:
    if value % 2:
        raise ValueError("must be even")
    return value


@pytest.mark.anyio
async def test_pydantic_validators_on_arguments_become_field_errors() -> None:
    async def half(n: Annotated[int, AfterValidator(even)]) -> int:
        """Halve an even number."""
        return n // 2

    registry = Registry()
    registry.register(_declare(half))
    gate = Gate(registry)
    odd = await gate.handle(ToolCall(id="1", name="half", arguments={"n": 3}), P)
    assert odd.error_type is ErrorCode.INVALID_ARGUMENTS
    assert list(odd.field_errors) == ["$.n"]
    ok = await gate.handle(ToolCall(id="2", name="half", arguments={"n": 4}), P)
    assert ok.data == 2


# --- raw schemas ---------------------------------------------------------------------------

RAW = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "maxLength": 200},
        "tenant_id": {"type": "string"},
        "when": {"type": "string", "format": "date"},
    },
    "required": ["path", "tenant_id"],
    "additionalProperties": False,
}


@pytest.mark.anyio
async def test_a_raw_schema_tool_hides_trusted_parameters_and_fills_them() -> None:
    received: list[dict[str, Any]] = []

    def read_file(arguments: dict[str, Any], ctx: ToolContext) -> str:
        received.append(arguments)
        return "content"

    raw = Tool.from_json_schema(
        name="fs.read",
        description="Read a file.",
        input_schema=RAW,
        fn=read_file,
        risk=RiskLevel.L1_INTERNAL_READ,
        trusted={"tenant_id": FromPrincipal("tenant_id")},
    )
    assert set(raw.spec.input_schema["properties"]) == {"path", "when"}
    assert raw.spec.input_schema["required"] == ["path"]
    registry = Registry()
    registry.register(raw)
    gate = Gate(registry)
    envelope = await gate.handle(ToolCall(id="1", name="fs.read", arguments='{"path":"a"}'), P)
    assert envelope.status is Status.OK
    assert received == [{"path": "a", "tenant_id": "t"}]
    bad_date = await gate.handle(
        ToolCall(id="2", name="fs.read", arguments={"path": "a", "when": "yesterday"}),
        P,
    )
    assert bad_date.error_type is ErrorCode.INVALID_ARGUMENTS


@pytest.mark.anyio
async def test_a_raw_schema_tool_may_be_async() -> None:
    async def fn(arguments: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        return arguments

    raw = Tool.from_json_schema(
        name="echo",
        description="Echo.",
        input_schema={"type": "object", "properties": {"a": {"type": "integer"}}},
        fn=fn,
        risk=RiskLevel.L0_PUBLIC_READ,
    )
    registry = Registry()
    registry.register(raw)
    envelope = await Gate(registry).handle(ToolCall(id="1", name="echo", arguments={"a": 1}), P)
    assert envelope.data == {"a": 1}


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "array"},
        {"properties": {}},
        {"type": "object", "properties": {"a": {"type": "nonsense"}}},
        {"type": "object", "$schema": "http://json-schema.org/draft-04/schema#"},
        {"type": "object", "properties": {"x": {"$ref": "#/$defs/missing"}}},
    ],
)
def test_invalid_raw_schemas_are_refused(schema: dict[str, Any]) -> None:
    with pytest.raises(SchemaError):
        Tool.from_json_schema(
            name="bad",
            description="Bad.",
            input_schema=schema,
            fn=lambda a, c: None,
            risk=RiskLevel.L0_PUBLIC_READ,
        )


def test_a_trusted_parameter_must_exist_in_the_raw_schema() -> None:
    with pytest.raises(SchemaError):
        Tool.from_json_schema(
            name="bad",
            description="Bad.",
            input_schema={"type": "object", "properties": {}},
            fn=lambda a, c: None,
            risk=RiskLevel.L0_PUBLIC_READ,
            trusted={"tenant_id": FromPrincipal("tenant_id")},
        )
