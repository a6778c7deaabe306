"""ConversationGuard: bypass through another tool, the denial breaker, and its state."""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from pydantic import Field

from handrail import ErrorCode, Gate, Principal, Registry, RiskLevel, Status, Tool, ToolCall, tool
from handrail.authz.guard import ConversationGuard, ConversationState, MemoryGuardState
from handrail.authz.policy import Outcome, PolicyEngine, Resolved, Rule
from handrail.errors import ConfigurationError
from handrail.events import AuditEvent
from handrail.testing import FixedClock, MemoryAuditSink, sequential_ids

ALICE = Principal(user_id="alice", tenant_id="t1", permissions=frozenset({"doc.read"}))
OUTSIDER = Principal(user_id="alice", tenant_id="t2", permissions=frozenset({"doc.read"}))
DOCS = {"d1": {"secret": True}, "d2": {"secret": False}, "d3": {"secret": False}}


def _tools(ran: list[str]) -> list[Tool]:
    @tool(risk=RiskLevel.L1_INTERNAL_READ, namespace="docs", permissions={"doc.read"})
    def read(doc_id: Annotated[str, Field(max_length=4)]) -> str:
        """Read a document."""
        ran.append(f"read:{doc_id}")
        return "text"

    @tool(risk=RiskLevel.L1_INTERNAL_READ, namespace="docs", permissions={"doc.read"})
    def summary(doc_id: Annotated[str, Field(max_length=4)]) -> str:
        """Summarise a document (the rules forgot that secrets have summaries too)."""
        ran.append(f"summary:{doc_id}")
        return "short"

    @tool(risk=RiskLevel.L1_INTERNAL_READ, namespace="docs", permissions={"doc.admin"})
    def purge_cache() -> str:
        """Needs a permission nobody here has."""
        ran.append("purge")
        return "done"

    return [read, summary, purge_cache]


def _policy() -> PolicyEngine:
    def load(principal: Principal, arguments: Any) -> Resolved | None:
        found = DOCS.get(arguments.doc_id)
        return None if found is None else Resolved(key=f"doc:{arguments.doc_id}", value=found)

    secret = Rule(
        name="no-secrets",
        tool="docs.read",
        outcome=Outcome.DENY,
        reason="secret documents are not read by tools",
        when=lambda facts: bool(facts.resource["secret"]),
    )
    return PolicyEngine([secret], resolvers={"docs.read": load, "docs.summary": load})


@pytest.fixture
def ran() -> list[str]:
    return []


@pytest.fixture
def audit() -> MemoryAuditSink:
    return MemoryAuditSink()


def _gate(
    ran: list[str],
    audit: MemoryAuditSink,
    guard: ConversationGuard | None,
) -> Gate:
    registry = Registry()
    for item in _tools(ran):
        registry.register(item)
    return Gate(
        registry,
        audit=audit,
        clock=FixedClock(),
        new_id=sequential_ids(),
        policy=_policy(),
        guard=guard,
    )


async def _call(
    gate: Gate,
    name: str,
    call_id: str,
    conversation: str | None = "conv-1",
    principal: Principal = ALICE,
    **arguments: object,
) -> Any:
    call = ToolCall(id=call_id, name=f"docs.{name}", arguments=arguments)
    return await gate.handle(call, principal, conversation=conversation)


def _last(audit: MemoryAuditSink, call_id: str) -> AuditEvent:
    return audit.for_call(call_id)[-1]


# --- bypass -----------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_target_denied_through_one_tool_is_refused_through_another(
    ran: list[str],
    audit: MemoryAuditSink,
) -> None:
    gate = _gate(ran, audit, ConversationGuard())
    first = await _call(gate, "read", "c1", doc_id="d1")
    second = await _call(gate, "summary", "c2", doc_id="d1")
    assert first.error_type is ErrorCode.PERMISSION_DENIED
    assert second.error_type is ErrorCode.PERMISSION_DENIED
    assert (first.retryable, second.retryable) == (False, False)
    assert ran == []
    event = _last(audit, "c2")
    assert (event.stage, event.decision, event.code) == (
        "guard",
        "refused",
        ErrorCode.PERMISSION_DENIED,
    )
    assert event.detail is not None
    assert event.detail.startswith("bypass: doc:d1 was denied to docs.read ")
    assert "rule=default:read" in event.detail


@pytest.mark.anyio
async def test_once_a_bypass_was_tried_the_target_stays_out_of_reach_through_every_tool(
    ran: list[str],
    audit: MemoryAuditSink,
) -> None:
    gate = _gate(ran, audit, ConversationGuard(max_denials=10))
    await _call(gate, "read", "c1", doc_id="d1")
    codes = [(await _call(gate, "summary", f"s{i}", doc_id="d1")).error_type for i in range(3)]
    assert codes == [ErrorCode.PERMISSION_DENIED] * 3
    assert all(_last(audit, f"s{i}").stage == "guard" for i in range(3))
    assert ran == []


@pytest.mark.anyio
async def test_a_bypass_refusal_reads_like_any_other_denial(
    ran: list[str],
    audit: MemoryAuditSink,
) -> None:
    gate = _gate(ran, audit, ConversationGuard())
    denied = await _call(gate, "read", "c1", doc_id="d1")
    bypass = await _call(gate, "summary", "c2", doc_id="d1")
    assert bypass.summary == denied.summary.replace("docs.read", "docs.summary")


@pytest.mark.anyio
async def test_other_targets_and_other_conversations_are_not_affected(
    ran: list[str],
    audit: MemoryAuditSink,
) -> None:
    gate = _gate(ran, audit, ConversationGuard())
    await _call(gate, "read", "c1", doc_id="d1")
    other_doc = await _call(gate, "summary", "c2", doc_id="d2")
    other_conversation = await _call(gate, "summary", "c3", conversation="conv-2", doc_id="d1")
    other_tenant = await _call(gate, "summary", "c4", principal=OUTSIDER, doc_id="d1")
    assert [e.status for e in (other_doc, other_conversation, other_tenant)] == [Status.OK] * 3
    assert ran == ["summary:d2", "summary:d1", "summary:d1"]


@pytest.mark.anyio
async def test_without_a_guard_or_a_conversation_id_nothing_is_remembered(
    ran: list[str],
    audit: MemoryAuditSink,
) -> None:
    unguarded = _gate(ran, audit, None)
    await _call(unguarded, "read", "c1", doc_id="d1")
    assert (await _call(unguarded, "summary", "c2", doc_id="d1")).status is Status.OK
    guarded = _gate(ran, audit, ConversationGuard())
    await _call(guarded, "read", "c3", conversation=None, doc_id="d1")
    assert (await _call(guarded, "summary", "c4", conversation=None, doc_id="d1")).ok


@pytest.mark.anyio
async def test_the_denying_tool_itself_is_decided_again_by_the_policy(
    ran: list[str],
    audit: MemoryAuditSink,
) -> None:
    gate = _gate(ran, audit, ConversationGuard(max_denials=5))
    assert (await _call(gate, "read", "c1", doc_id="d1")).error_type is ErrorCode.PERMISSION_DENIED
    again = await _call(gate, "read", "c2", doc_id="d1")
    assert again.error_type is ErrorCode.PERMISSION_DENIED
    assert _last(audit, "c2").stage == "authorization"


# --- the breaker ------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_repeated_denials_trip_the_breaker_and_every_later_call_runs_nothing(
    ran: list[str],
    audit: MemoryAuditSink,
) -> None:
    gate = _gate(ran, audit, ConversationGuard(max_denials=3))
    for index in range(3):
        refused = await _call(gate, "purge_cache", f"d{index}")
        assert refused.error_type is ErrorCode.PERMISSION_DENIED
    tripped = audit.for_call("d2")[-1]
    assert (tripped.stage, tripped.decision, tripped.code) == (
        "guard",
        "tripped",
        ErrorCode.BUDGET_EXHAUSTED,
    )
    assert [e.decision for e in audit.for_call("d1")][-1] == "refused"

    later = [
        await _call(gate, "read", "l1", doc_id="d2"),
        await _call(gate, "nonexistent", "l2"),
        await gate.handle(
            ToolCall(id="l3", name="docs.read", arguments="{"), ALICE, conversation="conv-1"
        ),
    ]
    assert [e.error_type for e in later] == [ErrorCode.BUDGET_EXHAUSTED] * 3
    assert all(not e.retryable for e in later)
    assert ran == []
    for call_id in ("l1", "l2", "l3"):
        events = audit.for_call(call_id)
        assert [(e.stage, e.decision, e.code) for e in events] == [
            ("guard", "refused", ErrorCode.BUDGET_EXHAUSTED),
        ]
        assert events[0].detail is not None
        assert events[0].detail.startswith("breaker: 3 denials")
    fresh = await _call(gate, "read", "f1", conversation="conv-2", doc_id="d2")
    assert fresh.status is Status.OK


@pytest.mark.anyio
async def test_bypass_refusals_count_toward_the_breaker_but_not_found_does_not(
    ran: list[str],
    audit: MemoryAuditSink,
) -> None:
    gate = _gate(ran, audit, ConversationGuard(max_denials=2))
    for index in range(3):
        missing = await _call(gate, "read", f"m{index}", doc_id="zz")
        assert missing.error_type is ErrorCode.NOT_FOUND
    await _call(gate, "read", "c1", doc_id="d1")
    await _call(gate, "summary", "c2", doc_id="d1")
    after = await _call(gate, "read", "c3", doc_id="d2")
    assert after.error_type is ErrorCode.BUDGET_EXHAUSTED


@pytest.mark.anyio
async def test_the_conversation_id_is_passed_through_batches_and_sync_calls(
    ran: list[str],
    audit: MemoryAuditSink,
) -> None:
    gate = _gate(ran, audit, ConversationGuard(max_denials=1))
    envelopes = await gate.handle_batch(
        [
            ToolCall(id="b1", name="docs.purge_cache", arguments={}),
            ToolCall(id="b2", name="docs.read", arguments={"doc_id": "d2"}),
        ],
        ALICE,
        conversation="conv-b",
    )
    codes = {e.call_id: e.error_type for e in envelopes}
    assert codes["b1"] is ErrorCode.PERMISSION_DENIED
    later = await gate.handle_batch(
        [ToolCall(id="b3", name="docs.read", arguments={"doc_id": "d2"})],
        ALICE,
        conversation="conv-b",
    )
    assert [e.error_type for e in later] == [ErrorCode.BUDGET_EXHAUSTED]


def test_the_sync_helpers_take_the_conversation_id_too(
    ran: list[str],
    audit: MemoryAuditSink,
) -> None:
    gate = _gate(ran, audit, ConversationGuard(max_denials=1))
    purge = ToolCall(id="s1", name="docs.purge_cache", arguments={})
    assert (
        gate.handle_sync(purge, ALICE, conversation="c").error_type is ErrorCode.PERMISSION_DENIED
    )
    read = ToolCall(id="s2", name="docs.read", arguments={"doc_id": "d2"})
    assert gate.handle_sync(read, ALICE, conversation="c").error_type is ErrorCode.BUDGET_EXHAUSTED
    batch = gate.handle_batch_sync([read], ALICE, conversation="c")
    assert [e.error_type for e in batch] == [ErrorCode.BUDGET_EXHAUSTED]
    assert gate.handle_sync(read, ALICE, conversation="other").status is Status.OK


class BrokenState:
    async def load(self, tenant_id: str, conversation: str) -> ConversationState:
        return ConversationState()

    async def add_denial(
        self,
        tenant_id: str,
        conversation: str,
        *,
        tool: str,
        target: str | None,
    ) -> ConversationState:
        raise OSError("state store is down")


@pytest.mark.anyio
async def test_a_guard_whose_state_cannot_be_written_leaves_the_denial_standing_and_audited(
    ran: list[str],
    audit: MemoryAuditSink,
) -> None:
    gate = _gate(ran, audit, ConversationGuard(state=BrokenState()))
    envelope = await _call(gate, "read", "c1", doc_id="d1")
    assert envelope.error_type is ErrorCode.PERMISSION_DENIED
    events = audit.for_call("c1")
    assert [(e.stage, e.decision) for e in events[-2:]] == [
        ("authorization", "refused"),
        ("guard", "error"),
    ]
    assert events[-1].detail is not None
    assert "state store is down" in events[-1].detail


# --- the state --------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_memory_state_counts_denials_and_remembers_targets_per_tenant_and_id() -> None:
    state = MemoryGuardState()
    assert await state.load("t1", "c") == ConversationState()
    await state.add_denial("t1", "c", tool="a", target="x")
    await state.add_denial("t1", "c", tool="b", target="x")
    after = await state.add_denial("t1", "c", tool="a", target=None)
    assert after.denials == 3
    assert dict(after.targets) == {"x": frozenset({"a", "b"})}
    assert await state.load("t1", "c") == after
    assert await state.load("t2", "c") == ConversationState()


@pytest.mark.anyio
async def test_memory_state_forgets_the_least_recently_used_conversation_beyond_its_bound() -> None:
    state = MemoryGuardState(max_conversations=2)
    await state.add_denial("t", "a", tool="x", target=None)
    await state.add_denial("t", "b", tool="x", target=None)
    await state.load("t", "a")
    await state.add_denial("t", "c", tool="x", target=None)
    assert len(state) == 2
    assert (await state.load("t", "a")).denials == 1
    assert (await state.load("t", "b")).denials == 0


@pytest.mark.anyio
async def test_memory_state_remembers_a_bounded_number_of_targets() -> None:
    state = MemoryGuardState()
    for index in range(300):
        after = await state.add_denial("t", "c", tool="x", target=f"k{index}")
    assert after.denials == 300
    assert len(after.targets) == 256
    again = await state.add_denial("t", "c", tool="y", target="k0")
    assert again.targets["k0"] == frozenset({"x", "y"})


@pytest.mark.parametrize("limit", [0, -1])
def test_a_guard_needs_a_positive_denial_limit(limit: int) -> None:
    with pytest.raises(ConfigurationError):
        ConversationGuard(max_denials=limit)


def test_memory_state_needs_room_for_a_conversation() -> None:
    with pytest.raises(ConfigurationError):
        MemoryGuardState(max_conversations=0)
    assert ConversationGuard().max_denials == 3


@pytest.mark.anyio
@pytest.mark.parametrize("state", [MemoryGuardState(), BrokenState()], ids=["memory", "broken"])
async def test_the_guard_works_the_same_with_auditing_off(
    ran: list[str],
    state: MemoryGuardState | BrokenState,
) -> None:
    registry = Registry()
    for item in _tools(ran):
        registry.register(item)
    gate = Gate(registry, policy=_policy(), guard=ConversationGuard(state=state, max_denials=1))
    first = await _call(gate, "read", "c1", doc_id="d1")
    second = await _call(gate, "summary", "c2", doc_id="d2")
    assert first.error_type is ErrorCode.PERMISSION_DENIED
    expected = ErrorCode.BUDGET_EXHAUSTED if isinstance(state, MemoryGuardState) else None
    assert second.error_type is expected
