"""A schema that asks the model who it is never registers; trusted parameters are filled.

Identity, tenant and authority come from the Principal (invariant 1). Asking for them
anywhere in a schema (top level, nested models, `$defs`, array items, `required`)
is refused at registration; declaring them `FromPrincipal` hides them from the model,
and a model that supplies one anyway is refused.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping
from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, Field

from handrail import (
    BusinessValue,
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
from handrail.authz.policy import Outcome, PolicyEngine, Resolved, Rule
from handrail.errors import IdentityParameterError
from handrail.testing import MemoryAuditSink

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


# --- stricter names: look-alikes, compounds, patterns (issue 13, item 1) -------------------------

# Each spells an identity name with letters of another script, as a reviewer would read it.
LOOK_ALIKES = [
    "t\u0435nant_id",  # Cyrillic small ie
    "us\u0435r_id",  # Cyrillic small ie
    "r\u043ele",  # Cyrillic small o
    "is_\u0430dmin",  # Cyrillic small a
    "\u03c1rincipal",  # Greek small rho
    "tenant_\u0456d",  # Cyrillic small Byelorussian-Ukrainian i
    "\u03a4ENANT_ID",  # Greek capital tau
    "\u0422enant",  # Cyrillic capital te
    "\u0440ermissions",  # Cyrillic small er
    "org_\u0456d",  # Cyrillic small Byelorussian-Ukrainian i
    "ten\u0101nt_id",  # a with macron: marks are dropped
]
# Identity words inside longer names.
COMPOUNDS = [
    "owner_user_id",
    "ownerUserId",
    "customer_tenant_id",
    "targetTenant",
    "user_role",
    "granted_permissions",
    "acting_as_user",
    "super_user",
    "is_super_admin",
    "admin_mode",
    "principal_id",
    "owner_principal",
]
RAW_ONLY_COMPOUNDS = [
    "x-tenant",
    "X-Tenant-ID",
    "x-user-id",
    "owner.userId",
    "owner_ten\u200bant",  # an invisible zero-width space inside
]
# Ordinary names that must keep working without any declaration.
ORDINARY_NAMES = [
    "username",
    "username_pattern",
    "user_query",
    "user_message",
    "user_name",
    "lieutenant",
    "maintenant",
    "order_id",
    "customer_id",
    "owner",
    "organization",
    "role_description",
    "permission_note",
    "scope",
    "tenant_email",
    "principal_amount",
    "secretTenantMarker",
]


@pytest.mark.invariant(1)
@pytest.mark.parametrize("name", LOOK_ALIKES + COMPOUNDS)
def test_an_identity_name_in_disguise_is_refused_for_a_typed_parameter(name: str) -> None:
    with pytest.raises(IdentityParameterError):
        tool(risk=RiskLevel.L0_PUBLIC_READ)(_function_with_parameter(name))


@pytest.mark.invariant(1)
@pytest.mark.parametrize("shape", [_top, _nested, _in_defs, _in_items, _required_only])
@pytest.mark.parametrize("name", LOOK_ALIKES + COMPOUNDS + RAW_ONLY_COMPOUNDS)
def test_an_identity_name_in_disguise_is_refused_anywhere_in_a_raw_schema(
    shape: Callable[[str], dict[str, Any]],
    name: str,
) -> None:
    with pytest.raises(IdentityParameterError):
        _raw(shape(name))


@pytest.mark.parametrize("name", ORDINARY_NAMES)
def test_ordinary_names_that_contain_identity_words_register_without_a_declaration(
    name: str,
) -> None:
    assert name in _raw(_top(name)).spec.input_schema["properties"]
    registered = tool(risk=RiskLevel.L0_PUBLIC_READ)(_function_with_parameter(name))
    assert name in registered.spec.input_schema["properties"]


def _pattern_properties(pattern: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "labels": {"type": "object", "patternProperties": {pattern: {"type": "string"}}},
        },
    }


def _keys_named_by(names: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "labels": {
                "type": "object",
                "additionalProperties": {"type": "string"},
                "propertyNames": names,
            },
        },
    }


IDENTITY_PATTERNS = [
    "^tenant_id$",
    "^(tenant|org)_id$",
    "user_?id",
    "^ten[a]nt$",
    "^(?:role|roles)$",
    "^is_?admin$",
    "^x-tenant",
]
GENERIC_PATTERNS = ["^[a-z_]+$", ".*", "^[A-Za-z][A-Za-z0-9_-]*$", "^x-", "^[0-9]+$"]
IDENTITY_NAME_SCHEMAS: list[dict[str, Any]] = [
    {"enum": ["tenant_id", "note"]},
    {"const": "user_id"},
    {"pattern": "^role$"},
    {"anyOf": [{"const": "note"}, {"const": "is_admin"}]},
    {"pattern": "^(tenant|order)_id$"},
]
GENERIC_NAME_SCHEMAS: list[dict[str, Any]] = [
    {"maxLength": 32},
    {"pattern": "^[a-z_]+$"},
    {"format": "uuid"},
    {"enum": ["note", "colour"]},
]


@pytest.mark.invariant(1)
@pytest.mark.parametrize("pattern", IDENTITY_PATTERNS)
def test_pattern_properties_that_admit_identity_names_are_refused(pattern: str) -> None:
    with pytest.raises(IdentityParameterError):
        _raw(_pattern_properties(pattern))


@pytest.mark.parametrize("pattern", GENERIC_PATTERNS)
def test_pattern_properties_for_arbitrary_keys_are_not_identity(pattern: str) -> None:
    _raw(_pattern_properties(pattern))


@pytest.mark.invariant(1)
@pytest.mark.parametrize("names", IDENTITY_NAME_SCHEMAS, ids=str)
def test_property_names_that_admit_identity_names_are_refused(names: dict[str, Any]) -> None:
    with pytest.raises(IdentityParameterError):
        _raw(_keys_named_by(names))


@pytest.mark.parametrize("names", GENERIC_NAME_SCHEMAS, ids=str)
def test_property_names_that_do_not_single_out_identity_are_accepted(
    names: dict[str, Any],
) -> None:
    _raw(_keys_named_by(names))


@pytest.mark.invariant(1)
def test_a_typed_mapping_whose_keys_are_identity_names_is_refused() -> None:
    def tag(labels: dict[Literal["tenant_id", "note"], str]) -> object:
        """Tag something."""
        return labels

    with pytest.raises(IdentityParameterError):
        tool(risk=RiskLevel.L0_PUBLIC_READ)(tag)


def test_the_registration_error_names_the_declaration_to_use() -> None:
    with pytest.raises(IdentityParameterError) as raw_error:
        _raw(_top("user_id"))
    assert "business_values" in str(raw_error.value)
    assert "#/properties/user_id" in str(raw_error.value)
    with pytest.raises(IdentityParameterError) as typed_error:
        tool(risk=RiskLevel.L0_PUBLIC_READ)(_function_with_parameter("user_id"))
    assert "BusinessValue(reason=" in str(typed_error.value)


# --- a declared business value is data, never identity (issue 13, item 1) -------------------------

CUSTOMERS: dict[tuple[str, str], dict[str, str]] = {
    ("t1", "cust-7"): {"user_id": "cust-7", "email": "old@example.com"},
    ("t2", "cust-9"): {"user_id": "cust-9", "email": "other@example.com"},
}
ADMIN = Principal(user_id="admin-ann", tenant_id="t1", permissions=frozenset({"crm.write"}))
CUSTOMER = BusinessValue(reason="the CRM customer an administrator updates")


def _crm_tools(seen: list[tuple[str, str, str, str]]) -> list[Tool]:
    @tool(risk=RiskLevel.L1_INTERNAL_READ, namespace="crm", permissions={"crm.write"})
    def touch(user_id: Annotated[str, CUSTOMER], ctx: ToolContext) -> str:
        """Mark a customer as reviewed."""
        seen.append(("typed", user_id, ctx.principal.user_id, ctx.principal.tenant_id))
        return user_id

    def touch_raw(arguments: dict[str, Any], ctx: ToolContext) -> str:
        seen.append(("raw", arguments["user_id"], ctx.principal.user_id, ctx.principal.tenant_id))
        return str(arguments["user_id"])

    raw = Tool.from_json_schema(
        name="crm.touch_raw",
        description="Mark a customer as reviewed.",
        input_schema={
            "type": "object",
            "properties": {"user_id": {"type": "string"}, "tenant_id": {"type": "string"}},
            "required": ["user_id"],
        },
        fn=touch_raw,
        risk=RiskLevel.L1_INTERNAL_READ,
        permissions={"crm.write"},
        business_values={
            "user_id": CUSTOMER,
            "tenant_id": BusinessValue(reason="the customer's own account in the CRM"),
        },
    )
    return [touch, raw]


def _crm_gate(seen: list[tuple[str, str, str, str]]) -> tuple[Gate, MemoryAuditSink]:
    def load(principal: Principal, arguments: Any) -> Resolved | None:
        user_id = arguments["user_id"] if isinstance(arguments, dict) else arguments.user_id
        found = CUSTOMERS.get((principal.tenant_id, user_id))
        return None if found is None else Resolved(key=f"customer:{user_id}", value=found)

    rules = [
        Rule(name=f"{name}-admins", tool=name, outcome=Outcome.ALLOW, reason="administrators")
        for name in ("crm.touch", "crm.touch_raw")
    ]
    policy = PolicyEngine(rules, resolvers={"crm.touch": load, "crm.touch_raw": load})
    sink = MemoryAuditSink()
    registry = Registry()
    for crm_tool in _crm_tools(seen):
        registry.register(crm_tool)
    return Gate(registry, policy=policy, audit=sink), sink


@pytest.mark.anyio
@pytest.mark.invariant(1)
@pytest.mark.parametrize("name", ["crm.touch", "crm.touch_raw"])
async def test_a_declared_user_id_of_another_tenants_customer_is_not_found(
    wire: WireCheck,
    name: str,
) -> None:
    seen: list[tuple[str, str, str, str]] = []
    gate, _ = _crm_gate(seen)
    call = ToolCall(id="c1", name=name, arguments={"user_id": "cust-9"})
    envelope = await gate.handle(call, ADMIN)
    assert envelope.error_type is ErrorCode.NOT_FOUND
    assert seen == []
    wire(envelope, call)


@pytest.mark.anyio
@pytest.mark.invariant(1)
@pytest.mark.parametrize("name", ["crm.touch", "crm.touch_raw"])
async def test_a_declared_user_id_is_passed_as_data_and_never_becomes_the_caller(
    name: str,
) -> None:
    seen: list[tuple[str, str, str, str]] = []
    gate, sink = _crm_gate(seen)
    arguments: dict[str, str] = {"user_id": "cust-7"}
    if name == "crm.touch_raw":
        arguments["tenant_id"] = "t2"  # a declared business value: the CRM's, not the caller's
    call = ToolCall(id="c1", name=name, arguments=arguments)
    envelope = await gate.handle(call, ADMIN)
    assert envelope.status is Status.OK
    assert [entry[1:] for entry in seen] == [("cust-7", "admin-ann", "t1")]
    call_events = [event for event in sink.events if event.tool_call_id == "c1"]
    assert call_events
    assert {(event.user_id, event.tenant_id) for event in call_events} == {("admin-ann", "t1")}
