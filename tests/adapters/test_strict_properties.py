"""Property: strict mode loses nothing a valid call can say, for representative signatures.

For values valid under a tool's original schema: fill every absent optional field with
null (what strict mode makes the model send) → valid under the strict schema → restore
→ the original value again. The one exception strict mode cannot avoid: an absent
field that is nullable in the original comes back as null (the model cannot say
"absent" there), which the original schema accepts as well.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field

from handrail import RiskLevel, Tool, tool
from handrail.adapters._strict import Restorer, make_strict
from handrail.declare.schema import ArgumentValidator, compile_validator

Triple = tuple[Any, Any, Any]
"""(original value, the value strict mode makes the model send, what restore must give)."""

MAX_DEPTH = 3
CHARACTERS = st.characters(codec="utf-8")


class Item(BaseModel):
    sku: Annotated[str, Field(pattern=r"^[A-Z]{2}[0-9]{3}$")]
    quantity: Annotated[int, Field(ge=1, le=99)] = 1


class Address(BaseModel):
    street: Annotated[str, Field(min_length=1, max_length=40)]
    city: str = "Paris"
    zip_code: Annotated[str, Field(pattern=r"^[0-9]{5}$")] | None = None


class Cat(BaseModel):
    kind: Literal["cat"]
    lives: Annotated[int, Field(ge=0, le=9)] = 9


class Dog(BaseModel):
    kind: Literal["dog"]
    good: bool | None = True


class Tree(BaseModel):
    label: str
    children: list[Tree] = []
    weight: float | None = None


class Filters(BaseModel):
    in_stock: bool = False
    genres: Annotated[list[Literal["fiction", "history", "science"]], Field(max_length=3)] = []


@tool(risk=RiskLevel.L0_PUBLIC_READ, namespace="shop")
def search(
    query: Annotated[str, Field(min_length=1, max_length=100)],
    limit: Annotated[int, Field(ge=1, le=20)] = 5,
    filters: Filters | None = None,
) -> None:
    """Search the catalogue."""


@tool(risk=RiskLevel.L0_PUBLIC_READ, namespace="shop")
def quote(
    address: Address,
    items: Annotated[list[Item], Field(min_length=1, max_length=4)],
    express: bool = False,
    note: str | None = None,
    gift_to: Address | None = None,
    discount: Annotated[float, Field(ge=0, le=1)] = 0.0,
) -> None:
    """Quote a shipment."""


@tool(risk=RiskLevel.L0_PUBLIC_READ, namespace="pets")
def adopt(
    pet: Annotated[Cat | Dog, Field(discriminator="kind")],
    count: int | str = 1,
    colour: Literal["black", "white"] | None = "black",
) -> None:
    """Adopt a pet."""


@tool(risk=RiskLevel.L0_PUBLIC_READ, namespace="garden")
def plant(tree: Tree, depth: Annotated[int, Field(ge=0)] = 3) -> None:
    """Plant a tree."""


def _nullable(schema: Mapping[str, Any]) -> bool:
    kind = schema.get("type")
    branches = schema.get("anyOf") or schema.get("oneOf") or []
    return (
        kind == "null"
        or (isinstance(kind, list) and "null" in kind)
        or {"type": "null"} in (branches)
    )


class Values:
    """Triples for values valid under one schema (the subset pydantic derives)."""

    def __init__(self, root: Mapping[str, Any]) -> None:
        self.root = root

    def of(self, schema: Mapping[str, Any], depth: int = 0) -> st.SearchStrategy[Triple]:
        if "$ref" in schema:
            name = schema["$ref"].rsplit("/", 1)[-1]
            return st.deferred(lambda: self.of(self.root["$defs"][name], depth))
        branches = schema.get("anyOf") or schema.get("oneOf")
        if branches:
            return st.one_of([self.of(branch, depth) for branch in branches])
        if "const" in schema:
            return st.just((schema["const"],) * 3)
        if "enum" in schema:
            return st.sampled_from(schema["enum"]).map(lambda v: (v, v, v))
        return self.typed(schema, depth)

    def typed(self, schema: Mapping[str, Any], depth: int) -> st.SearchStrategy[Triple]:
        kind = schema["type"]
        plain: st.SearchStrategy[Any]
        if kind == "object":
            return self.object(schema, depth)
        if kind == "array":
            low = schema.get("minItems", 0)
            high = max(low, min(schema.get("maxItems", 3), 0 if depth >= MAX_DEPTH else 3))
            items = st.lists(self.of(schema["items"], depth + 1), min_size=low, max_size=high)
            return items.map(_columns)
        if kind == "string":
            pattern = schema.get("pattern")
            low = schema.get("minLength", 0)
            plain = (
                st.from_regex(pattern, fullmatch=True)
                if pattern
                else st.text(CHARACTERS, min_size=low, max_size=max(low, 12))
            )
        elif kind == "integer":
            plain = st.integers(schema.get("minimum", -(10**6)), schema.get("maximum", 10**6))
        elif kind == "number":
            plain = st.floats(
                schema.get("minimum", -1e6), schema.get("maximum", 1e6), allow_nan=False
            )
        elif kind == "boolean":
            plain = st.booleans()
        else:
            plain = st.none()
        return plain.map(lambda v: (v, v, v))

    def object(self, schema: Mapping[str, Any], depth: int) -> st.SearchStrategy[Triple]:
        required = set(schema.get("required", []))
        fields: list[st.SearchStrategy[tuple[str, Triple | None]]] = []
        for name, sub in schema.get("properties", {}).items():
            present = self.of(sub, depth + 1).map(functools.partial(_named, name))
            if name in required:
                fields.append(present)
            elif depth >= MAX_DEPTH:
                fields.append(st.just((name, None)))
            else:
                fields.append(st.just((name, None)) | present)
        nullable = {n for n, s in schema.get("properties", {}).items() if _nullable(s)}
        return st.tuples(*fields).map(lambda parts: _assemble(parts, nullable))


def _named(name: str, triple: Triple) -> tuple[str, Triple | None]:
    return name, triple


def _columns(triples: list[Triple]) -> Triple:
    return tuple([triple[k] for triple in triples] for k in range(3))  # type: ignore[return-value]


def _assemble(parts: tuple[tuple[str, Triple | None], ...], nullable: set[str]) -> Triple:
    original: dict[str, Any] = {}
    sent: dict[str, Any] = {}
    expected: dict[str, Any] = {}
    for name, triple in parts:
        if triple is None:
            sent[name] = None
            if name in nullable:
                expected[name] = None
            continue
        original[name], sent[name], expected[name] = triple
    return original, sent, expected


TOOLS = [search, quote, adopt, plant]


def _compiled(
    chosen: Tool,
) -> tuple[st.SearchStrategy[Triple], ArgumentValidator, ArgumentValidator, Restorer]:
    schema = dict(chosen.spec.input_schema)
    converted = make_strict(chosen.name, schema)
    assert converted.restorer is not None
    strategy = Values(schema).of(schema)
    return (
        strategy,
        compile_validator(converted.schema),
        compile_validator(schema),
        converted.restorer,
    )


CASES = {chosen.name: _compiled(chosen) for chosen in TOOLS}


def _check(name: str) -> Callable[[Triple], None]:
    _, strict_validator, original_validator, restorer = CASES[name]

    def check(triple: Triple) -> None:
        original, sent, expected = triple
        assert original_validator.errors(original) == {}
        assert strict_validator.errors(sent) == {}
        restored = restorer.restore(sent)
        assert restored == expected
        assert original_validator.errors(restored) == {}

    return check


@pytest.mark.parametrize("name", list(CASES))
def test_filled_nulls_are_valid_strict_and_restore_to_the_original(name: str) -> None:
    strategy = CASES[name][0]
    check = _check(name)

    @settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
    @given(strategy)
    def run(triple: Triple) -> None:
        check(triple)

    run()
