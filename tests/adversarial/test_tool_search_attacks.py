"""search_tools never hands the model a tool its principal may not use, whatever it asks.

The registry holds, beside the tools the caller may use, a tool of another tenant, a
forbidden (L4) tool, a tool needing a permission the caller lacks and a disabled tool,
all deferred and each with a unique marker in its name, description and parameters.
Queries that name them, quote their words, carry prompt injections, control and
invisible characters, or are a megabyte long: no answer returns one, mentions one,
or counts one among its matches, under any run request the host may set.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from _injection_corpus import CORPUS
from hypothesis import given, settings
from hypothesis import strategies as st

from handrail import (
    Envelope,
    ErrorCode,
    Gate,
    Principal,
    Registry,
    RiskLevel,
    Status,
    Tool,
    ToolCall,
    ToolContext,
)
from handrail.declare.exposure import ExposureRequest
from handrail.envelope import Trust
from handrail.testing import FixedClock
from handrail.tools import SEARCH_TOOLS, search_tools_tool

CALLER = Principal(user_id="mallory", tenant_id="t1", permissions=frozenset({"billing"}))

HIDDEN: dict[str, dict[str, Any]] = {
    "vault.export_keys": {"marker": "Qx7tenantMarker", "enabled_tenants": ("t2",)},
    "ops.purge_tenant": {"marker": "Qx7forbiddenMarker", "risk": RiskLevel.L4_FORBIDDEN},
    "hr.salary_report": {"marker": "Qx7permissionMarker", "permissions": ("hr",)},
    "ops.old_export": {"marker": "Qx7disabledMarker", "enabled": False},
}
MARKERS = tuple(entry["marker"] for entry in HIDDEN.values())
USABLE = ("billing.refund_payment", "billing.export_invoices")
WORDS = [
    *("export", "keys", "purge", "tenant", "salary", "report", "old", "vault", "ops", "hr"),
    *("admin", "secret", "all", "every", "tool", "refund", "payment", "invoices", "billing"),
]


async def _noop(arguments: dict[str, Any], ctx: ToolContext) -> dict[str, object]:
    return {}


def _tool(name: str, *, marker: str = "", **options: Any) -> Tool:
    words = f"{name.replace('.', ' ').replace('_', ' ')} {marker}"
    return Tool.from_json_schema(
        name=name,
        description=f"Export, report, purge or refund: {words}. Every secret of every tenant.",
        input_schema={
            "type": "object",
            "properties": {f"{marker or 'plain'}_id": {"type": "string", "description": words}},
            "additionalProperties": False,
        },
        fn=_noop,
        risk=options.pop("risk", RiskLevel.L1_INTERNAL_READ),
        defer_loading=True,
        **options,
    )


def _registry() -> Registry:
    registry = Registry()
    registry.register(search_tools_tool(registry))
    for name in USABLE:
        registry.register(_tool(name, permissions=("billing",)))
    for name, entry in HIDDEN.items():
        options = {key: value for key, value in entry.items() if key != "marker"}
        registry.register(_tool(name, marker=entry["marker"], **options))
    return registry


REGISTRY = _registry()
GATE = Gate(REGISTRY, clock=FixedClock())
REQUESTS = (
    ExposureRequest(),
    ExposureRequest(discovered=frozenset(HIDDEN)),
    ExposureRequest(narrowed_to=frozenset({SEARCH_TOOLS, *HIDDEN, *USABLE})),
    ExposureRequest(scenario="admin", preferred=tuple(HIDDEN)),
    None,
)


def _search(arguments: object, request: ExposureRequest | None = None) -> Envelope:
    exposure = None if request is None else REGISTRY.exposure(CALLER, request)
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    call = ToolCall(id="c1", name=SEARCH_TOOLS, arguments=text)
    return asyncio.run(GATE.handle(call, CALLER, exposure=exposure))


def _assert_nothing_hidden(envelope: Envelope) -> None:
    if envelope.status is Status.ERROR:
        return
    # Everything but the echo of the query, which says back what the model wrote.
    shown = envelope.summary + json.dumps(envelope.data["tools"])
    assert not any(marker in shown for marker in MARKERS)
    found = [tool["name"] for tool in envelope.data["tools"]]
    assert set(found) <= set(USABLE)
    # Nothing hidden is counted either: the caller learns nothing of what exists.
    assert envelope.data["matches"] == len(found) + envelope.data["omitted"] <= len(USABLE)


@pytest.mark.parametrize("request_", REQUESTS)
@pytest.mark.parametrize(
    "query",
    [
        *HIDDEN,
        *MARKERS,
        "export keys vault",
        "purge tenant",
        "salary report hr",
        "old export ops",
        " ".join(WORDS),
    ],
)
def test_a_hidden_tool_is_never_returned_or_counted_when_asked_for_by_name_or_words(
    query: str, request_: ExposureRequest | None
) -> None:
    envelope = _search({"query": query, "limit": 20}, request_)
    assert envelope.status is Status.OK
    _assert_nothing_hidden(envelope)


def test_a_query_that_only_hidden_tools_match_finds_nothing_at_all() -> None:
    for query in (*MARKERS, "vault keys", "salary hr", " ".join(MARKERS)):
        data = _search({"query": query}).data
        assert data == {"query": query, "tools": [], "matches": 0, "omitted": 0}


@settings(max_examples=150, deadline=None)
@given(
    query=st.one_of(
        st.text(min_size=1, max_size=200),
        st.lists(st.sampled_from(WORDS + list(MARKERS) + list(HIDDEN)), min_size=1, max_size=8)
        .map(" ".join)
        .filter(lambda text: len(text) <= 200),
    ),
    request=st.sampled_from(REQUESTS),
    limit=st.integers(1, 20),
)
def test_whatever_the_query_no_hidden_tool_is_ever_returned(
    query: str, request: ExposureRequest | None, limit: int
) -> None:
    envelope = _search({"query": query, "limit": limit}, request)
    _assert_nothing_hidden(envelope)


@pytest.mark.parametrize("name", sorted(set(CORPUS) - {"lone-surrogates"}))
def test_a_prompt_injection_query_is_only_data_and_finds_only_usable_tools(name: str) -> None:
    query = (CORPUS[name] + " vault.export_keys ops.purge_tenant refund")[-200:]
    envelope = _search({"query": query})
    assert envelope.status is Status.OK
    assert envelope.trust is Trust.UNTRUSTED
    assert envelope.data["tools"]
    _assert_nothing_hidden(envelope)


def test_a_query_with_lone_surrogates_is_refused() -> None:
    envelope = _search({"query": CORPUS["lone-surrogates"] + " refund"})
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS


def test_a_megabyte_query_is_refused_by_the_schema_before_the_search_runs() -> None:
    envelope = _search({"query": "refund " * 140_000})  # 980,000 characters
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS
    assert set(envelope.field_errors) == {"$.query"}
    assert len(envelope.to_json()) < 2_000


def test_arguments_over_the_size_limit_are_refused_before_they_are_parsed() -> None:
    envelope = _search({"query": "refund " * 150_000})  # past 1 MiB of JSON
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS
    assert len(envelope.to_json()) < 2_000


@pytest.mark.parametrize(
    "arguments",
    [
        {"query": ""},
        {"query": 7},
        {"query": ["refund"]},
        {"limit": 3},
        {"query": "refund", "limit": 0},
        {"query": "refund", "limit": 21},
        {"query": "refund", "include_hidden": True},
        {"query": "refund", "tenant_id": "t2"},
    ],
)
def test_malformed_arguments_are_refused(arguments: dict[str, Any]) -> None:
    envelope = _search(arguments)
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS


@pytest.mark.parametrize(
    ("query", "echoed"),
    [
        ("ref\u200bund\u202e payment", "refund payment"),
        ("\x00refund\x1b[31m\x07 payment\r\n", "refund [31m payment"),
        ("\ufeffrefund\u2066 \u2069payment\U000e0041", "refund payment"),
    ],
)
def test_control_and_invisible_characters_are_dropped_from_the_query(
    query: str, echoed: str
) -> None:
    envelope = _search({"query": query})
    assert envelope.status is Status.OK
    assert envelope.data["query"] == echoed
    assert envelope.data["tools"][0]["name"] == "billing.refund_payment"
    _assert_nothing_hidden(envelope)
