"""Projection: only allowlisted fields reach the model; nested lists are capped and counted."""

from __future__ import annotations

import pydantic
import pytest

from handrail.envelope import Omission
from handrail.errors import ConfigurationError
from handrail.shaping.project import Projection


class Author(pydantic.BaseModel):
    name: str


class Line(pydantic.BaseModel):
    sku: str
    qty: int


class Order(pydantic.BaseModel):
    id: str
    author: Author | None
    lines: list[Line]
    total: int


def test_unknown_fields_are_dropped_at_every_level() -> None:
    projection = Projection(["id", "author.name", "lines.sku"])
    data = {
        "id": "o1",
        "internal_cost": 3,
        "author": {"name": "Ann", "email": "ann@example.com"},
        "lines": [{"sku": "a", "supplier": "x"}, {"sku": "b", "supplier": "y"}],
    }
    out, omissions = projection.apply(data)
    assert out == {"id": "o1", "author": {"name": "Ann"}, "lines": [{"sku": "a"}, {"sku": "b"}]}
    assert omissions == ()
    assert data["author"] == {"name": "Ann", "email": "ann@example.com"}  # input untouched


def test_a_top_level_list_is_projected_item_by_item_and_not_capped() -> None:
    projection = Projection(["id"], max_items=2)
    out, omissions = projection.apply([{"id": i, "secret": i} for i in range(5)])
    assert out == [{"id": i} for i in range(5)]
    assert omissions == ()


def test_nested_lists_are_capped_with_their_real_count() -> None:
    projection = Projection(["tags", "lines.sku"], max_items=2)
    out, omissions = projection.apply(
        {"tags": ["a", "b", "c"], "lines": [{"sku": str(i)} for i in range(4)]},
    )
    assert out == {"tags": ["a", "b"], "lines": [{"sku": "0"}, {"sku": "1"}]}
    assert set(omissions) == {
        Omission(path="$.tags", unit="items", kept=2, total=3),
        Omission(path="$.lines", unit="items", kept=2, total=4),
    }


def test_a_scalar_where_an_object_was_declared_is_withheld() -> None:
    out, _ = Projection(["author.name"]).apply({"author": "Ann <ann@example.com>"})
    assert out == {"author": None}


def test_a_shorter_path_keeps_the_whole_value() -> None:
    projection = Projection(["author", "author.name"])
    out, _ = projection.apply({"author": {"name": "A", "bio": "B"}})
    assert out == {"author": {"name": "A", "bio": "B"}}


def test_a_pydantic_result_model_declares_the_projection() -> None:
    projection = Projection.of_model(Order, max_items=10)
    assert projection.fields == {"id", "author.name", "lines.sku", "lines.qty", "total"}
    out, _ = projection.apply(
        {
            "id": "o",
            "author": {"name": "A", "x": 1},
            "lines": [{"sku": "s", "qty": 1, "y": 2}],
            "total": 3,
            "margin": 9,
        },
    )
    assert out == {
        "id": "o",
        "author": {"name": "A"},
        "lines": [{"sku": "s", "qty": 1}],
        "total": 3,
    }


def test_items_are_projected_with_paths_relative_to_them() -> None:
    projection = Projection(["tags"], max_items=1)
    out, omissions = projection.apply_item({"tags": [1, 2], "x": 0})
    assert out == {"tags": [1]}
    assert omissions == (Omission(path="$.tags", unit="items", kept=1, total=2),)


@pytest.mark.parametrize("fields", [[], ["a..b"], [".a"], ["a."]])
def test_bad_projections_are_refused(fields: list[str]) -> None:
    with pytest.raises(ConfigurationError):
        Projection(fields)


def test_max_items_must_be_positive() -> None:
    with pytest.raises(ConfigurationError):
        Projection(["a"], max_items=0)
