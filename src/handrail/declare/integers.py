"""Integer places of a schema, found at registration: whole-number floats become int.

JSON Schema counts `10.0` as an integer, so a validated value may hold a float where
the schema says integer. Owns compiling a schema, once, into a converter that visits
only the parts of a value where an integer may stand (through properties, patterns,
arrays, unions, conditionals and `$ref`s, recursion included), and the conversion:
a whole-number float there becomes the int it equals. It never rounds (a fraction
fails the schema before this runs) and never validates. A whole number beyond
±(2**53 - 1) is reported instead, since its JSON text may already have been rounded.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol
from urllib.parse import unquote, urldefrag, urljoin

__all__ = ["IntegerPlaces", "UnsafeIntegerError"]

_SAFE_INTEGER = 2**53 - 1
_ROOT = "urn:handrail:integers"
_BUILDING = object()
# Values no integer place can change: nothing below them needs checking.
_UNCHANGED = frozenset({str, int, bool, type(None)})

Pointer = tuple[str, ...]
Check = Callable[[Any], bool]


class UnsafeIntegerError(ValueError):
    """A whole-number float at an integer place is outside ±(2**53 - 1)."""

    def __init__(self) -> None:
        super().__init__("a whole number is outside the safe integer range of ±(2**53 - 1)")
        self.path: list[str | int] = []


class _Node(Protocol):
    def convert(self, value: Any) -> Any:  # noqa: ANN401 - any JSON value
        """The value with the integer places below this subschema converted."""
        ...


class _Int(_Node):
    __slots__ = ()

    def convert(self, value: Any) -> Any:  # noqa: ANN401 - any JSON value
        if isinstance(value, float) and value.is_integer():
            if not -_SAFE_INTEGER <= value <= _SAFE_INTEGER:
                raise UnsafeIntegerError
            return int(value)
        return value


class _Object(_Node):
    __slots__ = ("_additional", "_integers", "_named", "_patterns", "_properties")

    def __init__(
        self,
        properties: dict[str, _Node],
        patterns: tuple[tuple[Check, _Node | None], ...],
        additional: _Node | None,
    ) -> None:
        self._properties = properties
        self._patterns = patterns
        self._additional = additional
        # The common case, looked up without a call: properties that are integers.
        self._integers = tuple(key for key, node in properties.items() if type(node) is _Int)
        self._named = tuple(
            (key, node)
            for key, node in properties.items()
            if type(node) is not _Int and type(node) is not _Nothing
        )

    def convert(self, value: Any) -> Any:  # noqa: ANN401 - any JSON value
        if type(value) is not dict and not isinstance(value, Mapping):
            return value
        if self._patterns or self._additional is not None:
            return self._convert_all(value)
        # Only the named properties can hold integers: look them up, not every key.
        changed: dict[str, Any] | None = None
        for key in self._integers:
            old = value.get(key)
            if type(old) is float:
                new = _child(_INT, old, key)
                if new is not old:
                    changed = changed if changed is not None else dict(value)
                    changed[key] = new
        for key, node in self._named:
            if key in value:
                old = value[key]
                new = _child(node, old, key)
                if new is not old:
                    changed = changed if changed is not None else dict(value)
                    changed[key] = new
        return value if changed is None else changed

    def _convert_all(self, value: Mapping[str, Any]) -> Mapping[str, Any]:
        changed: dict[str, Any] | None = None
        for key, old in value.items():
            new = old
            named = self._properties.get(key)
            matched = named is not None
            if named is not None:
                new = _child(named, new, key)
            for matches, pattern_node in self._patterns:
                if matches(key):
                    matched = True
                    if pattern_node is not None:
                        new = _child(pattern_node, new, key)
            if not matched and self._additional is not None:
                new = _child(self._additional, new, key)
            if new is not old:
                changed = changed if changed is not None else dict(value)
                changed[key] = new
        return value if changed is None else changed


_INT = _Int()


class _Array(_Node):
    __slots__ = ("_contains", "_prefix", "_rest")

    def __init__(
        self,
        prefix: tuple[_Node | None, ...],
        rest: _Node | None,
        contains: tuple[Check | None, _Node] | None,
    ) -> None:
        self._prefix = prefix
        self._rest = rest
        self._contains = contains

    def convert(self, value: Any) -> Any:  # noqa: ANN401 - any JSON value
        if not isinstance(value, list | tuple):
            return value
        changed: list[Any] | None = None
        count = len(self._prefix)
        for index, old in enumerate(value):
            new = old
            node = self._prefix[index] if index < count else self._rest
            if node is not None:
                new = _child(node, new, index)
            if self._contains is not None:
                check, matching = self._contains
                if check is None or check(new):
                    new = _child(matching, new, index)
            if new is not old:
                changed = changed if changed is not None else list(value)
                changed[index] = new
        return value if changed is None else changed


class _All(_Node):
    __slots__ = ("_nodes",)

    def __init__(self, nodes: tuple[_Node, ...]) -> None:
        self._nodes = nodes

    def convert(self, value: Any) -> Any:  # noqa: ANN401 - any JSON value
        for node in self._nodes:
            value = node.convert(value)
        return value


class _Branches(_Node):
    """anyOf / oneOf: the integer places of every branch the value satisfies."""

    __slots__ = ("_branches",)

    def __init__(self, branches: tuple[tuple[Check | None, _Node], ...]) -> None:
        self._branches = branches

    def convert(self, value: Any) -> Any:  # noqa: ANN401 - any JSON value
        if type(value) in _UNCHANGED:
            return value
        for check, node in self._branches:
            if check is None or check(value):
                value = node.convert(value)
        return value


class _Conditional(_Node):
    __slots__ = ("_check", "_else", "_if", "_then")

    def __init__(
        self,
        check: Check | None,
        when: _Node | None,
        then: _Node | None,
        otherwise: _Node | None,
    ) -> None:
        self._check = check
        self._if = when
        self._then = then
        self._else = otherwise

    def convert(self, value: Any) -> Any:  # noqa: ANN401 - any JSON value
        if type(value) in _UNCHANGED:
            return value
        holds = self._check is None or self._check(value)
        for node in (self._if, self._then) if holds else (self._else,):
            if node is not None:
                value = node.convert(value)
        return value


class _Dependent(_Node):
    __slots__ = ("_schemas",)

    def __init__(self, schemas: dict[str, _Node]) -> None:
        self._schemas = schemas

    def convert(self, value: Any) -> Any:  # noqa: ANN401 - any JSON value
        if isinstance(value, Mapping):
            for key, node in self._schemas.items():
                if key in value:
                    value = node.convert(value)
        return value


class _Later(_Node):
    """A reference to a node still being built (recursion); filled in afterwards."""

    __slots__ = ("target",)

    def __init__(self) -> None:
        self.target: _Node | None = None

    def convert(self, value: Any) -> Any:  # noqa: ANN401 - any JSON value
        return value if self.target is None else self.target.convert(value)


def _child(node: _Node, value: Any, where: str | int) -> Any:  # noqa: ANN401 - any JSON value
    try:
        return node.convert(value)
    except UnsafeIntegerError as exc:
        exc.path.insert(0, where)
        raise


def _says_integer(schema: Mapping[str, Any]) -> bool:
    kind = schema.get("type")
    if kind == "integer" or (isinstance(kind, list) and "integer" in kind):
        return True
    values = list(schema.get("enum", ())) if isinstance(schema.get("enum"), list) else []
    if "const" in schema:
        values.append(schema["const"])
    return any(isinstance(v, int) and not isinstance(v, bool) for v in values)


def _token(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


class _Compiler:
    """Builds the converter of one schema document; refs resolve within the document."""

    def __init__(
        self,
        root: Mapping[str, Any],
        checks: Callable[[str], Check | None],
        patterns: Callable[[str], Check],
    ) -> None:
        self._root = root
        self._checks = checks
        self._patterns = patterns
        self._resources: dict[str, Pointer] = {}
        self._anchors: dict[tuple[str, str], Pointer] = {}
        self._bases: dict[Pointer, str] = {}
        self._index()
        self._places: set[Pointer] = set()
        self._built: dict[Pointer, _Node | object | None] = {}
        self._pending: dict[Pointer, list[_Later]] = {}

    # -- the document's resources and anchors --------------------------------------------------

    def _index(self) -> None:
        declared = self._root.get("$id")
        root_base = urldefrag(declared).url if isinstance(declared, str) else _ROOT
        self._resources[root_base] = ()
        stack: list[tuple[object, str, Pointer]] = [(self._root, root_base, ())]
        while stack:
            current, base, at = stack.pop()
            if isinstance(current, list):
                stack.extend((item, base, (*at, str(i))) for i, item in enumerate(current))
                continue
            if not isinstance(current, Mapping):
                continue
            if at and isinstance(current.get("$id"), str):
                base = urldefrag(_join(base, current["$id"])).url
                self._resources.setdefault(base, at)
            self._bases[at] = base
            for keyword in ("$anchor", "$dynamicAnchor"):
                if isinstance(current.get(keyword), str):
                    self._anchors.setdefault((base, current[keyword]), at)
            stack.extend(
                (value, base, (*at, str(key)))
                for key, value in current.items()
                if isinstance(value, Mapping | list)
            )

    def _resolve(self, pointer: Pointer, ref: str) -> Pointer | None:
        base = self._bases.get(pointer, _ROOT)
        document, fragment = urldefrag(_join(base, ref))
        start = self._resources.get(document)
        if start is None:  # pragma: no cover - the validator compiled it, so it resolves
            return None
        if not fragment:
            return start
        if fragment.startswith("/"):
            return (*start, *(_token(unquote(t)) for t in fragment[1:].split("/")))
        return self._anchors.get((document, unquote(fragment)))

    def _at(self, pointer: Pointer) -> object:
        node: Any = self._root
        try:
            for token in pointer:
                node = node[int(token)] if isinstance(node, list) else node[token]
        except (KeyError, IndexError, ValueError, TypeError):  # pragma: no cover - it resolves
            return None
        return node

    # -- which places may hold an integer ---------------------------------------------------

    def _edges(self, pointer: Pointer, node: Mapping[str, Any]) -> list[Pointer]:
        out: list[Pointer] = []
        for keyword in ("properties", "patternProperties", "dependentSchemas"):
            if isinstance(node.get(keyword), Mapping):
                out.extend((*pointer, keyword, str(name)) for name in node[keyword])
        for keyword in ("allOf", "anyOf", "oneOf", "prefixItems"):
            if isinstance(node.get(keyword), list):
                out.extend((*pointer, keyword, str(i)) for i in range(len(node[keyword])))
        single = (
            "additionalProperties",
            "unevaluatedProperties",
            "items",
            "unevaluatedItems",
            "contains",
            "if",
            "then",
            "else",
        )
        out.extend((*pointer, keyword) for keyword in single if keyword in node)
        for keyword in ("$ref", "$dynamicRef"):
            if isinstance(node.get(keyword), str):
                target = self._resolve(pointer, node[keyword])
                if target is not None:
                    out.append(target)
        return out

    def integer_places(self) -> set[Pointer]:
        """Pointers of the subschemas from which an integer place can be reached."""
        parents: dict[Pointer, set[Pointer]] = {}
        direct: list[Pointer] = []
        seen: set[Pointer] = set()
        stack: list[Pointer] = [()]
        while stack:
            pointer = stack.pop()
            if pointer in seen:
                continue
            seen.add(pointer)
            node = self._at(pointer)
            if not isinstance(node, Mapping):
                continue
            if _says_integer(node):
                direct.append(pointer)
            for child in self._edges(pointer, node):
                parents.setdefault(child, set()).add(pointer)
                stack.append(child)
        reach: set[Pointer] = set()
        while direct:
            pointer = direct.pop()
            if pointer not in reach:
                reach.add(pointer)
                direct.extend(parents.get(pointer, ()))
        return reach

    # -- building the converter ------------------------------------------------------------

    def build(self, places: set[Pointer]) -> _Node | None:
        self._places = places
        return self._node(())

    def _node(self, pointer: Pointer) -> _Node | None:
        if pointer not in self._places:
            return None
        if pointer in self._built:
            built = self._built[pointer]
            if built is _BUILDING:  # a recursive reference: filled in when done
                later = _Later()
                self._pending.setdefault(pointer, []).append(later)
                return later
            return built  # type: ignore[return-value]
        self._built[pointer] = _BUILDING
        node = self._at(pointer)
        parts = self._parts(pointer, node) if isinstance(node, Mapping) else []
        result: _Node | None = (
            parts[0] if len(parts) == 1 else _All(tuple(parts)) if parts else None
        )
        self._built[pointer] = result
        for later in self._pending.pop(pointer, []):
            later.target = result
        return result

    def _parts(self, pointer: Pointer, node: Mapping[str, Any]) -> list[_Node]:
        parts: list[_Node] = []
        if _says_integer(node):
            parts.append(_Int())
        obj = self._object(pointer, node)
        if obj is not None:
            parts.append(obj)
        array = self._array(pointer, node)
        if array is not None:
            parts.append(array)
        for keyword in ("$ref", "$dynamicRef"):
            if isinstance(node.get(keyword), str):
                target = self._resolve(pointer, node[keyword])
                built = None if target is None else self._node(target)
                if built is not None:
                    parts.append(built)
        if isinstance(node.get("allOf"), list):
            parts.extend(
                built
                for i in range(len(node["allOf"]))
                if (built := self._node((*pointer, "allOf", str(i)))) is not None
            )
        for keyword in ("anyOf", "oneOf"):
            if isinstance(node.get(keyword), list):
                branches = tuple(
                    (self._checks(_key((*pointer, keyword, str(i)))), built)
                    for i in range(len(node[keyword]))
                    if (built := self._node((*pointer, keyword, str(i)))) is not None
                )
                if branches:
                    parts.append(_Branches(branches))
        conditional = self._conditional(pointer, node)
        if conditional is not None:
            parts.append(conditional)
        if isinstance(node.get("dependentSchemas"), Mapping):
            dependent = {
                str(name): built
                for name in node["dependentSchemas"]
                if (built := self._node((*pointer, "dependentSchemas", str(name)))) is not None
            }
            if dependent:
                parts.append(_Dependent(dependent))
        return parts

    def _object(self, pointer: Pointer, node: Mapping[str, Any]) -> _Node | None:
        properties: dict[str, _Node] = {}
        named = node.get("properties")
        if isinstance(named, Mapping):
            for name in named:
                built = self._node((*pointer, "properties", str(name)))
                if built is not None:
                    properties[str(name)] = built
        patterns: list[tuple[Check, _Node | None]] = []
        any_pattern = False
        if isinstance(node.get("patternProperties"), Mapping):
            for pattern in node["patternProperties"]:
                built = self._node((*pointer, "patternProperties", str(pattern)))
                any_pattern = any_pattern or built is not None
                patterns.append((self._patterns(str(pattern)), built))
        additional = self._node((*pointer, "additionalProperties"))
        if additional is None:
            additional = self._node((*pointer, "unevaluatedProperties"))
        if not properties and not any_pattern and additional is None:
            return None
        if additional is not None:
            # Every declared name takes part in deciding what is "additional".
            for name in named if isinstance(named, Mapping) else ():
                properties.setdefault(str(name), _Nothing())
        return _Object(properties, tuple(patterns) if any_pattern or additional else (), additional)

    def _array(self, pointer: Pointer, node: Mapping[str, Any]) -> _Node | None:
        prefix: tuple[_Node | None, ...] = ()
        if isinstance(node.get("prefixItems"), list):
            prefix = tuple(
                self._node((*pointer, "prefixItems", str(i)))
                for i in range(len(node["prefixItems"]))
            )
        rest = self._node((*pointer, "items"))
        if rest is None and "items" not in node:
            rest = self._node((*pointer, "unevaluatedItems"))
        contains_node = self._node((*pointer, "contains"))
        contains = None
        if contains_node is not None:
            contains = (self._checks(_key((*pointer, "contains"))), contains_node)
        if all(p is None for p in prefix) and rest is None and contains is None:
            return None
        return _Array(prefix, rest, contains)

    def _conditional(self, pointer: Pointer, node: Mapping[str, Any]) -> _Node | None:
        if "if" not in node:
            return None
        when = self._node((*pointer, "if"))
        then = self._node((*pointer, "then"))
        otherwise = self._node((*pointer, "else"))
        if when is None and then is None and otherwise is None:
            return None
        return _Conditional(self._checks(_key((*pointer, "if"))), when, then, otherwise)


class _Nothing(_Node):
    __slots__ = ()

    def convert(self, value: Any) -> Any:  # noqa: ANN401 - any JSON value
        return value


def _join(base: str, ref: str) -> str:
    # A URN base takes fragments only; urljoin would drop it.
    return base + ref if ref.startswith("#") else urljoin(base, ref)


def _key(pointer: Pointer) -> str:
    return "#" + "".join(f"/{_escape(token)}" for token in pointer)


class IntegerPlaces:
    """The converter of one schema: whole-number floats at integer places become int."""

    __slots__ = ("_root",)

    def __init__(self, root: _Node) -> None:
        self._root = root

    @classmethod
    def find(
        cls,
        schema: Mapping[str, Any],
        *,
        checks: Callable[[str], Check | None],
        patterns: Callable[[str], Check],
    ) -> IntegerPlaces | None:
        """The converter for `schema`, or None when no integer can stand anywhere in it.

        `checks(pointer)` gives a validity check for the subschema at a JSON Pointer
        (`#/anyOf/0`); it is asked only for unions, conditionals and `contains` that
        lead to an integer place. `patterns(regex)` gives a key check with the
        validator's own regular expressions, for `patternProperties`.
        """
        compiler = _Compiler(schema, checks, patterns)
        places = compiler.integer_places()
        if not places:
            return None
        root = compiler.build(places)
        return None if root is None else cls(root)

    def convert(self, value: Any) -> Any:  # noqa: ANN401 - any JSON value
        """`value` with whole-number floats at integer places as int; the same object if none.

        Raises UnsafeIntegerError (with `.path`) for one beyond ±(2**53 - 1).
        """
        return self._root.convert(value)

    @property
    def converter(self) -> Callable[[Any], Any]:
        """`convert` itself, one call shorter, for callers that convert on every call."""
        return self._root.convert
