"""OpenAI strict mode: the rewrite that makes a tool schema strict, and its undo.

Owns `make_strict` (a Handrail schema → OpenAI's strict subset, every change reported
as a SchemaIssue, with the `Restorer` from `_restore` that undoes the nulls strict mode
forces the model to send) and `report_unsupported` (the same findings when a schema is
sent unchanged). It never validates a call: the gate checks arguments against the
*original* schema, so a rewrite may loosen a schema, as long as the model can still
express every valid call.

The subset is the "Supported schemas" section of OpenAI's Structured Outputs guide:
types string, number, integer, boolean, object, array, enum, anyOf; string `pattern`
and nine `format`s; number `multipleOf`, `minimum`, `maximum` and the exclusive bounds;
array `minItems` and `maxItems`; `$defs` and recursion; every object lists all its
properties in `required` and sets `additionalProperties: false`; the root is an object.

The rule for everything else: a keyword that only *narrows* values other kept keywords
already describe is dropped (REWRITTEN) — the model can still produce every valid call,
and a violation comes back from the gate as a field error it can repair; its value is
appended to the description so the model can follow it anyway. A keyword that
*introduces* values no kept keyword describes is REFUSED: dropping it would lock the
model out of valid calls.

Decisions, keyword by keyword (strict mode):

REWRITTEN (the gate still enforces the original):
- an optional property: required and nullable; `Restorer` drops the null again;
- an optional property that is nullable already: required; its null stays null (the
  model cannot say "absent" there; the default is described);
- `additionalProperties` absent: false (undeclared keys have no name the model knows);
- `oneOf`: anyOf (the gate checks that exactly one branch matches);
- `allOf` of one subschema: merged; `$ref` with siblings: a one-branch anyOf;
- `minLength`, `maxLength` (the guide lists only `pattern` and `format` for strings),
  `uniqueItems`, `contains`, `minContains`, `maxContains`, `minProperties`,
  `maxProperties`, `propertyNames`, `not`, `dependentRequired`, `unevaluatedItems`,
  `unevaluatedProperties: false`, a `format` not in FORMATS: dropped, value described;
- `default`, `examples`: dropped, value described; other annotations and unknown
  keywords: dropped; a root object without properties: a tool without arguments.

REFUSED (the whole export fails with UnsupportedSchemaError):
- free-form keys: `additionalProperties` true or a schema, `patternProperties`,
  `unevaluatedProperties` true or a schema, a nested object without properties;
- `allOf` of several subschemas, `if` / `then` / `else`, `dependentSchemas`: they add
  properties or requirements; a `required` name not in `properties`;
- values the model cannot produce: `prefixItems`, an array without `items`, a boolean
  subschema, a subschema without type, enum, const, anyOf or $ref;
- references that cannot be resolved here: non-local `$ref`, `$anchor`, nested `$id`,
  `$dynamicRef` and kin;
- OpenAI's limits: 5000 properties, 10 levels, 1000 enum values, 120000 characters.

Recursion (`$ref` to `#` or to `$defs`) is kept: the guide supports it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from handrail.adapters._common import plain_json
from handrail.adapters._restore import Restorer, admits_null, resolve
from handrail.adapters.base import IssueAction, SchemaIssue
from handrail.paths import json_path

__all__ = ["FORMATS", "Restorer", "StrictSchema", "make_strict", "report_unsupported"]

FORMATS = frozenset(
    {"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"},
)
"""The string formats OpenAI's strict mode supports."""

# In OpenAI's strict subset as they are (objects, arrays, unions and refs are walked).
_KEPT = frozenset(
    {
        "type",
        "enum",
        "const",
        "description",
        "title",
        "pattern",
        "multipleOf",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minItems",
        "maxItems",
    },
)
# Assertions that only narrow what kept keywords allow: dropped, the gate checks them.
_NARROWING = frozenset(
    {
        "minLength",
        "maxLength",
        "uniqueItems",
        "contains",
        "minContains",
        "maxContains",
        "minProperties",
        "maxProperties",
        "propertyNames",
        "not",
        "dependentRequired",
        "unevaluatedItems",
        "additionalItems",
    },
)
_DESCRIBED = frozenset({"default", "examples"})
_REFUSED = {
    "patternProperties": "free-form keys: every property must be declared",
    "if": "a conditional schema adds requirements no kept keyword describes",
    "then": "a conditional schema adds requirements no kept keyword describes",
    "else": "a conditional schema adds requirements no kept keyword describes",
    "dependentSchemas": "adds properties or requirements no kept keyword describes",
    "prefixItems": "tuples are not in OpenAI's strict subset",
    "$anchor": "anchors cannot be resolved here",
    "$dynamicRef": "dynamic references are not in OpenAI's strict subset",
    "$dynamicAnchor": "dynamic references are not in OpenAI's strict subset",
    "$recursiveRef": "dynamic references are not in OpenAI's strict subset",
    "$recursiveAnchor": "dynamic references are not in OpenAI's strict subset",
}
_STRUCTURE = frozenset(
    {"properties", "required", "additionalProperties", "items", "anyOf", "oneOf", "allOf"},
)
_SCALARS = frozenset({"string", "number", "integer", "boolean"})
_TYPED = ("type", "enum", "const", "anyOf", "$ref")
_MAX_PROPERTIES = 5000
_MAX_DEPTH = 10
_MAX_ENUM_VALUES = 1000
_MAX_CHARS = 120_000
_LARGE_ENUM = 250
_MAX_LARGE_ENUM_CHARS = 15_000
_MAX_HINT = 80
_DESCRIBED_NOTE = "; its value is described to the model"
_ONE_OF = "sent as anyOf; the gate checks that exactly one branch matches"
_LARGE_ENUM_DETAIL = "an enum of over 250 values and 15000 characters"
_OPTIONAL = "optional: required and nullable now; the null is dropped when the call is parsed"
_OPTIONAL_NULLABLE = "optional and nullable: required now; a null is passed on as null"

_Path = tuple[str | int, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class StrictSchema:
    """A schema rewritten for strict mode, what changed, and how to undo it."""

    schema: dict[str, Any]
    issues: tuple[SchemaIssue, ...]
    restorer: Restorer | None
    """None when no call made against `schema` needs undoing."""


def make_strict(tool: str, schema: Mapping[str, Any]) -> StrictSchema:
    """`schema` in OpenAI's strict subset; REFUSED issues mean it cannot be sent strict."""
    original = plain_json(schema)
    rewrite = _Rewrite(tool, original, report_only=False)
    out = rewrite.root()
    restorer = Restorer(original) if rewrite.undo else None
    return StrictSchema(schema=out, issues=tuple(rewrite.issues), restorer=restorer)


def report_unsupported(tool: str, schema: Mapping[str, Any]) -> tuple[SchemaIssue, ...]:
    """The keywords outside OpenAI's strict subset, for a schema sent unchanged.

    Without strict mode OpenAI enforces nothing, the schema only guides the model; the
    report names what strict mode would have to rewrite or refuse. The gate enforces
    all of it either way.
    """
    rewrite = _Rewrite(tool, plain_json(schema), report_only=True)
    rewrite.root()
    return tuple(rewrite.issues)


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` or null: a type list for scalars, an anyOf branch for the rest."""
    kind = schema.get("type")
    kinds = [kind] if isinstance(kind, str) else kind
    if isinstance(kinds, list) and kinds and set(kinds) <= _SCALARS and "const" not in schema:
        out = {**schema, "type": [*kinds, "null"]}
        if isinstance(out.get("enum"), list):
            out["enum"] = [*out["enum"], None]
        return out
    notes = {k: v for k, v in schema.items() if k in {"description", "title"}}
    core = {k: v for k, v in schema.items() if k not in notes}
    if set(core) == {"anyOf"}:
        return {**notes, "anyOf": [*core["anyOf"], {"type": "null"}]}
    return {**notes, "anyOf": [core, {"type": "null"}]}


def _hint(keyword: str, value: object) -> str | None:
    try:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        return None
    return f"{keyword}: {text}" if len(text) <= _MAX_HINT else None


@dataclass(kw_only=True, slots=True)
class _Counts:
    properties: int = 0
    enum_values: int = 0
    chars: int = 0
    too_deep: bool = False


@dataclass(slots=True)
class _Rewrite:
    """One schema's walk; collects issues, and in strict mode builds the strict copy."""

    tool: str
    original: dict[str, Any]
    report_only: bool
    issues: list[SchemaIssue] = field(default_factory=list)
    undo: bool = False
    counts: _Counts = field(default_factory=_Counts)

    def issue(
        self,
        path: _Path,
        keyword: str,
        action: IssueAction,
        detail: str,
        *,
        structural: bool = False,
    ) -> None:
        """Record a finding; structural ones (strict requirements) only in strict mode."""
        if self.report_only:
            if structural:
                return
            action = IssueAction.UNENFORCED
            reason = detail.removeprefix("dropped: ").removesuffix(_DESCRIBED_NOTE)
            detail = f"sent unchanged (strict=False); strict mode would not take it: {reason}"
        self.issues.append(
            SchemaIssue(
                tool=self.tool,
                path=json_path(path),
                keyword=keyword,
                action=action,
                detail=detail,
            ),
        )

    def refuse(self, path: _Path, keyword: str, detail: str) -> None:
        """Record what strict mode cannot send."""
        self.issue(path, keyword, IssueAction.REFUSED, detail)

    def root(self) -> dict[str, Any]:
        """The whole schema, with the root's own rules and the size limits."""
        schema = self.original
        if schema.get("type") != "object" or "anyOf" in schema or "oneOf" in schema:
            self.refuse((), "type", "the root must be an object, not a union")
        free = ("additionalProperties", "patternProperties", "unevaluatedProperties")
        if not schema.get("properties") and not any(key in schema for key in free):
            schema = {**schema, "properties": {}, "additionalProperties": False}
            self.issue(
                (),
                "properties",
                IssueAction.REWRITTEN,
                "declares no properties: sent as a tool without arguments",
                structural=True,
            )
        out: dict[str, Any] = self.node(schema, (), 0)
        counts = self.counts
        if counts.properties > _MAX_PROPERTIES:
            self.refuse((), "properties", f"more than {_MAX_PROPERTIES} properties in all")
        if counts.too_deep:
            self.refuse((), "properties", f"objects nested more than {_MAX_DEPTH} levels")
        if counts.enum_values > _MAX_ENUM_VALUES:
            self.refuse((), "enum", f"more than {_MAX_ENUM_VALUES} enum values in all")
        if counts.chars > _MAX_CHARS:
            self.refuse((), "properties", f"names and values exceed {_MAX_CHARS} characters")
        return out

    def node(self, schema: object, path: _Path, depth: int) -> Any:  # noqa: ANN401 - JSON
        """One subschema in strict form; `depth` counts the objects around it."""
        if not isinstance(schema, dict):
            self.refuse(path, "type", "a boolean subschema admits anything or nothing")
            return schema
        all_of = schema.get("allOf")
        if all_of is not None:
            merged = self.merge_all_of(schema, all_of, path)
            if merged is not None:
                return self.node(merged, path, depth)
        if "anyOf" in schema and "oneOf" in schema:
            self.refuse(path, "oneOf", "anyOf and oneOf in the same subschema")
        out: dict[str, Any] = {}
        hints: list[str] = []
        for key, value in schema.items():
            where = (*path, key)
            if key in _KEPT:
                out[key] = value
                self.count(key, value, path)
            elif key == "format":
                if value in FORMATS:
                    out[key] = value
                else:
                    self.drop(path, key, value, hints, "a format OpenAI does not support")
            elif key == "items":
                if isinstance(value, dict):
                    out[key] = self.node(value, where, depth)
                else:
                    self.refuse(path, key, "items must be one schema")
            elif key in {"anyOf", "oneOf"}:
                out["anyOf"] = self.branches(value, where, depth)
                if key == "oneOf":
                    self.issue(path, key, IssueAction.REWRITTEN, _ONE_OF)
            elif key == "$ref":
                self.reference(value, path, out)
            elif key in {"$defs", "definitions"} and isinstance(value, dict):
                self.counts.chars += sum(len(name) for name in value)
                out[key] = {n: self.node(s, (*where, n), 0) for n, s in value.items()}
            elif key in _STRUCTURE:
                continue  # objects are handled below, as a whole
            elif key in _REFUSED:
                self.refuse(path, key, _REFUSED[key])
            elif key == "$id" and not path:
                self.issue(path, key, IssueAction.REWRITTEN, "dropped; references are local")
            elif key == "$id":
                self.refuse(path, key, "a nested $id changes how references resolve")
            elif key in _NARROWING:
                self.drop(path, key, value, hints, "narrows values; the gate checks it")
            elif key in _DESCRIBED:
                self.drop(path, key, value, hints, "not in OpenAI's strict subset")
            else:
                self.issue(path, key, IssueAction.REWRITTEN, "dropped: not in the strict subset")
        if _is_object(schema):
            self.object(schema, path, depth, out)
            self.typed(out, "object", path)
        elif "properties" in schema or "required" in schema or "additionalProperties" in schema:
            self.issue(path, "properties", IssueAction.REWRITTEN, "dropped: not an object")
        if _is_array(schema):
            self.typed(out, "array", path)
            if "items" not in schema and "prefixItems" not in schema:
                self.refuse(path, "items", "an array without items admits any value")
        if not any(key in out for key in _TYPED) and "allOf" not in schema:
            self.refuse(path, "type", "admits any value; give it a type")
        if hints and not self.report_only:
            note = "; ".join(hints)
            text = out.get("description")
            out["description"] = f"{text} ({note})" if isinstance(text, str) and text else note
        if "$ref" in out and len(out) > 1:
            ref = out.pop("$ref")
            out = {"anyOf": [{"$ref": ref}], **out}
            self.issue(
                path,
                "$ref",
                IssueAction.REWRITTEN,
                "$ref with siblings sent as a one-branch anyOf",
                structural=True,
            )
        return out

    def typed(self, out: dict[str, Any], kind: str, path: _Path) -> None:
        """Give an untyped object or array schema its type, as strict mode needs."""
        if "type" not in out:
            out["type"] = kind
            detail = f"no type, but {kind} keywords: sent as type {kind}"
            self.issue(path, "type", IssueAction.REWRITTEN, detail, structural=True)

    def drop(self, path: _Path, key: str, value: object, hints: list[str], why: str) -> None:
        """Drop a keyword the gate still checks; describe its value to the model."""
        hint = _hint(key, value)
        if hint is not None:
            hints.append(hint)
        described = _DESCRIBED_NOTE if hint is not None else ""
        self.issue(path, key, IssueAction.REWRITTEN, f"dropped: {why}{described}")

    def count(self, key: str, value: object, path: _Path) -> None:
        """Keep OpenAI's limits on enum values and characters."""
        if key == "enum" and isinstance(value, list):
            self.counts.enum_values += len(value)
            chars = sum(len(v) for v in value if isinstance(v, str))
            self.counts.chars += chars
            if len(value) > _LARGE_ENUM and chars > _MAX_LARGE_ENUM_CHARS:
                self.refuse(path, key, _LARGE_ENUM_DETAIL)
        elif key == "const" and isinstance(value, str):
            self.counts.chars += len(value)

    def merge_all_of(self, schema: dict[str, Any], all_of: object, path: _Path) -> Any:  # noqa: ANN401
        """A one-subschema allOf merged into its parent, or None after refusing it."""
        rest = {k: v for k, v in schema.items() if k != "allOf"}
        if isinstance(all_of, list) and len(all_of) == 1 and isinstance(all_of[0], dict):
            clash = set(rest) & set(all_of[0]) - {"description", "title"}
            if not clash:
                self.issue(
                    path,
                    "allOf",
                    IssueAction.REWRITTEN,
                    "one subschema, merged into its parent",
                    structural=True,
                )
                return {**all_of[0], **rest}
        self.refuse(path, "allOf", "an intersection cannot be sent strict")
        return None

    def branches(self, value: object, where: _Path, depth: int) -> list[Any]:
        """The branches of an anyOf (or oneOf), each in strict form."""
        if not isinstance(value, list) or not value:
            self.refuse(where, str(where[-1]), "must be a non-empty list of schemas")
            return []
        return [self.node(branch, (*where, i), depth) for i, branch in enumerate(value)]

    def reference(self, value: object, path: _Path, out: dict[str, Any]) -> None:
        """Keep a local $ref; refuse one that cannot be resolved in this document."""
        if isinstance(value, str) and resolve(self.original, value) is not None:
            out["$ref"] = value
        else:
            self.refuse(path, "$ref", "only local references (#/...) can be sent")

    def object(self, schema: dict[str, Any], path: _Path, depth: int, out: dict[str, Any]) -> None:
        """Every property required (optional ones nullable), no undeclared keys."""
        props = schema.get("properties") or {}
        required = schema.get("required") or []
        extra = schema.get("additionalProperties")
        if extra is True or isinstance(extra, dict):
            self.refuse(path, "additionalProperties", "free-form keys: every key must be declared")
        elif extra is None and "unevaluatedProperties" in schema:
            if schema["unevaluatedProperties"] is not False:
                self.refuse(path, "unevaluatedProperties", "free-form keys")
        elif extra is None and not props:
            self.refuse(path, "properties", "a free-form object: the model could send no key")
        elif extra is None:
            self.issue(
                path,
                "additionalProperties",
                IssueAction.REWRITTEN,
                "absent, sent as false: undeclared keys can no longer be sent",
                structural=True,
            )
        if not isinstance(props, dict) or not isinstance(required, list):
            self.refuse(path, "properties", "properties must be an object, required a list")
            return
        for name in required:
            if name not in props:
                self.refuse(path, "required", f"{name!r} is required but not declared")
        if depth + 1 > _MAX_DEPTH:
            self.counts.too_deep = True
        self.counts.properties += len(props)
        self.counts.chars += sum(len(name) for name in props)
        strict: dict[str, Any] = {}
        for name, sub in props.items():
            where = (*path, "properties", name)
            converted = self.node(sub, where, depth + 1)
            if name not in required and isinstance(converted, dict):
                if admits_null(sub, self.original):
                    detail = _OPTIONAL_NULLABLE
                else:
                    converted = _nullable(converted)
                    self.undo = True
                    detail = _OPTIONAL
                self.issue(where, "required", IssueAction.REWRITTEN, detail, structural=True)
            strict[name] = converted
        out["properties"] = strict
        out["required"] = list(strict)
        out["additionalProperties"] = False


def _kinds(schema: Mapping[str, Any]) -> set[str]:
    kind = schema.get("type")
    if isinstance(kind, str):
        return {kind}
    return {k for k in kind if isinstance(k, str)} if isinstance(kind, list) else set()


def _is_object(schema: Mapping[str, Any]) -> bool:
    kinds = _kinds(schema)
    return "object" in kinds or (not kinds and "properties" in schema)


def _is_array(schema: Mapping[str, Any]) -> bool:
    kinds = _kinds(schema)
    return "array" in kinds or (not kinds and "items" in schema)
