"""SchemaStore: schema documents the host registers by URI, the only place `$ref`s resolve.

Owns the documents (checked and copied when added) and the resolution of a tool
schema's references to them, once, at registration, into a self-contained schema:
each referenced part becomes a `$defs` entry and its `$ref` a local pointer, so the
model reads every definition it must satisfy and the gate validates exactly that. It
never fetches anything: a URI that is not in the store is a SchemaError.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urldefrag, urljoin, urlsplit

import jsonschema_rs

from handrail.errors import SchemaError

__all__ = ["SchemaStore"]

_DRAFT = "https://json-schema.org/draft/2020-12/schema"
_ROOT = "urn:handrail:input-schema"
# Keywords whose values are subschemas (JSON Schema 2020-12, core and applicators).
_ONE = (
    "additionalProperties",
    "propertyNames",
    "items",
    "contains",
    "not",
    "if",
    "then",
    "else",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contentSchema",
)
_MANY = ("allOf", "anyOf", "oneOf", "prefixItems")
# Named subschemas; the first three are evaluated, the last two are only places to refer to.
_NAMED = ("properties", "patternProperties", "dependentSchemas", "$defs", "definitions")
# Dynamic references depend on the path evaluation took, which a copy cannot keep.
_DYNAMIC = ("$dynamicRef", "$dynamicAnchor", "$recursiveRef", "$recursiveAnchor")
# Dropped from copied parts: every reference into them is rewritten to a local pointer.
_RESOURCE_KEYWORDS = ("$id", "$anchor", "$schema", "$vocabulary", "$defs", "definitions")
_KEY = re.compile(r"[^A-Za-z0-9_]+")
_MAX_SHOWN = 120


def _copy(document: object, what: str) -> Any:  # noqa: ANN401 - any JSON value
    """A deep copy that is plain JSON, or a SchemaError saying why it is not."""
    try:
        return json.loads(json.dumps(document, allow_nan=False))
    except (TypeError, ValueError, RecursionError) as exc:
        raise SchemaError(f"{what} is not plain JSON: {str(exc)[:_MAX_SHOWN]}") from exc


def _subschemas(node: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    """(keyword, subschema) for every subschema directly inside a schema object."""
    for keyword in _ONE:
        if keyword in node:
            yield keyword, node[keyword]
    for keyword in _MANY:
        if isinstance(node.get(keyword), list):
            yield from ((keyword, sub) for sub in node[keyword])
    for keyword in _NAMED:
        if isinstance(node.get(keyword), Mapping):
            yield from ((keyword, sub) for sub in node[keyword].values())


def _has_dynamic(schema: object) -> bool:
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            if any(keyword in node for keyword in _DYNAMIC):
                return True
            stack.extend(sub for _, sub in _subschemas(node))
    return False


def _external_refs(schema: object) -> bool:
    """Whether a schema has a `$ref` that is not a plain fragment (`#...`)."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            ref = node.get("$ref")
            if isinstance(ref, str) and not ref.startswith("#"):
                return True
            stack.extend(sub for _, sub in _subschemas(node))
    return False


def _refuse_relative(schema: object) -> None:
    """SchemaError for a relative `$ref` in a schema without `$id` to resolve it against."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            ref = node.get("$ref")
            if isinstance(ref, str) and not ref.startswith("#") and not _absolute(ref):
                msg = (
                    f"the reference {ref[:_MAX_SHOWN]!r} is relative, but the schema has no "
                    f"$id to resolve it against; use the document's full URI"
                )
                raise SchemaError(msg)
            stack.extend(sub for _, sub in _subschemas(node))


def _absolute(uri: str) -> bool:
    parts = urlsplit(uri)
    return bool(parts.scheme) and bool(parts.netloc or parts.path) and " " not in uri


class SchemaStore:
    """Schema documents by absolute URI, for `$ref`s in raw tool schemas.

    `add(uri, document)` stores a copy; `Tool.from_json_schema(..., schemas=store)` (or
    `compile_validator(schema, schemas=store)`) resolves the schema's references from
    here at registration. A document may itself refer to other stored documents, by
    absolute or relative URI, JSON Pointer or `$anchor`. Only Draft 2020-12 documents
    without dynamic references are taken. Nothing is ever retrieved from the network.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._documents: dict[str, Any] = {}

    def add(self, uri: str, document: Mapping[str, Any]) -> None:
        """Store `document` under `uri`, an absolute URI without a fragment.

        Refuses (SchemaError) another document under a URI already taken, a document
        that is not a valid Draft 2020-12 schema object, one whose `$id` names another
        URI, and one with `$dynamicRef` or `$dynamicAnchor`.
        """
        if not isinstance(uri, str) or not _absolute(uri) or "#" in uri:
            msg = f"a schema document is stored under an absolute URI without '#', not {uri!r}"
            raise SchemaError(msg[: _MAX_SHOWN * 2])
        if not isinstance(document, Mapping):
            msg = f"the schema document for {uri!r} must be a JSON object"
            raise SchemaError(msg)
        copied = _copy(document, f"the schema document for {uri!r}")
        if copied.get("$schema", _DRAFT) != _DRAFT:
            raise SchemaError(f"the schema document for {uri!r} is not Draft 2020-12")
        declared = copied.get("$id")
        if declared is not None and urldefrag(urljoin(uri, str(declared))).url != uri:
            msg = f"the schema document for {uri!r} declares another $id, {declared!r}"
            raise SchemaError(msg[: _MAX_SHOWN * 2])
        if _has_dynamic(copied):
            msg = f"the schema document for {uri!r} uses dynamic references, which are not taken"
            raise SchemaError(msg)
        try:
            jsonschema_rs.meta.validate(copied)
        except (jsonschema_rs.ValidationError, jsonschema_rs.ReferencingError) as exc:
            msg = f"the schema document for {uri!r} is not a valid schema: {exc}"
            raise SchemaError(msg[: _MAX_SHOWN * 3]) from exc
        with self._lock:
            if self._documents.get(uri, copied) != copied:
                raise SchemaError(f"another schema document is already stored under {uri!r}")
            self._documents[uri] = copied

    def __contains__(self, uri: object) -> bool:
        return uri in self._documents

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._documents))

    def __len__(self) -> int:
        return len(self._documents)

    def resolve(self, schema: Mapping[str, Any]) -> dict[str, Any]:
        """`schema` with every non-local `$ref` resolved from this store, self-contained.

        Each referenced part becomes a `$defs` entry (named after its URI) and each
        reference to it a local pointer; parts are copied with their own references
        rewritten the same way, so recursion across documents stays recursion. A schema
        whose references are all local comes back as a copy. Raises SchemaError for a
        URI that is not stored, a relative reference in a schema without `$id`, and a
        schema with dynamic references.
        """
        root = _copy(schema, "the schema")
        if not _external_refs(root):
            return dict(root)
        with self._lock:
            documents = dict(self._documents)
        return _Resolution(root, documents).run()


class _Resolution:
    """One schema's references, resolved from a snapshot of the store's documents."""

    def __init__(self, root: dict[str, Any], documents: Mapping[str, Any]) -> None:
        if _has_dynamic(root):
            msg = "a schema with dynamic references cannot refer to stored documents"
            raise SchemaError(msg)
        declared = root.get("$id")
        self._root_uri = _ROOT if declared is None else urldefrag(str(declared)).url
        if declared is None:
            _refuse_relative(root)
        if not _absolute(self._root_uri):
            msg = f"the schema's $id {declared!r} must be an absolute URI to resolve references"
            raise SchemaError(msg[: _MAX_SHOWN * 2])
        if self._root_uri in documents:
            msg = f"the schema's $id {self._root_uri!r} is also a stored document"
            raise SchemaError(msg[: _MAX_SHOWN * 2])
        self._root = root
        self._documents = documents
        self._missing: list[str] = []
        try:
            registry = jsonschema_rs.Registry(
                [(self._root_uri, root), *documents.items()],
                retriever=self._refuse,
            )
        except (ValueError, jsonschema_rs.ReferencingError) as exc:
            raise self._unresolved(str(exc)) from exc
        self._resolver = registry.resolver(self._root_uri)
        existing = root.get("$defs")
        self._defs: dict[str, Any] = dict(existing) if isinstance(existing, Mapping) else {}
        self._names: set[str] = set(self._defs)
        self._entries: dict[str, str] = {}

    def _refuse(self, uri: str) -> Any:  # noqa: ANN401 - the library's retriever signature
        self._missing.append(uri)
        msg = f"{uri[:_MAX_SHOWN]!r} is not in the schema store"
        raise SchemaError(msg)

    def _unresolved(self, detail: str) -> SchemaError:
        if self._missing:
            return SchemaError(
                f"the schema refers to {self._missing[0][:_MAX_SHOWN]!r}, which is not in the "
                f"schema store; add the document with SchemaStore.add(uri, document) and pass "
                f"schemas=store (documents are never fetched)",
            )
        return SchemaError(f"a reference in the schema cannot be resolved: {detail[:_MAX_SHOWN]}")

    def run(self) -> dict[str, Any]:
        root: dict[str, Any] = self._rewrite(self._root, self._root_uri, copied=False)
        if self._entries:
            root["$defs"] = self._defs
        return root

    def _rewrite(self, node: object, base: str, *, copied: bool) -> Any:  # noqa: ANN401
        """The subschema `node` with its references rewritten; `copied` parts lose ids."""
        if not isinstance(node, Mapping):
            return node
        out = dict(node)
        if isinstance(node.get("$id"), str) and node is not self._root:
            if not copied:
                # A local pointer written below it would resolve in the nested resource.
                msg = "a nested $id in a schema that refers to stored documents is not taken"
                raise SchemaError(msg)
            base = urldefrag(urljoin(base, node["$id"])).url
        ref = node.get("$ref")
        if isinstance(ref, str):
            out["$ref"] = self._reference(ref, base)
        for keyword in _ONE:
            if keyword in node:
                out[keyword] = self._rewrite(node[keyword], base, copied=copied)
        for keyword in _MANY:
            if isinstance(node.get(keyword), list):
                out[keyword] = [self._rewrite(sub, base, copied=copied) for sub in node[keyword]]
        for keyword in _NAMED[:3] if copied else _NAMED:
            if isinstance(node.get(keyword), Mapping):
                out[keyword] = {
                    name: self._rewrite(sub, base, copied=copied)
                    for name, sub in node[keyword].items()
                }
        if copied:
            for keyword in _RESOURCE_KEYWORDS:
                out.pop(keyword, None)
        return out

    def _reference(self, ref: str, base: str) -> str:
        # A URN base (the schema without $id) takes fragments only; urljoin would drop it.
        joined = base + ref if ref.startswith("#") else urljoin(base, ref)
        document, fragment = urldefrag(joined)
        if document == self._root_uri:
            # Into the tool's own schema, which keeps no nested $id: a fragment resolves there.
            return f"#{fragment}"
        target = f"{document}#{fragment}" if fragment else document
        return f"#/$defs/{self._entry(target)}"

    def _entry(self, target: str) -> str:
        """The `$defs` name holding the copied target, copying it on first use."""
        known = self._entries.get(target)
        if known is not None:
            return known
        try:
            resolved = self._resolver.lookup(target)
        except (jsonschema_rs.ReferencingError, ValueError) as exc:
            raise self._unresolved(str(exc)) from exc
        name = self._name_for(target)
        self._entries[target] = name
        self._defs[name] = {}  # reserved before the copy, so recursion finds it
        contents = resolved.contents
        self._defs[name] = self._rewrite(contents, resolved.resolver.base_uri, copied=True)
        return name

    def _name_for(self, target: str) -> str:
        document, fragment = urldefrag(target)
        stem = document.rstrip("/").rsplit("/", 1)[-1].split(".", 1)[0]
        tail = fragment.rstrip("/").rsplit("/", 1)[-1] if fragment else ""
        name = _KEY.sub("_", f"{stem}_{tail}" if tail else stem).strip("_") or "schema"
        if not name[0].isalpha():
            name = f"s_{name}"
        candidate, number = name, 1
        while candidate in self._names:
            number += 1
            candidate = f"{name}_{number}"
        self._names.add(candidate)
        return candidate
