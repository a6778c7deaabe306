"""A large catalogue: back-office tools by the hundred loaded on demand, and skills that narrow.

The bookstore's tools are the core set a model always sees; 180 back-office reads are
declared `defer_loading` and reach a model only through `search_tools`. The example
skills (`examples/skills`) are offered through `load_skill`, and a host-side selector
loads the one a task needs. A scripted model (no network, no weights) drives two runs:

1. "Which suppliers deliver slowest?": it searches, the found tool becomes callable at
   the next step, it calls it, and answers.
2. "Which books run low? What should we reorder?": the selector loads `inventory-report`,
   which narrows the run to that skill's tools; the back-office tool the model remembers
   from the first run is UNKNOWN_TOOL here.

`python -m examples.catalogue.demo` prints what each step showed the model and how many
characters of definitions that took, against sending every definition.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from examples.bookstore.data import BookstoreDb
from examples.bookstore.tools import build_tools
from handrail import Handrail, Principal, Registry, RiskLevel, ToolCall, ToolContext
from handrail.adapters.base import Definitions
from handrail.app import MEMORY
from handrail.declare.definition import Tool
from handrail.declare.exposure import ExposureRequest, definition_chars
from handrail.loop import ToolsetOptions
from handrail.loop.agent import RunOutcome
from handrail.loop.models import ModelReply, ScriptedModelClient, Usage
from handrail.skills import SkillLibrary, SkillSelector, skill_tools
from handrail.tools import search_tools_tool

__all__ = ["ALICE", "SKILLS", "Catalogue", "build_catalogue", "run_demo"]

SKILLS = Path(__file__).resolve().parents[1] / "skills"
ALICE = Principal(
    user_id="alice",
    tenant_id="acme",
    permissions=frozenset({"inventory.read", "orders.read", "backoffice.read"}),
    request_id="catalogue-alice",
)
LEAD_TIMES = "backoffice.purchasing.supplier_lead_times"

_AREAS = {
    "purchasing": ("supplier", "purchase order", "invoice", "contract", "lead time", "quote"),
    "warehouse": ("bin", "pallet", "shipment", "receipt", "cycle count", "transfer"),
    "finance": ("ledger entry", "payment run", "tax code", "cost centre", "budget", "refund"),
    "people": ("shift", "timesheet", "leave request", "training record", "role", "badge"),
    "marketing": ("campaign", "coupon", "newsletter", "segment", "banner", "survey"),
    "support": ("ticket", "macro", "escalation", "satisfaction score", "queue", "sla"),
}
_VERBS = {
    "list": "List the {o}s of this store, newest first, with their ids and states.",
    "count": "Count the {o}s of this store by state, for a date range.",
    "history": "Show the change history of one {o} by its id: who changed what, and when.",
    "report": "Summarise the {o}s of this store for a month: totals and the largest items.",
    "export_preview": "Preview the first rows of a {o} export before anyone runs it.",
}


def _back_office_tool(area: str, subject: str, verb: str) -> Tool:
    slug = subject.replace(" ", "_")
    name = f"backoffice.{area}.{slug}_{verb}"
    text = _VERBS[verb].format(o=subject)

    def answer(arguments: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        del ctx
        return {"tool": name, "rows": [], "arguments": arguments}

    return Tool.from_json_schema(
        name=name,
        description=text,
        input_schema={
            "type": "object",
            "properties": {
                "since": {"type": "string", "format": "date", "description": "First day"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50, "description": "Rows"},
            },
            "additionalProperties": False,
        },
        fn=answer,
        risk=RiskLevel.L1_INTERNAL_READ,
        permissions={"backoffice.read"},
        owner=f"{area}-team",
        defer_loading=True,
    )


def _lead_times() -> Tool:
    def lead_times(arguments: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        del arguments, ctx
        return {"suppliers": [{"name": "Penguin", "days": 12}, {"name": "Folio", "days": 4}]}

    return Tool.from_json_schema(
        name=LEAD_TIMES,
        description="Days each supplier takes to deliver an order, slowest first.",
        input_schema={"type": "object", "properties": {}, "additionalProperties": False},
        fn=lead_times,
        risk=RiskLevel.L1_INTERNAL_READ,
        permissions={"backoffice.read"},
        owner="purchasing-team",
        defer_loading=True,
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class Catalogue:
    """The registry and the skill library of the example."""

    registry: Registry
    skills: SkillLibrary


def build_catalogue(db: BookstoreDb) -> Catalogue:
    """The bookstore's core tools, 181 deferred back-office reads, search and skills."""
    registry = Registry()
    for made in build_tools(db):
        registry.register(made, actor="catalogue")
    for area, subjects in _AREAS.items():
        for subject in subjects:
            for verb in _VERBS:
                registry.register(_back_office_tool(area, subject, verb), actor="catalogue")
    registry.register(_lead_times(), actor="catalogue")
    registry.register(search_tools_tool(registry), actor="catalogue")
    library = SkillLibrary.load(SKILLS, registry=registry)
    for made in skill_tools(library):
        registry.register(made, actor="catalogue")
    return Catalogue(registry=registry, skills=library)


def _call(call_id: str, name: str, **arguments: object) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=json.dumps(arguments), provider="scripted")


def _reply(*calls: ToolCall, text: str | None = None) -> ModelReply:
    return ModelReply(
        calls=calls,
        text=text,
        usage=Usage(input_tokens=0, output_tokens=0),
        finish_reason="tool_calls" if calls else "stop",
        model="scripted-model",
    )


def _final(message: str) -> ModelReply:
    return _reply(text=json.dumps({"state": "answered", "message": message, "evidence": []}))


def _steps(model: ScriptedModelClient) -> list[dict[str, Any]]:
    shown: list[dict[str, Any]] = []
    for request in model.requests:
        specs = request.tools
        assert not isinstance(specs, Definitions)  # the loop sends specs; adapters render them
        shown.append(
            {
                "tools": len(specs),
                "definition_chars": sum(definition_chars(spec) for spec in specs),
                "shown": sorted(spec.name for spec in specs),
            }
        )
    return shown


def _run_summary(outcome: RunOutcome, model: ScriptedModelClient) -> dict[str, Any]:
    return {"status": outcome.status.value, "steps": _steps(model)}


async def run_demo(work: Path) -> dict[str, Any]:
    """Both runs over a bookstore database in `work`; a summary of what the model saw."""
    db = BookstoreDb.open(work / "catalogue-bookstore.db")
    db.reset()
    catalogue = build_catalogue(db)
    everything = catalogue.registry.exposure(ALICE, ExposureRequest(include_deferred=True))
    async with Handrail.open(MEMORY, registry=catalogue.registry, audit=False) as app:
        searching = ScriptedModelClient(
            [
                _reply(_call("s1", "search_tools", query="supplier lead time deliver")),
                _reply(_call("s2", LEAD_TIMES)),
                _final("Penguin is the slowest supplier: 12 days."),
            ]
        )
        first = await app.agent(searching, toolset=ToolsetOptions(skills=catalogue.skills)).run(
            "Which suppliers deliver slowest?", ALICE, run_id="catalogue-search"
        )
        skilled = ScriptedModelClient(
            [
                _reply(_call("k1", "bookstore.search_books", query="Darwin")),
                _reply(_call("k2", LEAD_TIMES)),
                _final("Origin of Species runs low."),
            ]
        )
        options = ToolsetOptions(
            skills=catalogue.skills, selector=SkillSelector(catalogue.skills), k=1
        )
        second = await app.agent(skilled, toolset=options).run(
            "Which books run low? Make a stock report with reorder suggestions.",
            ALICE,
            run_id="catalogue-skill",
        )
        statuses = {
            run_id: [c.describe() for step in (await _steps_of(app, run_id)) for c in step]
            for run_id in ("catalogue-search", "catalogue-skill")
        }
    db.close()
    return {
        "registered": len(catalogue.registry),
        "all_definitions": {"tools": len(everything), "chars": everything.chars},
        "search_run": {**_run_summary(first, searching), "calls": statuses["catalogue-search"]},
        "skill_run": {**_run_summary(second, skilled), "calls": statuses["catalogue-skill"]},
    }


async def _steps_of(app: Handrail, run_id: str) -> Sequence[Sequence[Any]]:
    from handrail.loop._run_log import read_run  # noqa: PLC0415 - the run's stored document

    record = app.store.get_run(run_id)
    assert record is not None
    return [step.calls for step in read_run(record).steps]


def main(argv: Sequence[str] = ()) -> None:
    """Run both runs in `.handrail/` (or the folder given) and print the summary as JSON."""
    work = Path(argv[0]) if argv else Path(".handrail")
    work.mkdir(parents=True, exist_ok=True)
    summary = asyncio.run(run_demo(work))
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
