"""Undoing OpenAI strict mode: `Restorer` drops the nulls strict mode made a model send.

Strict mode (`_strict`) makes every optional property required and nullable; a call
made against it sends null for each field the model meant to leave out. `Restorer`
walks the arguments along the *original* schema and drops exactly those nulls. Also
holds the two schema questions both sides ask: where a local `$ref` points, and whether
a subschema admits null. It never validates a call for the gate.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any, cast
from urllib.parse import unquote

import jsonschema_rs

from handrail.adapters._common import plain_json
from handrail.declare.schema import compile_validator_map
from handrail.errors import SchemaError

__all__ = ["Restorer", "admits_null", "resolve"]

_MAX_REF_HOPS = 32
_MAX_ERRORS_COUNTED = 50


def _escape(part: str | int) -> str:
    return str(part).replace("~", "~0").replace("/", "~1")


def resolve(root: Mapping[str, Any], ref: str) -> tuple[object, str] | None:
    """The subschema a local `$ref` names and its canonical pointer, or None."""
    if not ref.startswith("#"):
        return None
    fragment = unquote(ref[1:])
    if not fragment:
        return root, "#"
    if not fragment.startswith("/"):
        return None
    node: object = root
    parts: list[str] = []
    for raw in fragment[1:].split("/"):
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
        parts.append(part)
    return node, "#" + "".join(f"/{_escape(p)}" for p in parts)


def admits_null(schema: object, root: Mapping[str, Any], hops: int = 0) -> bool:
    """Whether null is valid under `schema` (its type-level keywords, refs followed)."""
    if isinstance(schema, bool):
        return schema
    if not isinstance(schema, Mapping) or hops > _MAX_REF_HOPS:
        return False
    kind = schema.get("type")
    branches = [schema.get(key) for key in ("anyOf", "oneOf")]
    all_of = schema.get("allOf")
    ref = schema.get("$ref")
    target = resolve(root, ref) if isinstance(ref, str) else (True, "")
    refusals = (
        isinstance(kind, str) and kind != "null",
        isinstance(kind, list) and "null" not in kind,
        "enum" in schema and None not in (schema["enum"] or ()),
        "const" in schema and schema["const"] is not None,
        any(
            isinstance(b, list) and not any(admits_null(x, root, hops) for x in b) for b in branches
        ),
        isinstance(all_of, list) and not all(admits_null(b, root, hops) for b in all_of),
        target is None or not admits_null(target[0], root, hops + 1),
    )
    return not any(refusals)


class Restorer:
    """Undoes strict mode for one tool: drops the nulls sent for optional fields.

    Walks the arguments along the *original* schema and removes a null only where the
    property is optional and null is not valid for it there; a null for a genuinely
    nullable field is kept. Inside anyOf / oneOf it takes the first branch under which
    the restored value is valid (else the one with the fewest errors), so nested
    unions restore the way the model meant them.
    """

    __slots__ = ("_schema", "_validators")

    def __init__(self, schema: Mapping[str, Any]) -> None:
        self._schema: dict[str, Any] = plain_json(schema)
        self._validators: jsonschema_rs.ValidatorMap | None = None

    @property
    def schema(self) -> Mapping[str, Any]:
        """The original schema the restored arguments are meant for."""
        return self._schema

    def restore(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The arguments without strict mode's nulls; the same object if none was sent."""
        restored = self._walk(arguments, self._schema, "#", 0)
        return cast("dict[str, Any]", restored) if isinstance(restored, dict) else arguments

    def _walk(self, value: object, node: object, pointer: str, hops: int) -> object:
        if not isinstance(node, Mapping):
            return value
        ref = node.get("$ref")
        if isinstance(ref, str) and hops < _MAX_REF_HOPS:
            found = resolve(self._schema, ref)
            if found is not None:
                value = self._walk(value, found[0], found[1], hops + 1)
        if isinstance(value, dict):
            value = self._object(value, node, pointer)
        elif isinstance(value, list):
            value = self._array(value, node, pointer)
        for key in ("anyOf", "oneOf"):
            branches = node.get(key)
            if isinstance(branches, list) and branches:
                value = self._choose(value, branches, f"{pointer}/{key}", hops)
        all_of = node.get("allOf")
        if isinstance(all_of, list):
            for i, sub in enumerate(all_of):
                value = self._walk(value, sub, f"{pointer}/allOf/{i}", hops)
        return value

    def _object(self, value: dict[str, Any], node: Mapping[str, Any], pointer: str) -> object:
        props = node.get("properties")
        extra = node.get("additionalProperties")
        if not isinstance(props, Mapping) and not isinstance(extra, Mapping):
            return value
        props = props if isinstance(props, Mapping) else {}
        required = node.get("required")
        required = set(required) if isinstance(required, list) else set()
        out: dict[str, Any] = {}
        changed = False
        for key, item in value.items():
            sub = props.get(key)
            if sub is not None:
                if item is None and key not in required and not admits_null(sub, self._schema):
                    changed = True
                    continue
                new = self._walk(item, sub, f"{pointer}/properties/{_escape(key)}", 0)
            elif isinstance(extra, Mapping):
                new = self._walk(item, extra, f"{pointer}/additionalProperties", 0)
            else:
                new = item
            changed = changed or new is not item
            out[key] = new
        return out if changed else value

    def _array(self, value: list[Any], node: Mapping[str, Any], pointer: str) -> object:
        items = node.get("items")
        prefix = node.get("prefixItems")
        prefix = prefix if isinstance(prefix, list) else []
        out: list[Any] = []
        for i, item in enumerate(value):
            if i < len(prefix):
                out.append(self._walk(item, prefix[i], f"{pointer}/prefixItems/{i}", 0))
            elif isinstance(items, Mapping):
                out.append(self._walk(item, items, f"{pointer}/items", 0))
            else:
                out.append(item)
        changed = any(new is not old for new, old in zip(out, value, strict=True))
        return out if changed else value

    def _choose(self, value: object, branches: list[Any], base: str, hops: int) -> object:
        candidates = [
            self._walk(value, branch, f"{base}/{i}", hops) for i, branch in enumerate(branches)
        ]
        if all(candidate is value for candidate in candidates):
            return value
        validators = self._validator_map()
        if validators is None:
            return value
        scored: list[tuple[int, int]] = []
        for i, candidate in enumerate(candidates):
            validator = validators.get(f"{base}/{i}")
            if validator is None:
                continue
            if validator.is_valid(candidate):
                return candidate
            errors = itertools.islice(validator.iter_errors(candidate), _MAX_ERRORS_COUNTED)
            scored.append((sum(1 for _ in errors), i))
        return candidates[min(scored)[1]] if scored else value

    def _validator_map(self) -> jsonschema_rs.ValidatorMap | None:
        # Compiled on first need: most calls have no union to choose in.
        if self._validators is None:
            try:
                self._validators = compile_validator_map(self._schema)
            except SchemaError:
                return None
        return self._validators
