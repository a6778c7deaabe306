"""The `search_tools` tool: the model finds deferred tools by describing what it needs.

Owns the tool's schema, which tools a search may return (deferred tools this principal
may use under the run's exposure request, not yet discovered), their order (the ranking
of `declare.search`) and the token budget of the definitions returned. It never makes a
tool callable: the loop or the MCP server takes the names out of a SUCCEEDED envelope
and checks them again through `Registry.exposure` before the model is shown them.

What a search returns. A tool is returned only if the run's request leaves it out for
being deferred alone (`ExclusionReason.DEFERRED`): it passes every other filter of that
request (tenant, deprecation, scenario, risk ceiling, permissions, schema features, the
active skills' narrowing) for the calling principal. So a tool the model already has
(not deferred, or already in `discovered`) is never returned, nor is `search_tools`
itself, and a request with `include_deferred` finds nothing, since it shows every tool
already. Without an exposure in the call's context (a host that passed the gate none)
the request is the default, unscoped one. A definition is written as every definition
writer writes it (`ToolSpec.model_description`, with any deprecation notice).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from dataclasses import replace
from datetime import date
from typing import Any

from handrail.context import ExposureView, ToolContext
from handrail.declare.definition import Tool
from handrail.declare.exposure import (
    SEARCH_TOOLS,
    ExposureRequest,
    ModelCapabilities,
    select_tools,
)
from handrail.declare.registry import Registry
from handrail.declare.search import CatalogueIndex
from handrail.envelope import Trust
from handrail.errors import ConfigurationError
from handrail.principal import Principal
from handrail.shaping.budget import HeuristicTokens, TokenEstimator, json_text
from handrail.shaping.policy import RawKeeping, ResultPolicy
from handrail.shaping.redact import RedactionAction, RedactionPolicy
from handrail.spec import RiskLevel, SideEffect, ToolHints, ToolSpec

__all__ = ["SEARCH_TOOLS", "search_tools_tool"]


MAX_QUERY_CHARS = 200
MAX_RESULTS = 20
DEFAULT_RESULTS = 5
MAX_COUNTED = 50
"""Matches are counted up to here: `matches` 50 means 50 or more."""
_WINDOW = 32
"""Ranked tools judged by the exposure rules at once."""
_MIN_BUDGET = 64
"""Tokens below which not even a small definition fits beside the envelope's own keys."""
_MAX_SKIPPED = 8
"""Definitions passed over for being too large before a search stops looking further."""
_MAX_CACHED = 4_096
"""Definitions remembered with their token cost; the cache starts again beyond this."""

_DESCRIPTION = (
    "Search the catalogue for tools you do not have yet. Describe the task in a few words "
    "(for example 'refund an order' or 'export invoices as CSV'); the best matching tools "
    "come back with their definitions, best first, and you can call them from your next "
    "step on. Tools you already have are never listed."
)


def search_tools_tool(
    registry: Registry,
    *,
    budget_tokens: int = 2_000,
    max_results: int = MAX_RESULTS,
    estimator: TokenEstimator | None = None,
) -> Tool:
    """The `search_tools` tool over `registry`: read-only, L0, for every principal.

    Arguments: `query` (1-200 characters) and `limit` (1 to `max_results`, at most 20;
    default 5). Answers `{"query", "tools": [{"name", "description", "parameters"}],
    "matches", "omitted"}`: `matches` counts the tools the search may return that
    matched (up to 50), `omitted` those of them left out for the limit or the budget. The
    definitions returned fit in `budget_tokens` with the rest of the answer, measured
    by `estimator` (give the shaper's, if it has its own); keep `budget_tokens` within
    the gate's result budget (4 characters a token), so that shaping never cuts it.
    """
    if not 1 <= max_results <= MAX_RESULTS:
        raise ConfigurationError(f"search_tools: max_results must be between 1 and {MAX_RESULTS}")
    if budget_tokens < _MIN_BUDGET:
        raise ConfigurationError(f"search_tools: budget_tokens must be at least {_MIN_BUDGET}")
    catalogue = _Catalogue(registry, budget_tokens, estimator or HeuristicTokens())
    default = min(DEFAULT_RESULTS, max_results)
    schema = {
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_QUERY_CHARS,
                "description": "What you need to do, in a few words.",
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": max_results,
                "default": default,
                "description": "How many tools to return at most.",
            },
        },
        "required": ["query"],
        "additionalProperties": False,
    }

    async def search(arguments: dict[str, Any], ctx: ToolContext) -> dict[str, object]:
        limit = arguments.get("limit", default)
        return catalogue.search(arguments["query"], limit, ctx)

    return Tool.from_json_schema(
        name=SEARCH_TOOLS,
        description=_DESCRIPTION,
        input_schema=schema,
        fn=search,
        risk=RiskLevel.L0_PUBLIC_READ,
        side_effect=SideEffect.NONE,
        hints=ToolHints(read_only=True, idempotent=True, open_world=False),
        owner="handrail",  # the name and behaviour are Handrail's, fixed
        examples=({"query": "refund an order"},),
        # The answer is sized by the tool itself, by whole definitions: the shaper's
        # budget is the same, so it never cuts a definition apart, and definitions are
        # the registry's own text, so there is nothing to redact or keep.
        results=ResultPolicy(
            max_tokens=budget_tokens,
            redaction=RedactionPolicy(default=RedactionAction.KEEP),
            keep_raw=RawKeeping.NEVER,
            trust=Trust.UNTRUSTED,
        ),
    )


class _Catalogue:
    """The state behind one `search_tools` tool: its registry's index and definitions."""

    __slots__ = ("_budget", "_definitions", "_estimator", "_index", "_registry")

    def __init__(self, registry: Registry, budget: int, estimator: TokenEstimator) -> None:
        self._registry = registry
        self._index = CatalogueIndex(registry, leave_out=frozenset({SEARCH_TOOLS}))
        self._budget = budget
        self._estimator = estimator
        # By name: the spec it was made from, the definition and its token cost.
        self._definitions: dict[str, tuple[ToolSpec, dict[str, Any], int]] = {}

    def search(self, query: str, limit: int, ctx: ToolContext) -> dict[str, object]:
        """The answer to one search by `ctx.principal` under the call's exposure request."""
        text = _printable(query)
        ranked = self._returnable(text, ctx.principal, _request(ctx.exposure))
        matches = len(ranked)
        room = self._budget - self._cost(_answer(text, [], matches))
        tools: list[dict[str, Any]] = []
        skipped = 0
        for spec in ranked:
            if len(tools) >= limit or skipped >= _MAX_SKIPPED:
                break
            definition, cost = self._definition(spec)
            if cost + 1 > room:  # a smaller definition ranked later may still fit
                skipped += 1
                continue
            tools.append(definition)
            room -= cost + 1  # and its comma
        answer = _answer(text, tools, matches)
        # The sum of the parts bounds the whole for the default estimate; any other
        # estimator is held to the budget by measuring the whole.
        while tools and self._cost(answer) > self._budget:
            tools.pop()
            answer = _answer(text, tools, matches)
        return answer

    def _returnable(
        self, text: str, principal: Principal, request: ExposureRequest
    ) -> list[ToolSpec]:
        """The tools this search may return that match `text`, best first (up to 50).

        Judged a window of ranked tools at a time, so that a query matching most of
        a large catalogue costs no more than its best matches.
        """
        if request.include_deferred:
            return []  # every deferred tool is shown already
        shown = request.discovered
        today = self._registry.today  # deprecations are judged by the registry's clock
        found: list[ToolSpec] = []
        window: list[ToolSpec] = []
        for name in self._index.current().ranked_names(text):
            if name == SEARCH_TOOLS or name in shown:
                continue
            # The registry as it is now: a tool removed or changed since the index was
            # built is judged by what is registered, never by what was indexed.
            tool = self._registry.lookup(name, principal)
            if tool is None or not tool.spec.defer_loading:
                continue
            window.append(tool.spec)
            if len(window) == _WINDOW:
                found += _eligible(window, principal, request, today)
                window = []
                if len(found) >= MAX_COUNTED:
                    return found[:MAX_COUNTED]
        found += _eligible(window, principal, request, today)
        return found[:MAX_COUNTED]

    def _definition(self, spec: ToolSpec) -> tuple[dict[str, Any], int]:
        """The definition the model is shown of `spec`, and its token cost."""
        cached = self._definitions.get(spec.name)
        if cached is not None and cached[0] is spec:
            return cached[1], cached[2]
        definition = {
            "name": spec.name,
            "description": spec.model_description,
            "parameters": _plain(spec.input_schema),
        }
        cost = self._cost(definition)
        if len(self._definitions) >= _MAX_CACHED:
            self._definitions.clear()
        self._definitions[spec.name] = (spec, definition, cost)
        return definition, cost

    def _cost(self, value: object) -> int:
        return self._estimator.count(json_text(value))


def _eligible(
    candidates: list[ToolSpec], principal: Principal, request: ExposureRequest, today: date
) -> list[ToolSpec]:
    """The candidates the request would show if it showed deferred tools, in order.

    The exposure rules themselves decide (`select_tools`, as `Registry.exposure` with
    `include_deferred`), without the capacity cut: whether a found tool fits beside
    the others is the next exposure's to say. The candidates are deferred and not yet
    discovered, so these are exactly the ones the request leaves out as DEFERRED alone.
    """
    if not candidates:
        return []
    unlimited = ModelCapabilities(unsupported_keywords=request.capabilities.unsupported_keywords)
    wider = replace(request, include_deferred=True, capabilities=unlimited)
    shown = set(select_tools(candidates, principal, wider, today=today).names)
    return [spec for spec in candidates if spec.name in shown]


def _request(view: ExposureView | None) -> ExposureRequest:
    """The exposure request of the call (the default, unscoped one when there is none)."""
    if view is None:
        return ExposureRequest()
    if isinstance(view, ExposureRequest):
        return view
    return ExposureRequest(
        scenario=view.scenario,
        risk_ceiling=view.risk_ceiling,
        preferred=view.preferred,
        discovered=view.discovered,
        include_deferred=view.include_deferred,
        narrowed_to=view.narrowed_to,
    )


def _answer(query: str, tools: list[dict[str, Any]], matches: int) -> dict[str, object]:
    return {"query": query, "tools": tools, "matches": matches, "omitted": matches - len(tools)}


def _printable(text: str) -> str:
    """`text` as it is searched and echoed, without control characters.

    Control characters become spaces; format characters (zero-width, bidi controls)
    and unassigned ones go; runs of spaces become one.
    """
    if text.isprintable():
        return text
    kept: list[str] = []
    for ch in text:
        category = unicodedata.category(ch)
        if category[0] != "C":
            kept.append(ch)
        elif category == "Cc":
            kept.append(" ")
    return " ".join("".join(kept).split())


def _plain(value: object) -> Any:  # noqa: ANN401 - JSON
    """A schema as plain JSON values (mappings become dicts, tuples lists)."""
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value
