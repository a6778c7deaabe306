"""The Shaper through the gate: projection, redaction, budgets, pages, raw records, streams."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from handrail.calls import ToolCall
from handrail.clock import FixedClock
from handrail.context import ToolContext
from handrail.credentials import StaticSecretProvider
from handrail.declare.definition import Tool, tool
from handrail.declare.registry import Registry
from handrail.envelope import Envelope, Omission, Status, Trust
from handrail.errors import ConfigurationError, ErrorCode, NeedsClarification
from handrail.gate import Gate
from handrail.principal import Principal
from handrail.record.raw_results import RawResults
from handrail.shaping.budget import Budget, HeuristicTokens, json_size, json_text
from handrail.shaping.continuation import continuation_tool
from handrail.shaping.pages import Cursors
from handrail.shaping.policy import Overflow, RawKeeping, ResultPolicy
from handrail.shaping.project import Projection
from handrail.shaping.redact import Kind, RedactionAction, RedactionPolicy, Redactor
from handrail.shaping.shaper import CONTINUATION_TOOL, Shaper
from handrail.shaping.stream import StreamKind, TextStream
from handrail.signing import SigningKey
from handrail.spec import (
    ConfirmationMode,
    ConfirmationPolicy,
    IdempotencyMode,
    IdempotencyPolicy,
    RiskLevel,
    SideEffect,
)
from handrail.store import MemoryStore
from handrail.writes.confirmation import Keyring
from handrail.writes.service import Writes

pytestmark = pytest.mark.anyio

ALICE = Principal(user_id="alice", tenant_id="t1", permissions=frozenset({"orders.read"}))
BOB = Principal(user_id="bob", tenant_id="t1", permissions=frozenset({"orders.read"}))
EVE = Principal(user_id="alice", tenant_id="t2", permissions=frozenset({"orders.read"}))
KEY = b"k" * 32

ORDERS = [
    {
        "id": f"o{i}",
        "customer": f"customer{i}@example.com",
        "note": "n" * 30,
        "cost_price": i * 3,
        "lines": [{"sku": f"s{j}", "warehouse": "w"} for j in range(3)],
    }
    for i in range(300)
]


class _Harness:
    def __init__(self, *tools: Tool, max_chars: int = 2000, **gate: Any) -> None:
        self.clock = FixedClock()
        self.store = MemoryStore()
        self.raw = RawResults(self.store, self.clock)
        self.registry = Registry(clock=self.clock)
        self.shaper = Shaper(
            redactor=Redactor(hash_key=KEY),
            raw=self.raw,
            cursors=Cursors(SigningKey("c1", b"c" * 32), clock=self.clock, ttl_seconds=600),
            max_chars=max_chars,
        )
        for item in tools:
            self.registry.register(item)
        self.registry.register(continuation_tool(self.shaper, self.registry))
        self.gate = Gate(self.registry, clock=self.clock, shaper=self.shaper, **gate)
        self._ids = iter(range(10_000))

    async def call(self, name: str, arguments: object = None, who: Principal = ALICE) -> Envelope:
        call = ToolCall(id=f"c{next(self._ids)}", name=name, arguments=arguments or {})
        return await self.gate.handle(call, who)


def _orders(**results: Any) -> Tool:
    @tool(
        risk=RiskLevel.L1_INTERNAL_READ,
        name="orders",
        permissions={"orders.read"},
        results=ResultPolicy(**results),
    )
    async def orders() -> list[dict[str, Any]]:
        """List orders."""
        return ORDERS

    return orders


async def test_a_small_plain_result_is_ok_with_its_label_and_no_raw_copy() -> None:
    @tool(
        risk=RiskLevel.L0_PUBLIC_READ,
        name="hello",
        results=ResultPolicy(trust=Trust.INTERNAL, source="crm"),
    )
    async def hello() -> dict[str, str]:
        """Greet."""
        return {"greeting": "hi"}

    envelope = await _Harness(hello).call("hello")
    assert envelope.status is Status.OK
    assert envelope.data == {"greeting": "hi"}
    assert (envelope.trust, envelope.source_label) == (Trust.INTERNAL, "crm")
    assert envelope.ref is None
    assert envelope.omitted == ()


@pytest.mark.invariant(8)
async def test_projection_drops_undeclared_fields_and_keeps_the_full_raw_for_people() -> None:
    harness = _Harness(
        _orders(projection=Projection(["id", "lines.sku"], max_items=2)), max_chars=10**6
    )
    envelope = await harness.call("orders")
    assert envelope.data[0] == {"id": "o0", "lines": [{"sku": "s0"}, {"sku": "s1"}]}
    assert Omission(path="$[0].lines", unit="items", kept=2, total=3) in envelope.omitted
    assert envelope.status is Status.TRUNCATED
    assert envelope.ref is not None
    raw = harness.raw.read(envelope.ref, ALICE)
    assert json.loads(raw.body) == ORDERS
    assert "customer0@example.com" not in envelope.to_json()


@pytest.mark.invariant(8)
async def test_personal_data_is_redacted_counted_and_named_in_the_summary() -> None:
    harness = _Harness(_orders(projection=Projection(["id", "customer"])), max_chars=10**6)
    envelope = await harness.call("orders")
    assert envelope.status is Status.OK
    assert envelope.data[0]["customer"] == "[REDACTED:email]"
    assert envelope.redacted == {"email": 300}
    assert "redacted (300 email)" in envelope.summary
    assert envelope.ref is not None  # what the model saw differs from the raw


async def test_a_hash_policy_keeps_equal_values_equal_without_revealing_them() -> None:
    policy = RedactionPolicy(actions={Kind.EMAIL: RedactionAction.HASH})
    harness = _Harness(
        _orders(projection=Projection(["customer"]), redaction=policy), max_chars=10**6
    )
    first = (await harness.call("orders")).data
    again = (await harness.call("orders")).data
    assert first == again
    assert first[0]["customer"] != first[1]["customer"]
    assert "example.com" not in json.dumps(first)


@pytest.mark.invariant(8)
async def test_an_over_budget_result_is_really_cut_and_says_how_much_is_missing() -> None:
    harness = _Harness(_orders(projection=Projection(["id", "note"])), max_chars=500)
    envelope = await harness.call("orders")
    assert envelope.status is Status.TRUNCATED
    assert envelope.truncated is True
    assert envelope.cursor is None
    assert json_size(envelope.data) <= 500
    assert envelope.omitted[-1] == Omission(
        path="$", unit="items", kept=len(envelope.data), total=300
    )
    assert "first" in envelope.summary
    assert "300 item(s)" in envelope.summary


async def test_a_paginating_tool_serves_every_item_exactly_once_through_cursors() -> None:
    harness = _Harness(
        _orders(projection=Projection(["id"]), overflow=Overflow.PAGINATE), max_chars=400
    )
    envelope = await harness.call("orders")
    seen: list[str] = []
    pages = 0
    while True:
        pages += 1
        assert json_size(envelope.data) <= 400
        seen.extend(item["id"] for item in envelope.data)
        if envelope.cursor is None:
            assert envelope.status is Status.OK
            break
        assert envelope.status is Status.TRUNCATED
        assert CONTINUATION_TOOL in envelope.summary
        envelope = await harness.call(CONTINUATION_TOOL, {"cursor": envelope.cursor})
        assert envelope.source_label == "tool:orders"
    assert seen == [order["id"] for order in ORDERS]
    assert pages > 3


async def test_a_cursor_is_useless_to_another_user_or_tenant_and_when_altered() -> None:
    harness = _Harness(
        _orders(projection=Projection(["id"]), overflow=Overflow.PAGINATE), max_chars=400
    )
    cursor = (await harness.call("orders")).cursor
    assert cursor is not None
    for who in (BOB, EVE):
        refused = await harness.call(CONTINUATION_TOOL, {"cursor": cursor}, who=who)
        assert refused.error_type is ErrorCode.INVALID_ARGUMENTS
    tampered = cursor[:-2] + ("AA" if not cursor.endswith("AA") else "BB")
    refused = await harness.call(CONTINUATION_TOOL, {"cursor": tampered})
    assert refused.error_type is ErrorCode.INVALID_ARGUMENTS
    harness.clock.advance(601)
    expired = await harness.call(CONTINUATION_TOOL, {"cursor": cursor})
    assert expired.error_type is ErrorCode.INVALID_ARGUMENTS


async def test_a_page_stops_when_its_record_is_gone() -> None:
    harness = _Harness(
        _orders(projection=Projection(["id"]), overflow=Overflow.PAGINATE), max_chars=400
    )
    cursor = (await harness.call("orders")).cursor
    harness.clock.advance(harness.raw.retention_seconds + 1)
    harness.raw.purge()
    harness.shaper._cursors = Cursors(
        SigningKey("c1", b"c" * 32), clock=harness.clock, ttl_seconds=10**9
    )
    gone = await harness.call(CONTINUATION_TOOL, {"cursor": cursor})
    assert gone.error_type in {ErrorCode.NOT_FOUND, ErrorCode.INVALID_ARGUMENTS}


async def test_the_turn_budget_is_shared_by_the_calls_of_a_turn() -> None:
    harness = _Harness(
        _orders(projection=Projection(["id", "note"])),
        max_chars=10_000,
        turn_budget=Budget(max_chars=4000),
    )
    calls = [ToolCall(id=f"b{i}", name="orders", arguments={}) for i in range(4)]
    envelopes = await harness.gate.handle_batch(calls, ALICE)
    assert [e.call_id for e in envelopes] == ["b0", "b1", "b2", "b3"]
    for envelope in envelopes:
        assert envelope.status is Status.TRUNCATED
        assert json_size(envelope.data) <= 1000


async def test_raw_keeping_never_and_always() -> None:
    never = _Harness(_orders(keep_raw=RawKeeping.NEVER), max_chars=300)
    assert (await never.call("orders")).ref is None

    @tool(
        risk=RiskLevel.L0_PUBLIC_READ,
        name="tiny",
        results=ResultPolicy(keep_raw=RawKeeping.ALWAYS),
    )
    async def tiny() -> int:
        """One."""
        return 1

    harness = _Harness(tiny)
    envelope = await harness.call("tiny")
    assert envelope.ref is not None
    assert harness.raw.read(envelope.ref, ALICE).body == b"1"


def _log(lines: int) -> Iterator[str]:
    for i in range(lines):
        yield f"line {i} ok\n"
        if i == lines // 2:
            yield "FAILED tests/test_pay.py::test_refund - AssertionError: boom\n"
            yield "contact ops@example.com\n"


async def test_a_streamed_log_becomes_a_bounded_excerpt_with_its_failures() -> None:
    @tool(risk=RiskLevel.L0_PUBLIC_READ, name="build_log")
    async def build_log() -> TextStream:
        """The build log."""
        return TextStream(_log(20_000), kind=StreamKind.LOG)

    harness = _Harness(build_log, max_chars=4000)
    envelope = await harness.call("build_log")
    assert envelope.status is Status.TRUNCATED
    assert json_size(envelope.data) <= 4000
    data = envelope.data
    assert data["lines"] == 20_002
    assert data["failed_tests"] == ["tests/test_pay.py::test_refund"]
    assert "line 0 ok" in data["text"]
    assert "line 19999 ok" in data["text"]
    assert envelope.omitted[0].unit == "lines"
    raw = harness.raw.read(envelope.ref or "", ALICE)
    assert raw.size == sum(len(line.encode()) for line in _log(20_000))
    assert b"ops@example.com" in raw.body
    assert "ops@example.com" not in envelope.to_json()


async def test_secret_values_handed_to_a_tool_never_come_back_in_its_result() -> None:
    token = "ghp_" + "A1b2C3d4" * 5

    @tool(risk=RiskLevel.L0_PUBLIC_READ, name="leaky", secrets={"github"})
    async def leaky(ctx: ToolContext) -> dict[str, str]:
        """Leak."""
        return {"echo": f"token={ctx.secret('github')}"}

    harness = _Harness(leaky, secrets=StaticSecretProvider({("t1", "github"): token}))
    envelope = await harness.call("leaky")
    assert envelope.status is Status.OK
    assert token not in envelope.to_json()
    assert "[SECRET:github]" in envelope.data["echo"]
    assert len(harness.gate.ledger) == 1


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    items=st.lists(
        st.fixed_dictionaries(
            {"id": st.integers(0, 10**6), "text": st.text(max_size=80)},
        ),
        max_size=40,
    ),
    limit=st.integers(50, 3000),
)
def test_status_and_content_never_disagree(items: list[dict[str, Any]], limit: int) -> None:
    import anyio  # noqa: PLC0415

    @tool(risk=RiskLevel.L0_PUBLIC_READ, name="items")
    async def items_tool() -> list[dict[str, Any]]:
        """Items."""
        return items

    envelope = anyio.run(_Harness(items_tool, max_chars=limit).call, "items")
    full = Shaper(redactor=Redactor(hash_key=KEY))._redactor.value(items).value
    body = envelope.to_model_dict()
    assert body["error_type"] is None
    assert body["retryable"] is False
    if envelope.status is Status.TRUNCATED:
        assert envelope.truncated
        assert envelope.omitted
        assert envelope.data != full
    else:
        assert not envelope.truncated
        assert envelope.omitted == ()
        assert envelope.data == full
        assert envelope.status is (Status.EMPTY if not items else Status.OK)


async def test_a_stream_whose_redactions_lengthen_it_is_composed_again_to_fit_whole_lines() -> None:
    @tool(risk=RiskLevel.L0_PUBLIC_READ, name="poll_log")
    async def poll_log() -> TextStream:
        """A log with an internal address on every line."""
        lines = (f"poll 10.0.{i % 250}.{i % 200} timeout\n" for i in range(50_000))
        return TextStream(lines, kind=StreamKind.LOG)

    envelope = await _Harness(poll_log, max_chars=3000).call("poll_log")
    assert json_size(envelope.data) <= 3000
    # Only whole lines were left out: nothing had to be cut from the text afterwards.
    assert [o.path for o in envelope.omitted] == ["$.text"]
    assert "10.0." not in envelope.to_json()
    assert "The whole output is kept for people" in envelope.summary
    shown = envelope.data["text"].splitlines()
    assert shown[0] == "poll [REDACTED:ip_address] timeout"
    assert shown[-1] == "poll [REDACTED:ip_address] timeout"


async def test_a_tool_no_longer_usable_yields_no_more_pages() -> None:
    harness = _Harness(
        _orders(projection=Projection(["id"]), overflow=Overflow.PAGINATE), max_chars=400
    )
    cursor = (await harness.call("orders")).cursor
    without = Principal(user_id="alice", tenant_id="t1", permissions=frozenset())
    refused = await harness.call(CONTINUATION_TOOL, {"cursor": cursor}, who=without)
    assert refused.error_type is ErrorCode.PERMISSION_DENIED
    harness.registry.deregister("orders")
    gone = await harness.call(CONTINUATION_TOOL, {"cursor": cursor})
    assert gone.error_type is ErrorCode.NOT_FOUND


async def test_pagination_needs_a_raw_store_and_cursors() -> None:
    shaper = Shaper(redactor=Redactor(hash_key=KEY))
    assert not shaper.paginates
    with pytest.raises(ConfigurationError):
        await shaper.next_page("hrp1.x.y.z", ALICE, lambda _name: None)


async def test_without_pagination_a_paginating_tool_is_truncated() -> None:
    registry = Registry()
    registry.register(_orders(projection=Projection(["id"]), overflow=Overflow.PAGINATE))
    gate = Gate(registry, max_result_chars=300)
    envelope = await gate.handle(ToolCall(id="x", name="orders", arguments={}), ALICE)
    assert envelope.status is Status.TRUNCATED
    assert envelope.cursor is None
    assert envelope.ref is None


async def test_an_empty_result_is_empty_and_not_an_error() -> None:
    @tool(risk=RiskLevel.L0_PUBLIC_READ, name="nothing")
    async def nothing() -> list[int]:
        """Nothing."""
        return []

    envelope = await _Harness(nothing).call("nothing")
    assert envelope.status is Status.EMPTY
    assert envelope.to_model_dict()["error_type"] is None


async def test_a_token_budget_from_the_tool_is_kept() -> None:
    @tool(
        risk=RiskLevel.L0_PUBLIC_READ,
        name="cjk",
        results=ResultPolicy(max_tokens=200),
    )
    async def cjk() -> list[str]:
        """Much text."""
        return ["漢字" * 100] * 20

    harness = _Harness(cjk, max_chars=100_000)
    envelope = await harness.call("cjk")
    assert envelope.status is Status.TRUNCATED
    assert HeuristicTokens().count(json_text(envelope.data)) <= 200


async def test_business_rule_candidates_are_redacted_and_labelled_as_the_tools_data() -> None:
    def pick(_arguments: object, _ctx: ToolContext) -> None:
        raise NeedsClarification(
            "Which customer?",
            candidates=[{"name": "Ann", "email": "ann@example.com"}],
        )

    @tool(risk=RiskLevel.L0_PUBLIC_READ, name="find_customer", validators=[pick])
    async def find_customer(name: str) -> str:
        """Find."""
        return name

    envelope = await _Harness(find_customer).call("find_customer", {"name": "A"})
    assert envelope.error_type is ErrorCode.NEEDS_CLARIFICATION
    assert envelope.candidates == ({"name": "Ann", "email": "[REDACTED:email]"},)
    assert (envelope.trust, envelope.source_label) == (Trust.UNTRUSTED, "tool:find_customer")
    plain = await _Harness(find_customer).call("missing_tool")
    assert (plain.trust, plain.source_label) == (Trust.HANDRAIL, "handrail")


async def test_a_result_that_is_not_json_fails_without_reaching_the_model() -> None:
    @tool(risk=RiskLevel.L0_PUBLIC_READ, name="odd")
    async def odd() -> object:
        """Odd."""
        return {"x": float("nan")}

    envelope = await _Harness(odd).call("odd")
    assert envelope.error_type is ErrorCode.FAILED_FINAL


@tool(
    risk=RiskLevel.L2_REVERSIBLE_WRITE,
    name="add_contact",
    side_effect=SideEffect.EXTERNAL_WRITE,
    confirmation=ConfirmationPolicy(mode=ConfirmationMode.NONE),
    idempotency=IdempotencyPolicy(mode=IdempotencyMode.COMMAND_ID),
)
async def add_contact(name: str) -> dict[str, Any]:
    """Add a contact; the downstream echoes more than it should."""
    return {"name": name, "email": "ann@example.com", "log": ["entry"] * 500}


async def test_the_result_of_a_write_is_shaped_like_a_read_and_stored_whole() -> None:
    clock = FixedClock()
    store = MemoryStore()
    registry = Registry(clock=clock)
    registry.register(add_contact)
    writes = Writes(
        registry, store, Keyring(SigningKey("k1", b"k" * 32)), clock=clock, max_result_chars=500
    )
    gate = Gate(registry, clock=clock, writes=writes)
    call = ToolCall(id="w1", name="add_contact", arguments={"name": "Ann"})
    envelope = await gate.handle(call, ALICE, command_id="cmd-1")
    assert envelope.status is Status.TRUNCATED
    assert envelope.data["email"] == "[REDACTED:email]"
    assert json_size(envelope.data) <= 500
    again = await gate.handle(call, ALICE, command_id="cmd-1")  # replayed from the record
    assert again.data == envelope.data
    [record] = store.list_executions(tenant_id="t1")
    assert record.result_value["email"] == "ann@example.com"  # people keep the whole record
