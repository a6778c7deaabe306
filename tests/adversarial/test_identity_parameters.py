"""A schema that asks the model who it is never registers; trusted parameters are filled.

Identity, tenant and authority come from the Principal (invariant 1). Asking for them
anywhere in a schema (top level, nested models, `$defs`, array items, `required`)
is refused at registration; declaring them `FromPrincipal` hides them from the model,
and a model that supplies one anyway is refused.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, Field

from handrail import (
    Envelope,
    ErrorCode,
    FromPrincipal,
    Gate,
    Principal,
    Registry,
    RiskLevel,
    Status,
    Tool,
    ToolCall,
    ToolContext,
    tool,
)
from handrail.errors import IdentityParameterError

WireCheck = Callable[[Envelope, ToolCall], dict[str, Any]]

IDENTITY_NAMES = [
    "tenant_id",
    "user_id",
    "principal",
    "role",
    "is_admin",
    "userId",
    "TENANT_ID",
    "Tenant",
    "roles",
    "permissions",
    "org_id",
    "acting_as",
    "on_behalf_of",
]
RAW_ONLY_NAMES = ["TENANT-ID", "tenant id", "Is-Admin", "user.id", "ｔｅｎａｎｔ_ｉｄ"]  # noqa: RUF001
WHO = Principal(
    user_id="alice",
    tenant_id="t1",
    roles=frozenset({"clerk"}),
    data_scope={"region": "eu"},
)


def _function_with_parameter(name: str) -> Callable[..., object]:
    def fn(**kwargs: object) -> object:
        return kwargs

    parameter = inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=str)
    fn.__signature__ = inspect.Signature([parameter])  # type: ignore[attr-defined]
    fn.__annotations__ = {name: str, "return": object}
    fn.__doc__ = "Echo the arguments."
    return fn


def _raw(schema: Mapping[str, Any], **options: Any) -> Tool:
    return Tool.from_json_schema(
        name="raw.echo",
        description="Echo the arguments.",
        input_schema=schema,
        fn=lambda arguments, _ctx: arguments,
        risk=RiskLevel.L0_PUBLIC_READ,
        **options,
    )


def _property_names(schema: object) -> Iterator[str]:
    if isinstance(schema, Mapping):
        properties = schema.get("properties")
        if isinstance(properties, Mapping):
            yield from (str(name) for name in properties)
        for value in schema.values():
            yield from _property_names(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from _property_names(item)


# --- decorated tools --------------------------------------------------------------------------


@pytest.mark.invariant(1)
@pytest.mark.parametrize("name", IDENTITY_NAMES)
def test_a_tool_parameter_that_names_an_identity_is_refused_at_registration(name: str) -> None:
    with pytest.raises(IdentityParameterError):
        tool(risk=RiskLevel.L0_PUBLIC_READ)(_function_with_parameter(name))


class _Account(BaseModel):
    number: str
    tenant_id: str


class _Owner(BaseModel):
    name: str
    is_admin: bool = False


class _Shelf(BaseModel):
    label: str
    owner: _Owner


class _Aliased(BaseModel):
    label: str
    scope: str = Field(alias="TENANT-ID")


def _takes_account(account: _Account) -> object:
    """Echo."""
    return account


def _takes_nested_list(shelves: list[_Shelf] | None = None) -> object:
    """Echo."""
    return shelves


def _takes_alias(item: _Aliased) -> object:
    """Echo."""
    return item


def _takes_dict_of_models(owners: dict[str, _Owner]) -> object:
    """Echo."""
    return owners


@pytest.mark.invariant(1)
@pytest.mark.parametrize(
    "fn",
    [_takes_account, _takes_nested_list, _takes_alias, _takes_dict_of_models],
    ids=["model-field", "list-of-model-of-model", "alias", "dict-of-models"],
)
def test_an_identity_field_inside_a_model_parameter_is_refused_at_registration(
    fn: Callable[..., object],
) -> None:
    with pytest.raises(IdentityParameterError):
        tool(risk=RiskLevel.L0_PUBLIC_READ)(fn)


@pytest.mark.invariant(1)
def test_trusted_parameters_are_accepted_and_never_shown_to_the_model() -> None:
    @tool(risk=RiskLevel.L0_PUBLIC_READ)
    def whoami(
        ctx: ToolContext,
        *,
        tenant_id: Annotated[str, FromPrincipal("tenant_id")],
        user_id: Annotated[str, FromPrincipal("user_id")],
        roles: Annotated[list[str], FromPrincipal("roles")],
        region: Annotated[str, FromPrincipal("data_scope.region")],
        query: str = "",
    ) -> dict[str, object]:
        """Echo the trusted values."""
        del ctx
        return {"tenant_id": tenant_id, "user_id": user_id, "roles": roles, "region": region}

    names = set(_property_names(dict(whoami.spec.input_schema)))
    assert names == {"query"}
    assert set(whoami.spec.trusted) == {"tenant_id", "user_id", "roles", "region"}


def _whoami(seen: list[dict[str, object]]) -> Tool:
    @tool(risk=RiskLevel.L0_PUBLIC_READ, namespace="id")
    async def whoami(
        tenant: Annotated[str, FromPrincipal("tenant_id")],
        user: Annotated[str, FromPrincipal("user_id")],
        region: Annotated[str, FromPrincipal("data_scope.region")],
        query: str = "",
    ) -> dict[str, object]:
        """Echo what the tool was given."""
        received = {"tenant": tenant, "user": user, "region": region, "query": query}
        seen.append(received)
        return received

    return whoami


@pytest.mark.anyio
@pytest.mark.invariant(1)
@pytest.mark.parametrize(
    "arguments",
    [
        {"query": "x", "tenant": "t2"},
        {"query": "x", "user": "root"},
        {"query": "x", "region": "us"},
        '{"query": "x", "tenant": "t2", "user": "root"}',
    ],
)
async def test_a_model_that_supplies_a_trusted_parameter_is_refused(
    wire: WireCheck,
    arguments: object,
) -> None:
    seen: list[dict[str, object]] = []
    registry = Registry()
    registry.register(_whoami(seen))
    call = ToolCall(id="c", name="id.whoami", arguments=arguments)  # type: ignore[arg-type]
    envelope = await Gate(registry).handle(call, WHO)
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS
    assert seen == []
    wire(envelope, call)


@pytest.mark.anyio
@pytest.mark.invariant(1)
async def test_the_tool_receives_the_principals_values_for_trusted_parameters() -> None:
    seen: list[dict[str, object]] = []
    registry = Registry()
    registry.register(_whoami(seen))
    call = ToolCall(id="c", name="id.whoami", arguments={"query": "x"})
    envelope = await Gate(registry).handle(call, WHO)
    assert envelope.status is Status.OK
    assert seen == [{"tenant": "t1", "user": "alice", "region": "eu", "query": "x"}]


# --- raw schemas (MCP-style) ---------------------------------------------------------------------


def _nested(name: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "filter": {"type": "object", "properties": {name: {"type": "string"}}},
        },
    }


def _in_defs(name: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"owner": {"$ref": "#/$defs/Owner"}},
        "$defs": {"Owner": {"type": "object", "properties": {name: {"type": "string"}}}},
    }


def _in_items(name: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "rows": {
                "type": "array",
                "items": {
                    "anyOf": [{"type": "object", "properties": {name: {}}}, {"type": "null"}]
                },
            },
        },
    }


def _top(name: str) -> dict[str, Any]:
    return {"type": "object", "properties": {name: {"type": "string"}}}


def _required_only(name: str) -> dict[str, Any]:
    # Not declared, yet demanded: with additional properties allowed the model must send it.
    return {"type": "object", "required": [name]}


def _dependent(name: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"query": {"type": "string"}},
        "dependentRequired": {"query": [name]},
    }


@pytest.mark.invariant(1)
@pytest.mark.parametrize(
    "shape",
    [_top, _nested, _in_defs, _in_items, _required_only, _dependent],
    ids=["top", "nested", "defs", "items", "required-only", "dependent-required"],
)
@pytest.mark.parametrize("name", IDENTITY_NAMES + RAW_ONLY_NAMES)
def test_a_raw_schema_that_asks_for_identity_anywhere_is_refused(
    shape: Callable[[str], dict[str, Any]],
    name: str,
) -> None:
    with pytest.raises(IdentityParameterError):
        _raw(shape(name))


@pytest.mark.invariant(1)
def test_a_raw_schema_tool_may_declare_identity_trusted_and_the_model_never_sees_it() -> None:
    raw = _raw(
        {
            "type": "object",
            "properties": {"tenant_id": {"type": "string"}, "query": {"type": "string"}},
            "required": ["tenant_id", "query"],
        },
        trusted={"tenant_id": FromPrincipal("tenant_id")},
    )
    assert set(_property_names(dict(raw.spec.input_schema))) == {"query"}
    assert raw.spec.input_schema["required"] == ["query"]


def _raw_whoami(seen: list[dict[str, object]], *, closed: bool) -> Tool:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {"tenant_id": {"type": "string"}, "query": {"type": "string"}},
        "required": ["tenant_id"],
    }
    if closed:
        schema["additionalProperties"] = False

    def whoami(arguments: dict[str, Any], _ctx: ToolContext) -> dict[str, Any]:
        seen.append(arguments)
        return arguments

    return Tool.from_json_schema(
        name="raw.whoami",
        description="Echo what the tool was given.",
        input_schema=schema,
        fn=whoami,
        risk=RiskLevel.L0_PUBLIC_READ,
        trusted={"tenant_id": FromPrincipal("tenant_id")},
    )


@pytest.mark.anyio
@pytest.mark.invariant(1)
@pytest.mark.parametrize("closed", [True, False], ids=["closed-schema", "open-schema"])
async def test_a_model_that_supplies_a_raw_tools_trusted_parameter_is_refused(
    wire: WireCheck,
    closed: bool,
) -> None:
    # Even where the raw schema lets unknown properties through, a trusted name is not
    # silently overwritten: the model is told it may not send it.
    seen: list[dict[str, object]] = []
    registry = Registry()
    registry.register(_raw_whoami(seen, closed=closed))
    call = ToolCall(id="c", name="raw.whoami", arguments={"query": "x", "tenant_id": "t2"})
    envelope = await Gate(registry).handle(call, WHO)
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS
    assert "$.tenant_id" in envelope.field_errors
    assert seen == []
    wire(envelope, call)


@pytest.mark.anyio
@pytest.mark.invariant(1)
@pytest.mark.parametrize("closed", [True, False], ids=["closed-schema", "open-schema"])
async def test_a_raw_tool_receives_the_principals_value_for_its_trusted_parameter(
    closed: bool,
) -> None:
    seen: list[dict[str, object]] = []
    registry = Registry()
    registry.register(_raw_whoami(seen, closed=closed))
    call = ToolCall(id="c", name="raw.whoami", arguments={"query": "x"})
    envelope = await Gate(registry).handle(call, WHO)
    assert envelope.status is Status.OK
    assert seen == [{"query": "x", "tenant_id": "t1"}]
