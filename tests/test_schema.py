from __future__ import annotations

from typing import Any

import pytest

from handrail import ErrorCode, Gate, Principal, Registry, RiskLevel, Tool, ToolCall
from handrail.declare.schema import (
    check_identity_parameters,
    compile_validator,
    compile_validator_map,
)
from handrail.errors import SchemaError
from handrail.paths import json_path


def test_a_validator_map_checks_a_value_against_one_part_of_a_schema() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}}
    validators = compile_validator_map(schema)
    part = validators["#/properties/n"]
    assert part.is_valid(3)
    assert not part.is_valid(0)


@pytest.mark.parametrize("compile_", [compile_validator, compile_validator_map])
def test_a_schema_the_library_refuses_is_a_schema_error(compile_: object) -> None:
    with pytest.raises(SchemaError):
        compile_({"type": "object", "properties": {"x": {"type": "nonsense"}}})  # type: ignore[operator]


def test_json_paths_quote_keys_that_are_not_identifiers() -> None:
    assert json_path(["items", 2, "name"]) == "$.items[2].name"
    assert json_path(["a b", "ok"]) == '$["a b"].ok'


# --- boolean schemas (issue 13, item 5) ---------------------------------------------------------


@pytest.mark.parametrize("schema", [True, False])
@pytest.mark.parametrize("compile_", [compile_validator, compile_validator_map])
def test_a_boolean_schema_where_an_object_schema_is_expected_is_a_schema_error(
    compile_: object,
    schema: bool,
) -> None:
    with pytest.raises(SchemaError):
        compile_(schema)  # type: ignore[operator]


@pytest.mark.parametrize("schema", [True, False, None, [], "object", 3])
def test_a_raw_tool_whose_parameters_are_not_an_object_schema_is_a_schema_error(
    schema: object,
) -> None:
    with pytest.raises(SchemaError):
        Tool.from_json_schema(
            name="raw.bool",
            description="Parameters given as a boolean schema.",
            input_schema=schema,  # type: ignore[arg-type]
            fn=lambda arguments, _ctx: arguments,
            risk=RiskLevel.L0_PUBLIC_READ,
        )


@pytest.mark.parametrize("schema", [True, False, None, [], "object"])
def test_the_identity_check_refuses_a_schema_that_is_not_an_object_schema(
    schema: object,
) -> None:
    with pytest.raises(SchemaError):
        check_identity_parameters("raw.bool", schema)  # type: ignore[arg-type]


# --- enum errors (issue 13, item 3) ---------------------------------------------------------------

COLOURS = ["Red", "Green", "Blue", "Cyan", "Magenta", "Yellow", "Black"]


def _enum_error(options: list[object], value: object) -> str:
    validator = compile_validator(
        {"type": "object", "properties": {"colour": {"enum": options}}},
    )
    errors = validator.errors({"colour": value})
    assert list(errors) == ["$.colour"]
    return errors["$.colour"]


def test_an_enum_error_lists_every_allowed_value_so_the_model_can_repair_its_call() -> None:
    message = _enum_error(list(COLOURS), "Purple")
    for colour in COLOURS:
        assert f'"{colour}"' in message
    assert "other candidates" not in message


def test_an_enum_error_of_a_long_enum_is_bounded_and_says_how_many_values_it_left_out() -> None:
    options: list[object] = [f"value-{index:03d}" for index in range(300)]
    message = _enum_error(options, "nope")
    assert len(message) <= 400
    listed = [option for option in options if f'"{option}"' in message]
    assert listed == options[: len(listed)]
    assert len(listed) >= 10
    assert f"{len(options) - len(listed)} more" in message


def test_an_enum_error_shows_numbers_and_null_as_json() -> None:
    message = _enum_error([1, 2.5, None, True, "x"], "y")
    for shown in ("1", "2.5", "null", "true", '"x"'):
        assert shown in message


def test_a_case_only_mismatch_is_refused_with_a_hint_naming_the_value_with_the_right_case() -> None:
    validator = compile_validator(
        {
            "type": "object",
            "properties": {"colour": {"enum": COLOURS}, "size": {"enum": ["S", "M", "L", "XL"]}},
        },
    )
    errors = validator.errors({"colour": "magenta", "size": "xl"})
    assert set(errors) == {"$.colour", "$.size"}
    assert '"Magenta"' in errors["$.colour"].split("must be one of")[0]
    assert '"XL"' in errors["$.size"].split("must be one of")[0]


def test_a_value_that_differs_in_more_than_case_gets_no_case_hint() -> None:
    message = _enum_error(list(COLOURS), "Purple")
    hint, _, allowed = message.partition("must be one of")
    assert allowed
    assert not any(f'"{colour}"' in hint for colour in COLOURS)


@pytest.mark.anyio
async def test_the_gate_refuses_a_case_only_mismatch_with_the_hint_in_the_field_error() -> None:
    received: list[dict[str, Any]] = []
    raw = Tool.from_json_schema(
        name="paint.pick",
        description="Pick a colour.",
        input_schema={
            "type": "object",
            "properties": {"colour": {"enum": COLOURS}},
            "required": ["colour"],
        },
        fn=lambda arguments, _ctx: received.append(arguments),
        risk=RiskLevel.L0_PUBLIC_READ,
    )
    registry = Registry()
    registry.register(raw)
    who = Principal(user_id="u", tenant_id="t")
    call = ToolCall(id="c1", name="paint.pick", arguments={"colour": "red"})
    envelope = await Gate(registry).handle(call, who)
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS
    hint, _, allowed = envelope.field_errors["$.colour"].partition("must be one of")
    assert '"Red"' in hint
    assert all(f'"{colour}"' in allowed for colour in COLOURS)
    assert received == []
