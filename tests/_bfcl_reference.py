"""Reference BFCL answers built from the possible answers, and ways to spoil them.

`reference_answers` answers every question with an acceptable value for each expected
parameter (the first one the tool's schema accepts), every expected call once, no
call where none is expected and the first expected-looking call where some is. The
few questions whose possible answers no schema-valid call can meet are listed in
`UNANSWERABLE`, each with the reason, so that a test pins them.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema_rs

from handrail.eval._bfcl_data import Expectation, ExpectedCall, Question
from handrail.eval._bfcl_tools import _LANGUAGES, to_json_schema
from handrail.eval.bfcl import Answer, ProposedCall

_OMITTED = ""


def _value(pattern: Any) -> Any:
    """A concrete value a pattern accepts: a dict pattern's first non-omitted values."""
    if isinstance(pattern, dict):
        built = {}
        for key, listed in pattern.items():
            options = listed if isinstance(listed, list) else [listed]
            given = [o for o in options if o != _OMITTED]
            if given:
                built[key] = _value(given[0])
        return built
    if isinstance(pattern, list):
        return [_value(item) for item in pattern]
    return pattern


def reference_arguments(expected: ExpectedCall, schema: dict[str, Any]) -> dict[str, Any]:
    """For each parameter, the first acceptable value its schema accepts (else the first)."""
    properties = schema.get("properties", {})
    required = set(schema.get("required", []))
    arguments: dict[str, Any] = {}
    for name, options in expected.params.items():
        values = [_value(o) for o in options if o != _OMITTED]
        valid = []
        if name in properties:
            valid = [v for v in values if jsonschema_rs.validator_for(properties[name]).is_valid(v)]
        if valid:
            arguments[name] = valid[0]
        elif values and (_OMITTED not in options or name in required):
            arguments[name] = values[0]  # nothing acceptable is valid: see UNANSWERABLE
    return arguments


_PLACEHOLDERS = {
    "string": "x",
    "integer": 1,
    "number": 1,
    "boolean": True,
    "array": [],
    "object": {},
}


def some_arguments(schema: dict[str, Any]) -> dict[str, Any]:
    """Arguments a schema accepts: each required parameter with a placeholder of its type."""
    arguments: dict[str, Any] = {}
    for name in schema.get("required", []):
        sub = schema["properties"][name]
        kind = sub.get("type", "string")
        kind = kind[0] if isinstance(kind, list) else kind
        arguments[name] = sub["enum"][0] if "enum" in sub else _PLACEHOLDERS[kind]
    return arguments


def _schema(question: Question, function: str) -> dict[str, Any]:
    """The function's parameters as the question's tool has them (top level unclosed)."""
    document = next(f for f in question.functions if f["name"] == function)
    language = _LANGUAGES.get(question.category)
    return to_json_schema(document["parameters"], where=function, language=language)


def reference_answers(questions: tuple[Question, ...]) -> dict[str, Answer]:
    """An answer to every question that the matcher should accept (but for UNANSWERABLE)."""
    answers = {}
    for question in questions:
        calls = []
        if question.expectation is Expectation.CALLS:
            for expected in question.expected:
                arguments = reference_arguments(expected, _schema(question, expected.function))
                calls.append(ProposedCall(name=expected.function, arguments=json.dumps(arguments)))
        elif question.expectation is Expectation.SOME_CALL:
            function = question.functions[0]["name"]
            arguments = some_arguments(_schema(question, function))
            calls.append(ProposedCall(name=function, arguments=json.dumps(arguments)))
        answers[question.id] = Answer(calls=tuple(calls))
    return answers


UNANSWERABLE = {
    # No acceptable value in BFCL's possible answer passes the function's own schema,
    # which Handrail's gate enforces (BFCL's checker does not look at enums).
    "parallel_multiple_21": "the answer is a Python expression where an array is declared",
    "parallel_multiple_94": "strings where the function declares an array of integers",
    "live_simple_71-35-0": "a value outside the declared enum",
    "live_multiple_87-38-4": "a value outside the declared enum",
    "live_multiple_152-58-6": "a value outside the declared enum",
    "live_multiple_507-149-4": "a required parameter the answer leaves out",
    "live_multiple_552-153-1": "a boolean where a string is declared",
    "live_multiple_595-158-1": "an integer where a string is declared",
    "live_multiple_596-158-2": "an integer where a string is declared",
    "live_multiple_731-167-2": "a boolean where a string is declared",
    "live_multiple_733-167-4": "a boolean where a string is declared",
    "live_multiple_735-167-6": "a boolean where a string is declared",
    "live_multiple_750-169-5": "a value outside the declared enum",
    "live_multiple_756-169-11": "an enum value in the wrong case",
    "live_multiple_835-178-10": "a value outside the declared enum",
    "live_multiple_862-181-3": "a parameter the function does not declare",
    "live_multiple_871-182-8": "a value outside the declared enum",
    "live_multiple_947-197-0": "a value outside the declared enum",
    "live_multiple_964-207-0": "an undeclared parameter for a required one",
    "live_parallel_multiple_2-2-0": "a value outside the declared enum",
}
"""Questions whose possible answers no schema-valid call meets, with why (bfcl-eval 2026.3.23)."""
