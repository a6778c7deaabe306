"""Tool search over 1,000 tools: tokens sent per turn, search latency and ranking quality.

A generated catalogue of realistic tools (20 business domains x 5 objects x 10 verbs,
each with a description of one or two sentences and two to six described parameters)
is registered with `search_tools`; a small core set is shown up front and every other
tool is `defer_loading`. The principal lacks one domain's permission, so the catalogue
it may see is smaller than the registry, and the search must filter.

Tokens (HeuristicTokens, 4 ASCII characters a token, over OpenAI chat definitions):
- every definition: what the model is sent each turn without tool search (every tool
  the principal may use);
- with search: the core set's and `search_tools`' definitions, plus the envelope of an
  average search answer (the mean over the queries of the JSON the model reads).
  Target: at most 5% of every definition.

Latency: per query, the index alone (`ToolIndex.search`, the ranking) and a whole
`search_tools` call through the gate (lookup, the four checks, the exposure filter of
the ranked tools, the budget, shaping, the envelope; audit off). p50 and p99 over the
queries of a round; reported as the median over rounds. Target: index p99 <= 1 ms.
Quality: how often the tool a query was written for ranks first, and in the first 5.

Nothing here asserts a time.

    .venv/bin/python bench/tool_search.py [--rounds 7] [--queries 400] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _measure import environment_facts, interleaved, summary, table

from handrail import (
    ConfirmationMode,
    ConfirmationPolicy,
    ErrorCode,
    Gate,
    IdempotencyMode,
    IdempotencyPolicy,
    Principal,
    Registry,
    RiskLevel,
    SideEffect,
    Status,
    Tool,
    ToolCall,
    ToolContext,
)
from handrail.adapters import DefinitionFormat, tool_definitions
from handrail.declare.exposure import Exposure, ExposureRequest
from handrail.declare.search import ToolIndex
from handrail.shaping.budget import HeuristicTokens, json_text
from handrail.tools import SEARCH_TOOLS, search_tools_tool

DOMAINS: dict[str, tuple[str, ...]] = {
    "billing": ("invoice", "payment", "credit_note", "subscription", "tax_rate"),
    "orders": ("order", "return_request", "cart", "discount_code", "quote"),
    "customers": ("customer", "contact", "address", "segment", "note"),
    "inventory": ("product", "stock_level", "warehouse", "supplier", "batch"),
    "shipping": ("shipment", "carrier", "label", "delivery_slot", "parcel"),
    "support": ("ticket", "macro", "sla_policy", "survey", "escalation"),
    "hr": ("employee", "leave_request", "position", "onboarding_task", "review"),
    "payroll": ("payslip", "salary_band", "bonus", "expense_claim", "timesheet"),
    "calendar": ("event", "meeting_room", "availability", "reminder", "booking"),
    "email": ("message", "draft", "mailbox", "template", "attachment"),
    "crm": ("lead", "opportunity", "account", "pipeline", "activity"),
    "analytics": ("report", "dashboard", "metric", "funnel", "cohort"),
    "marketing": ("campaign", "audience", "newsletter", "landing_page", "coupon"),
    "files": ("document", "folder", "share_link", "file_version", "upload"),
    "projects": ("project", "task", "milestone", "sprint", "comment"),
    "security": ("user_account", "api_key", "role", "audit_log", "session"),
    "devops": ("deployment", "incident", "alert_rule", "build", "service"),
    "finance": ("budget", "ledger_entry", "exchange_rate", "forecast", "cost_center"),
    "legal": ("contract", "nda", "policy_document", "signature_request", "clause"),
    "procurement": ("purchase_order", "vendor", "requisition", "catalog_item", "rfq"),
}
FIELDS: dict[str, tuple[tuple[str, str], ...]] = {
    "billing": (("amount", "Amount in minor units."), ("currency", "ISO 4217 code.")),
    "orders": (("customer_id", "Who ordered."), ("channel", "Web, store or phone.")),
    "customers": (("email", "Primary e-mail address."), ("country", "ISO country code.")),
    "inventory": (("sku", "Stock keeping unit."), ("quantity", "Units on hand.")),
    "shipping": (("destination", "Delivery address id."), ("weight_grams", "Parcel weight.")),
    "support": (("priority", "Low, normal, high or urgent."), ("requester_id", "Who asked.")),
    "hr": (("department", "Organisational unit."), ("start_date", "First working day.")),
    "payroll": (("period", "Pay period, YYYY-MM."), ("gross_amount", "Before deductions.")),
    "calendar": (("starts_at", "Start, ISO 8601."), ("attendees", "Invited people's ids.")),
    "email": (("recipients", "To addresses."), ("subject", "Subject line.")),
    "crm": (("stage", "Sales stage."), ("expected_value", "Forecast deal value.")),
    "analytics": (("time_range", "Period the numbers cover."), ("granularity", "Day or week.")),
    "marketing": (("channel", "E-mail, social or ads."), ("launch_date", "Go-live day.")),
    "files": (("path", "Location in the drive."), ("mime_type", "Media type.")),
    "projects": (("assignee_id", "Responsible person."), ("due_date", "Deadline.")),
    "security": (("scope", "Permissions granted."), ("expires_at", "End of validity.")),
    "devops": (("environment", "Staging or production."), ("severity", "Impact level.")),
    "finance": (("fiscal_year", "Year of the books."), ("cost_center_id", "Who pays.")),
    "legal": (("counterparty", "The other party."), ("effective_date", "Start of terms.")),
    "procurement": (("vendor_id", "Who supplies."), ("total_amount", "Order value.")),
}
VERBS: tuple[str, ...] = ("list", "get", "create", "update", "delete", "search", "export")
VERBS += ("archive", "approve", "assign")
READS = frozenset({"list", "get", "search", "export"})
PLURAL_VERBS = frozenset({"list", "search", "export"})
DESCRIPTIONS = {
    "list": "List {plural} in {domain}, newest first. Filter by status and creation date; "
    "results come in pages.",
    "get": "Read one {label} by its id, with every field and its current status.",
    "create": "Create a new {label} in {domain}. Returns the id of the new {label}.",
    "update": "Change fields of an existing {label}; fields left out keep their values.",
    "delete": "Delete a {label} permanently. This cannot be undone.",
    "search": "Search {plural} in {domain} by free text over names, notes and references.",
    "export": "Export {plural} as CSV or JSON for a date range, for spreadsheets or archives.",
    "archive": "Archive a {label} so that it no longer shows in lists; it can be restored.",
    "approve": "Approve a pending {label}, recording who approved it and why.",
    "assign": "Assign a {label} to a person or a team, who is notified.",
}
QUERIES = {
    "list": ("list {plural}", "show recent {plural}"),
    "get": ("read {label} details", "get {label} by id"),
    "create": ("create a new {label}", "new {label} in {domain}"),
    "update": ("change a {label}", "update fields of {label}"),
    "delete": ("delete a {label} permanently", "delete {label}"),
    "search": ("search {plural} by text", "find {label} by name"),
    "export": ("export {plural} to csv", "export {domain} {plural}"),
    "archive": ("archive old {label}", "archive a {label}"),
    "approve": ("approve pending {label}", "approve {label}"),
    "assign": ("assign {label} to a team", "assign {label} to person"),
}
CORE = 12
"""Tools shown up front (one search tool per domain of the first twelve); the rest defer."""
WITHHELD_DOMAIN = "legal"
"""The principal lacks this domain's permission: its tools must never be found."""
PRINCIPAL = Principal(
    user_id="bench",
    tenant_id="t1",
    permissions=frozenset(f"{domain}.use" for domain in DOMAINS if domain != WITHHELD_DOMAIN),
)
ESTIMATOR = HeuristicTokens()
CONFIRMED = ConfirmationPolicy(mode=ConfirmationMode.CONFIRM)
INDEX = "index"
GATE = "search_tools"


# --- the catalogue ----------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Entry:
    """One generated tool's words: what a query about it is made of."""

    name: str
    verb: str
    domain: str
    label: str
    plural: str


def _plural(label: str) -> str:
    if label.endswith("y") and label[-2:-1] not in "aeiou":
        return label[:-1] + "ies"
    return label + ("es" if label.endswith(("s", "x", "ch", "sh")) else "s")


def _schema(verb: str, domain: str, obj: str) -> dict[str, Any]:
    ident = {f"{obj}_id": {"type": "string", "description": f"The {obj}'s id."}}
    fields = {name: {"type": "string", "description": text} for name, text in FIELDS[domain]}
    status = {
        "type": "string",
        "enum": ["open", "pending", "closed"],
        "description": "Only these.",
    }
    by_verb: dict[str, dict[str, Any]] = {
        "list": {
            "status": status,
            "created_after": {"type": "string", "format": "date", "description": "From day."},
            "limit": {"type": "integer", "minimum": 1, "maximum": 100, "description": "Page."},
            "cursor": {"type": "string", "description": "From the previous page."},
        },
        "get": ident,
        "create": fields,
        "update": {**ident, **fields},
        "delete": {**ident, "reason": {"type": "string", "description": "Why, for the log."}},
        "search": {
            "query": {"type": "string", "description": "Words to look for."},
            "limit": {"type": "integer", "minimum": 1, "maximum": 50, "description": "At most."},
        },
        "export": {
            "format": {"type": "string", "enum": ["csv", "json"], "description": "File type."},
            "from_date": {"type": "string", "format": "date", "description": "First day."},
            "to_date": {"type": "string", "format": "date", "description": "Last day."},
        },
        "archive": {**ident, "reason": {"type": "string", "description": "Why, for the log."}},
        "approve": {**ident, "comment": {"type": "string", "description": "Shown in history."}},
        "assign": {
            **ident,
            "assignee_id": {"type": "string", "description": "Person's id."},
            "team": {"type": "string", "description": "Team's name, instead of a person."},
        },
    }
    properties = by_verb[verb]
    required = [name for name in properties if name.endswith("_id")][:1]
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


async def _run(_arguments: dict[str, Any], _ctx: ToolContext) -> dict[str, object]:
    return {"ok": True}


def catalogue() -> tuple[list[Tool], list[Entry]]:
    """1,000 tools and their words; the core set is the first twelve domains' searches."""
    tools: list[Tool] = []
    entries: list[Entry] = []
    core = {f"{domain}.search_{_plural(objs[0])}" for domain, objs in list(DOMAINS.items())[:CORE]}
    for domain, objects in DOMAINS.items():
        for obj in objects:
            label, plural = obj.replace("_", " "), _plural(obj).replace("_", " ")
            for verb in VERBS:
                name = f"{domain}.{verb}_{_plural(obj) if verb in PLURAL_VERBS else obj}"
                text = DESCRIPTIONS[verb].format(plural=plural, label=label, domain=domain)
                reads = verb in READS
                risk = RiskLevel.L1_INTERNAL_READ if reads else RiskLevel.L2_REVERSIBLE_WRITE
                mode = IdempotencyMode.NONE if reads else IdempotencyMode.COMMAND_ID
                tools.append(
                    Tool.from_json_schema(
                        name=name,
                        description=text,
                        input_schema=_schema(verb, domain, obj),
                        fn=_run,
                        risk=risk,
                        side_effect=SideEffect.NONE if reads else SideEffect.LOCAL_WRITE,
                        idempotency=IdempotencyPolicy(mode=mode),
                        confirmation=None if reads else CONFIRMED,
                        permissions=(f"{domain}.use",),
                        defer_loading=name not in core,
                    ),
                )
                entries.append(
                    Entry(name=name, verb=verb, domain=domain, label=label, plural=plural)
                )
    return tools, entries


def queries(entries: Sequence[Entry], count: int, seed: int = 19) -> list[tuple[str, str]]:
    """`count` (query, the tool it was written for) pairs, from the principal's tools."""
    rng = random.Random(seed)  # noqa: S311 - the same queries every run, not secrecy
    usable = [e for e in entries if e.domain != WITHHELD_DOMAIN]
    made = []
    for _ in range(count):
        entry = rng.choice(usable)
        template = rng.choice(QUERIES[entry.verb])
        text = template.format(plural=entry.plural, label=entry.label, domain=entry.domain)
        made.append((text, entry.name))
    return made


# --- measuring --------------------------------------------------------------------------------


@dataclass(kw_only=True)
class Case:
    """One measured path: per round, the p50 and p99 of its per-query latencies."""

    key: str
    p50: list[float] = field(default_factory=list)
    p99: list[float] = field(default_factory=list)


def _percentile(samples: Sequence[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass(kw_only=True)
class Bench:
    """The registered catalogue, the gate over it and what one turn shows the model."""

    registry: Registry
    gate: Gate
    request: ExposureRequest
    exposure: Exposure
    """What the model is shown this turn: the host works it out once per turn."""
    index: ToolIndex
    queries: list[tuple[str, str]]
    answers: list[dict[str, Any]] = field(default_factory=list)

    async def search(self, number: int, query: str) -> dict[str, Any]:
        call = ToolCall(
            id=f"q{number}",
            name=SEARCH_TOOLS,
            arguments=json.dumps({"query": query}),
        )
        envelope = await self.gate.handle(call, PRINCIPAL, exposure=self.exposure)
        if envelope.status is not Status.OK:
            raise AssertionError(f"search_tools answered {envelope.to_model_dict()}")
        return envelope.to_model_dict()


def build(query_count: int) -> Bench:
    """The catalogue registered with `search_tools`, a gate without audit, the queries."""
    registry = Registry()
    tools, entries = catalogue()
    for item in tools:
        registry.register(item)
    registry.register(search_tools_tool(registry))
    request = ExposureRequest()
    return Bench(
        registry=registry,
        gate=Gate(registry),
        request=request,
        exposure=registry.exposure(PRINCIPAL, request),
        index=ToolIndex.build(registry.specs()),
        queries=queries(entries, query_count),
    )


async def check(bench: Bench) -> None:
    """Every answer holds only tools the principal may use and never a shown one."""
    shown = set(bench.registry.exposure(PRINCIPAL, bench.request).names)
    for number, (query, _) in enumerate(bench.queries):
        answer = await bench.search(number, query)
        names = [t["name"] for t in answer["data"]["tools"]]
        bad = [n for n in names if n.startswith(f"{WITHHELD_DOMAIN}.") or n in shown]
        if bad or SEARCH_TOOLS in names:
            raise AssertionError(f"{query!r} returned {bad or names}")
        bench.answers.append(answer)
    refused = await bench.gate.handle(
        ToolCall(id="huge", name=SEARCH_TOOLS, arguments=json.dumps({"query": "x" * 1_000_000})),
        PRINCIPAL,
    )
    if refused.error_type is not ErrorCode.INVALID_ARGUMENTS:
        raise AssertionError("a 1 MB query was not refused")


def tokens(bench: Bench) -> dict[str, Any]:
    """Tokens of one turn with every definition, and with the core set and a search."""
    every = bench.registry.exposure(PRINCIPAL, ExposureRequest(include_deferred=True))
    specs = [s for s in every.included if s.name != SEARCH_TOOLS]
    shown = bench.registry.exposure(PRINCIPAL, bench.request).included
    fmt = DefinitionFormat.OPENAI_CHAT
    all_tokens = ESTIMATOR.count(json_text(tool_definitions(specs, fmt)))
    core = ESTIMATOR.count(json_text(tool_definitions(shown, fmt)))
    results = [ESTIMATOR.count(json_text(answer)) for answer in bench.answers]
    found = [len(answer["data"]["tools"]) for answer in bench.answers]
    average = statistics.mean(results)
    with_search = core + average
    return {
        "tools_registered": len(bench.registry),
        "tools_the_principal_may_use": len(specs),
        "core_tools_shown": len([s for s in shown if s.name != SEARCH_TOOLS]),
        "every_definition_tokens": all_tokens,
        "core_and_search_tools_tokens": core,
        "average_search_answer_tokens": round(average, 1),
        "average_tools_found": round(statistics.mean(found), 2),
        "with_search_tokens": round(with_search, 1),
        "ratio": round(with_search / all_tokens, 4),
    }


def quality(bench: Bench) -> dict[str, float]:
    """Share of queries whose tool ranks first, and in the first five (index and tool)."""
    top1 = top5 = found1 = 0
    for (query, wanted), answer in zip(bench.queries, bench.answers, strict=True):
        ranked = [hit.name for hit in bench.index.search(query, limit=5)]
        top1 += ranked[:1] == [wanted]
        top5 += wanted in ranked
        names = [t["name"] for t in answer["data"]["tools"]]
        found1 += names[:1] == [wanted]
    count = len(bench.queries)
    return {
        "index_top1": round(top1 / count, 3),
        "index_top5": round(top5 / count, 3),
        "search_tools_top1": round(found1 / count, 3),
    }


async def measure(bench: Bench, rounds: int) -> dict[str, Case]:
    """Interleaved rounds of every query through the index alone and through the gate."""
    cases = {INDEX: Case(key=INDEX), GATE: Case(key=GATE)}

    async def prepare(case: Case) -> None:
        await sample(case, record=False)

    async def sample(case: Case, *, record: bool = True) -> None:
        spent: list[float] = []
        for number, (query, _) in enumerate(bench.queries):
            if case.key == INDEX:
                start = time.perf_counter_ns()
                bench.index.search(query)
            else:
                start = time.perf_counter_ns()
                await bench.search(number, query)
            spent.append((time.perf_counter_ns() - start) / 1000)
        if record:
            case.p50.append(_percentile(spent, 0.5))
            case.p99.append(_percentile(spent, 0.99))

    await interleaved(list(cases.values()), rounds=rounds, prepare=prepare, sample=sample)
    return cases


def build_time_ms(bench: Bench, repeat: int = 3) -> float:
    """The median time to build the index of the whole registry."""
    spent = []
    for _ in range(repeat):
        start = time.perf_counter_ns()
        ToolIndex.build(bench.registry.specs())
        spent.append((time.perf_counter_ns() - start) / 1e6)
    return round(statistics.median(spent), 2)


# --- report -----------------------------------------------------------------------------------


def report(found: dict[str, Any], rounds: int, count: int) -> str:
    """The results as plain tables."""
    t = found["tokens"]
    body: list[tuple[str, ...]] = [
        ("every definition", f"{t['every_definition_tokens']:,}", "100%"),
        (
            f"core ({t['core_tools_shown']}) + search_tools + avg answer",
            f"{t['with_search_tokens']:,.0f}",
            f"{100 * t['ratio']:.2f}%",
        ),
    ]
    title = (
        f"{t['tools_registered']} tools registered, {t['tools_the_principal_may_use']} "
        f"usable; tokens per turn (target <= 5%)"
    )
    first = table(("turn", "tokens", "share"), body, title)
    latency = found["latency_us"]
    rows: list[tuple[str, ...]] = [
        (key, f"{row['p50_median']:.1f}", f"{row['p99_median']:.1f}", f"{row['p99_max']:.1f}")
        for key, row in latency.items()
    ]
    second = table(
        ("path", "p50 µs", "p99 µs", "worst round p99 µs"),
        rows,
        f"{rounds} rounds x {count} queries, interleaved; medians over rounds (index p99 <= 1 ms)",
    )
    q = found["quality"]
    third = (
        f"index build: {found['index_build_ms']} ms; the expected tool first: "
        f"{100 * q['index_top1']:.0f}% (in the first 5: {100 * q['index_top5']:.0f}%)"
    )
    return f"{first}\n\n{second}\n\n{third}"


def main(argv: list[str] | None = None) -> int:
    """Run, print tables, optionally write JSON."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--queries", type=int, default=400, help="queries per path per round")
    parser.add_argument("--json", type=Path, metavar="PATH")
    args = parser.parse_args(argv)
    bench = build(args.queries)
    asyncio.run(check(bench))
    cases = asyncio.run(measure(bench, args.rounds))
    found: dict[str, Any] = {
        "tokens": tokens(bench),
        "latency_us": {
            key: {
                "p50_median": round(summary(case.p50).median, 2),
                "p99_median": round(summary(case.p99).median, 2),
                "p99_max": round(max(case.p99), 2),
                "rounds_p99": summary(case.p99).rounds,
            }
            for key, case in cases.items()
        },
        "quality": quality(bench),
        "index_build_ms": build_time_ms(bench),
    }
    print(report(found, args.rounds, args.queries))
    if args.json:
        settings = {"rounds": args.rounds, "queries": args.queries}
        payload = {"environment": environment_facts(settings, ["pydantic"]), "results": found}
        args.json.write_text(json.dumps(payload, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
