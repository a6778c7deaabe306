"""JSON Schema (Draft 2020-12) to the OpenAPI-subset Schema of Gemini's `parameters`.

Gemini's `FunctionDeclaration.parameters` takes a select subset of an OpenAPI 3.0 Schema
object: upper-case type names (the REST enum `STRING`, `OBJECT`, ...), `nullable`,
string-only `enum`, no `$ref`. This module converts a tool's model-facing schema and
reports every change as a SchemaIssue, never silently. The gate still validates the
arguments against the original schema, so a looser form here is safe; a form that
cannot be written at all is refused. It never decides which tools are sent.

| JSON Schema | Gemini `parameters` | action |
| --- | --- | --- |
| `type` string, integer, number, boolean, array, object | `STRING` ... `OBJECT` | kept |
| `type: [X, "null"]` | `X` with `nullable: true` | rewritten |
| `type` with several non-null types, `null` alone, or no type | - | refused |
| `title`, `description`, `default`, `pattern`, `minLength`, `maxLength`, | same | kept |
| `minimum`, `maximum`, `minItems`, `maxItems`, `minProperties`, | | |
| `maxProperties`, `properties`, `required`, `items`, `anyOf`, string `enum` | | |
| `$ref` into this schema | inlined | rewritten |
| `$ref` that recurses, leaves the document or does not resolve | - | refused |
| `$defs`, `definitions` | removed once inlined | rewritten |
| `anyOf` or `enum` with a null member | `nullable: true` | rewritten |
| `oneOf` | `anyOf` (also accepts a value matching several) | rewritten |
| `allOf` with one member / with several | merged / - | rewritten / refused |
| `const` | a one-value `enum` | rewritten |
| `enum` of numbers or booleans | dropped, values listed in `description` | rewritten |
| `enum` mixing types | - | refused |
| `format` other than `date-time`, `enum` (strings), | dropped, noted in `description` | rewritten |
| `float`, `double` (numbers), `int32`, `int64` (integers) | | |
| `exclusiveMinimum`, `exclusiveMaximum` | `minimum`, `maximum` (inclusive) + note | rewritten |
| `multipleOf`, `uniqueItems` | dropped, noted in `description` | rewritten |
| `prefixItems` (tuples) | `items`: the one member schema, or `anyOf` them | rewritten |
| `examples` | its first member as `example` | rewritten |
| `additionalProperties` beside declared `properties` (or at the top) | dropped | rewritten |
| an object without `properties` below the top (`dict[str, X]`) | - | refused |
| an array without an `items` schema; an untyped schema (`{}`, `true`) | - | refused |
| `required` naming undeclared properties | filtered | rewritten |
| a keyword of another type (`pattern` on an integer, ...) | dropped | rewritten |
| anything else (`not`, `if`, `patternProperties`, `propertyNames`, | dropped | rewritten |
| `dependent*`, `unevaluated*`, `contains`, `discriminator`, `$comment`, `x-*`) | | |
| a parameter name other than `^[A-Za-z_][A-Za-z0-9_]{0,63}$` | - | refused |

A top-level object without properties becomes no `parameters` at all: Gemini rejects
an OBJECT with empty `properties`, and documents leaving `parameters` unset instead.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

from handrail.adapters._common import plain_json
from handrail.adapters.base import IssueAction, SchemaIssue
from handrail.paths import json_path

__all__ = ["GEMINI_TYPES", "to_openapi"]

Path = tuple[str | int, ...]

GEMINI_TYPES = {
    "string": "STRING",
    "integer": "INTEGER",
    "number": "NUMBER",
    "boolean": "BOOLEAN",
    "array": "ARRAY",
    "object": "OBJECT",
}
"""JSON Schema type names and the Gemini REST `Type` values they become."""

_FORMATS = {
    "STRING": frozenset({"date-time", "enum"}),
    "NUMBER": frozenset({"float", "double"}),
    "INTEGER": frozenset({"int32", "int64"}),
}
_KEPT_BY_TYPE: dict[str, tuple[str, ...]] = {
    "STRING": ("minLength", "maxLength", "pattern"),
    "INTEGER": ("minimum", "maximum"),
    "NUMBER": ("minimum", "maximum"),
    "ARRAY": ("minItems", "maxItems"),
    "OBJECT": ("minProperties", "maxProperties"),
    "BOOLEAN": (),
}
# Which kind of value a keyword constrains, to say why it was dropped elsewhere.
_OWNER = {
    **dict.fromkeys(("minLength", "maxLength", "pattern", "contentEncoding"), "string"),
    **dict.fromkeys(
        ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"),
        "number",
    ),
    **dict.fromkeys(
        ("items", "prefixItems", "minItems", "maxItems", "uniqueItems", "contains"),
        "array",
    ),
    **dict.fromkeys(
        ("properties", "required", "additionalProperties", "minProperties", "maxProperties"),
        "object",
    ),
}
_OWNER_TYPES = {"string": {"STRING"}, "number": {"NUMBER", "INTEGER"}}
_PARAMETER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
"""Gemini's rule for parameter names: a letter or '_', then letters, digits or '_'."""
_MAX_NODES = 5_000
_MISSING = object()


def to_openapi(
    tool: str, schema: Mapping[str, Any]
) -> tuple[dict[str, Any] | None, list[SchemaIssue]]:
    """Gemini `parameters` for a tool's JSON Schema, and every issue met on the way.

    Returns None as the schema for a tool without parameters, and also when any issue
    was refused (the caller raises UnsupportedSchemaError with them).
    """
    converter = _Converter(tool, schema)
    root = dict(schema)
    for key in ("$defs", "definitions"):
        if key in root:
            del root[key]
            converter.rewrite((), key, "removed; the references into it were inlined")
    if root.get("type") != "object":
        converter.refuse((), "type", "tool parameters must be declared as an object")
        return None, converter.issues
    out = converter.node(root, (), ((),))
    if converter.refused or "properties" not in out:
        return None, converter.issues
    return out, converter.issues


class _RefusedError(Exception):
    """Unwinds the conversion of one subschema after a refusal was recorded."""


class _Converter:
    """One conversion: the document references resolve in, and the issues so far."""

    def __init__(self, tool: str, root: Mapping[str, Any]) -> None:
        self._tool = tool
        self._root = root
        self._issues: dict[tuple[str, str, IssueAction], SchemaIssue] = {}
        self._nodes = 0

    @property
    def issues(self) -> list[SchemaIssue]:
        """Every issue met, in the order met, each reported once."""
        return list(self._issues.values())

    @property
    def refused(self) -> bool:
        """Whether some part of the schema cannot be sent."""
        return any(i.action is IssueAction.REFUSED for i in self._issues.values())

    def rewrite(self, path: Path, keyword: str, detail: str) -> None:
        """Record a change the gate makes safe by validating the original schema."""
        self._issue(path, keyword, IssueAction.REWRITTEN, detail)

    def refuse(self, path: Path, keyword: str, detail: str) -> None:
        """Record a part of the schema that has no Gemini form."""
        self._issue(path, keyword, IssueAction.REFUSED, detail)

    def _fail(self, path: Path, keyword: str, detail: str) -> _RefusedError:
        self.refuse(path, keyword, detail)
        return _RefusedError()

    def _issue(self, path: Path, keyword: str, action: IssueAction, detail: str) -> None:
        where = json_path(path)
        self._issues.setdefault(
            (where, keyword, action),
            SchemaIssue(tool=self._tool, path=where, keyword=keyword, action=action, detail=detail),
        )

    # --- one schema node ---------------------------------------------------------------------

    def node(self, schema: object, path: Path, refs: tuple[Path, ...]) -> dict[str, Any]:
        """The Gemini form of one subschema ({} if refused); `refs` are being inlined."""
        try:
            return self._node(schema, path, refs)
        except _RefusedError:
            return {}

    def _node(self, schema: object, path: Path, refs: tuple[Path, ...]) -> dict[str, Any]:
        self._nodes += 1
        if self._nodes > _MAX_NODES:
            raise self._fail(path, "$ref", f"inlined, the schema exceeds {_MAX_NODES} nodes")
        if not isinstance(schema, Mapping) or not schema:
            raise self._fail(path, "type", "an untyped schema (any value) has no Gemini form")
        work = dict(schema)
        if "allOf" in work:
            members = work.pop("allOf")
            if not (isinstance(members, list) and len(members) == 1):
                raise self._fail(path, "allOf", "an intersection of schemas has no Gemini form")
            if not isinstance(members[0], Mapping):
                return self._node(members[0], (*path, "allOf", 0), refs)
            self.rewrite(path, "allOf", "its single member was merged into the schema")
            return self._node({**members[0], **work}, path, refs)
        if "$ref" in work:
            return self._ref(work, path, refs)
        if "oneOf" in work:
            if "anyOf" in work:
                raise self._fail(path, "oneOf", "oneOf beside anyOf has no Gemini form")
            self.rewrite(path, "oneOf", "became anyOf, which also accepts a value matching several")
            work["anyOf"] = work.pop("oneOf")
        if "anyOf" in work:
            return self._any_of(work, path, refs)
        return self._typed(work, path, refs)

    def _ref(self, work: dict[str, Any], path: Path, refs: tuple[Path, ...]) -> dict[str, Any]:
        ref = work.pop("$ref")
        found = self._resolve(ref) if isinstance(ref, str) else None
        if found is None:
            raise self._fail(path, "$ref", f"{str(ref)[:80]!r} does not point into this schema")
        target, where = found
        if where in refs:
            raise self._fail(path, "$ref", f"{ref!r} refers back to itself; cannot be inlined")
        self.rewrite(path, "$ref", f"{ref!r} was inlined")
        if work and isinstance(target, Mapping):
            # Keywords beside a reference (a default, a description) override its own.
            return self._node({**target, **work}, path, (*refs, where))
        return self._node(target, where, (*refs, where))

    def _resolve(self, ref: str) -> tuple[object, Path] | None:
        """The subschema a local JSON pointer (`#/$defs/Name`) names, and its path."""
        if ref != "#" and not ref.startswith("#/"):
            return None
        found: object = self._root
        path: list[str | int] = []
        for raw in ref[2:].split("/") if ref != "#" else ():
            token = unquote(raw).replace("~1", "/").replace("~0", "~")
            if isinstance(found, Mapping) and token in found:
                found = found[token]
                path.append(token)
            elif isinstance(found, list) and token.isdigit() and int(token) < len(found):
                found = found[int(token)]
                path.append(int(token))
            else:
                return None
        return found, tuple(path)

    def _any_of(self, work: dict[str, Any], path: Path, refs: tuple[Path, ...]) -> dict[str, Any]:
        branches = work.pop("anyOf")
        if not isinstance(branches, list) or not branches:
            raise self._fail(path, "anyOf", "anyOf must list at least one schema")
        members = [
            (index, branch)
            for index, branch in enumerate(branches)
            if not (isinstance(branch, Mapping) and branch.get("type") == "null")
        ]
        nullable = work.pop("nullable", False) is True
        if len(members) < len(branches):
            nullable = True
            self.rewrite(path, "anyOf", "its null member became nullable: true")
        if not members:
            raise self._fail(path, "anyOf", "a value that can only be null has no Gemini form")
        if len(members) == 1:
            index, only = members[0]
            if work and isinstance(only, Mapping):
                out = self._node({**only, **work}, path, refs)
            else:
                out = self._node(only, (*path, "anyOf", index), refs)
        else:
            out = {"anyOf": [self.node(branch, (*path, "anyOf", i), refs) for i, branch in members]}
            self._annotations(work, out, path)
            self._drop(work, path, None)
        if nullable:
            out["nullable"] = True
        return out

    def _typed(self, work: dict[str, Any], path: Path, refs: tuple[Path, ...]) -> dict[str, Any]:
        nullable = work.pop("nullable", False) is True
        declared = work.pop("type", None)
        if isinstance(declared, list):
            names = [name for name in declared if name != "null"]
            nullable = nullable or len(names) < len(declared)
            if len(names) != 1:
                raise self._fail(path, "type", "a value of several types has no Gemini form")
            self.rewrite(path, "type", "a type list with null became nullable: true")
            declared = names[0]
        notes: list[str] = []
        enum = self._enum(work, path, declared, notes)
        if enum is not None:
            declared = declared or enum[0]
            nullable = nullable or enum[2]
        if declared is None:
            declared = self._inferred(work, path)
        gemini = GEMINI_TYPES.get(declared) if isinstance(declared, str) else None
        if gemini is None:
            raise self._fail(path, "type", f"type {str(declared)[:40]!r} has no Gemini form")
        out: dict[str, Any] = {"type": gemini}
        if nullable:
            out["nullable"] = True
        self._annotations(work, out, path)
        if enum is not None and enum[1]:
            out["enum"] = enum[1]
        self._format(work, out, path, notes)
        for key in _KEPT_BY_TYPE[gemini]:
            if key in work:
                out[key] = work.pop(key)
        if gemini in {"INTEGER", "NUMBER"}:
            self._bounds(work, out, path, notes)
        elif gemini == "ARRAY":
            self._array(work, out, path, refs, notes)
        elif gemini == "OBJECT":
            self._object(work, out, path, refs)
        self._drop(work, path, gemini)
        if notes:
            out["description"] = " ".join([out.get("description", ""), *notes]).strip()
        return out

    # --- keyword groups ----------------------------------------------------------------------

    def _enum(
        self,
        work: dict[str, Any],
        path: Path,
        declared: object,
        notes: list[str],
    ) -> tuple[str, list[str], bool] | None:
        """The values' JSON type, the string values Gemini takes, and whether null was one."""
        if "const" in work:
            if "enum" in work:
                raise self._fail(path, "const", "const beside enum has no Gemini form")
            work["enum"] = [work.pop("const")]
            self.rewrite(path, "const", "became a one-value enum")
        if "enum" not in work:
            return None
        values = work.pop("enum")
        if not isinstance(values, list) or not values:
            raise self._fail(path, "enum", "enum must list at least one value")
        with_null = None in values
        if with_null:
            values = [value for value in values if value is not None]
            self.rewrite(path, "enum", "its null member became nullable: true")
        kind = _kind_of(values)
        if kind is None:
            raise self._fail(path, "enum", "an enum of several types (or none) has no Gemini form")
        if declared not in {None, kind} and not (declared == "number" and kind == "integer"):
            raise self._fail(path, "enum", "the enum's values do not match the declared type")
        if kind == "string":
            return kind, [str(value) for value in values], with_null
        self.rewrite(path, "enum", "Gemini takes string enums only; values listed in description")
        notes.append("One of: " + ", ".join(json.dumps(value) for value in values) + ".")
        return kind, [], with_null

    def _inferred(self, work: dict[str, Any], path: Path) -> str | None:
        if "properties" in work:
            self.rewrite(path, "type", "missing; inferred object from properties")
            return "object"
        if "items" in work or "prefixItems" in work:
            self.rewrite(path, "type", "missing; inferred array from items")
            return "array"
        return None

    def _annotations(self, work: dict[str, Any], out: dict[str, Any], path: Path) -> None:
        for key in ("title", "description"):
            if key in work:
                value = work.pop(key)
                if isinstance(value, str):
                    out[key] = value
                else:
                    self.rewrite(path, key, "not a string; dropped")
        if "default" in work:
            out["default"] = plain_json(work.pop("default"))
        if "example" in work:
            out["example"] = plain_json(work.pop("example"))
        if "examples" in work:
            examples = work.pop("examples")
            if isinstance(examples, list) and examples and "example" not in out:
                out["example"] = plain_json(examples[0])
                self.rewrite(path, "examples", "its first member became example")
            else:
                self.rewrite(path, "examples", "dropped")

    def _format(
        self, work: dict[str, Any], out: dict[str, Any], path: Path, notes: list[str]
    ) -> None:
        if "format" not in work:
            return
        value = str(work.pop("format"))[:40]
        if value in _FORMATS.get(out["type"], ()):
            out["format"] = value
            return
        self.rewrite(path, "format", f"Gemini does not take {value!r} for {out['type']}; noted")
        notes.append(f"Format: {value}.")

    def _bounds(
        self, work: dict[str, Any], out: dict[str, Any], path: Path, notes: list[str]
    ) -> None:
        for exclusive, inclusive, word in (
            ("exclusiveMinimum", "minimum", "Greater"),
            ("exclusiveMaximum", "maximum", "Less"),
        ):
            if exclusive not in work:
                continue
            value = work.pop(exclusive)
            if isinstance(value, bool) or not isinstance(value, int | float):
                self.rewrite(path, exclusive, "not a number (the draft-4 form); dropped")
                continue
            current = out.get(inclusive)
            if current is None:
                out[inclusive] = value
            elif inclusive == "minimum":
                out[inclusive] = max(current, value)
            else:
                out[inclusive] = min(current, value)
            self.rewrite(path, exclusive, f"became an inclusive {inclusive}; noted in description")
            notes.append(f"{word} than {value}.")
        if "multipleOf" in work:
            value = work.pop("multipleOf")
            self.rewrite(path, "multipleOf", "dropped; noted in description")
            notes.append(f"A multiple of {value}.")

    def _array(
        self,
        work: dict[str, Any],
        out: dict[str, Any],
        path: Path,
        refs: tuple[Path, ...],
        notes: list[str],
    ) -> None:
        prefix = work.pop("prefixItems", None)
        items = work.pop("items", None)
        keyword = "prefixItems"
        if isinstance(items, list):  # the draft-4 tuple form
            prefix, items, keyword = items, None, "items"
        if prefix is not None:
            if not isinstance(prefix, list) or not prefix:
                raise self._fail(path, keyword, "a tuple must list at least one schema")
            members = [self.node(p, (*path, keyword, i), refs) for i, p in enumerate(prefix)]
            if isinstance(items, Mapping) and items:
                members.append(self.node(items, (*path, "items"), refs))
            unique = list({json.dumps(m, sort_keys=True): m for m in members}.values())
            out["items"] = unique[0] if len(unique) == 1 else {"anyOf": unique}
            self.rewrite(path, keyword, "the positions were merged into one items schema")
        elif isinstance(items, Mapping) and items:
            out["items"] = self.node(items, (*path, "items"), refs)
        else:
            raise self._fail(path, "items", "an array without an items schema has no Gemini form")
        if "uniqueItems" in work:
            if work.pop("uniqueItems") is True:
                self.rewrite(path, "uniqueItems", "dropped; noted in description")
                notes.append("Items must be unique.")
            else:
                self.rewrite(path, "uniqueItems", "dropped (false is the default)")

    def _object(
        self,
        work: dict[str, Any],
        out: dict[str, Any],
        path: Path,
        refs: tuple[Path, ...],
    ) -> None:
        properties = work.pop("properties", {})
        if not isinstance(properties, Mapping):
            raise self._fail(path, "properties", "properties must be an object")
        additional = work.pop("additionalProperties", _MISSING)
        if not properties and path:
            is_map = isinstance(additional, Mapping) and bool(additional)
            raise self._fail(
                path,
                "additionalProperties" if is_map else "properties",
                "an object without declared properties (a free-form map) has no Gemini form",
            )
        converted: dict[str, Any] = {}
        for name, sub in properties.items():
            where = (*path, "properties", name)
            if not path and not _PARAMETER.fullmatch(name):
                self.refuse(where, "properties", "Gemini parameter names are letters, digits, '_'")
                continue
            converted[name] = self.node(sub, where, refs)
        if converted:
            out["properties"] = converted
        if additional is not _MISSING:
            self.rewrite(
                path,
                "additionalProperties",
                "dropped; Gemini cannot restrict undeclared properties (the gate still does)",
            )
        required = work.pop("required", None)
        if required is None:
            return
        names = [n for n in required if n in converted] if isinstance(required, list) else []
        if not isinstance(required, list) or len(names) != len(required):
            self.rewrite(path, "required", "names that are not declared properties were dropped")
        if names:
            out["required"] = names

    def _drop(self, work: dict[str, Any], path: Path, gemini: str | None) -> None:
        for key in sorted(work):
            owner = _OWNER.get(key)
            if owner is not None and gemini not in _OWNER_TYPES.get(owner, {owner.upper()}):
                self.rewrite(path, key, f"constrains {owner} values, not {gemini}; dropped")
            else:
                self.rewrite(path, key, "Gemini's schema has no such keyword; dropped")


def _kind_of(values: list[Any]) -> str | None:
    """The one JSON type of all enum values, or None if they mix types."""
    if all(isinstance(v, str) for v in values):
        return "string"
    if all(isinstance(v, bool) for v in values):
        return "boolean"
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return "integer"
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        return "number"
    return None
