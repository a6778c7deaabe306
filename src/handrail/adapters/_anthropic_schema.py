"""Anthropic's tool schemas: one tool's JSON Schema rewritten into what Anthropic takes.

Every request needs an object root without top-level combinators and plain property
keys; strict mode also needs its grammar's subset. Each rewrite or refusal is noted as a
SchemaIssue. It never reads calls or transcripts, and never changes an argument's shape.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from handrail.adapters.base import IssueAction, SchemaIssue
from handrail.paths import json_path

__all__ = ["SchemaCheck"]

_PROPERTY_KEY = re.compile(r"[a-zA-Z0-9_.-]{1,64}")
"""What Anthropic accepts as a key of `input_schema.properties`."""
_COMBINATORS = ("anyOf", "oneOf", "allOf")
_STRICT_FORMATS = frozenset(
    {"date-time", "time", "date", "duration", "email", "hostname", "uri", "ipv4", "ipv6", "uuid"},
)
_HARD_PATTERN = re.compile(r"\(\?<?[=!]|\\[bBk1-9]")
"""Regex features strict mode's grammar cannot take: lookaround, word boundaries, backrefs."""
_KEPT = frozenset({"type", "required", "description", "title", "default"})
_TYPED = frozenset({"type", "anyOf", "oneOf", "allOf", "enum", "const", "$ref"})
_Path = tuple[str | int, ...]


def _primitive(value: object) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


class SchemaCheck:
    """Rewrites one tool's schema (a fresh copy) for Anthropic, noting every change."""

    def __init__(self, tool: str) -> None:
        self.tool = tool
        self.issues: list[SchemaIssue] = []

    def note(self, path: _Path, keyword: str, action: IssueAction, detail: str) -> None:
        self.issues.append(
            SchemaIssue(
                tool=self.tool,
                path=json_path(path),
                keyword=keyword,
                action=action,
                detail=detail,
            ),
        )

    def root(self, schema: dict[str, Any], *, strict: bool) -> dict[str, Any]:
        """What every request needs: an object root without combinators, plain keys."""
        kind = schema.get("type")
        if kind != "object":
            allowed = kind if isinstance(kind, list) else [kind]
            if kind is not None and "object" not in allowed:
                self.note((), "type", IssueAction.REFUSED, "the input must be an object")
            else:
                self.note((), "type", IssueAction.REWRITTEN, 'set to "object"; input is one')
                schema["type"] = "object"
        for keyword in _COMBINATORS:
            if keyword not in schema:
                continue
            if "properties" in schema:
                del schema[keyword]
                self.note((), keyword, IssueAction.REWRITTEN, "dropped: not at the top level")
            else:
                self.note((), keyword, IssueAction.REFUSED, "the parameters lie inside it")
        properties = schema.get("properties")
        for key in properties if isinstance(properties, Mapping) else ():
            if not _PROPERTY_KEY.fullmatch(key):
                detail = "property keys must match ^[a-zA-Z0-9_.-]{1,64}$"
                self.note(("properties", key), "properties", IssueAction.REFUSED, detail)
        if not strict:
            return schema
        self._cycles(schema)
        return dict(self.strict(schema, ()))

    def _cycles(self, schema: dict[str, Any]) -> None:
        """Refuses recursive local `$ref`s, which strict mode cannot compile."""
        done: set[str] = set()

        def cyclic(pointer: str, trail: tuple[str, ...]) -> str | None:
            if pointer in trail:
                return pointer
            if pointer in done:
                return None
            for target in sorted(set(_local_refs(_resolve(schema, pointer)))):
                hit = cyclic(target, (*trail, pointer))
                if hit is not None:
                    return hit
            done.add(pointer)
            return None

        hit = cyclic("", ())
        if hit is not None:
            self.note((), "$ref", IssueAction.REFUSED, f"recursive schema through #{hit}")

    def strict(self, node: object, path: _Path) -> Any:  # noqa: ANN401 - a JSON schema
        """`node` in strict mode's subset: unsupported constraints move to `description`."""
        if not isinstance(node, dict):
            self.note(path, "type", IssueAction.REFUSED, "strict mode needs a typed schema")
            return node
        if not _TYPED & node.keys():
            self.note(path, "type", IssueAction.REFUSED, "strict mode needs a type here")
        out: dict[str, Any] = {}
        moved: list[str] = []
        if "prefixItems" in node and "items" in node:
            node = {k: v for k, v in node.items() if k != "items"}
            self.note(path, "items", IssueAction.REWRITTEN, "dropped with prefixItems")
        if "oneOf" in node and "anyOf" in node:
            self.note(path, "oneOf", IssueAction.REFUSED, "beside anyOf, it cannot become one")
        is_object = _is_object(node)
        for key, value in node.items():
            if key == "additionalProperties" and is_object:
                continue  # decided below, for objects only
            kept = self._keyword(key, value, path, out)
            if not kept:
                detail = "not in strict mode's subset; the gate still enforces it"
                self.note(path, key, IssueAction.REWRITTEN, f"dropped: {detail}")
                if _primitive(value):
                    moved.append(f"{key}: {json.dumps(value)}")
        if is_object:
            extra = node.get("additionalProperties")
            if extra not in (None, True, False, {}):
                detail = "strict mode forbids extra keys; this schema wants them"
                self.note(path, "additionalProperties", IssueAction.REFUSED, detail)
            elif extra is not False:
                detail = "set to false; extra keys were optional and strict mode needs it"
                self.note(path, "additionalProperties", IssueAction.REWRITTEN, detail)
            out["additionalProperties"] = False
        if moved:
            note = "(" + ", ".join(moved) + ")"
            text = out.get("description")
            out["description"] = f"{text}\n\n{note}" if isinstance(text, str) and text else note
        return out

    def _keyword(self, key: str, value: object, path: _Path, out: dict[str, Any]) -> bool:  # noqa: PLR0911
        """Copies one keyword into `out` when strict mode takes it; False to drop it."""
        if key in _KEPT:
            out[key] = value
            return True
        if key in {"properties", "$defs", "definitions"} and isinstance(value, dict):
            out[key] = {k: self.strict(v, (*path, key, k)) for k, v in value.items()}
            return True
        if key in _COMBINATORS and isinstance(value, list):
            target = "anyOf" if key == "oneOf" else key
            if key == "oneOf":
                self.note(path, key, IssueAction.REWRITTEN, "as anyOf; the gate keeps oneOf")
            out[target] = [self.strict(v, (*path, key, i)) for i, v in enumerate(value)]
            return True
        if key == "items" and isinstance(value, dict):
            out[key] = self.strict(value, (*path, key))
            return True
        if key in {"enum", "const"}:
            values = value if key == "enum" and isinstance(value, list) else [value]
            if not all(_primitive(v) for v in values):
                self.note(path, key, IssueAction.REFUSED, "strict mode takes only scalar values")
            out[key] = value
            return True
        if key == "$ref":
            if not (isinstance(value, str) and value.startswith("#")):
                self.note(path, key, IssueAction.REFUSED, "only local references are taken")
            out[key] = value
            return True
        if key == "patternProperties":
            self.note(path, key, IssueAction.REFUSED, "strict mode forbids keys it allows")
            return True
        keep = (
            (key == "minItems" and value in (0, 1))
            or (key == "format" and value in _STRICT_FORMATS)
            or (key == "pattern" and isinstance(value, str) and not _HARD_PATTERN.search(value))
        )
        if keep:
            out[key] = value
        return keep


def _is_object(node: Mapping[str, Any]) -> bool:
    kind = node.get("type")
    return kind == "object" or (isinstance(kind, list) and "object" in kind) or "properties" in node


def _local_refs(node: object) -> list[str]:
    """Every local `$ref` under `node`, as a JSON pointer without its leading `#`."""
    if isinstance(node, list):
        return [ref for item in node for ref in _local_refs(item)]
    if not isinstance(node, dict):
        return []
    found = [ref for value in node.values() for ref in _local_refs(value)]
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#"):
        found.append(ref[1:])
    return found


def _resolve(schema: object, pointer: str) -> object:
    """The part of `schema` a local JSON pointer names, or None."""
    node = schema
    for raw in pointer.split("/")[1:]:
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node
