"""Projection: the fields of a result the model may see, declared once per tool.

A result passes through an allowlist of dotted paths ("id", "author.name",
"items.sku"); lists are transparent, so a path reaches into every element. Anything
not named is dropped, and lists nested inside the result are capped at `max_items`,
each cut reported as an Omission so the model knows the real count.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import pydantic

from handrail.envelope import Omission
from handrail.errors import ConfigurationError
from handrail.shaping.budget import child_path

__all__ = ["Projection"]

# A leaf (True: keep the whole value) or the allowed members of an object.
_Tree = Mapping[str, "_Tree | Literal[True]"]
_MAX_MODEL_DEPTH = 16


@dataclass(frozen=True, slots=True)
class Projection:
    """A field allowlist for results, plus a cap on nested lists."""

    fields: frozenset[str]
    max_items: int = 100
    _tree: _Tree = field(init=False, repr=False, compare=False)

    def __init__(self, fields: Iterable[str], *, max_items: int = 100) -> None:
        paths = frozenset(fields)
        if not paths:
            raise ConfigurationError("a projection names at least one field")
        if max_items < 1:
            raise ConfigurationError("a projection's max_items is at least 1")
        object.__setattr__(self, "fields", paths)
        object.__setattr__(self, "max_items", max_items)
        object.__setattr__(self, "_tree", _tree_of(paths))

    @classmethod
    def of_model(cls, model: type[pydantic.BaseModel], *, max_items: int = 100) -> Projection:
        """The fields of a pydantic model, nested models (also in lists) included."""
        return cls(_model_paths(model, "", 0), max_items=max_items)

    def apply(self, data: object) -> tuple[Any, tuple[Omission, ...]]:
        """The projected copy of JSON `data`, and the nested lists that were capped.

        A top-level list keeps all its items (cutting it is the budget's concern);
        each item is projected.
        """
        omissions: list[Omission] = []
        if isinstance(data, list):
            out = [
                self._walk(item, self._tree, child_path("$", i), omissions)
                for i, item in enumerate(data)
            ]
        else:
            out = self._walk(data, self._tree, "$", omissions)
        return out, tuple(omissions)

    def apply_item(self, item: object) -> tuple[Any, tuple[Omission, ...]]:
        """One item of a list result projected, paths relative to it (`$`)."""
        omissions: list[Omission] = []
        return self._walk(item, self._tree, "$", omissions), tuple(omissions)

    def _walk(self, value: object, tree: _Tree, path: str, omissions: list[Omission]) -> Any:  # noqa: ANN401 - JSON
        if isinstance(value, dict):
            kept: dict[str, Any] = {}
            for key, sub in tree.items():
                if key in value:
                    child = child_path(path, key)
                    item = value[key]
                    kept[key] = (
                        self._cap(item, child, omissions)
                        if sub is True
                        else self._walk(item, sub, child, omissions)
                    )
            return kept
        if isinstance(value, list):
            return [
                self._walk(item, tree, child_path(path, i), omissions)
                for i, item in enumerate(self._capped(value, path, omissions))
            ]
        # A scalar where an object was expected: its fields cannot be chosen, so it
        # is withheld rather than shown unprojected.
        return None

    def _cap(self, value: object, path: str, omissions: list[Omission]) -> Any:  # noqa: ANN401 - JSON
        """A whole value kept as it is, except that lists inside it are capped."""
        if isinstance(value, list):
            return [
                self._cap(item, child_path(path, i), omissions)
                for i, item in enumerate(self._capped(value, path, omissions))
            ]
        if isinstance(value, dict):
            return {k: self._cap(v, child_path(path, k), omissions) for k, v in value.items()}
        return value

    def _capped(self, items: list[Any], path: str, omissions: list[Omission]) -> list[Any]:
        if len(items) <= self.max_items:
            return items
        omissions.append(Omission(path=path, unit="items", kept=self.max_items, total=len(items)))
        return items[: self.max_items]


def _tree_of(paths: Iterable[str]) -> _Tree:
    tree: dict[str, Any] = {}
    for path in sorted(paths, key=len):
        parts = path.split(".")
        if not all(parts):
            raise ConfigurationError(f"projection path {path!r} has an empty segment")
        node = tree
        for part in parts[:-1]:
            sub = node.setdefault(part, {})
            if sub is True:
                break  # a shorter path already keeps the whole value
            node = sub
        else:
            node[parts[-1]] = True
    return tree


def _model_paths(model: type[pydantic.BaseModel], prefix: str, depth: int) -> list[str]:
    if depth > _MAX_MODEL_DEPTH:
        raise ConfigurationError(f"result model {model.__name__} nests too deeply to project")
    paths: list[str] = []
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        nested = _nested_model(info.annotation)
        if nested is None:
            paths.append(path)
        else:
            paths.extend(_model_paths(nested, f"{path}.", depth + 1))
    return paths


def _nested_model(annotation: object) -> type[pydantic.BaseModel] | None:
    """The model inside `Model`, `Model | None`, `list[Model]` and the like, if one."""
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin in {list, tuple, set, frozenset, typing.Union, types.UnionType}:
        models = {m for arg in typing.get_args(annotation) if (m := _nested_model(arg))}
        if len(models) == 1:
            return models.pop()
    return None
