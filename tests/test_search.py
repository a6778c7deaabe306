"""The tool-search index: the words of a tool, BM25F ranking, one index per registry version."""

from __future__ import annotations

from typing import Any

import pytest

from handrail import Registry, RiskLevel, SideEffect, Tool, ToolContext, ToolSpec
from handrail.declare.search import CatalogueIndex, SearchHit, ToolIndex, terms


def spec(name: str, description: str, properties: dict[str, Any] | None = None) -> ToolSpec:
    return ToolSpec(
        name=name,
        description=description,
        input_schema={"type": "object", "properties": properties or {}},
        schema_version="1",
        description_version="1",
        risk=RiskLevel.L1_INTERNAL_READ,
        side_effect=SideEffect.NONE,
    )


def text(description: str) -> dict[str, str]:
    return {"type": "string", "description": description}


CATALOGUE = [
    spec(
        "billing.create_invoice",
        "Create a draft invoice for a customer, with line items and a due date.",
        {"customer_id": text("Who is billed."), "due_date": text("When payment is due.")},
    ),
    spec(
        "billing.list_invoices",
        "List a customer's invoices, newest first, filtered by status.",
        {"customer_id": text("Whose invoices."), "status": text("Paid, open or overdue.")},
    ),
    spec(
        "billing.refund_payment",
        "Refund a card payment in full or in part to the original card.",
        {"payment_id": text("The payment."), "amount": text("Minor units; omit for all.")},
    ),
    spec(
        "orders.cancel_order",
        "Cancel an order that has not shipped yet; the stock is released.",
        {"order_id": text("The order."), "reason": text("Shown to the customer.")},
    ),
    spec(
        "orders.track_shipment",
        "Where a parcel is now, from the carrier's tracking events.",
        {"tracking_number": text("The carrier's number.")},
    ),
    spec(
        "crm.lookupCustomer",
        "Find a customer record by e-mail address or phone number.",
        {"emailAddress": text("Exact address."), "phone": text("E.164 number.")},
    ),
    spec(
        "calendar.book_meeting_room",
        "Reserve a meeting room for a time slot and invite attendees.",
        {"room": text("Room name."), "starts_at": text("ISO 8601 start.")},
    ),
    spec(
        "files.share-document",
        "Create a link to a document that others can open.",
        {"document_id": text("The document."), "expires": text("When the link stops.")},
    ),
    spec(
        "hr.request_leave",
        "Ask for days off; the manager approves or declines.",
        {"first_day": text("First day away."), "last_day": text("Last day away.")},
    ),
    spec(
        "devops.restart_service",
        "Restart a running service in an environment, one instance at a time.",
        {"service": text("Service name."), "environment": text("Staging or production.")},
    ),
    spec(
        "analytics.export_report",
        "Export a report as CSV or PDF for a date range.",
        {"report_id": text("The report."), "format": text("csv or pdf.")},
    ),
    spec(
        "support.escalate_ticket",
        "Hand a support ticket to the second line with a priority.",
        {"ticket_id": text("The ticket."), "priority": text("High or urgent.")},
    ),
]


@pytest.fixture(scope="module")
def index() -> ToolIndex:
    return ToolIndex.build(CATALOGUE)


# --- the words of a tool ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ("billing.create_invoice", ["billing", "create", "invoice"]),
        ("createInvoice", ["create", "invoice"]),
        ("HTTPRequestLog", ["http", "request", "log"]),
        ("files.share-document", ["file", "share", "document"]),
        ("Create the INVOICES", ["create", "invoice"]),
        ("categories boxes addresses batches", ["category", "box", "address", "batch"]),
        ("status analysis access bus ties", ["status", "analysis", "access", "bus", "ties"]),
        ("get me a list of the users", ["list", "user"]),
        ("\uff29\uff2e\uff36\uff2f\uff29\uff23\uff25", ["invoice"]),  # full-width
        ("Rechnungsübersicht", ["rechnungsübersicht"]),
        ("x y 7 v2", ["v2"]),
        ("", []),
    ],
)
def test_text_is_split_at_name_boundaries_lower_cased_and_plurals_folded(
    raw: str, words: list[str]
) -> None:
    assert terms(raw) == words


# --- ranking ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("refund a payment", "billing.refund_payment"),
        ("draft an invoice for a customer", "billing.create_invoice"),
        ("show overdue invoices", "billing.list_invoices"),
        ("cancel my order", "orders.cancel_order"),
        ("where is my parcel", "orders.track_shipment"),
        ("find customer by email address", "crm.lookupCustomer"),
        ("book a room for a meeting", "calendar.book_meeting_room"),
        ("share a document link", "files.share-document"),
        ("days off", "hr.request_leave"),
        ("restart the production service", "devops.restart_service"),
        ("export report as csv", "analytics.export_report"),
        ("escalate an urgent ticket", "support.escalate_ticket"),
    ],
)
def test_the_tool_a_realistic_query_is_about_ranks_first(
    index: ToolIndex, query: str, expected: str
) -> None:
    assert index.search(query, limit=1)[0].name == expected


def test_a_match_in_the_name_outranks_the_same_word_in_a_description() -> None:
    built = ToolIndex.build(
        [
            spec("a.mentions", "Send the weekly digest of every invoice."),
            spec("b.invoice", "Send the weekly digest."),
        ],
    )
    assert [hit.name for hit in built.search("invoice")] == ["b.invoice", "a.mentions"]


def test_parameter_names_and_nested_parameter_descriptions_are_searched() -> None:
    nested = {
        "filters": {
            "type": "object",
            "properties": {"warehouse": {"type": "string"}},
        },
        "lines": {
            "type": "array",
            "items": {"anyOf": [{"type": "object", "description": "A pallet label."}]},
        },
    }
    built = ToolIndex.build([spec("ops.move", "Move stock.", nested), spec("ops.other", "Else.")])
    assert [hit.name for hit in built.search("warehouse")] == ["ops.move"]
    assert [hit.name for hit in built.search("pallet")] == ["ops.move"]


def test_parameters_nested_deeper_than_four_levels_are_not_read() -> None:
    deep: dict[str, Any] = {"type": "string", "description": "buried"}
    for level in range(6):
        deep = {"type": "object", "properties": {f"level{level}": deep}}
    built = ToolIndex.build([spec("ops.deep", "Deep.", deep["properties"])])
    assert built.search("level5")
    assert built.search("buried") == ()


def test_the_full_name_as_query_ranks_that_tool_first(index: ToolIndex) -> None:
    assert index.search("  Billing.List_Invoices ")[0].name == "billing.list_invoices"


def test_ties_are_broken_by_name_and_the_order_of_specs_does_not_matter() -> None:
    same = [spec(f"t.tool_{n}", "Rotate the keys.") for n in (3, 1, 2)]
    shuffled = [same[1], same[2], same[0]]
    first = ToolIndex.build(same).search("rotate keys")
    assert [hit.name for hit in first] == ["t.tool_1", "t.tool_2", "t.tool_3"]
    assert ToolIndex.build(shuffled).search("rotate keys") == first
    assert len({hit.score for hit in first}) == 1


def test_a_word_in_most_of_a_large_catalogue_counts_only_when_the_query_has_no_other() -> None:
    specs = [
        spec(f"a.read_order_{n}", "Read an order by id.", {"id": text("id")}) for n in range(65)
    ]
    specs.append(spec("b.close_ticket", "Close a ticket by id.", {"id": text("id")}))
    built = ToolIndex.build(specs)
    assert [hit.name for hit in built.search("ticket id")] == ["b.close_ticket"]
    assert len(built.search("id")) == 66
    few = ToolIndex.build(specs[-3:])  # in a small catalogue every word counts
    assert len(few.search("ticket id")) == 3


def test_limit_search_hits_and_ranked_names_agree(index: ToolIndex) -> None:
    hits = index.search("customer invoice")
    assert len(hits) > 2
    assert index.search("customer invoice", limit=2) == hits[:2]
    assert index.search("customer invoice", limit=0) == ()
    assert index.ranked_names("customer invoice") == tuple(hit.name for hit in hits)
    assert all(isinstance(hit, SearchHit) and hit.score > 0 for hit in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


@pytest.mark.parametrize("query", ["", "   ", "the a of", "!!! ???", "\x00\x1b"])
def test_a_query_without_searchable_words_matches_nothing(index: ToolIndex, query: str) -> None:
    assert index.search(query) == ()


def test_only_the_first_thousand_characters_and_32_words_of_a_query_count(
    index: ToolIndex,
) -> None:
    assert index.search("x" * 1_000 + " refund") == ()
    fillers = " ".join(f"aa{n:02d}" for n in range(32))
    assert index.search(f"{fillers} refund") == ()  # 'refund' sorts after the fillers
    assert index.search(f"{fillers[5:]} refund")[0].name == "billing.refund_payment"


def test_an_empty_index_matches_nothing() -> None:
    empty = ToolIndex.build([])
    assert len(empty) == 0
    assert empty.search("anything") == ()


def test_a_thousand_tools_are_each_found_first_by_their_own_name() -> None:
    specs = [
        spec(f"ns{n % 10}.tool_{n}", f"Tool number {n} of the catalogue.", {"x": text("An x.")})
        for n in range(1_000)
    ]
    built = ToolIndex.build(specs)
    assert len(built) == 1_000
    assert built.names == tuple(sorted(s.name for s in specs))
    for n in (0, 1, 499, 999):
        assert built.search(f"ns{n % 10}.tool_{n}", limit=1)[0].name == f"ns{n % 10}.tool_{n}"


# --- one index per registry version -----------------------------------------------------------


async def _noop(arguments: dict[str, Any], ctx: ToolContext) -> dict[str, object]:
    return {}


def _tool(name: str, description: str) -> Tool:
    return Tool.from_json_schema(
        name=name,
        description=description,
        input_schema={"type": "object", "properties": {}},
        fn=_noop,
        risk=RiskLevel.L0_PUBLIC_READ,
    )


def test_the_catalogue_index_is_rebuilt_only_after_the_registry_changed() -> None:
    registry = Registry()
    registry.register(_tool("a.archive_mail", "Archive old mail."))
    catalogue = CatalogueIndex(registry)
    first = catalogue.current()
    assert catalogue.current() is first
    assert first.ranked_names("archive") == ("a.archive_mail",)

    registry.register(_tool("b.archive_files", "Archive old files."))
    second = catalogue.current()
    assert second is not first
    assert catalogue.current() is second
    assert set(second.ranked_names("archive")) == {"a.archive_mail", "b.archive_files"}

    registry.deregister("a.archive_mail")
    assert catalogue.current().ranked_names("archive") == ("b.archive_files",)


def test_a_closed_catalogue_index_no_longer_follows_the_registry() -> None:
    registry = Registry()
    catalogue = CatalogueIndex(registry)
    built = catalogue.current()
    catalogue.close()
    registry.register(_tool("a.archive_mail", "Archive old mail."))
    assert catalogue.current() is built
    assert built.search("archive") == ()
