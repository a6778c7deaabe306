"""The CRM chat's tools through Handrail, in one process: scope, once-only, versions, proof."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from examples.crm_chat.app import build_registry, build_tools, crm_user
from examples.crm_chat.crm import Crm, StaleVersionError
from handrail import ErrorCode, Found, Handrail, NotExecuted, SystemClock, ToolCall, ToolContext

pytestmark = pytest.mark.anyio

SAM = crm_user("acme", "sam")
GUS = crm_user("globex", "gus")


@pytest.fixture
def crm(tmp_path: Path) -> Crm:
    built = Crm(tmp_path / "crm.db")
    built.ensure()
    return built


@pytest.fixture
async def hr(crm: Crm) -> AsyncIterator[Handrail]:
    async with Handrail.open("memory://", registry=build_tools(crm)) as opened:
        yield opened


def _call(call_id: str, tool: str, **arguments: str) -> ToolCall:
    return ToolCall(id=call_id, name=f"crm.{tool}", arguments=json.dumps(arguments))


def _update(customer_id: str, email: str) -> ToolCall:
    return _call("w1", "update_email", customer_id=customer_id, email=email)


async def test_reads_see_only_the_principals_tenant(hr: Handrail) -> None:
    found = await hr.handle(_call("c1", "find_customer", name="ada"), SAM)
    assert found.data == [{"customer_id": "c-1", "name": "Ada Lovelace"}]
    shown = await hr.handle(_call("c2", "get_customer", customer_id="c-1"), SAM)
    assert isinstance(shown.data, dict)
    assert shown.data["email"] == "ada@old.example"  # kept visible on purpose
    orders = await hr.handle(_call("c3", "list_orders", customer_id="c-1"), SAM)
    assert [o["order_id"] for o in orders.data or ()] == ["o-100", "o-101"]
    # Another tenant: Ada does not exist, exactly like an id that exists nowhere.
    assert (await hr.handle(_call("g1", "find_customer", name="ada"), GUS)).data in ([], None)
    for name in ("get_customer", "list_orders"):
        theirs = await hr.handle(_call("g2", name, customer_id="c-1"), GUS)
        nowhere = await hr.handle(_call("g3", name, customer_id="c-99"), GUS)
        assert theirs.error_type is nowhere.error_type is ErrorCode.NOT_FOUND
        assert theirs.summary == nowhere.summary
    # The tenant is never an argument the model may fill.
    forged = ToolCall(
        id="g4", name="crm.find_customer", arguments='{"name": "ada", "tenant": "acme"}'
    )
    refused = await hr.handle(forged, GUS)
    assert refused.error_type is ErrorCode.INVALID_ARGUMENTS
    assert "$.tenant" in (refused.field_errors or {})


async def test_a_confirmed_change_runs_once_under_its_key(hr: Handrail, crm: Crm) -> None:
    proposed = await hr.handle(
        _call("w1", "update_email", customer_id="c-1", email="a@n.example"), SAM
    )
    assert proposed.error_type is ErrorCode.NEEDS_CONFIRMATION
    assert isinstance(proposed.data, dict)
    plan_id = proposed.data["plan_id"]
    plan = await hr.writes.get_plan(plan_id, SAM)
    assert plan.plan.expected_version == "1"
    assert plan.plan.impact.notes == ("from ada@old.example to a@n.example",)
    assert crm.changes() == []
    token = await hr.writes.issue_token(plan_id, SAM)
    await hr.writes.confirm(plan_id, token.value, SAM)
    first = await hr.writes.execute_plan(plan_id, SAM)
    again = await hr.writes.execute_plan(plan_id, SAM)
    assert (first.business_id, again.business_id, again.replayed) == ("chg-1", "chg-1", True)
    assert [c["idempotency_key"] for c in crm.changes()] == [first.key]
    # The downstream deduplicates too: the same key sent again changes nothing.
    assert first.key is not None
    repeat = crm.change_email(first.key, "acme", "c-1", "other@x.example", expected_version=None)
    assert repeat == {"change_id": "chg-1", "customer_id": "c-1", "email": "a@n.example"}
    assert len(crm.changes()) == 1


async def test_a_customer_changed_after_the_plan_is_a_version_conflict(
    hr: Handrail, crm: Crm
) -> None:
    proposed = await hr.handle(
        _call("w1", "update_email", customer_id="c-2", email="g@n.example"), SAM
    )
    assert isinstance(proposed.data, dict)
    plan_id = proposed.data["plan_id"]
    token = await hr.writes.issue_token(plan_id, SAM)
    await hr.writes.confirm(plan_id, token.value, SAM)
    crm.change_email("elsewhere", "acme", "c-2", "grace@moved.example", expected_version=None)
    outcome = await hr.writes.execute_plan(plan_id, SAM)
    assert outcome.envelope.error_type is ErrorCode.VERSION_CONFLICT
    assert [c["idempotency_key"] for c in crm.changes()] == ["elsewhere"]
    assert (crm.customer("acme", "c-2") or {})["email"] == "grace@moved.example"
    # The CRM compares the version where it writes, too (a change between check and write).
    with pytest.raises(StaleVersionError):
        crm.change_email("late", "acme", "c-2", "g@n.example", expected_version="1")
    assert len(crm.changes()) == 1


def test_reconcile_answers_by_the_key_the_crm_was_sent(crm: Crm) -> None:
    update = build_tools(crm)[3]
    assert update.reconcile is not None
    clock = SystemClock()
    ctx = ToolContext(
        principal=SAM,
        call_id="r1",
        tool="crm.update_email",
        deadline=clock.monotonic(),
        clock=clock,
    )
    assert isinstance(update.reconcile("hk-missing", ctx), NotExecuted)
    crm.change_email("hk-1", "acme", "c-1", "a@n.example", expected_version="1")
    found = update.reconcile("hk-1", ctx)
    assert isinstance(found, Found)
    assert found.result == {"change_id": "chg-1", "customer_id": "c-1", "email": "a@n.example"}


def test_the_cli_factory_builds_the_same_four_tools(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CRM_CHAT_DB", str(tmp_path / "elsewhere.db"))
    names = sorted(spec.name for spec in build_registry().specs())
    assert names == ["crm.find_customer", "crm.get_customer", "crm.list_orders", "crm.update_email"]
    assert not (tmp_path / "elsewhere.db").exists()  # building opens nothing
