"""SKILL.md split into its YAML front matter and its body, with the line of every key.

Owns the `---` fences and the YAML: safe loading only, and no anchors or aliases at all
(a billion-laughs document is refused at its first anchor, before anything expands),
no nesting deeper than a few levels, text keys only, no key twice. Line numbers are
those of the file, counted from 1. It never checks what the keys mean (`_checks` does).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

__all__ = ["FrontMatter", "FrontMatterError", "parse_skill_md"]

_FENCE = "---"
_MAX_DEPTH = 8
_STR_TAG = "tag:yaml.org,2002:str"
_YAML_BREAKS = frozenset("\x85\u2028\u2029")
"""Characters YAML counts as line breaks besides CR and LF: they would shift the lines."""


class FrontMatterError(Exception):
    """SKILL.md cannot be read as front matter and body; `line` says where (1-based)."""

    def __init__(self, line: int | None, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.message = message


@dataclass(frozen=True, kw_only=True, slots=True)
class FrontMatter:
    """The keys of the front matter with their values and lines, and the body after it."""

    values: Mapping[str, object]
    lines: Mapping[str, int]
    """The line of each key."""
    item_lines: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    """For a key whose value is a list: the line of each item."""
    body: str
    body_line: int
    """The line the body starts on."""


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing anchors and aliases and deep nesting."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: object) -> Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise yaml.composer.ComposerError(
                None,
                None,
                "anchors and aliases (& and *) are not allowed in front matter",
                event.start_mark,
            )
        self._depth += 1
        try:
            if self._depth > _MAX_DEPTH:
                raise yaml.composer.ComposerError(
                    None,
                    None,
                    f"front matter nests deeper than {_MAX_DEPTH} levels",
                    event.start_mark,
                )
            return super().compose_node(parent, index)  # type: ignore[arg-type]
        finally:
            self._depth -= 1


def parse_skill_md(text: str) -> FrontMatter:
    """Split SKILL.md's text and load its front matter; FrontMatterError says what is wrong."""
    lines = text.split("\n")
    if not lines or lines[0].rstrip() != _FENCE:
        raise FrontMatterError(1, "SKILL.md must start with a '---' line opening the front matter")
    closing = next((i for i in range(1, len(lines)) if lines[i].rstrip() == _FENCE), None)
    if closing is None:
        raise FrontMatterError(1, "the front matter opened on line 1 is never closed by '---'")
    for index in range(1, closing):
        if _YAML_BREAKS.intersection(lines[index]):
            raise FrontMatterError(
                index + 1,
                "the front matter holds a line separator other than a line feed",
            )
    node = _compose("\n".join(lines[1:closing]))
    if not isinstance(node, MappingNode):
        line = None if node is None else _line(node)
        raise FrontMatterError(line or 1, "the front matter must be a mapping of keys to values")
    values: dict[str, object] = {}
    key_lines: dict[str, int] = {}
    item_lines: dict[str, tuple[int, ...]] = {}
    for key_node, value_node in node.value:
        if not isinstance(key_node, ScalarNode) or key_node.tag != _STR_TAG:
            raise FrontMatterError(_line(key_node), "front matter keys must be plain text")
        key = str(key_node.value)
        if key in values:
            raise FrontMatterError(_line(key_node), f"key {key!r} appears twice")
        values[key] = _construct(value_node)
        key_lines[key] = _line(key_node)
        if isinstance(value_node, SequenceNode):
            item_lines[key] = tuple(_line(item) for item in value_node.value)
    return FrontMatter(
        values=MappingProxyType(values),
        lines=MappingProxyType(key_lines),
        item_lines=MappingProxyType(item_lines),
        body="\n".join(lines[closing + 1 :]),
        body_line=closing + 2,
    )


def _line(node: Node) -> int:
    """The file line of a node: YAML counts from 0, and the front matter starts on line 2."""
    return int(node.start_mark.line) + 2


def _compose(text: str) -> Node | None:
    loader = _Loader(text)
    try:
        return loader.get_single_node()
    except yaml.MarkedYAMLError as exc:
        raise _located(exc) from None
    except yaml.YAMLError as exc:  # pragma: no cover - PyYAML marks what it refuses
        raise FrontMatterError(None, f"the front matter is not valid YAML: {exc}") from None
    finally:
        loader.dispose()


def _construct(node: Node) -> Any:  # noqa: ANN401 - a YAML value
    loader = _Loader("")
    try:
        return loader.construct_object(node, deep=True)
    except yaml.MarkedYAMLError as exc:
        raise _located(exc) from None
    finally:
        loader.dispose()


def _located(exc: yaml.MarkedYAMLError) -> FrontMatterError:
    mark = exc.problem_mark or exc.context_mark
    line = None if mark is None else int(mark.line) + 2
    problem = exc.problem or exc.context or "not valid YAML"
    return FrontMatterError(line, f"the front matter is not valid YAML: {problem}")
