from __future__ import annotations

import pytest

from handrail.errors import SchemaError
from handrail.schema import compile_validator, compile_validator_map, json_path


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
