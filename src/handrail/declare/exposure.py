"""Exposure: which tools one request's model is shown, and a report of what was left out.

Owns the rule that bars a tool from every model (`barred`: L4, disabled, other tenant),
the per-request filters (scenario, permissions, risk ceiling, schema features), the
deterministic cut to what the model can take (`ModelCapabilities`) and the `Exposure`
report. It never runs a tool and never writes a provider payload; `Registry.exposure`
is the entry point, adapters only format what it returns.

Scenarios. A request without a scenario is unscoped: it sees every tool its other
filters allow (this is what an operator's listing shows). A tool without scenarios is
general-purpose: it is offered in every scenario. A tool with scenarios is offered only
in those (and in unscoped requests). For a minimal toolset, a request names its scenario.

Order of the filters; a tool is reported with the first one that rejects it: FORBIDDEN,
DISABLED, OTHER_TENANT, DEPRECATED, OTHER_SCENARIO, ABOVE_RISK_CEILING, MISSING_PERMISSION,
UNSUPPORTED_SCHEMA, OUTSIDE_SKILL, DEFERRED; then the capacity cut, MAX_TOOLS and
OVER_BUDGET.

Deferred loading and skills. A tool declared `defer_loading` is eligible but not shown
until the request names it in `discovered` (a `search_tools` call found it), or the
request sets `include_deferred`. A request with `narrowed_to` (the active skills' tools
and the catalogue tools) shows nothing outside that set; narrowing only ever removes
tools, so a skill can never widen what the principal may see.

Deprecation. A tool whose `Deprecation.after` day has come (the request's `today`,
from the registry's clock) is left out as DEPRECATED, and the registry's lookup refuses
it; before that day it is shown with the notice of `ToolSpec.model_description`.

The capacity cut. Tools that pass every filter are ranked: first the request's
`preferred` names in the order given, then tools that name the request's scenario
before general-purpose ones, then lower risk, then name. Walking that ranking, a tool
is taken unless `max_tools` are taken already (MAX_TOOLS) or its definition would take
the total past `definition_budget` characters (OVER_BUDGET; a smaller tool ranked later
may still fit). So lowering `max_tools` only ever removes tools from the end of what
was taken. The exposed tools are listed by name, whatever their rank, so that the same
set always gives the same definitions (and the same prompt-cache prefix).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from enum import StrEnum
from typing import Any

from handrail.errors import ConfigurationError
from handrail.principal import Principal
from handrail.spec import RiskLevel, ToolSpec

__all__ = [
    "CATALOGUE_TOOLS",
    "LOAD_SKILL",
    "READ_SKILL_FILE",
    "RUN_SKILL_SCRIPT",
    "SEARCH_TOOLS",
    "Exclusion",
    "ExclusionReason",
    "Exposure",
    "ExposureRequest",
    "ModelCapabilities",
    "barred",
    "definition_chars",
    "never_exposed",
    "retired",
    "schema_keywords",
    "select_tools",
]

SEARCH_TOOLS = "search_tools"
LOAD_SKILL = "load_skill"
READ_SKILL_FILE = "read_skill_file"
RUN_SKILL_SCRIPT = "run_skill_script"
CATALOGUE_TOOLS = frozenset({SEARCH_TOOLS, LOAD_SKILL, READ_SKILL_FILE, RUN_SKILL_SCRIPT})
"""Handrail's own tools that find and load others. Their names are fixed (the loop and
the MCP server follow their results by name) and a narrowing to skills keeps them."""


class ExclusionReason(StrEnum):
    """Why a registered tool is not shown to the model of one request."""

    FORBIDDEN = "forbidden"
    """Risk L4: registered for the record, never shown to any model."""
    DISABLED = "disabled"
    """Switched off for everyone."""
    OTHER_TENANT = "other_tenant"
    """Not enabled for the principal's tenant."""
    DEPRECATED = "deprecated"
    """Its deprecation day has come: refused from that day on, never shown again."""
    OTHER_SCENARIO = "other_scenario"
    """Offered only in scenarios other than the request's."""
    ABOVE_RISK_CEILING = "above_risk_ceiling"
    """Riskier than the request allows."""
    MISSING_PERMISSION = "missing_permission"
    """The principal lacks a permission the tool requires."""
    UNSUPPORTED_SCHEMA = "unsupported_schema"
    """The schema uses a keyword the model does not support."""
    OUTSIDE_SKILL = "outside_skill"
    """The request is narrowed to the active skills' tools, and this is not one."""
    DEFERRED = "deferred"
    """Declared `defer_loading` and not discovered yet: found through `search_tools`."""
    MAX_TOOLS = "max_tools"
    """Eligible, but the model already has as many tools as it handles well."""
    OVER_BUDGET = "over_budget"
    """Eligible, but its definition does not fit the remaining character budget."""


_CAPACITY = frozenset({ExclusionReason.MAX_TOOLS, ExclusionReason.OVER_BUDGET})


def never_exposed(spec: ToolSpec) -> ExclusionReason | None:
    """Why no model of any tenant may see the tool (FORBIDDEN, DISABLED), or None.

    The one definition of invariant 9; `barred` adds the tenant boundary.
    """
    if spec.forbidden:
        return ExclusionReason.FORBIDDEN
    if not spec.enabled:
        return ExclusionReason.DISABLED
    return None


def retired(spec: ToolSpec, today: date | None) -> bool:
    """Whether the tool's deprecation day has come (`today` None: no day is known)."""
    deprecation = spec.deprecation
    return deprecation is not None and today is not None and today >= deprecation.after


def barred(spec: ToolSpec, tenant_id: str) -> ExclusionReason | None:
    """Why no model of this tenant may ever see or reach the tool, or None.

    The registry's lookup, `select_tools` and `Exposure` itself all apply it.
    """
    reason = never_exposed(spec)
    if reason is None and not spec.enabled_for(tenant_id):
        return ExclusionReason.OTHER_TENANT
    return reason


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelCapabilities:
    """What the model of a request handles well; the defaults set no limit.

    `max_tools`: how many definitions it chooses among reliably (None: no limit).
    `definition_budget`: characters of the context the definitions may take, measured
    by `definition_chars` (None: no limit). `unsupported_keywords`: JSON Schema keywords
    it cannot take; a tool whose schema uses one is left out (the adapter still refuses
    what its provider cannot take, loudly, as a second line). `supports_parallel_calls`:
    whether it may propose several calls in one turn; routing passes it on.
    `supports_forced_choice`: whether it can be made to call a tool (REQUIRED or a named
    tool); Anthropic models with extended thinking, for one, take only auto and none.
    """

    max_tools: int | None = None
    definition_budget: int | None = None
    unsupported_keywords: frozenset[str] = frozenset()
    supports_parallel_calls: bool = True
    supports_forced_choice: bool = True

    def __post_init__(self) -> None:
        if self.max_tools is not None and self.max_tools < 0:
            raise ConfigurationError("ModelCapabilities.max_tools must be None or >= 0")
        if self.definition_budget is not None and self.definition_budget < 0:
            raise ConfigurationError("ModelCapabilities.definition_budget must be None or >= 0")
        object.__setattr__(self, "unsupported_keywords", frozenset(self.unsupported_keywords))


@dataclass(frozen=True, kw_only=True, slots=True)
class ExposureRequest:
    """What the host knows about one request that decides its toolset.

    Everything here comes from the host (its routing, its model configuration), never
    from the model. `risk_ceiling` is the riskiest level the request may see, for
    example L1 for a read-only scenario; L4 is never exposed, so it is not a ceiling.
    `preferred` names tools the request hints at, most wanted first: they are kept first
    when the model cannot take every eligible tool, and never pass a filter they fail.
    `discovered` names deferred tools a search found in this run (they are shown if they
    pass every other filter); `include_deferred` shows every deferred tool (an
    operator's listing, a host without tool search). `narrowed_to`, when set, is the
    only set of names that may be shown (the active skills' tools with the catalogue
    tools); it cannot add a tool any other filter removes.
    """

    scenario: str | None = None
    risk_ceiling: RiskLevel = RiskLevel.L3_HIGH_RISK_WRITE
    preferred: tuple[str, ...] = ()
    capabilities: ModelCapabilities = field(default_factory=ModelCapabilities)
    discovered: frozenset[str] = frozenset()
    include_deferred: bool = False
    narrowed_to: frozenset[str] | None = None

    def __post_init__(self) -> None:
        if self.risk_ceiling >= RiskLevel.L4_FORBIDDEN:
            raise ConfigurationError("L4 tools are never exposed; the highest ceiling is L3")
        object.__setattr__(self, "preferred", tuple(self.preferred))
        object.__setattr__(self, "discovered", frozenset(self.discovered))
        if self.narrowed_to is not None:
            object.__setattr__(self, "narrowed_to", frozenset(self.narrowed_to))


@dataclass(frozen=True, kw_only=True, slots=True)
class Exclusion:
    """One registered tool the request's model is not shown, and why (for the host's log)."""

    tool: str
    reason: ExclusionReason
    detail: str


@dataclass(frozen=True, kw_only=True, slots=True)
class Exposure:
    """The toolset of one request: what is shown (by name) and what is not, with reasons.

    Refuses to hold a tool that `barred` rejects for `tenant_id`, so that whoever built
    it, an Exposure never carries a forbidden, disabled or other tenant's tool.
    """

    tenant_id: str
    request: ExposureRequest
    included: tuple[ToolSpec, ...]
    excluded: tuple[Exclusion, ...] = ()

    def __post_init__(self) -> None:
        for spec in self.included:
            reason = barred(spec, self.tenant_id)
            if reason is not None:
                raise ConfigurationError(
                    f"tool {spec.name!r} is {reason.value} for tenant {self.tenant_id!r} "
                    f"and can never be exposed",
                )

    @property
    def names(self) -> tuple[str, ...]:
        """The names of the tools shown, in order."""
        return tuple(spec.name for spec in self.included)

    @property
    def chars(self) -> int:
        """The size of the shown definitions, as `definition_chars` measures it."""
        return sum(definition_chars(spec) for spec in self.included)

    @property
    def eligible(self) -> tuple[str, ...]:
        """Names that passed every filter: the shown ones and those cut for capacity."""
        cut = (e.tool for e in self.excluded if e.reason in _CAPACITY)
        return tuple(sorted((*self.names, *cut)))

    def reason(self, name: str) -> ExclusionReason | None:
        """Why `name` is not shown; None when it is shown or not registered at all."""
        return next((e.reason for e in self.excluded if e.tool == name), None)

    def __contains__(self, name: object) -> bool:
        return name in self.names

    def __iter__(self) -> Iterator[ToolSpec]:
        return iter(self.included)

    def __len__(self) -> int:
        return len(self.included)


def definition_chars(spec: ToolSpec) -> int:
    """The characters of a tool's provider-neutral definition: name, description, schema.

    Compact JSON with sorted keys; provider payloads differ by a few dozen characters of
    wrapping per tool, so a budget should leave that margin.
    """
    document = {
        "name": spec.name,
        "description": spec.model_description,
        "parameters": spec.input_schema,
    }
    text = json.dumps(
        document,
        default=_plain_mapping,
        ensure_ascii=False,
        separators=(",", ":"),
        sort_keys=True,
    )
    return len(text)


def _plain_mapping(value: object) -> dict[str, Any]:
    if isinstance(value, Mapping):
        return dict(value)
    msg = f"{type(value).__name__} is not JSON"
    raise TypeError(msg)


# Keywords whose value maps names to subschemas, holds one subschema, or a list of them.
_NAMED_SUBSCHEMAS = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"},
)
_ONE_SUBSCHEMA = frozenset(
    {
        "additionalItems",
        "additionalProperties",
        "contains",
        "else",
        "if",
        "items",
        "not",
        "propertyNames",
        "then",
        "unevaluatedItems",
        "unevaluatedProperties",
    },
)
_SUBSCHEMA_LISTS = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})


def schema_keywords(schema: Mapping[str, Any]) -> frozenset[str]:
    """Every keyword a JSON Schema uses, at any depth; property names are not keywords."""
    found: set[str] = set()
    pending: list[object] = [schema]
    while pending:
        node = pending.pop()
        if not isinstance(node, Mapping):
            continue
        for keyword, value in node.items():
            found.add(str(keyword))
            if keyword in _NAMED_SUBSCHEMAS and isinstance(value, Mapping):
                pending.extend(value.values())
            elif keyword in _ONE_SUBSCHEMA:
                pending.append(value)
            elif keyword in _SUBSCHEMA_LISTS and isinstance(value, list | tuple):
                pending.extend(value)
    return frozenset(found)


def _filtered(
    spec: ToolSpec,
    principal: Principal,
    request: ExposureRequest,
    today: date | None,
) -> Exclusion | None:
    # The filters in their documented order; the first that rejects names the reason.
    fixed = _out_for_good(spec, principal, today)
    if fixed is not None:
        return fixed
    scenario = request.scenario
    if scenario is not None and spec.scenarios and scenario not in spec.scenarios:
        return Exclusion(
            tool=spec.name,
            reason=ExclusionReason.OTHER_SCENARIO,
            detail=f"offered in {sorted(spec.scenarios)}, not in {scenario!r}",
        )
    if spec.risk > request.risk_ceiling:
        return Exclusion(
            tool=spec.name,
            reason=ExclusionReason.ABOVE_RISK_CEILING,
            detail=f"{spec.risk.name} is above the ceiling {request.risk_ceiling.name}",
        )
    if not principal.has_permissions(spec.permissions):
        missing = sorted(spec.permissions - principal.permissions)
        return Exclusion(
            tool=spec.name,
            reason=ExclusionReason.MISSING_PERMISSION,
            detail=f"needs {missing}",
        )
    unknown = request.capabilities.unsupported_keywords
    unsupported = unknown and schema_keywords(spec.input_schema) & unknown
    if unsupported:
        return Exclusion(
            tool=spec.name,
            reason=ExclusionReason.UNSUPPORTED_SCHEMA,
            detail=f"the model does not support {sorted(unsupported)}",
        )
    return _withheld(spec, request)


def _out_for_good(spec: ToolSpec, principal: Principal, today: date | None) -> Exclusion | None:
    """The first filters: barred for the tenant, or past the tool's deprecation day."""
    reason = barred(spec, principal.tenant_id)
    if reason is not None:
        return Exclusion(tool=spec.name, reason=reason, detail=_barred_detail(reason, principal))
    deprecation = spec.deprecation
    if deprecation is None or not retired(spec, today):
        return None
    replacement = deprecation.replacement
    return Exclusion(
        tool=spec.name,
        reason=ExclusionReason.DEPRECATED,
        detail=f"deprecated from {deprecation.after.isoformat()}"
        + (f"; replaced by {replacement!r}" if replacement else ""),
    )


def _withheld(spec: ToolSpec, request: ExposureRequest) -> Exclusion | None:
    """The last two filters: outside the active skills, or deferred and not discovered."""
    narrowed = request.narrowed_to
    if narrowed is not None and spec.name not in narrowed:
        return Exclusion(
            tool=spec.name,
            reason=ExclusionReason.OUTSIDE_SKILL,
            detail="the active skills do not list it",
        )
    if spec.defer_loading and not request.include_deferred and spec.name not in request.discovered:
        return Exclusion(
            tool=spec.name,
            reason=ExclusionReason.DEFERRED,
            detail="loaded on demand: search_tools finds it",
        )
    return None


def _barred_detail(reason: ExclusionReason, principal: Principal) -> str:
    if reason is ExclusionReason.FORBIDDEN:
        return "risk L4: never exposed"
    if reason is ExclusionReason.DISABLED:
        return "disabled for every tenant"
    return f"not enabled for tenant {principal.tenant_id!r}"


def _rank(request: ExposureRequest) -> Callable[[ToolSpec], tuple[int, int, int, str]]:
    wanted = {name: index for index, name in enumerate(dict.fromkeys(request.preferred))}
    scenario = request.scenario

    def key(spec: ToolSpec) -> tuple[int, int, int, str]:
        named = scenario is not None and scenario in spec.scenarios
        return (wanted.get(spec.name, len(wanted)), 0 if named else 1, int(spec.risk), spec.name)

    return key


def _cut(
    eligible: Iterable[ToolSpec],
    request: ExposureRequest,
) -> tuple[list[ToolSpec], list[Exclusion]]:
    capabilities = request.capabilities
    taken: list[ToolSpec] = []
    left: list[Exclusion] = []
    used = 0
    budget = capabilities.definition_budget
    for spec in sorted(eligible, key=_rank(request)):
        size = 0 if budget is None else definition_chars(spec)
        if capabilities.max_tools is not None and len(taken) >= capabilities.max_tools:
            left.append(
                Exclusion(
                    tool=spec.name,
                    reason=ExclusionReason.MAX_TOOLS,
                    detail=f"the model takes at most {capabilities.max_tools} tool(s)",
                ),
            )
        elif budget is not None and used + size > budget:
            left.append(
                Exclusion(
                    tool=spec.name,
                    reason=ExclusionReason.OVER_BUDGET,
                    detail=(f"{size} characters do not fit the {budget - used} left of {budget}"),
                ),
            )
        else:
            taken.append(spec)
            used += size
    return taken, left


def select_tools(
    specs: Sequence[ToolSpec],
    principal: Principal,
    request: ExposureRequest,
    *,
    today: date | None = None,
) -> Exposure:
    """The minimal toolset of one request, and every other tool with the reason it is out.

    Pure and deterministic: the same specs (in any order), principal, request and
    `today` (the UTC day deprecations are judged by; None judges none) give the same
    Exposure. Raises ConfigurationError for two specs of one name.
    """
    by_name: dict[str, ToolSpec] = {}
    for spec in specs:
        if spec.name in by_name:
            raise ConfigurationError(f"two specs are named {spec.name!r}")
        by_name[spec.name] = spec
    eligible: list[ToolSpec] = []
    excluded: list[Exclusion] = []
    for name in sorted(by_name):
        spec = by_name[name]
        exclusion = _filtered(spec, principal, request, today)
        if exclusion is None:
            eligible.append(spec)
        else:
            excluded.append(exclusion)
    taken, cut = _cut(eligible, request)
    return Exposure(
        tenant_id=principal.tenant_id,
        request=request,
        included=tuple(sorted(taken, key=lambda spec: spec.name)),
        excluded=tuple(sorted((*excluded, *cut), key=lambda e: e.tool)),
    )
