"""Governance of a tool catalogue: declared examples, deprecation days, and lint.

Owns the check that a tool's examples pass its own schema (at registration), the UTC
day a clock says deprecations are judged by, and `lint`: the rules `handrail tools
lint` applies to a catalogue, each with a documented severity (`SEVERITIES`). Lint
reads specs and an approved catalogue only; it never registers, exposes or runs a tool.

The rules and their severities (an ERROR makes `handrail tools lint` exit 1):

- near-duplicate (error): two tools whose names and descriptions overlap once verbs
  that mean the same to a model are folded (search, grep, lookup, find, query, get,
  fetch, read...): the model cannot tell which to pick. Merge them or bound each.
- unknown-replacement (error): a deprecation names a replacement that is not a
  registered, exposable tool, or is itself retired by then.
- description-changed (error): what the model reads differs from the approved
  catalogue (`--approved`); review it and export a new catalogue.
- unapproved-tool (warning): the tool is not in the approved catalogue at all.
- vague-name (warning): the name's last segment has no word besides verbs and filler
  (`desk.run`, `process_data`, `tools.helper`): it does not say what it acts on.
- vague-description (warning): fewer than five words, or filler ("various", "etc").
- missing-owner (warning): no owner to ask about the tool.
- undescribed-field (warning): a schema property without a description.
- missing-examples (info): a tool with parameters declares no example arguments.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from handrail.declare._lint_words import (
    SYNONYMS,
    VAGUE_WORDS,
    description_words,
    name_words,
    overlap,
)
from handrail.declare.catalogue import Catalogue, CatalogueEntry
from handrail.declare.exposure import CATALOGUE_TOOLS, never_exposed

if TYPE_CHECKING:
    from handrail.clock import Clock
    from handrail.declare.definition import Tool
    from handrail.spec import ToolSpec

__all__ = [
    "SEVERITIES",
    "Finding",
    "Rule",
    "Severity",
    "example_errors",
    "lint",
    "undescribed_fields",
    "utc_day",
]


def utc_day(clock: Clock) -> date:
    """The UTC calendar day of the clock's `now`: the day a deprecation is judged by."""
    return clock.now().astimezone(UTC).date()


def example_errors(tool: Tool) -> str | None:
    """Why a tool's declared examples fail its own schema, or None when they all pass."""
    for index, example in enumerate(tool.spec.examples):
        errors = tool.schema_errors(dict(example))
        if errors:
            path, message = next(iter(errors.items()))
            return f"examples[{index}] does not match the schema: {path} {message}"
    return None


class Severity(StrEnum):
    """How much a finding matters: an ERROR fails `handrail tools lint`."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


class Rule(StrEnum):
    """One lint rule; its severity is in `SEVERITIES`, its meaning in the module docs."""

    NEAR_DUPLICATE = "near-duplicate"
    UNKNOWN_REPLACEMENT = "unknown-replacement"
    DESCRIPTION_CHANGED = "description-changed"
    UNAPPROVED_TOOL = "unapproved-tool"
    VAGUE_NAME = "vague-name"
    VAGUE_DESCRIPTION = "vague-description"
    MISSING_OWNER = "missing-owner"
    UNDESCRIBED_FIELD = "undescribed-field"
    MISSING_EXAMPLES = "missing-examples"


SEVERITIES: Mapping[Rule, Severity] = MappingProxyType(
    {
        Rule.NEAR_DUPLICATE: Severity.ERROR,
        Rule.UNKNOWN_REPLACEMENT: Severity.ERROR,
        Rule.DESCRIPTION_CHANGED: Severity.ERROR,
        Rule.UNAPPROVED_TOOL: Severity.WARNING,
        Rule.VAGUE_NAME: Severity.WARNING,
        Rule.VAGUE_DESCRIPTION: Severity.WARNING,
        Rule.MISSING_OWNER: Severity.WARNING,
        Rule.UNDESCRIBED_FIELD: Severity.WARNING,
        Rule.MISSING_EXAMPLES: Severity.INFO,
    },
)


@dataclass(frozen=True, kw_only=True, slots=True)
class Finding:
    """One problem of one tool (and the other tool it concerns, for a pair)."""

    rule: Rule
    tool: str
    message: str
    other: str | None = None

    @property
    def severity(self) -> Severity:
        """The rule's documented severity."""
        return SEVERITIES[self.rule]

    def document(self) -> dict[str, Any]:
        """The finding as JSON."""
        return {
            "rule": self.rule.value,
            "severity": self.severity.value,
            "tool": self.tool,
            "other": self.other,
            "message": self.message,
        }


NAME_OVERLAP = 0.5
"""Folded name words two tools share, at least, to be near duplicates..."""
DESCRIPTION_OVERLAP = 0.5
"""...together with this share of their folded description words."""
_MIN_DESCRIPTION_WORDS = 5
_VAGUE_PHRASES = re.compile(
    r"\b(various|misc|miscellaneous|etc|stuff|things|something|anything|and more|"
    r"todo|tbd|fixme|helper|general[- ]purpose)\b",
    re.IGNORECASE,
)
_MAX_LISTED = 10
_FIXED_NAMES = CATALOGUE_TOOLS
"""The catalogue tools' names, fixed by Handrail: nobody can rename them, so no vague-name."""
_VERBS = frozenset(SYNONYMS.values())
_ORDER = {severity: rank for rank, severity in enumerate(Severity)}


def lint(
    specs: Sequence[ToolSpec],
    *,
    approved: Catalogue | None = None,
    today: date | None = None,
) -> tuple[Finding, ...]:
    """Every finding of every rule over these specs, errors first, then by tool and rule.

    Only tools some model may see are linted (not forbidden, not disabled). With
    `approved`, descriptions are compared with it; `today` (UTC) judges whether a
    replacement is itself retired.
    """
    shown = [spec for spec in specs if never_exposed(spec) is None]
    findings = [*_near_duplicates(shown), *_replacements(shown, today)]
    for spec in shown:
        findings.extend(_tool_findings(spec))
    if approved is not None:
        findings.extend(_approval(shown, approved))
    return tuple(
        sorted(findings, key=lambda f: (_ORDER[f.severity], f.tool, f.rule.value, f.other or "")),
    )


def _tool_findings(spec: ToolSpec) -> Iterator[Finding]:
    words = name_words(spec.name.rpartition(".")[2])
    if not words - VAGUE_WORDS - _VERBS and spec.name not in _FIXED_NAMES:
        yield Finding(
            rule=Rule.VAGUE_NAME,
            tool=spec.name,
            message="the name has only verbs and filler; name what it acts on",
        )
    vague = _VAGUE_PHRASES.search(spec.description)
    if len(description_words(spec.description)) < _MIN_DESCRIPTION_WORDS or vague:
        said = f" ({vague.group(0)!r})" if vague else ""
        yield Finding(
            rule=Rule.VAGUE_DESCRIPTION,
            tool=spec.name,
            message=f"say what it does, to what, and when to use it{said}",
        )
    if not (spec.owner or "").strip():
        yield Finding(rule=Rule.MISSING_OWNER, tool=spec.name, message="no owner is declared")
    bare = list(itertools.islice(undescribed_fields(spec.input_schema), _MAX_LISTED + 1))
    if bare:
        listed = ", ".join(bare[:_MAX_LISTED]) + (", ..." if len(bare) > _MAX_LISTED else "")
        yield Finding(
            rule=Rule.UNDESCRIBED_FIELD,
            tool=spec.name,
            message=f"fields without a description: {listed}",
        )
    if spec.input_schema.get("properties") and not spec.examples:
        yield Finding(
            rule=Rule.MISSING_EXAMPLES,
            tool=spec.name,
            message="declare example arguments (examples=...)",
        )


def undescribed_fields(schema: Mapping[str, Any]) -> Iterator[str]:
    """JSON Pointers of the properties, at any depth, that have no description.

    A property that is only a `$ref` counts as described when its target in `$defs`
    has a description.
    """
    definitions = schema.get("$defs") or {}
    pending: list[tuple[str, object]] = [("", schema)]
    while pending:
        pointer, node = pending.pop(0)
        if not isinstance(node, Mapping):
            continue
        properties = node.get("properties")
        if isinstance(properties, Mapping):
            for key, sub in properties.items():
                here = f"{pointer}/properties/{key}"
                if isinstance(sub, Mapping) and not _described(sub, definitions):
                    yield here
                pending.append((here, sub))
        items = node.get("items")
        if items is not None:
            pending.append((f"{pointer}/items", items))
        if pointer == "" and isinstance(definitions, Mapping):
            pending.extend((f"/$defs/{k}", v) for k, v in definitions.items())


def _described(schema: Mapping[str, Any], definitions: object) -> bool:
    if str(schema.get("description") or "").strip():
        return True
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/") and isinstance(definitions, Mapping):
        target = definitions.get(ref.removeprefix("#/$defs/"))
        return isinstance(target, Mapping) and bool(str(target.get("description") or "").strip())
    return False


def _near_duplicates(specs: Sequence[ToolSpec]) -> Iterator[Finding]:
    words = [(spec, name_words(spec.name), description_words(spec.description)) for spec in specs]
    for (a, a_name, a_text), (b, b_name, b_text) in itertools.combinations(words, 2):
        names = overlap(a_name, b_name)
        if names < NAME_OVERLAP:
            continue
        texts = overlap(a_text, b_text)
        if names == 1.0 or texts >= DESCRIPTION_OVERLAP:
            yield Finding(
                rule=Rule.NEAR_DUPLICATE,
                tool=a.name,
                other=b.name,
                message=(
                    f"{a.name} and {b.name} overlap ({names:.0%} of name words, "
                    f"{texts:.0%} of description words): merge them or say in each when "
                    f"to use it and not the other"
                ),
            )


def _replacements(specs: Sequence[ToolSpec], today: date | None) -> Iterator[Finding]:
    by_name = {spec.name: spec for spec in specs}
    for spec in specs:
        deprecation = spec.deprecation
        if deprecation is None or deprecation.replacement is None:
            continue
        target = by_name.get(deprecation.replacement)
        if target is None:
            problem = "is not a registered tool any model may see"
        elif target.deprecation is not None and target.deprecation.after <= max(
            deprecation.after,
            today or deprecation.after,
        ):
            problem = f"is itself deprecated from {target.deprecation.after.isoformat()}"
        else:
            continue
        yield Finding(
            rule=Rule.UNKNOWN_REPLACEMENT,
            tool=spec.name,
            other=deprecation.replacement,
            message=f"the replacement {deprecation.replacement!r} {problem}",
        )


def _approval(specs: Sequence[ToolSpec], approved: Catalogue) -> Iterator[Finding]:
    for spec in specs:
        before = approved.tools.get(spec.name)
        if before is None:
            yield Finding(
                rule=Rule.UNAPPROVED_TOOL,
                tool=spec.name,
                message="not in the approved catalogue: review its description",
            )
        elif before.description != CatalogueEntry.of(spec).description:
            yield Finding(
                rule=Rule.DESCRIPTION_CHANGED,
                tool=spec.name,
                message=(
                    f"the description differs from the approved one (approved version "
                    f"{before.description_version}, now {spec.description_version}): it "
                    f"changes which tool the model picks; review and approve it"
                ),
            )
