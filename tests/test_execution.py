"""Execution records: the state machine, and keys derived from stable intent only."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from _records import execution_record
from handrail import ExecutionRecord, ExecutionStatus, IdempotencyScope
from handrail.errors import IllegalTransitionError
from handrail.execution import check_transition, command_key, intent_hash, plan_key

S = ExecutionStatus
_LEGAL = {
    (S.PREPARED, S.RUNNING),
    (S.PREPARED, S.FAILED_FINAL),
    (S.RUNNING, S.SUCCEEDED),
    (S.RUNNING, S.FAILED_FINAL),
    (S.RUNNING, S.UNKNOWN),
    (S.RUNNING, S.PREPARED),
    (S.UNKNOWN, S.SUCCEEDED),
    (S.UNKNOWN, S.FAILED_FINAL),
    (S.UNKNOWN, S.RUNNING),
    (S.UNKNOWN, S.UNKNOWN),
}


def _record(status: ExecutionStatus) -> ExecutionRecord:
    return execution_record(status=status, result='{"a":1}', lease_owner=None, version=3)


@pytest.mark.parametrize("current", list(S))
@pytest.mark.parametrize("new", list(S))
def test_the_state_machine_allows_exactly_its_moves(
    current: ExecutionStatus,
    new: ExecutionStatus,
) -> None:
    record = _record(current)
    if (current, new) in _LEGAL:
        check_transition(current, new)
        moved = record.moved(new)
        assert (moved.status, moved.version) == (new, 4)
    else:
        with pytest.raises(IllegalTransitionError):
            record.moved(new)


def test_a_timeout_can_never_be_written_as_a_failure_from_unknown_only_by_reconciling() -> None:
    # UNKNOWN leaves only towards outcomes or a retry; it never goes back to PREPARED.
    with pytest.raises(IllegalTransitionError):
        _record(S.UNKNOWN).moved(S.PREPARED)


def test_settled_records_are_final_and_results_decode() -> None:
    assert S.SUCCEEDED.settled
    assert S.FAILED_FINAL.settled
    assert not S.UNKNOWN.settled
    with pytest.raises(IllegalTransitionError):
        _record(S.SUCCEEDED).updated(checks=1)
    assert _record(S.RUNNING).updated(checks=2).version == 4
    assert _record(S.SUCCEEDED).result_value == {"a": 1}


def test_plan_keys_depend_on_tenant_tool_and_plan_only() -> None:
    key = plan_key(tenant_id="t1", tool="x", plan_id="p1")
    assert key == plan_key(tenant_id="t1", tool="x", plan_id="p1")
    assert key.startswith("hk1_")
    assert len(key) == 68
    others = {
        plan_key(tenant_id="t2", tool="x", plan_id="p1"),
        plan_key(tenant_id="t1", tool="y", plan_id="p1"),
        plan_key(tenant_id="t1", tool="x", plan_id="p2"),
    }
    assert key not in others
    assert len(others) == 3


def test_command_keys_are_scoped_to_tenant_and_tool_and_optionally_the_principal() -> None:
    def key(tenant: str = "t1", tool: str = "x", user: str = "u1", **kw: object) -> str:
        scope = kw.get("scope", IdempotencyScope.TENANT)
        return command_key(
            tenant_id=tenant,
            tool=tool,
            command_id="cmd-1",
            user_id=user,
            scope=scope,  # type: ignore[arg-type]
        )

    assert key(user="u1") == key(user="u2")
    assert key(tenant="t1") != key(tenant="t2")
    assert key(tool="x") != key(tool="y")
    principal = IdempotencyScope.PRINCIPAL
    assert key(user="u1", scope=principal) != key(user="u2", scope=principal)
    assert key(scope=principal) != key()
    assert key() != plan_key(tenant_id="t1", tool="x", plan_id="cmd-1")


@given(st.text(max_size=20), st.text(max_size=20))
def test_key_fields_cannot_be_confused_by_their_text(a: str, b: str) -> None:
    # The key hashes a canonical document, not joined strings: no "a|b" ambiguity.
    first = plan_key(tenant_id=a + "|", tool=b, plan_id="p")
    second = plan_key(tenant_id=a, tool="|" + b, plan_id="p")
    assert first != second


def test_intent_hash_changes_with_arguments_tool_version_and_tenant() -> None:
    base = {"tool": "x", "schema_version": "1", "arguments": '{"a":1}', "tenant_id": "t1"}
    digest = intent_hash(**base)
    for field, value in [
        ("tool", "y"),
        ("schema_version", "2"),
        ("arguments", '{"a":2}'),
        ("tenant_id", "t2"),
    ]:
        assert intent_hash(**{**base, field: value}) != digest


def test_a_principal_snapshot_restores_the_same_principal() -> None:
    from handrail import Principal  # noqa: PLC0415

    principal = Principal(
        user_id="u",
        tenant_id="t",
        permissions=frozenset({"a", "b"}),
        roles=frozenset({"r"}),
        data_scope={"region": "eu"},
        request_id="req",
        trace_id="tr",
    )
    assert Principal.from_snapshot(principal.snapshot()) == principal
