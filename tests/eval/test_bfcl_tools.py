"""BFCL functions as Handrail tools: types to JSON Schema, names, and reading the data."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from handrail.clock import FixedClock
from handrail.errors import ConfigurationError
from handrail.eval._bfcl_data import Expectation, Question, data_folder, load_questions
from handrail.eval._bfcl_tools import handrail_name, question_tools, to_json_schema


def test_python_types_become_json_schema_types() -> None:
    document = {
        "type": "dict",
        "properties": {
            "ratio": {"type": "float", "description": "A ratio.", "default": 0.5},
            "point": {"type": "tuple", "items": {"type": "integer"}},
            "options": {"type": "dict", "properties": {"deep": {"type": "boolean"}}},
            "anything": {"type": "any"},
            "limit": {"type": "integer", "default": None},
            "kind": {"type": "string", "enum": ["a", "b"], "default": None},
            "when": {"type": "string", "format": "date"},
        },
        "required": ["ratio", "ghost"],
    }
    assert to_json_schema(document, where="f") == {
        "type": "object",
        "properties": {
            "ratio": {"type": "number", "description": "A ratio.", "default": 0.5},
            "point": {"type": "array", "items": {"type": "integer"}},
            "options": {"type": "object", "properties": {"deep": {"type": "boolean"}}},
            "anything": {},
            "limit": {"type": ["integer", "null"], "default": None},
            "kind": {"type": ["string", "null"], "enum": ["a", "b", None], "default": None},
            "when": {"type": "string", "format": "date"},
        },
        "required": ["ratio"],
    }


def test_java_and_javascript_parameters_may_also_be_written_as_program_text() -> None:
    schema = to_json_schema(
        {"type": "HashMap", "description": "Params."}, where="f", language="Java"
    )
    assert schema == {
        "type": ["object", "string"],
        "description": (
            "Params. (Java HashMap, or a variable or expression of the program as a string)"
        ),
    }
    assert to_json_schema({"type": "String"}, where="f", language="Java") == {"type": "string"}


def test_an_unknown_type_is_refused_with_its_place() -> None:
    with pytest.raises(ConfigurationError, match=r"f\.x: BFCL type 'complex'"):
        to_json_schema({"type": "dict", "properties": {"x": {"type": "complex"}}}, where="f")


def test_names_handrail_or_providers_cannot_carry_get_close_unique_substitutes() -> None:
    taken: set[str] = set()
    assert handrail_name("math.factorial", taken) == "math.factorial"
    assert handrail_name("__get_all_user_list", taken) == "get_all_user_list"
    assert handrail_name("get-all-user-list", taken) == "get-all-user-list_2"
    long = "website_configuration_api.WebsiteConfigurationApi.rename_website_and_more_words"
    assert handrail_name(long, taken) == "WebsiteConfigurationApi.rename_website_and_more_words"
    assert handrail_name("9lives", taken) == "f_9lives"


def _question(functions: list[dict[str, object]], category: str = "simple_python") -> Question:
    return Question(
        id="q",
        category=category,
        messages=(("user", "hi"),),
        functions=tuple(functions),
        expectation=Expectation.NO_CALL,
    )


def test_a_question_s_functions_are_registered_read_only_with_closed_arguments() -> None:
    question = _question(
        [
            {
                "name": "__book_room",
                "description": "Book.",
                "parameters": {
                    "type": "dict",
                    "properties": {"user_id": {"type": "string"}, "room": {"type": "string"}},
                    "required": ["room"],
                },
            },
        ]
    )
    tools = question_tools(question, clock=FixedClock())
    assert tools.by_function == {"__book_room": "book_room"}
    tool = tools.lookup("__book_room")
    assert tool is not None
    assert tools.lookup("book_room") is None  # calls name BFCL's function, not the tool
    assert tool.spec.input_schema["additionalProperties"] is False
    # an identity-like name is the question's data, declared as such, not refused
    assert list(tool.spec.business_values) == ["#/properties/user_id"]
    assert tool.schema_errors({"room": "a", "floor": 2}) == {"$.floor": "is not allowed"}
    assert [spec.name for spec in tools.specs()] == ["book_room"]


def test_a_function_offered_twice_is_refused() -> None:
    function = {"name": "f", "description": "F.", "parameters": {"type": "dict", "properties": {}}}
    with pytest.raises(ConfigurationError, match="offered twice"):
        question_tools(_question([function, function]), clock=FixedClock())


def test_the_data_folder_is_bfcl_eval_s_and_its_code_is_not_imported() -> None:
    folder = data_folder()
    assert (folder / "BFCL_v4_simple_python.json").is_file()
    assert "bfcl_eval" not in sys.modules


def _write(folder: Path, name: str, entries: list[dict[str, object]]) -> None:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(e) + "\n" for e in entries), encoding="utf-8")


def test_questions_are_joined_to_their_answers_and_an_empty_answer_list_is_an_empty_list(
    tmp_path: Path,
) -> None:
    question = {
        "id": "simple_python_0",
        "question": [
            [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Go"}]
        ],
        "function": [{"name": "f", "parameters": {"type": "dict", "properties": {}}}],
    }
    _write(tmp_path, "BFCL_v4_simple_python.json", [question])
    _write(
        tmp_path,
        "possible_answer/BFCL_v4_simple_python.json",
        [{"id": "simple_python_0", "ground_truth": [{"f": {"tags": [], "n": [1, ""]}}]}],
    )
    [loaded] = load_questions(["simple_python"], folder=tmp_path)
    assert loaded.messages == (("system", "Be brief."), ("user", "Go"))
    assert loaded.expected[0].params == {"tags": ([],), "n": (1, "")}


def test_a_question_without_a_possible_answer_is_refused(tmp_path: Path) -> None:
    question = {"id": "multiple_0", "question": [[]], "function": []}
    _write(tmp_path, "BFCL_v4_multiple.json", [question])
    _write(tmp_path, "possible_answer/BFCL_v4_multiple.json", [])
    with pytest.raises(ConfigurationError, match="multiple_0: no possible answer"):
        load_questions(["multiple"], folder=tmp_path)


def test_a_multi_turn_question_is_refused(tmp_path: Path) -> None:
    question = {"id": "irrelevance_0", "question": [[], []], "function": []}
    _write(tmp_path, "BFCL_v4_irrelevance.json", [question])
    with pytest.raises(ConfigurationError, match="not a single-turn question"):
        load_questions(["irrelevance"], folder=tmp_path)


def test_a_limit_below_one_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="at least 1"):
        load_questions(["irrelevance"], limit=0)


def test_parameters_that_are_not_an_object_are_refused() -> None:
    function = {"name": "f", "description": "F.", "parameters": ["x"]}
    with pytest.raises(ConfigurationError, match="the parameters are not an object"):
        question_tools(_question([function]), clock=FixedClock())
