"""Small catalogues for the governance tests and for `handrail tools lint --app`."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date
from typing import Any

from handrail import Registry, RiskLevel, Tool
from handrail.spec import Deprecation
from handrail.testing import FixedClock

ISSUE = {"type": "object", "properties": {"id": {"type": "string", "description": "Issue id"}}}
GOOD = "Read one ticket of the support desk by its id: title, status and assignee."
QUERY = {
    "type": "object",
    "properties": {"query": {"type": "string", "description": "Words to look for"}},
    "required": ["query"],
}


def make_tool(
    name: str,
    *,
    description: str = GOOD,
    schema: Mapping[str, Any] = ISSUE,
    owner: str | None = "support-team",
    examples: tuple[Mapping[str, Any], ...] = ({"id": "T-1"},),
    deprecation: Deprecation | None = None,
    rate_limit: str | None = None,
    risk: RiskLevel = RiskLevel.L1_INTERNAL_READ,
    enabled: bool = True,
) -> Tool:
    """A read-only raw-schema tool that answers its arguments back."""
    return Tool.from_json_schema(
        name=name,
        description=description,
        input_schema=dict(schema),
        fn=lambda arguments, ctx: dict(arguments),
        risk=risk,
        owner=owner,
        examples=examples,
        deprecation=deprecation,
        rate_limit=rate_limit,
        enabled=enabled,
    )


def clean() -> Registry:
    """A catalogue lint has nothing to say about."""
    registry = Registry(clock=FixedClock())
    registry.register(make_tool("desk.read_ticket"))
    return registry


def duplicates() -> Registry:
    """Two tools a model cannot tell apart: an error-level finding."""
    registry = Registry(clock=FixedClock())
    for name, description in (
        (
            "desk.search_tickets",
            "Search the support desk tickets by words: title, status, assignee.",
        ),
        (
            "desk.find_tickets",
            "Find support desk tickets matching words; title, status and assignee.",
        ),
    ):
        registry.register(
            make_tool(
                name, description=description, schema=QUERY, examples=({"query": "printer"},)
            ),
        )
    return registry


def retiring() -> Registry:
    """A deprecated tool with its replacement, and one whose replacement is missing."""
    registry = clean()
    registry.register(
        make_tool(
            "desk.old_ticket_reader",
            description="Read one support ticket (the old way): title, status, assignee.",
            deprecation=Deprecation(after=date(2026, 6, 1), replacement="desk.read_ticket"),
        ),
    )
    registry.register(
        make_tool(
            "desk.legacy_export",
            description="Export every support ticket of one month as rows of a table.",
            deprecation=Deprecation(after=date(2026, 6, 1), replacement="desk.export_tickets"),
        ),
    )
    return registry
