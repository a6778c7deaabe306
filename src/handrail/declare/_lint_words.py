"""Words of tool names and descriptions, for `handrail tools lint`.

Owns the splitting of names (dots, snake_case, kebab-case, camelCase) and of prose into
folded words, the synonym table that makes `search`, `grep`, `lookup` and `find` one
verb, and the overlap measure that finds near-duplicate tools. Pure text; it never
reads a registry.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from types import MappingProxyType

__all__ = ["SYNONYMS", "VAGUE_WORDS", "description_words", "name_words", "overlap"]

_GROUPS: dict[str, tuple[str, ...]] = {
    "find": (
        "search",
        "grep",
        "lookup",
        "look",
        "find",
        "query",
        "get",
        "fetch",
        "read",
        "retrieve",
        "list",
        "show",
        "locate",
        "browse",
    ),
    "create": ("create", "add", "new", "insert", "make", "register"),
    "update": ("update", "edit", "modify", "change", "set", "patch", "amend", "rename"),
    "delete": ("delete", "remove", "drop", "destroy", "erase", "purge"),
    "send": ("send", "post", "notify", "email", "mail", "message", "publish"),
    "run": ("run", "execute", "exec", "invoke", "call", "trigger", "start", "launch"),
}
SYNONYMS = MappingProxyType({word: verb for verb, words in _GROUPS.items() for word in words})
"""Each verb a tool name may start with, mapped to the one verb it means to a model."""

VAGUE_WORDS = frozenset(
    {
        "action",
        "api",
        "data",
        "do",
        "func",
        "function",
        "general",
        "generic",
        "handle",
        "handler",
        "helper",
        "it",
        "item",
        "main",
        "manage",
        "misc",
        "my",
        "op",
        "perform",
        "process",
        "stuff",
        "temp",
        "test",
        "thing",
        "things",
        "tmp",
        "tool",
        "tools",
        "util",
        "utils",
        "utility",
    },
)
"""Words that say nothing about what a tool does or to what."""

_STOP = frozenset(
    [
        "a",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "by",
        "can",
        "for",
        "from",
        "given",
        "in",
        "into",
        "is",
        "it",
        "its",
        "of",
        "on",
        "one",
        "or",
        "that",
        "the",
        "their",
        "them",
        "this",
        "to",
        "use",
        "used",
        "uses",
        "using",
        "when",
        "which",
        "with",
        "without",
        "you",
        "your",
    ],
)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_SPLIT = re.compile(r"[^A-Za-z0-9]+")
_WORD = re.compile(r"[a-z][a-z0-9]+")
_MIN_STEM = 4


def _fold(word: str) -> str:
    word = word.lower()
    if len(word) > _MIN_STEM and word.endswith("ies"):
        word = word[:-3] + "y"
    elif len(word) >= _MIN_STEM and word.endswith("s") and not word.endswith("ss"):
        word = word[:-1]
    return SYNONYMS.get(word, word)


def name_words(name: str) -> frozenset[str]:
    """The folded words of a tool name: `crm.searchCustomers` → {crm, find, customer}."""
    parts = (p for chunk in _SPLIT.split(name) for p in _CAMEL.split(chunk))
    return frozenset(_fold(p) for p in parts if p)


def description_words(text: str) -> frozenset[str]:
    """The folded content words of a description: no stop words, plurals and synonyms folded."""
    return frozenset(_fold(w) for w in _WORD.findall(text.lower()) if w not in _STOP)


def overlap(left: Iterable[str], right: Iterable[str]) -> float:
    """Jaccard overlap of two word sets: 1.0 for the same words, 0.0 for none shared."""
    a, b = frozenset(left), frozenset(right)
    union = a | b
    return len(a & b) / len(union) if union else 0.0
