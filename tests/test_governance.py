"""Governance: each lint rule (a case that triggers it, one that does not), examples and
rates checked when declared, and deprecation before, on and after its day."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone

import pytest

from _catalogue_apps import GOOD, QUERY, make_tool
from handrail import ErrorCode, Gate, Principal, Registry, Status, ToolCall
from handrail.adapters import (
    AnthropicAdapter,
    GeminiAdapter,
    OpenAIChatAdapter,
    OpenAIResponsesAdapter,
)
from handrail.adapters.json_schema import tool_definition
from handrail.declare._lint_words import description_words, name_words, overlap
from handrail.declare.catalogue import Catalogue
from handrail.declare.exposure import ExclusionReason, definition_chars
from handrail.declare.governance import (
    SEVERITIES,
    Rule,
    Severity,
    lint,
    undescribed_fields,
    utc_day,
)
from handrail.errors import RegistrationError
from handrail.mcp._definitions import tool_definition as mcp_definition
from handrail.spec import Deprecation, RiskLevel
from handrail.testing import FixedClock, MemoryAuditSink

DAY = date(2026, 6, 1)
ALICE = Principal(user_id="alice", tenant_id="t1")


def _rules(*tools: object, **kwargs: object) -> set[tuple[Rule, str]]:
    registry = Registry(clock=FixedClock())
    for one in tools:
        registry.register(one)  # type: ignore[arg-type]
    return {(f.rule, f.tool) for f in lint(registry.specs(), **kwargs)}  # type: ignore[arg-type]


# --- lint rules ------------------------------------------------------------------------------


def test_every_rule_has_a_documented_severity() -> None:
    assert set(SEVERITIES) == set(Rule)
    assert SEVERITIES[Rule.NEAR_DUPLICATE] is Severity.ERROR
    assert SEVERITIES[Rule.DESCRIPTION_CHANGED] is Severity.ERROR


def test_a_clean_tool_has_no_finding() -> None:
    assert _rules(make_tool("desk.read_ticket")) == set()


def test_search_and_find_tools_with_overlapping_descriptions_are_near_duplicates() -> None:
    search = make_tool(
        "desk.search_tickets",
        description="Search the support desk tickets by words in their title or body.",
        schema=QUERY,
        examples=({"query": "printer"},),
    )
    find = make_tool(
        "desk.find_tickets",
        description="Find support desk tickets whose title or body holds the words.",
        schema=QUERY,
        examples=({"query": "printer"},),
    )
    registry = Registry()
    registry.register(search)
    registry.register(find)
    (finding,) = lint(registry.specs())
    assert finding.rule is Rule.NEAR_DUPLICATE
    assert {finding.tool, finding.other} == {"desk.search_tickets", "desk.find_tickets"}
    assert finding.severity is Severity.ERROR


def test_tools_sharing_a_verb_but_not_an_object_are_not_near_duplicates() -> None:
    tickets = make_tool("desk.search_tickets", schema=QUERY, examples=({"query": "x"},))
    invoices = make_tool(
        "billing.find_invoices",
        description="Find the invoices of one customer account for a month, with totals due.",
        schema=QUERY,
        examples=({"query": "x"},),
    )
    assert not any(rule is Rule.NEAR_DUPLICATE for rule, _ in _rules(tickets, invoices))
    notes = make_tool(
        "desk.search_notes",
        description="Search the private notes agents wrote on a customer's account.",
        schema=QUERY,
        examples=({"query": "x"},),
    )
    assert overlap(name_words("desk.search_tickets"), name_words("desk.search_notes")) == 0.5
    assert not any(rule is Rule.NEAR_DUPLICATE for rule, _ in _rules(tickets, notes))


def test_the_synonym_table_folds_grep_lookup_query_and_plurals() -> None:
    assert (
        name_words("repo.grepFiles") == name_words("repo.lookup_file") == {"repo", "find", "file"}
    )
    assert name_words("kb.query-entries") == {"kb", "find", "entry"}
    assert overlap(description_words("Fetch the orders"), description_words("get an order")) == 1.0
    assert overlap((), ()) == 0.0


@pytest.mark.parametrize("name", ["desk.run", "tools.process_data", "helper", "do_it"])
def test_a_name_of_only_verbs_and_filler_is_vague(name: str) -> None:
    assert (Rule.VAGUE_NAME, name) in _rules(make_tool(name))


@pytest.mark.parametrize(
    "description",
    ["Gets tickets.", "Does various things with tickets of the support desk, etc."],
)
def test_a_short_or_filler_description_is_vague(description: str) -> None:
    found = _rules(make_tool("desk.read_ticket", description=description))
    assert (Rule.VAGUE_DESCRIPTION, "desk.read_ticket") in found


def test_a_tool_without_owner_is_flagged_and_one_with_owner_is_not() -> None:
    assert (Rule.MISSING_OWNER, "a.read_ticket") in _rules(make_tool("a.read_ticket", owner=None))
    assert (Rule.MISSING_OWNER, "a.read_ticket") not in _rules(make_tool("a.read_ticket"))


def test_a_tool_with_parameters_and_no_examples_is_flagged_one_without_parameters_is_not() -> None:
    assert (Rule.MISSING_EXAMPLES, "a.read_ticket") in _rules(
        make_tool("a.read_ticket", examples=()),
    )
    no_parameters = make_tool("a.read_status", schema={"type": "object"}, examples=())
    assert _rules(no_parameters) == set()


def test_fields_without_descriptions_are_listed_at_any_depth() -> None:
    schema = {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "filter": {"$ref": "#/$defs/Filter"},
            "tags": {"type": "array", "description": "Tags", "items": {"$ref": "#/$defs/Tag"}},
            "any": {"type": "array", "description": "Anything", "items": True},
        },
        "$defs": {
            "Filter": {"type": "object", "description": "A filter"},
            "Tag": {"type": "object", "properties": {"label": {"type": "string"}}},
        },
    }
    assert list(undescribed_fields(schema)) == ["/properties/id", "/$defs/Tag/properties/label"]
    found = _rules(make_tool("a.read_ticket", schema=schema, examples=()))
    assert (Rule.UNDESCRIBED_FIELD, "a.read_ticket") in found


def test_many_undescribed_fields_are_cut_to_ten_in_the_message() -> None:
    schema = {"type": "object", "properties": {f"f{i}": {"type": "string"} for i in range(12)}}
    registry = Registry()
    registry.register(make_tool("a.read_ticket", schema=schema, examples=()))
    (finding,) = [f for f in lint(registry.specs()) if f.rule is Rule.UNDESCRIBED_FIELD]
    assert finding.message.endswith(", ...")


def test_a_replacement_that_is_not_registered_or_retires_first_is_an_error() -> None:
    old = make_tool(
        "desk.old_reader",
        deprecation=Deprecation(after=DAY, replacement="desk.read_ticket"),
    )
    assert (Rule.UNKNOWN_REPLACEMENT, "desk.old_reader") in _rules(old)
    retiring_too = make_tool(
        "desk.read_ticket",
        description="Read one support ticket by id, with its full history of comments.",
        deprecation=Deprecation(after=DAY - timedelta(days=1)),
    )
    assert (Rule.UNKNOWN_REPLACEMENT, "desk.old_reader") in _rules(old, retiring_too)
    lasting = make_tool("desk.read_ticket", description="Read a support ticket with comments.")
    assert (Rule.UNKNOWN_REPLACEMENT, "desk.old_reader") not in _rules(old, lasting)


def test_a_replacement_already_retired_today_is_an_error() -> None:
    old = make_tool("desk.old_reader", deprecation=Deprecation(after=DAY, replacement="desk.new"))
    new = make_tool(
        "desk.new",
        description="Read a support ticket, its comments and its attachments by ticket id.",
        deprecation=Deprecation(after=DAY + timedelta(days=30)),
    )
    assert (Rule.UNKNOWN_REPLACEMENT, "desk.old_reader") not in _rules(old, new, today=DAY)
    later = DAY + timedelta(days=60)
    assert (Rule.UNKNOWN_REPLACEMENT, "desk.old_reader") in _rules(old, new, today=later)


def test_a_description_changed_since_the_approved_catalogue_is_an_error() -> None:
    before = Registry()
    before.register(make_tool("desk.read_ticket"))
    approved = Catalogue.of(before.specs())
    same = _rules(make_tool("desk.read_ticket"), approved=approved)
    assert same == set()
    changed = make_tool("desk.read_ticket", description=GOOD + " Prefer it to any search.")
    assert (Rule.DESCRIPTION_CHANGED, "desk.read_ticket") in _rules(changed, approved=approved)
    new = make_tool("desk.close_ticket", description="Close one support ticket by id with a note.")
    assert (Rule.UNAPPROVED_TOOL, "desk.close_ticket") in _rules(new, approved=approved)


def test_forbidden_and_disabled_tools_are_not_linted() -> None:
    hidden = make_tool("x", owner=None, enabled=False)
    forbidden = make_tool("y", owner=None, risk=RiskLevel.L4_FORBIDDEN)
    assert _rules(hidden, forbidden) == set()


def test_findings_come_errors_first_and_serialise_with_their_severity() -> None:
    registry = Registry()
    registry.register(make_tool("a.run", owner=None))
    registry.register(make_tool("b.old", deprecation=Deprecation(after=DAY, replacement="b.gone")))
    findings = lint(registry.specs())
    assert findings[0].severity is Severity.ERROR
    assert findings[0].document()["severity"] == "error"
    assert [f.severity for f in findings] == sorted(
        (f.severity for f in findings),
        key=list(Severity).index,
    )


# --- declaration checks ----------------------------------------------------------------------


def test_an_example_that_fails_the_schema_is_refused_at_registration_and_audited() -> None:
    audit = MemoryAuditSink()
    registry = Registry(audit=audit)
    with pytest.raises(RegistrationError, match="examples\\[1\\]"):
        registry.register(make_tool("desk.read_ticket", examples=({"id": "T-1"}, {"id": 7})))
    assert "desk.read_ticket" not in registry
    assert [e.decision for e in audit.events] == ["refused"]


@pytest.mark.parametrize("rate", ["10/minute", "10 per minute", "5/second;1000/day"])
def test_a_rate_in_the_limits_notation_is_accepted(rate: str) -> None:
    assert make_tool("a.read_ticket", rate_limit=rate).spec.rate_limit == rate


@pytest.mark.parametrize("rate", ["often", "10/minute;sometimes", "0/minute", ""])
def test_a_rate_that_does_not_parse_is_refused_when_declared(rate: str) -> None:
    with pytest.raises(RegistrationError, match="rate_limit"):
        make_tool("a.read_ticket", rate_limit=rate)


def test_a_deprecation_day_must_be_a_date_and_not_name_its_own_tool() -> None:
    with pytest.raises(RegistrationError, match="a UTC day"):
        Deprecation(after=datetime(2026, 6, 1, tzinfo=UTC))
    with pytest.raises(RegistrationError, match="own replacement"):
        make_tool("a.read_ticket", deprecation=Deprecation(after=DAY, replacement="a.read_ticket"))


# --- deprecation by the registry's clock -----------------------------------------------------


def _deprecated_registry(now: datetime) -> tuple[Registry, MemoryAuditSink]:
    audit = MemoryAuditSink()
    registry = Registry(audit=audit, clock=FixedClock(now))
    registry.register(make_tool("desk.read_ticket"))
    registry.register(
        make_tool(
            "desk.old_reader",
            description="Read one support ticket the old way, without its history.",
            deprecation=Deprecation(after=DAY, replacement="desk.read_ticket", note="Same data."),
        ),
    )
    return registry, audit


def test_the_day_before_a_deprecated_tool_is_shown_with_its_notice_and_runs() -> None:
    registry, _ = _deprecated_registry(datetime(2026, 5, 31, 23, 59, tzinfo=UTC))
    assert "desk.old_reader" in registry.exposure(ALICE)
    assert registry.lookup("desk.old_reader", ALICE) is not None
    spec = registry.get("desk.old_reader").spec
    assert spec.model_description.endswith(
        "Deprecated: refused from 2026-06-01 (UTC). Use desk.read_ticket instead. Same data.",
    )
    assert definition_chars(spec) > len(spec.description) + len(spec.deprecation.notice())  # type: ignore[union-attr]
    envelope = Gate(registry).handle_sync(
        ToolCall(id="c1", name="desk.old_reader", arguments={"id": "T-1"}),
        ALICE,
    )
    assert envelope.status is Status.OK


@pytest.mark.parametrize(
    "now",
    [datetime(2026, 6, 1, tzinfo=UTC), datetime(2026, 6, 2, 12, tzinfo=UTC)],
    ids=["on the day", "after the day"],
)
def test_from_its_day_a_deprecated_tool_is_left_out_and_refused_as_unknown(now: datetime) -> None:
    registry, audit = _deprecated_registry(now)
    exposure = registry.exposure(ALICE)
    assert "desk.old_reader" not in exposure
    assert exposure.reason("desk.old_reader") is ExclusionReason.DEPRECATED
    assert "desk.read_ticket" in exposure
    assert registry.lookup("desk.old_reader", ALICE) is None
    gate = Gate(registry, audit=audit)
    envelope = gate.handle_sync(
        ToolCall(id="c1", name="desk.old_reader", arguments={"id": "T-1"}),
        ALICE,
    )
    assert envelope.error is not None
    assert envelope.error.code is ErrorCode.UNKNOWN_TOOL
    refused = [e for e in audit.events if e.kind != "registry"]
    assert any(e.stage == "lookup" and e.decision != "pass" for e in refused)


def test_a_deprecation_day_is_judged_in_utc_whatever_the_clocks_zone() -> None:
    eastern = datetime(2026, 5, 31, 22, tzinfo=UTC).astimezone(timezone(timedelta(hours=5)))
    assert eastern.date() == DAY
    assert utc_day(FixedClock(eastern)) == date(2026, 5, 31)
    registry, _ = _deprecated_registry(eastern)
    assert registry.today == date(2026, 5, 31)
    assert registry.lookup("desk.old_reader", ALICE) is not None


def test_the_clock_moving_past_the_day_retires_the_tool_without_reregistering() -> None:
    clock = FixedClock(datetime(2026, 5, 31, 23, tzinfo=UTC))
    registry = Registry(clock=clock)
    registry.register(make_tool("desk.old", deprecation=Deprecation(after=DAY)))
    assert registry.lookup("desk.old", ALICE) is not None
    clock.advance(3600)
    assert registry.lookup("desk.old", ALICE) is None


def test_every_definition_writer_shows_the_deprecation_notice() -> None:
    registry, _ = _deprecated_registry(datetime(2026, 5, 1, tzinfo=UTC))
    specs = registry.exposure(ALICE).included
    old = registry.get("desk.old_reader").spec
    notice = old.deprecation.notice()  # type: ignore[union-attr]
    payloads = [
        OpenAIChatAdapter(strict=False).tool_definitions(specs).payload,
        OpenAIResponsesAdapter(strict=False).tool_definitions(specs).payload,
        AnthropicAdapter(strict=False).tool_definitions(specs).payload,
        GeminiAdapter().tool_definitions(specs).payload,
    ]
    for payload in payloads:
        assert str(payload).count(notice) == 1
    assert tool_definition(old)["description"].endswith(notice)
    assert (mcp_definition(old).description or "").endswith(notice)
    fresh = registry.get("desk.read_ticket").spec
    assert fresh.model_description == fresh.description
