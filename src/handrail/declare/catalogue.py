"""The approved catalogue: what the model sees of each tool, as a reviewed JSON file.

Owns the catalogue document (`Catalogue.of(specs)`, `to_json`), reading one back from
an untrusted file (bounded in size and depth, every field checked, each entry's hash
recomputed) and `diff`: what a model will see differently between two catalogues. A
description is how the model chooses among tools, so a changed one is a reviewed
change. It never registers, exposes or runs a tool.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date
from enum import StrEnum
from pathlib import Path
from types import MappingProxyType
from typing import Any

from handrail.canonical import canonical_json, sha256_hex
from handrail.errors import ConfigurationError, HandrailError
from handrail.spec import Deprecation, RiskLevel, SideEffect, ToolSpec

__all__ = [
    "CATALOGUE_FORMAT",
    "MAX_CATALOGUE_BYTES",
    "Catalogue",
    "CatalogueEntry",
    "CatalogueError",
    "Change",
    "ChangeKind",
    "diff",
]

CATALOGUE_FORMAT = "handrail.catalogue/1"
MAX_CATALOGUE_BYTES = 16 * 1024 * 1024
"""A catalogue file larger than this is refused unread (10,000 tools fit easily)."""
_MAX_TOOLS = 10_000
_MAX_NAME = 128
_MAX_TEXT = 16_384


class CatalogueError(ConfigurationError):
    """A catalogue file that is not a catalogue: unreadable, too large, or malformed."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CatalogueEntry:
    """One tool as the model sees it, with the facts a reviewer approves.

    `description` is the text every definition writer sends (`ToolSpec.model_description`,
    deprecation notice included). `hash` covers what the model reads: name, description
    and schema.
    """

    name: str
    description: str
    input_schema: Mapping[str, Any]
    schema_version: str
    description_version: str
    risk: RiskLevel
    side_effect: SideEffect
    owner: str | None
    deprecation: Deprecation | None
    rate_limit: str | None
    defer_loading: bool

    @classmethod
    def of(cls, spec: ToolSpec) -> CatalogueEntry:
        """The entry of a registered spec."""
        return cls(
            name=spec.name,
            description=spec.model_description,
            input_schema=_plain(spec.input_schema),
            schema_version=spec.schema_version,
            description_version=spec.description_version,
            risk=spec.risk,
            side_effect=spec.side_effect,
            owner=spec.owner,
            deprecation=spec.deprecation,
            rate_limit=spec.rate_limit,
            defer_loading=spec.defer_loading,
        )

    @property
    def hash(self) -> str:
        """SHA-256 of the canonical JSON of name, description and schema."""
        seen = {"name": self.name, "description": self.description, "schema": self.input_schema}
        return sha256_hex(canonical_json(seen))

    def document(self) -> dict[str, Any]:
        """The entry as JSON, in the order a reviewer reads it."""
        deprecation = self.deprecation
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": _plain(self.input_schema),
            "schema_version": self.schema_version,
            "description_version": self.description_version,
            "risk": self.risk.name,
            "side_effect": self.side_effect.value,
            "owner": self.owner,
            "deprecation": None
            if deprecation is None
            else {
                "after": deprecation.after.isoformat(),
                "replacement": deprecation.replacement,
                "note": deprecation.note,
            },
            "rate_limit": self.rate_limit,
            "defer_loading": self.defer_loading,
            "hash": self.hash,
        }


@dataclass(frozen=True, slots=True)
class Catalogue:
    """Entries by tool name."""

    tools: Mapping[str, CatalogueEntry]

    def __post_init__(self) -> None:
        object.__setattr__(self, "tools", MappingProxyType(dict(sorted(self.tools.items()))))

    @classmethod
    def of(cls, specs: Iterable[ToolSpec]) -> Catalogue:
        """The catalogue of these specs."""
        return cls({spec.name: CatalogueEntry.of(spec) for spec in specs})

    def document(self) -> dict[str, Any]:
        """The whole catalogue as JSON: a format tag and the entries by name."""
        return {
            "format": CATALOGUE_FORMAT,
            "tools": [entry.document() for entry in self.tools.values()],
        }

    def to_json(self) -> str:
        """Indented JSON with a final newline, stable for the same catalogue."""
        return json.dumps(self.document(), indent=2, ensure_ascii=False) + "\n"

    @classmethod
    def parse(cls, text: str | bytes) -> Catalogue:
        """Read a catalogue document; CatalogueError naming the first problem found."""
        if len(text) > MAX_CATALOGUE_BYTES:
            raise CatalogueError(f"a catalogue is at most {MAX_CATALOGUE_BYTES} bytes")
        try:
            document = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise CatalogueError(f"not JSON: {str(exc)[:160]}") from None
        if not isinstance(document, dict) or document.get("format") != CATALOGUE_FORMAT:
            raise CatalogueError(
                f"not a catalogue: expected an object with format {CATALOGUE_FORMAT!r}"
            )
        tools = document.get("tools")
        if not isinstance(tools, list) or len(tools) > _MAX_TOOLS:
            raise CatalogueError(f"'tools' must be a list of at most {_MAX_TOOLS} entries")
        entries: dict[str, CatalogueEntry] = {}
        for index, raw in enumerate(tools):
            entry = _entry(raw, f"tools[{index}]")
            if entry.name in entries:
                raise CatalogueError(f"tools[{index}]: {entry.name!r} is listed twice")
            entries[entry.name] = entry
        return cls(entries)

    @classmethod
    def load(cls, path: Path) -> Catalogue:
        """Read a catalogue file, refusing one over `MAX_CATALOGUE_BYTES` before reading it."""
        with path.open("rb") as handle:
            data = handle.read(MAX_CATALOGUE_BYTES + 1)
        try:
            return cls.parse(data)
        except CatalogueError as exc:
            raise CatalogueError(f"{path}: {exc}") from None


def _plain(value: Any) -> Any:  # noqa: ANN401 - JSON
    """A frozen schema as plain dicts and lists, for JSON and for hashing."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _text(raw: Mapping[str, Any], key: str, where: str, *, optional: bool = False) -> Any:  # noqa: ANN401
    value = raw.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str) or len(value) > _MAX_TEXT:
        raise CatalogueError(f"{where}.{key} must be a string of at most {_MAX_TEXT} characters")
    return value


def _entry(raw: object, where: str) -> CatalogueEntry:
    if not isinstance(raw, dict):
        raise CatalogueError(f"{where} must be an object")
    name = _text(raw, "name", where)
    if not name or len(name) > _MAX_NAME or not name.isprintable():
        raise CatalogueError(f"{where}.name must be a tool name of at most {_MAX_NAME} characters")
    schema = raw.get("input_schema")
    if not isinstance(schema, dict):
        raise CatalogueError(f"{where}.input_schema must be an object")
    defer = raw.get("defer_loading", False)
    if not isinstance(defer, bool):
        raise CatalogueError(f"{where}.defer_loading must be true or false")
    try:
        entry = CatalogueEntry(
            name=name,
            description=_text(raw, "description", where),
            input_schema=schema,
            schema_version=_text(raw, "schema_version", where),
            description_version=_text(raw, "description_version", where),
            risk=RiskLevel[_text(raw, "risk", where)],
            side_effect=SideEffect(_text(raw, "side_effect", where)),
            owner=_text(raw, "owner", where, optional=True),
            deprecation=_deprecation(raw.get("deprecation"), f"{where}.deprecation"),
            rate_limit=_text(raw, "rate_limit", where, optional=True),
            defer_loading=defer,
        )
    except (KeyError, ValueError) as exc:
        raise CatalogueError(f"{where}: unknown risk or side effect ({exc})") from None
    try:
        computed = entry.hash
    except (ValueError, TypeError, RecursionError):
        raise CatalogueError(
            f"{where}.input_schema is not plain JSON (too deep, or a bad number)"
        ) from None
    if raw.get("hash") != computed:
        # Edited by hand after export: the approval no longer says what it covers.
        raise CatalogueError(
            f"{where} ({name}): hash does not match its name, description and schema"
        )
    return entry


def _deprecation(raw: object, where: str) -> Deprecation | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise CatalogueError(f"{where} must be an object or null")
    after = _text(raw, "after", where)
    try:
        return Deprecation(
            after=date.fromisoformat(after),
            replacement=_text(raw, "replacement", where, optional=True),
            note=_text(raw, "note", where),
        )
    except (ValueError, HandrailError) as exc:
        raise CatalogueError(f"{where}: {str(exc)[:160]}") from None


class ChangeKind(StrEnum):
    """What changed for the model between two catalogues."""

    ADDED = "added"
    REMOVED = "removed"
    DESCRIPTION = "description"
    SCHEMA = "schema"
    RISK = "risk"
    SIDE_EFFECT = "side_effect"
    DEPRECATION = "deprecation"
    DEFERRED = "defer_loading"


_NOTES = MappingProxyType(
    {
        ChangeKind.ADDED: "the model may now choose this tool",
        ChangeKind.REMOVED: "a call the model remembers is refused as UNKNOWN_TOOL",
        ChangeKind.DESCRIPTION: (
            "the model chooses tools by their descriptions: this changes which tool it "
            "picks; review it"
        ),
        ChangeKind.SCHEMA: "the arguments the model must write changed",
        ChangeKind.RISK: "exposure and confirmation follow the risk level",
        ChangeKind.SIDE_EFFECT: "what a call changes outside itself",
        ChangeKind.DEPRECATION: "the model reads the notice; the tool is refused from its day",
        ChangeKind.DEFERRED: "whether the model sees the tool at once or finds it by search",
    },
)


@dataclass(frozen=True, kw_only=True, slots=True)
class Change:
    """One difference a model will see, with its before and after as JSON values."""

    tool: str
    kind: ChangeKind
    before: Any
    after: Any

    @property
    def note(self) -> str:
        """Why the change matters to what the model does."""
        return _NOTES[self.kind]

    def document(self) -> dict[str, Any]:
        """The change as JSON."""
        return {
            "tool": self.tool,
            "kind": self.kind.value,
            "before": self.before,
            "after": self.after,
            "note": self.note,
        }


def diff(old: Catalogue, new: Catalogue) -> tuple[Change, ...]:
    """What the model will see differently from `old` to `new`, by tool, then kind."""
    changes: list[Change] = []
    for name in sorted({*old.tools, *new.tools}):
        before, after = old.tools.get(name), new.tools.get(name)
        if before is None or after is None:
            kind = ChangeKind.ADDED if before is None else ChangeKind.REMOVED
            was = None if before is None else before.document()
            now = None if after is None else after.document()
            changes.append(Change(tool=name, kind=kind, before=was, after=now))
            continue
        changes.extend(_changed(before.document(), after.document(), name))
    return tuple(changes)


_COMPARED = (
    (ChangeKind.DESCRIPTION, "description"),
    (ChangeKind.SCHEMA, "input_schema"),
    (ChangeKind.RISK, "risk"),
    (ChangeKind.SIDE_EFFECT, "side_effect"),
    (ChangeKind.DEPRECATION, "deprecation"),
    (ChangeKind.DEFERRED, "defer_loading"),
)


def _changed(before: Mapping[str, Any], after: Mapping[str, Any], name: str) -> Iterable[Change]:
    for kind, key in _COMPARED:
        if canonical_json(before[key]) != canonical_json(after[key]):
            yield Change(tool=name, kind=kind, before=before[key], after=after[key])
