"""The plans API over HTTP on SQLite and PostgreSQL: read, token, confirm, reject, revise, run."""

from __future__ import annotations

import pytest
from _resources import APPROVER, LARGE_REFUND, REFUND, STAFF, propose
from _service import asgi_client, key_for

from handrail.server import create_app
from handrail.server.operations import PLANS_DECIDE_PERMISSION
from handrail.server.services import Services

pytestmark = pytest.mark.anyio


async def test_a_requester_reads_confirms_and_executes_a_plan(any_services: Services) -> None:
    plan_id = await propose(any_services)
    alice = key_for(any_services, user="alice", permissions=STAFF)
    async with asgi_client(create_app(any_services), alice) as client:
        listed = (await client.get("/v1/plans", params={"state": "PROPOSED"})).json()
        assert [p["plan_id"] for p in listed["plans"]] == [plan_id]
        shown = (await client.get(f"/v1/plans/{plan_id}")).json()
        assert shown["impact_text"]
        assert shown["confirmation"] == "CONFIRM"
        early = await client.post(f"/v1/plans/{plan_id}/execute")
        assert early.status_code == 409
        assert early.json()["error"]["code"] == "NEEDS_CONFIRMATION"
        token = (await client.post(f"/v1/plans/{plan_id}/token")).json()["token"]
        confirmed = await client.post(f"/v1/plans/{plan_id}/confirm", json={"token": token})
        assert confirmed.json()["state"] == "CONFIRMED"
        executed = await client.post(f"/v1/plans/{plan_id}/execute")
        assert executed.status_code == 200
        assert executed.json()["status"] == "SUCCEEDED"
        again = (await client.post(f"/v1/plans/{plan_id}/execute")).json()
        assert again["replayed"] is True
        assert again["key"] == executed.json()["key"]
        assert (await client.get(f"/v1/plans/{plan_id}")).json()["state"] == "EXECUTED"


async def test_two_distinct_approvers_approve_a_large_refund(any_services: Services) -> None:
    plan_id = await propose(any_services, tool=REFUND, arguments=LARGE_REFUND)
    app = create_app(any_services)
    for approver in ("bob", "carol"):
        token_text = key_for(any_services, user=approver, permissions=APPROVER)
        async with asgi_client(app, token_text) as client:
            token = (await client.post(f"/v1/plans/{plan_id}/token")).json()["token"]
            answer = await client.post(f"/v1/plans/{plan_id}/confirm", json={"token": token})
            assert answer.status_code == 200
            assert approver in answer.json()["approvals"]
    async with asgi_client(app, key_for(any_services, permissions=STAFF)) as client:
        shown = (await client.get(f"/v1/plans/{plan_id}")).json()
        assert shown["state"] == "CONFIRMED"
        assert shown["approvals"] == ["bob", "carol"]
        assert (await client.post(f"/v1/plans/{plan_id}/execute")).json()["status"] == "SUCCEEDED"


async def test_reject_and_revise(any_services: Services) -> None:
    first = await propose(any_services)
    second = await propose(any_services, call_id="call_2")
    alice = key_for(any_services, permissions=STAFF)
    async with asgi_client(create_app(any_services), alice) as client:
        rejected = await client.post(f"/v1/plans/{first}/reject", json={"reason": "not now"})
        assert rejected.json()["state"] == "REJECTED"
        again = await client.post(f"/v1/plans/{first}/reject", json={})
        assert again.status_code == 409
        assert again.json()["error"]["code"] == "PLAN_CLOSED"
        arguments = '{"recipients": ["CUS-10001"], "message": "Refund sent."}'
        revised = await client.post(f"/v1/plans/{second}/revise", json={"arguments": arguments})
        assert revised.status_code == 200
        envelope = revised.json()
        assert envelope["error_type"] == "NEEDS_CONFIRMATION"
        new = (await client.get(f"/v1/plans/{envelope['data']['plan_id']}")).json()
        assert new["revises"] == second
        assert (await client.get(f"/v1/plans/{second}")).json()["state"] == "REJECTED"


async def test_bad_requests_are_refused_with_their_code(any_services: Services) -> None:
    plan_id = await propose(any_services)
    async with asgi_client(create_app(any_services), key_for(any_services)) as client:
        assert (await client.get("/v1/plans", params={"state": "NOPE"})).status_code == 422
        assert (await client.get("/v1/plans", params={"limit": 0})).status_code == 422
        extra = await client.post(f"/v1/plans/{plan_id}/confirm", json={"token": "t", "user": "x"})
        assert extra.json()["error"]["code"] == "INVALID_ARGUMENTS"
    async with asgi_client(
        create_app(any_services), key_for(any_services, permissions=STAFF)
    ) as client:
        forged = await client.post(f"/v1/plans/{plan_id}/confirm", json={"token": "forged"})
        assert forged.status_code == 403
        assert forged.json()["error"]["code"] == "CONFIRMATION_INVALID"
    async with asgi_client(create_app(any_services)) as anonymous:
        answer = await anonymous.get("/v1/plans")
        assert answer.status_code == 401
        assert answer.json()["error"]["code"] == "UNAUTHENTICATED"


async def test_a_machine_credential_confirms_only_with_the_decide_permission(
    any_services: Services,
) -> None:
    plan_id = await propose(any_services)
    agent_host = key_for(any_services, permissions=STAFF - {PLANS_DECIDE_PERMISSION})
    before = any_services.handrail.store.get_plan(plan_id)
    async with asgi_client(create_app(any_services), agent_host) as client:
        token = await client.post(f"/v1/plans/{plan_id}/token")
        confirm = await client.post(f"/v1/plans/{plan_id}/confirm", json={"token": "t"})
        # Reading its own plan needs no token and stays open to it.
        assert (await client.get(f"/v1/plans/{plan_id}")).status_code == 200
    for answer in (token, confirm):
        assert answer.status_code == 403
        assert answer.json()["error"]["code"] == "PERMISSION_DENIED"
        assert PLANS_DECIDE_PERMISSION in answer.json()["error"]["message"]
    assert any_services.handrail.store.get_plan(plan_id) == before
