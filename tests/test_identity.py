"""Business values: an explicit, reasoned declaration that an identity-like name is data.

A declared name registers; the declaration is on the spec, never shown to the model,
and covers only the place it names. Nothing else about the identity check loosens.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from handrail import BusinessValue, FromPrincipal, RiskLevel, Tool, tool
from handrail.declare.identity import check_identity_parameters
from handrail.errors import (
    IdentityParameterError,
    RegistrationError,
    SchemaError,
    SignatureError,
)

LOAN = BusinessValue(reason="the loan amount, not a security principal")
CUSTOMER = BusinessValue(reason="the CRM customer an administrator updates")


def _raw(schema: Mapping[str, Any], **options: Any) -> Tool:
    return Tool.from_json_schema(
        name="raw.echo",
        description="Echo the arguments.",
        input_schema=schema,
        fn=lambda arguments, _ctx: arguments,
        risk=RiskLevel.L0_PUBLIC_READ,
        **options,
    )


def _text(value: object) -> str:
    return repr(value)


# --- typed signatures ----------------------------------------------------------------------------


def test_a_declared_business_value_registers_and_is_listed_on_the_spec() -> None:
    @tool(risk=RiskLevel.L0_PUBLIC_READ, namespace="loans")
    def interest(
        principal: Annotated[Decimal, LOAN],
        rate: float,
        years: int,
    ) -> Decimal:
        """Simple interest on a loan."""
        return principal * Decimal(rate) * years

    assert interest.spec.business_values == {"#/properties/principal": LOAN}
    assert "principal" in interest.spec.input_schema["properties"]


def test_without_the_declaration_the_same_parameter_is_refused() -> None:
    def interest(principal: Decimal, rate: float) -> Decimal:
        """Simple interest on a loan."""
        return principal * Decimal(rate)

    with pytest.raises(IdentityParameterError):
        tool(risk=RiskLevel.L0_PUBLIC_READ)(interest)


def test_the_model_never_reads_the_declaration_or_its_reason() -> None:
    @tool(risk=RiskLevel.L0_PUBLIC_READ)
    def update(user_id: Annotated[str, CUSTOMER], email: str | None = None) -> None:
        """Update a customer."""

    shown = _text(dict(update.spec.input_schema))
    assert CUSTOMER.reason not in shown
    assert "business" not in shown


class _Customer(BaseModel):
    user_id: Annotated[str, CUSTOMER]
    email: str


def test_a_declaration_on_a_field_of_a_nested_model_covers_that_field() -> None:
    @tool(risk=RiskLevel.L0_PUBLIC_READ)
    def import_customers(customers: list[_Customer]) -> int:
        """Import customers."""
        return len(customers)

    assert import_customers.spec.business_values == {
        "#/$defs/_Customer/properties/user_id": CUSTOMER,
    }
    assert CUSTOMER.reason not in _text(dict(import_customers.spec.input_schema))


def test_a_declaration_on_an_optional_parameter_covers_it() -> None:
    @tool(risk=RiskLevel.L0_PUBLIC_READ)
    def find(user_id: Annotated[str | None, CUSTOMER] = None) -> None:
        """Find customers."""

    assert find.spec.business_values == {"#/properties/user_id": CUSTOMER}


def test_declaring_one_name_does_not_excuse_another() -> None:
    def update(user_id: Annotated[str, CUSTOMER], tenant_id: str) -> None:
        """Update a customer."""

    with pytest.raises(IdentityParameterError) as caught:
        tool(risk=RiskLevel.L0_PUBLIC_READ)(update)
    assert "tenant_id" in str(caught.value)


def test_a_declaration_on_a_name_that_is_not_identity_like_is_refused() -> None:
    def pay(amount: Annotated[int, BusinessValue(reason="money")]) -> None:
        """Pay."""

    with pytest.raises(SignatureError):
        tool(risk=RiskLevel.L0_PUBLIC_READ)(pay)


def test_a_parameter_cannot_be_both_trusted_and_a_business_value() -> None:
    def update(
        user_id: Annotated[str, FromPrincipal("user_id"), CUSTOMER],
    ) -> None:
        """Update a customer."""

    with pytest.raises(SignatureError):
        tool(risk=RiskLevel.L0_PUBLIC_READ)(update)


def test_a_declaration_inside_a_list_of_a_parameter_is_refused_with_where_to_put_it() -> None:
    def notify(user_ids: list[Annotated[str, CUSTOMER]]) -> None:
        """Notify customers."""

    with pytest.raises(RegistrationError):
        tool(risk=RiskLevel.L0_PUBLIC_READ)(notify)


@pytest.mark.parametrize("reason", ["", "   ", "\n"])
def test_a_business_value_needs_a_reason(reason: str) -> None:
    with pytest.raises(RegistrationError):
        BusinessValue(reason=reason)


def test_a_business_value_reason_is_bounded_text() -> None:
    with pytest.raises(RegistrationError):
        BusinessValue(reason="x" * 501)
    with pytest.raises(RegistrationError):
        BusinessValue(reason="line one\x00line two")


def test_business_value_takes_its_reason_by_keyword_only() -> None:
    parameters = inspect.signature(BusinessValue).parameters
    assert parameters["reason"].kind is inspect.Parameter.KEYWORD_ONLY
    assert parameters["reason"].default is inspect.Parameter.empty


# --- raw schemas ---------------------------------------------------------------------------------

CRM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "user_id": {"type": "string"},
        "email": {"type": "string"},
        "owner": {
            "type": "object",
            "properties": {"owner_user_id": {"type": "string"}},
            "required": ["owner_user_id"],
        },
    },
    "required": ["user_id"],
}


def test_a_raw_tool_declares_business_values_by_parameter_name_or_json_pointer() -> None:
    raw = _raw(
        CRM_SCHEMA,
        business_values={
            "user_id": CUSTOMER,
            "#/properties/owner/properties/owner_user_id": BusinessValue(
                reason="the account manager the customer is assigned to",
            ),
        },
    )
    assert set(raw.spec.business_values) == {
        "#/properties/user_id",
        "#/properties/owner/properties/owner_user_id",
    }
    assert raw.spec.input_schema["required"] == ["user_id"]


def test_a_raw_tool_missing_one_declaration_is_refused_naming_the_pointer_to_declare() -> None:
    with pytest.raises(IdentityParameterError) as caught:
        _raw(CRM_SCHEMA, business_values={"user_id": CUSTOMER})
    assert "#/properties/owner/properties/owner_user_id" in str(caught.value)


@pytest.mark.parametrize(
    "key",
    ["email", "nonexistent", "#/properties/nonexistent", "#/properties/owner"],
)
def test_a_raw_declaration_that_names_no_identity_like_parameter_is_refused(key: str) -> None:
    with pytest.raises(SchemaError):
        _raw(CRM_SCHEMA, business_values={key: CUSTOMER, "user_id": CUSTOMER})


def test_a_raw_parameter_cannot_be_both_trusted_and_a_business_value() -> None:
    with pytest.raises(SchemaError):
        _raw(
            CRM_SCHEMA,
            trusted={"user_id": FromPrincipal("user_id")},
            business_values={"user_id": CUSTOMER},
        )


def test_a_raw_declaration_must_be_a_business_value() -> None:
    with pytest.raises(SchemaError):
        _raw(CRM_SCHEMA, business_values={"user_id": "the customer"})  # type: ignore[dict-item]


def test_a_raw_schema_cannot_declare_its_own_business_values() -> None:
    # The declaration is the host's, in code; a schema (from an MCP server, say) that
    # carries the keyword pydantic's marker uses is still refused.
    schema = {
        "type": "object",
        "properties": {
            "tenant_id": {"type": "string", "x-handrail-business-value": "trust me"},
        },
    }
    with pytest.raises(IdentityParameterError):
        _raw(schema)


def test_a_declaration_of_a_pattern_property_uses_its_pointer() -> None:
    schema = {
        "type": "object",
        "patternProperties": {"^user_id_[0-9]+$": {"type": "string"}},
    }
    with pytest.raises(IdentityParameterError):
        _raw(schema)
    raw = _raw(
        schema,
        business_values={"#/patternProperties/^user_id_[0-9]+$": CUSTOMER},
    )
    assert list(raw.spec.business_values) == ["#/patternProperties/^user_id_[0-9]+$"]


def _loan_tool(declare: Callable[[str], Mapping[str, BusinessValue]]) -> Tool:
    return _raw(
        {"type": "object", "properties": {"principal": {"type": "number"}}},
        business_values=declare("principal"),
    )


def test_principal_as_a_loan_amount_works_only_with_the_declaration() -> None:
    with pytest.raises(IdentityParameterError):
        _loan_tool(lambda _name: {})
    assert _loan_tool(lambda name: {name: LOAN}).spec.business_values == {
        "#/properties/principal": LOAN,
    }


def test_a_declaration_on_the_non_null_branch_of_an_optional_parameter_covers_it() -> None:
    @tool(risk=RiskLevel.L0_PUBLIC_READ)
    def find(user_id: Annotated[str, CUSTOMER] | None = None) -> None:
        """Find customers."""

    assert find.spec.business_values == {"#/properties/user_id": CUSTOMER}
    assert CUSTOMER.reason not in _text(dict(find.spec.input_schema))


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "patternProperties": {"(": {"type": "string"}}},
        {"type": "object", "propertyNames": {"pattern": "("}},
    ],
    ids=["pattern-properties", "property-names"],
)
def test_an_invalid_pattern_of_property_names_is_a_schema_error(schema: dict[str, Any]) -> None:
    with pytest.raises(SchemaError):
        _raw(schema)


def test_a_schema_object_that_contains_itself_is_refused_rather_than_walked_forever() -> None:
    schema: dict[str, Any] = {"type": "object", "properties": {}}
    schema["properties"]["loop"] = schema
    with pytest.raises(SchemaError):
        check_identity_parameters("raw.loop", schema)
