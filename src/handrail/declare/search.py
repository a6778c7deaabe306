"""Tool search: a ranking index over the registered tools' names, descriptions and parameters.

Owns the words of a tool (`terms`: name segments split at dots, underscores, hyphens and
camelCase, description words, parameter names and their descriptions, lower-cased with
plurals folded), a BM25F ranking over those fields with name matches weighted highest
(`ToolIndex`), and `CatalogueIndex`, which keeps one index per registry version. It never
decides who may see a tool: `search_tools` filters what it ranks through the exposure
rules, so the index holds every registered tool, barred or not.

Pure and deterministic: the same specs and query give the same ranking, ties broken by
name. The work is done when the index is built; a query is a walk over the postings of
its few terms.
"""

from __future__ import annotations

import math
import operator
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from handrail.declare.registry import Registry
    from handrail.spec import ToolSpec

__all__ = ["CatalogueIndex", "SearchHit", "ToolIndex", "terms"]

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_WORD = re.compile(r"[^\W_]+")
_STOP = frozenset(
    {
        *("a", "an", "and", "any", "are", "as", "at", "be", "by", "can", "do", "for", "from"),
        *("get", "has", "have", "how", "if", "in", "into", "is", "it", "its", "me", "my"),
        *("no", "not", "of", "on", "or", "our", "please", "so", "that", "the", "their"),
        *("them", "then", "there", "these", "this", "to", "us", "use", "was", "we", "what"),
        *("when", "where", "which", "who", "will", "with", "you", "your"),
    },
)
# `get` is a stop word: half of all tools start with it and it tells them apart no better
# than `the`; `list`, `create`, `delete` and the like do, and stay.
_PLURALS = (("ies", "y"), ("sses", "ss"), ("xes", "x"), ("ches", "ch"), ("shes", "sh"))
_NOT_PLURAL = ("ss", "us", "is")
_SHORTEST_STEM = 3
"""A plural ending is folded only when at least this many letters remain."""

_MAX_QUERY_CHARS = 1_000
"""A query is read up to here; the search tool's schema refuses longer ones anyway."""
_MAX_QUERY_TERMS = 32
"""Distinct words of a query that count; more only cost time."""
_MAX_SCHEMA_NODES = 256
"""Schema nodes read for parameter names and descriptions, per tool."""
_MAX_SCHEMA_DEPTH = 4
"""How deep nested parameters are read (an object's properties' properties ...)."""

_COMMON_SHARE = 0.5
_COMMON_TOOLS = 64
"""A query word found in more than half of the tools, and in more than 64 of them, is
skipped unless the query has no other words: it tells tools apart hardly at all (`id`
is in most schemas) and would make most of a large catalogue a match, at a cost."""
_SCORE = operator.itemgetter(1)
_K1 = 1.2
_EXACT_NAME = 100.0
"""Added to a tool whose full name is the query: asked for by name, it comes first."""


@dataclass(frozen=True, slots=True)
class _Field:
    """One part of a tool's text: how much a match in it counts, and its length norm."""

    weight: float
    b: float


# Name matches count most: a tool's name is what its author chose to say what it does.
_NAME = _Field(weight=4.0, b=0.3)
_PARAMETERS = _Field(weight=1.5, b=0.5)
_DESCRIPTION = _Field(weight=1.0, b=0.75)
_PARAMETER_TEXT = _Field(weight=0.5, b=0.75)
_FIELDS = (_NAME, _PARAMETERS, _DESCRIPTION, _PARAMETER_TEXT)


def _fold(word: str) -> str:
    """A word with its plural ending folded, the same way for tools and queries."""
    for ending, singular in _PLURALS:
        if word.endswith(ending):
            stem = word[: -len(ending)] + singular
            return stem if len(stem) >= _SHORTEST_STEM else word
    if word.endswith("s") and not word.endswith(_NOT_PLURAL) and len(word) > _SHORTEST_STEM:
        return word[:-1]
    return word


def terms(text: str) -> list[str]:
    """The searchable words of a text, in order: split, lower-cased, plurals folded.

    `createInvoice`, `create_invoice`, `billing.create-invoice` and `Create invoices`
    all give `create`, `invoice` (plus `billing`). Stop words and one-letter words go.
    """
    spaced = _CAMEL.sub(" ", text)
    folded = unicodedata.normalize("NFKC", spaced).casefold()
    return [_fold(word) for word in _WORD.findall(folded) if len(word) > 1 and word not in _STOP]


def _parameters(schema: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """Parameter names and the text describing them, nested ones included (bounded)."""
    names: list[str] = []
    text: list[str] = []
    pending: list[tuple[object, int]] = [(schema, 0)]
    seen = 0
    while pending and seen < _MAX_SCHEMA_NODES:
        node, depth = pending.pop()
        seen += 1
        if not isinstance(node, Mapping) or depth > _MAX_SCHEMA_DEPTH:
            continue
        properties = node.get("properties")
        if isinstance(properties, Mapping):
            for name, sub in properties.items():
                names.extend(terms(str(name)))
                pending.append((sub, depth + 1))
        for key in ("description", "title"):
            value = node.get(key)
            if depth and isinstance(value, str):
                text.extend(terms(value))
        items = node.get("items")
        if isinstance(items, Mapping):
            pending.append((items, depth + 1))
        for key in ("anyOf", "oneOf", "allOf"):
            options = node.get(key)
            if isinstance(options, list | tuple):
                pending.extend((option, depth + 1) for option in options)
    return names, text


def _fields(spec: ToolSpec) -> tuple[list[str], list[str], list[str], list[str]]:
    """A tool's words by field, in the order of `_FIELDS`."""
    parameter_names, parameter_text = _parameters(spec.input_schema)
    return terms(spec.name), parameter_names, terms(spec.description), parameter_text


@dataclass(frozen=True, kw_only=True, slots=True)
class SearchHit:
    """One tool that matched a query, and how well (higher is better)."""

    name: str
    score: float


class ToolIndex:
    """A BM25F ranking of tools: built once from specs, then queried many times.

    A term's weight in a tool is the sum over fields of the field's weight times the
    term's count, normalised by the field's length against the average (`b`); the
    score of a query is, over its distinct words, their inverse document frequency
    times that weight saturated by `k1`. Every term's contribution to every tool is
    worked out when the index is built, so a query only adds numbers.
    """

    __slots__ = ("_common", "_exact", "_names", "_postings")

    def __init__(
        self,
        names: tuple[str, ...],
        postings: Mapping[str, tuple[tuple[int, float], ...]],
    ) -> None:
        self._names = names
        self._postings = postings
        self._exact = {name.casefold(): index for index, name in enumerate(names)}
        most = max(_COMMON_SHARE * len(names), _COMMON_TOOLS)
        self._common = frozenset(term for term, row in postings.items() if len(row) > most)

    @classmethod
    def build(cls, specs: Iterable[ToolSpec]) -> ToolIndex:
        """The index of `specs` (names must be unique, as in a registry)."""
        ordered = sorted(specs, key=lambda spec: spec.name)
        fields = [_fields(spec) for spec in ordered]
        count = len(ordered)
        averages = [
            max(1.0, sum(len(words[f]) for words in fields) / count) if count else 1.0
            for f in range(len(_FIELDS))
        ]
        weighted: dict[str, dict[int, float]] = {}
        for doc, words in enumerate(fields):
            for f, field_words in enumerate(words):
                if not field_words:
                    continue
                spec = _FIELDS[f]
                norm = spec.weight / (1 - spec.b + spec.b * len(field_words) / averages[f])
                for term, tf in Counter(field_words).items():
                    row = weighted.setdefault(term, {})
                    row[doc] = row.get(doc, 0.0) + tf * norm
        postings: dict[str, tuple[tuple[int, float], ...]] = {}
        for term, row in weighted.items():
            idf = math.log(1 + (count - len(row) + 0.5) / (len(row) + 0.5))
            postings[term] = tuple(
                (doc, idf * tf * (_K1 + 1) / (_K1 + tf)) for doc, tf in sorted(row.items())
            )
        return cls(tuple(spec.name for spec in ordered), postings)

    def __len__(self) -> int:
        return len(self._names)

    @property
    def names(self) -> tuple[str, ...]:
        """The indexed tools' names, sorted."""
        return self._names

    def search(self, query: str, *, limit: int | None = None) -> tuple[SearchHit, ...]:
        """The tools matching `query`, best first (ties by name); at most `limit` of them.

        A tool matches when it shares at least one word with the query, or its full
        name is the query. A word found in more than half of the tools (and more
        than 64) counts only when the query has no other. Only the first 1,000
        characters and 32 distinct words of a query count. An empty or
        stop-word-only query matches nothing.
        """
        ranked = self._ranked(query)
        if limit is not None:
            ranked = ranked[: max(0, limit)]
        names = self._names
        return tuple(SearchHit(name=names[doc], score=score) for doc, score in ranked)

    def ranked_names(self, query: str) -> tuple[str, ...]:
        """The names of every tool matching `query`, in the order `search` gives them."""
        names = self._names
        return tuple(names[doc] for doc, _ in self._ranked(query))

    def _ranked(self, query: str) -> list[tuple[int, float]]:
        """(document, score) of every match, best first, ties in name order."""
        text = query[:_MAX_QUERY_CHARS]
        words = sorted(set(terms(text)))[:_MAX_QUERY_TERMS]
        distinctive = [word for word in words if word not in self._common]
        scores: dict[int, float] = {}
        get = scores.get
        postings = self._postings
        for word in distinctive or words:
            for doc, weight in postings.get(word, ()):
                scores[doc] = get(doc, 0.0) + weight
        exact = self._exact.get(text.strip().casefold())
        if exact is not None:
            scores[exact] = get(exact, 0.0) + _EXACT_NAME
        # Documents are numbered in name order: sorted by number, then stably by score.
        return sorted(sorted(scores.items()), key=_SCORE, reverse=True)


class CatalogueIndex:
    """The `ToolIndex` of one registry, rebuilt on the first query after it changed.

    Tools named in `leave_out` are not indexed (the search tool itself: its own
    description's words would only skew the ranking of the others).

    Subscribes to the registry's changes and counts them; `current()` rebuilds when the
    count moved since the index it holds was built. A change that lands while an index
    is built moves the count again, so the next query rebuilds: the index is never
    stale for longer than one query, and a stale index only ranks, it never decides
    what may be shown.
    """

    __slots__ = ("_built", "_changes", "_leave_out", "_registry", "_unsubscribe")

    def __init__(self, registry: Registry, *, leave_out: frozenset[str] = frozenset()) -> None:
        self._registry = registry
        self._leave_out = leave_out
        self._changes = 0
        # One tuple, swapped whole, so that concurrent rebuilds never pair an index
        # with the change count of another.
        self._built: tuple[int, ToolIndex] | None = None
        self._unsubscribe: Callable[[], None] = registry.subscribe(self._changed)

    def current(self) -> ToolIndex:
        """The index of the registry as it is now."""
        changes = self._changes
        built = self._built
        if built is not None and built[0] == changes:
            return built[1]
        leave_out = self._leave_out
        index = ToolIndex.build(s for s in self._registry.specs() if s.name not in leave_out)
        self._built = (changes, index)
        return index

    def close(self) -> None:
        """Stop following the registry (the index in hand stays as it is)."""
        self._unsubscribe()

    def _changed(self, _name: str) -> None:
        self._changes += 1
