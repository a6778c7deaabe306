"""A local store of schema documents by URI, resolved at registration (issue 13, item 4).

Raw schemas that `$ref` other documents (OpenAPI components, `$defs` split across
files) register when the host has put those documents in a SchemaStore. References
are resolved from the store only, once, into a self-contained model-facing schema:
the model reads every definition it must satisfy and the gate enforces the same.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from handrail import (
    BusinessValue,
    ErrorCode,
    Gate,
    Principal,
    Registry,
    RiskLevel,
    SchemaStore,
    Tool,
    ToolCall,
)
from handrail.declare.schema import compile_validator
from handrail.errors import IdentityParameterError, SchemaError

pytestmark = pytest.mark.anyio

WHO = Principal(user_id="u", tenant_id="t")
BASE = "https://schemas.example.com/"

ADDRESS: dict[str, Any] = {
    "$id": BASE + "common/address.json",
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 40},
        "zip": {"$ref": "#/$defs/zip"},
        "location": {"$ref": "geo.json#/$defs/point"},
    },
    "required": ["city", "zip"],
    "additionalProperties": False,
    "$defs": {"zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
}
GEO: dict[str, Any] = {
    "$defs": {
        "point": {
            "type": "object",
            "properties": {"lat": {"$ref": "#degrees"}, "lon": {"$ref": "#degrees"}},
            "required": ["lat", "lon"],
        },
        "degrees": {"$anchor": "degrees", "type": "number", "minimum": -180, "maximum": 180},
    },
}
NODE: dict[str, Any] = {
    "type": "object",
    "properties": {
        "label": {"type": "string"},
        "depth": {"type": "integer"},
        "children": {"type": "array", "items": {"$ref": "#"}},
    },
    "required": ["label"],
}
OPENAPI: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "Pets", "version": "1"},
    "paths": {},
    "components": {
        "schemas": {
            "Pet": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "kind": {"$ref": "#/components/schemas/Kind"},
                    "age": {"type": "integer", "minimum": 0},
                },
                "required": ["name", "kind"],
            },
            "Kind": {"enum": ["cat", "dog"]},
        },
    },
}


def _store() -> SchemaStore:
    store = SchemaStore()
    store.add(BASE + "common/address.json", ADDRESS)
    store.add(BASE + "common/geo.json", GEO)
    store.add(BASE + "tree/node.json", NODE)
    store.add("https://api.example.com/openapi.json", OPENAPI)
    return store


SHIP: dict[str, Any] = {
    "$id": BASE + "tools/ship.json",
    "type": "object",
    "properties": {
        "to": {"$ref": "../common/address.json"},
        "tree": {"$ref": BASE + "tree/node.json"},
        "pet": {"$ref": "https://api.example.com/openapi.json#/components/schemas/Pet"},
        "weight": {"$ref": "#/$defs/kg"},
    },
    "required": ["to"],
    "$defs": {"kg": {"type": "number", "exclusiveMinimum": 0}},
}


def _references(schema: object) -> Iterator[str]:
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "$ref":
                yield value
            else:
                yield from _references(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from _references(item)


def _ship(received: list[dict[str, Any]], store: SchemaStore | None) -> Tool:
    return Tool.from_json_schema(
        name="post.ship",
        description="Ship a parcel.",
        input_schema=SHIP,
        fn=lambda arguments, _ctx: received.append(arguments),
        risk=RiskLevel.L1_INTERNAL_READ,
        schemas=store,
    )


def test_a_schema_that_references_stored_documents_registers() -> None:
    spec = _ship([], _store()).spec
    assert spec.input_schema["properties"]["weight"] == {"$ref": "#/$defs/kg"}


def test_the_model_facing_schema_is_self_contained() -> None:
    schema = dict(_ship([], _store()).spec.input_schema)
    references = list(_references(schema))
    assert references
    assert all(reference.startswith("#") for reference in references)
    assert "$id" not in str({key: value for key, value in schema.items() if key != "$id"})
    # The referenced definitions themselves are there for the model to read.
    assert "^[0-9]{5}$" in str(schema)
    assert "'cat', 'dog'" in str(schema)


async def test_the_gate_enforces_what_the_stored_documents_say() -> None:
    received: list[dict[str, Any]] = []
    registry = Registry()
    registry.register(_ship(received, _store()))
    gate = Gate(registry)
    good = {
        "to": {"city": "Lyon", "zip": "69001", "location": {"lat": 45.7, "lon": 4.8}},
        "tree": {"label": "a", "children": [{"label": "b", "children": [{"label": "c"}]}]},
        "pet": {"name": "Rex", "kind": "dog", "age": 3.0},
        "weight": 2.5,
    }
    ok = await gate.handle(ToolCall(id="c1", name="post.ship", arguments=good), WHO)
    assert ok.ok
    assert received[0]["pet"]["age"] == 3
    assert type(received[0]["pet"]["age"]) is int
    bad = {
        "to": {"city": "Lyon", "zip": "6900", "location": {"lat": 95.0, "lon": 400}},
        "tree": {"label": "a", "children": [{"children": []}]},
        "pet": {"name": "Tom", "kind": "cow"},
    }
    refused = await gate.handle(ToolCall(id="c2", name="post.ship", arguments=bad), WHO)
    assert refused.error_type is ErrorCode.INVALID_ARGUMENTS
    assert set(refused.field_errors) == {
        "$.to.zip",
        "$.to.location.lon",
        "$.tree.children[0].label",
        "$.pet.kind",
    }
    assert len(received) == 1


def test_a_reference_to_a_document_not_in_the_store_is_a_schema_error_at_registration() -> None:
    with pytest.raises(SchemaError):
        _ship([], SchemaStore())
    with pytest.raises(SchemaError):
        _ship([], None)


def test_a_relative_reference_needs_an_id_to_resolve_against() -> None:
    store = _store()
    schema = {"type": "object", "properties": {"to": {"$ref": "common/address.json"}}}
    with pytest.raises(SchemaError):
        Tool.from_json_schema(
            name="post.ship",
            description="Ship a parcel.",
            input_schema=schema,
            fn=lambda arguments, _ctx: None,
            risk=RiskLevel.L1_INTERNAL_READ,
            schemas=store,
        )


def test_the_identity_check_reads_the_stored_documents_too() -> None:
    store = SchemaStore()
    store.add(BASE + "owner.json", {"type": "object", "properties": {"tenant_id": {}}})
    schema = {"type": "object", "properties": {"owner": {"$ref": BASE + "owner.json"}}}

    def build(**options: Any) -> Tool:
        return Tool.from_json_schema(
            name="acct.owner",
            description="Set the owner.",
            input_schema=schema,
            fn=lambda arguments, _ctx: None,
            risk=RiskLevel.L1_INTERNAL_READ,
            schemas=store,
            **options,
        )

    with pytest.raises(IdentityParameterError) as caught:
        build()
    pointer = str(caught.value).split("business_values={'")[1].split("'")[0]
    declared = build(business_values={pointer: BusinessValue(reason="the leasing tenant")})
    assert list(declared.spec.business_values) == [pointer]


def test_compile_validator_resolves_references_from_the_store() -> None:
    validator = compile_validator(
        {
            "type": "object",
            "properties": {
                "pet": {"$ref": "https://api.example.com/openapi.json#/components/schemas/Pet"}
            },
        },
        schemas=_store(),
    )
    assert validator.errors({"pet": {"name": "x", "kind": "dog"}}) == {}
    assert set(validator.errors({"pet": {"name": "x", "kind": "owl"}})) == {"$.pet.kind"}


# --- the store itself ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "uri",
    ["address.json", "/schemas/address.json", BASE + "a.json#/x", "", "not a uri"],
)
def test_a_document_is_stored_under_an_absolute_uri_without_a_fragment(uri: str) -> None:
    with pytest.raises(SchemaError):
        SchemaStore().add(uri, {"type": "string"})


@pytest.mark.parametrize(
    "document",
    [
        {"$schema": "http://json-schema.org/draft-07/schema#", "type": "string"},
        {"type": "nonsense"},
        {"$id": BASE + "elsewhere.json", "type": "string"},
        {"$dynamicRef": "#node"},
        [],
        "string",
    ],
    ids=["draft-07", "invalid", "other-id", "dynamic-ref", "list", "text"],
)
def test_a_document_the_store_cannot_resolve_the_same_way_is_refused(document: object) -> None:
    with pytest.raises(SchemaError):
        SchemaStore().add(BASE + "doc.json", document)  # type: ignore[arg-type]


def test_a_uri_holds_one_document() -> None:
    store = SchemaStore()
    store.add(BASE + "doc.json", {"type": "string"})
    store.add(BASE + "doc.json", {"type": "string"})  # the same document again is fine
    with pytest.raises(SchemaError):
        store.add(BASE + "doc.json", {"type": "integer"})
    assert BASE + "doc.json" in store
    assert list(store) == [BASE + "doc.json"]


def test_a_stored_document_is_a_copy_the_host_cannot_change_afterwards() -> None:
    document: dict[str, Any] = {"type": "string"}
    store = SchemaStore()
    store.add(BASE + "doc.json", document)
    document["type"] = "integer"
    validator = compile_validator(
        {"type": "object", "properties": {"x": {"$ref": BASE + "doc.json"}}},
        schemas=store,
    )
    assert validator.errors({"x": "text"}) == {}


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"x": {"$ref": BASE + "missing.json"}}},
        {"type": "object", "properties": {"x": {"$ref": BASE + "common/geo.json#/$defs/none"}}},
        {"type": "object", "properties": {"x": {"$ref": BASE + "common/geo.json#nowhere"}}},
        {
            "type": "object",
            "properties": {"x": {"$ref": BASE + "common/geo.json"}},
            "$defs": {"d": {"$dynamicAnchor": "d"}},
        },
        {"$id": "tools/ship.json", "type": "object", "properties": {"x": {"$ref": "a.json"}}},
        {
            "$id": BASE + "common/geo.json",
            "type": "object",
            "properties": {"x": {"$ref": "a.json"}},
        },
        {
            "$id": BASE + "tools/t.json",
            "type": "object",
            "properties": {
                "x": {"$id": "inner.json", "properties": {"y": {"$ref": "../common/geo.json"}}},
            },
        },
        {"type": "object", "properties": {"x": {"$ref": BASE + "common/geo.json"}}, "bad": {1, 2}},
        {
            "type": "object",
            "properties": {"x": {"$ref": BASE + "common/geo.json"}},
            "n": float("nan"),
        },
    ],
    ids=[
        "missing-document",
        "missing-pointer",
        "missing-anchor",
        "dynamic-anchor",
        "relative-id",
        "id-of-a-stored-document",
        "nested-id",
        "not-json",
        "nan",
    ],
)
def test_references_the_store_cannot_resolve_faithfully_are_schema_errors(
    schema: dict[str, Any],
) -> None:
    with pytest.raises(SchemaError):
        _store().resolve(schema)


def test_copied_parts_are_named_after_their_uri_without_clashing() -> None:
    store = SchemaStore()
    store.add(BASE + "v1/2item.json", {"type": "string"})
    store.add(BASE + "v2/2item.json", {"type": "integer"})
    store.add(BASE + "x/kg.json", {"type": "number"})
    resolved = store.resolve(
        {
            "type": "object",
            "properties": {
                "a": {"$ref": BASE + "v1/2item.json"},
                "b": {"anyOf": [{"$ref": BASE + "v2/2item.json"}, {"type": "null"}]},
                "c": {"$ref": BASE + "x/kg.json"},
                "d": {"$ref": BASE + "x/kg.json"},
            },
            "$defs": {"kg": {"type": "number", "minimum": 0}},
        },
    )
    names = [resolved["properties"][key].get("$ref") for key in "acd"]
    names.append(resolved["properties"]["b"]["anyOf"][0]["$ref"])
    assert names[1] == names[2]
    assert len({names[0], names[1], names[3]}) == 3
    assert all(name.startswith("#/$defs/") for name in names)
    assert resolved["$defs"]["kg"] == {"type": "number", "minimum": 0}
    assert all(name.removeprefix("#/$defs/")[0].isalpha() for name in names)
