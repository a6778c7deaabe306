"""A BFCL question's functions as Handrail tools: JSON Schema from BFCL's types, a registry.

BFCL documents parameters in a JSON-Schema-like dialect with Python, Java and
JavaScript type names (`dict`, `float`, `tuple`, `HashMap`, `any`, ...). Each function
becomes a read-only tool registered in a registry of the question's own, so that the
proposed calls meet the same lookup, JSON syntax and JSON Schema stages as any call.
Function names Handrail or a provider cannot carry get a close, unique substitute.
The tools never run: their implementation refuses to.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from handrail.adapters import to_wire_name
from handrail.clock import Clock
from handrail.context import ToolContext
from handrail.declare.definition import Tool
from handrail.declare.identity import find_identity_names
from handrail.declare.registry import Registry
from handrail.errors import ConfigurationError
from handrail.eval._bfcl_data import Question
from handrail.principal import Principal
from handrail.spec import BusinessValue, RiskLevel, ToolSpec

__all__ = ["QuestionTools", "question_tools", "to_json_schema"]

_TYPES: Final[Mapping[str, str | None]] = {
    # Python, and BFCL's own names
    "dict": "object",
    "object": "object",
    "float": "number",
    "number": "number",
    "integer": "integer",
    "int": "integer",
    "string": "string",
    "str": "string",
    "boolean": "boolean",
    "bool": "boolean",
    "array": "array",
    "list": "array",
    "tuple": "array",
    # Java
    "HashMap": "object",
    "Map": "object",
    "String": "string",
    "char": "string",
    "long": "integer",
    "short": "integer",
    "byte": "integer",
    "double": "number",
    "Array": "array",
    "ArrayList": "array",
    "List": "array",
    "Boolean": "boolean",
    # any value at all
    "any": None,
    "": None,
}
"""BFCL's type names and the JSON Schema type each stands for (None: any value)."""

_KEPT: Final = ("description", "enum", "default", "maximum", "minimum", "minItems", "maxItems")
_FORMATS: Final = frozenset({"date", "date-time", "time", "email", "uri"})
_LANGUAGES: Final = {"simple_java": "Java", "simple_javascript": "JavaScript"}
_REASON: Final = "a BFCL benchmark parameter: data of the question, not the caller"
EVAL_PRINCIPAL: Final = Principal(user_id="bfcl", tenant_id="bfcl")
"""Whose view the lookups take: the tools need no permission, so any principal would do."""


def to_json_schema(
    parameter: Mapping[str, Any],
    *,
    where: str,
    language: str | None = None,
) -> dict[str, Any]:
    """One BFCL parameter document as a Draft 2020-12 schema.

    `tuple` is an array (JSON has no tuples), `any` admits every value and a default
    of null admits null. Nested properties do not close an object: which keys are
    expected is the possible answer's business, as in BFCL (the caller closes the
    root, where BFCL fails an unexpected parameter). With a `language` (Java,
    JavaScript), a parameter of any other type may also be a string: a variable or
    expression of the program, as BFCL presents those parameters and often answers
    them. An unknown type name raises ConfigurationError.
    """
    name = parameter.get("type", "any")
    if not isinstance(name, str) or name not in _TYPES:
        raise ConfigurationError(f"{where}: BFCL type {name!r} has no JSON Schema counterpart")
    schema: dict[str, Any] = {key: parameter[key] for key in _KEPT if key in parameter}
    if parameter.get("format") in _FORMATS:
        schema["format"] = parameter["format"]
    kind = _TYPES[name]
    if kind is not None:
        kinds = [kind]
        if language is not None and kind != "string":
            kinds.append("string")
            note = f"{language} {name}, or a variable or expression of the program as a string"
            schema["description"] = f"{schema.get('description', '')} ({note})".strip()
        if "default" in parameter and parameter["default"] is None:
            kinds.append("null")
            if isinstance(schema.get("enum"), list) and None not in schema["enum"]:
                schema["enum"] = [*schema["enum"], None]
        schema["type"] = kinds[0] if len(kinds) == 1 else kinds
    properties = parameter.get("properties")
    if kind == "object" and isinstance(properties, Mapping) and properties:
        schema["properties"] = {
            key: to_json_schema(sub, where=f"{where}.{key}", language=language)
            for key, sub in properties.items()
        }
        required = parameter.get("required")
        if isinstance(required, list):
            schema["required"] = [r for r in required if r in properties]
    items = parameter.get("items")
    if kind == "array" and isinstance(items, Mapping):
        schema["items"] = to_json_schema(items, where=f"{where}[]", language=language)
    return schema


_UNSAFE: Final = re.compile(r"[^A-Za-z0-9_-]+")
_FOLD: Final = re.compile(r"[^a-z0-9]")


def _folded(name: str) -> str:
    # As the registry compares names: two that fold alike collide on some wire.
    return _FOLD.sub("_", name.lower())


def _segment(text: str) -> str:
    cleaned = re.sub(r"_{2,}", "_", _UNSAFE.sub("_", text)).strip("_")
    if not cleaned or not cleaned[0].isalpha():
        cleaned = f"f_{cleaned}".rstrip("_")
    return cleaned[:60].rstrip("_")


def _fits(name: str) -> bool:
    # A Handrail name's segments start with a letter; the wire name says the rest.
    try:
        to_wire_name(name)
    except ConfigurationError:
        return False
    return all(segment[:1].isalpha() for segment in name.split("."))


def handrail_name(function: str, taken: set[str]) -> str:
    """The function's own name when Handrail and providers can carry it, else a close one.

    Unsafe characters and runs of `_` become one `_`, a segment starts with a letter,
    and leading segments are dropped until the wire name fits 64 characters; a clash
    with a name already `taken` (as the registry folds names) gets a number. The
    result is added to `taken`.
    """
    name = function
    if not _fits(name) or _folded(name) in taken:
        segments = [_segment(s) for s in function.split(".")]
        while len(segments) > 1 and not _fits(".".join(segments)):
            segments.pop(0)
        base = ".".join(segments)[:64]
        name, number = base, 2
        while not _fits(name) or _folded(name) in taken:
            name = f"{base[:58]}_{number}"
            number += 1
    taken.add(_folded(name))
    return name


@dataclass(frozen=True, kw_only=True, slots=True)
class QuestionTools:
    """A question's functions registered as tools, with both directions of the names."""

    registry: Registry
    by_function: Mapping[str, str]
    """BFCL function name -> Handrail tool name."""
    by_tool: Mapping[str, str]
    """Handrail tool name -> BFCL function name."""

    def lookup(self, function: str) -> Tool | None:
        """The tool a call naming this BFCL function reaches, as the gate's lookup finds it."""
        name = self.by_function.get(function)
        return None if name is None else self.registry.lookup(name, EVAL_PRINCIPAL)

    def specs(self) -> tuple[ToolSpec, ...]:
        """The specs a model is shown (every function of the question)."""
        return self.registry.exposed(EVAL_PRINCIPAL)


def _never_runs(arguments: dict[str, Any], ctx: ToolContext) -> object:  # noqa: ARG001 - a tool's signature
    # Scoring looks tools up and checks arguments; nothing ever invokes one.
    msg = "a BFCL tool is only checked, never run"  # pragma: no cover
    raise ConfigurationError(msg)  # pragma: no cover


def _tool(function: Mapping[str, Any], name: str, where: str, language: str | None) -> Tool:
    parameters = function.get("parameters") or {"type": "dict", "properties": {}}
    if not isinstance(parameters, Mapping):
        raise ConfigurationError(f"{where}: the parameters are not an object")
    schema = to_json_schema(parameters, where=where, language=language)
    # The arguments are one object, which admits no parameter the function lacks.
    schema["type"] = "object"
    schema.pop("description", None)
    schema.setdefault("properties", {})
    schema["additionalProperties"] = False
    declared = {found.key: BusinessValue(reason=_REASON) for found in find_identity_names(schema)}
    description = function.get("description")
    return Tool.from_json_schema(
        name=name,
        description=description if isinstance(description, str) and description.strip() else name,
        input_schema=schema,
        fn=_never_runs,
        risk=RiskLevel.L0_PUBLIC_READ,
        business_values=declared,
    )


def question_tools(question: Question, *, clock: Clock) -> QuestionTools:
    """Register the question's functions in a registry of its own.

    Raises ConfigurationError (or a RegistrationError) for a function Handrail cannot
    register, naming the question.
    """
    registry = Registry(clock=clock)
    taken: set[str] = set()
    by_function: dict[str, str] = {}
    for function in question.functions:
        bfcl = function["name"]
        if bfcl in by_function:
            raise ConfigurationError(f"{question.id}: the function {bfcl!r} is offered twice")
        name = handrail_name(bfcl, taken)
        language = _LANGUAGES.get(question.category)
        registry.register(_tool(function, name, f"{question.id} {bfcl}", language))
        by_function[bfcl] = name
    return QuestionTools(
        registry=registry,
        by_function=by_function,
        by_tool={tool: function for function, tool in by_function.items()},
    )
