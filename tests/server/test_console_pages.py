"""The console's pages over the payments app: plans, approvals, executions, audit, runs.

A person reads a pending plan's impact and confirms it (the write runs once and the
page shows SUCCEEDED); a refund needs two different approvers and then its requester
executes it; the UNKNOWN queue shows what the reconciler knows and a person resolves
one with a note; the audit search and a run's transcript show the tenant's records.
Over SQLite and PostgreSQL (the `store_url` fixture).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from _console import add_person, console_services, csrf_of, login
from _resources import (
    ALICE,
    APPROVER,
    LARGE_REFUND,
    OPERATOR,
    REFUND,
    STAFF,
    flush,
    propose,
    stored_run,
    unknown_record,
)
from _service import asgi_client

from handrail.server import create_app
from handrail.server.services import Services
from handrail.store import open_store

HTML = {"Accept": "text/html"}


@pytest.fixture
def console(store_url: str, tmp_path: Path) -> Iterator[Services]:
    store = open_store(store_url)
    built = console_services(store, tmp_path)
    add_person(built, "alice@acme", permissions=STAFF)
    add_person(built, "bob@acme", permissions=APPROVER)
    add_person(built, "carol@acme", permissions=APPROVER)
    add_person(built, "oliver@acme", permissions=OPERATOR | STAFF)
    add_person(built, "gina@globex", tenant="globex", permissions=APPROVER | OPERATOR)
    try:
        yield built
    finally:
        built.handrail.close()
        store.close()


async def _post(client, path: str, **fields: str):
    page = await client.get("/plans", headers=HTML)  # one CSRF token per session
    assert page.status_code == 200, page.text
    return await client.post(path, data={"csrf": csrf_of(page.text), **fields}, headers=HTML)


@pytest.mark.anyio
async def test_a_person_reads_a_pending_plan_confirms_it_and_sees_it_succeeded(console):
    plan_id = await propose(console)
    async with asgi_client(create_app(console)) as client:
        await login(client, "alice@acme")
        listing = await client.get("/plans", headers=HTML)
        assert plan_id in listing.text
        assert "payments.notify_customers" in listing.text
        page = await client.get(f"/plans/{plan_id}", headers=HTML)
        assert "Impact" in page.text
        assert "Confirm" in page.text
        answer = await _post(client, f"/plans/{plan_id}/confirm")
        assert answer.status_code == 303
        done = await client.get(answer.headers["location"], headers=HTML)
    assert 'data-state="EXECUTED"' in done.text
    assert 'data-status="SUCCEEDED"' in done.text


@pytest.mark.anyio
async def test_a_refund_needs_two_different_approvers_then_its_requester_executes(console):
    plan_id = await propose(console, tool=REFUND, arguments=LARGE_REFUND)
    app = create_app(console)
    async with asgi_client(app) as alice, asgi_client(app) as bob, asgi_client(app) as carol:
        for client, who in ((alice, "alice"), (bob, "bob"), (carol, "carol")):
            await login(client, f"{who}@acme")
        page = await alice.get(f"/plans/{plan_id}", headers=HTML)
        assert 'id="confirm"' not in page.text  # the requester cannot approve her own refund
        assert (await _post(bob, f"/plans/{plan_id}/confirm")).status_code == 303
        await _post(bob, f"/plans/{plan_id}/confirm")  # his second approval counts nothing
        after_one = await alice.get(f"/plans/{plan_id}", headers=HTML)
        assert 'data-state="CONFIRMED"' not in after_one.text
        assert (await _post(carol, f"/plans/{plan_id}/confirm")).status_code == 303
        approved = await alice.get(f"/plans/{plan_id}", headers=HTML)
        assert 'data-state="CONFIRMED"' in approved.text
        assert (await _post(alice, f"/plans/{plan_id}/execute")).status_code == 303
        done = await alice.get(f"/plans/{plan_id}", headers=HTML)
    assert 'data-status="SUCCEEDED"' in done.text


@pytest.mark.anyio
async def test_a_rejected_plan_closes_and_cannot_be_confirmed(console):
    plan_id = await propose(console)
    async with asgi_client(create_app(console)) as client:
        await login(client, "alice@acme")
        rejected = await _post(client, f"/plans/{plan_id}/reject", reason="wrong customer")
        assert rejected.status_code == 303
        page = await client.get(f"/plans/{plan_id}", headers=HTML)
        assert 'data-state="REJECTED"' in page.text
        late = await _post(client, f"/plans/{plan_id}/confirm")
    assert late.status_code == 409
    assert 'data-code="PLAN_CLOSED"' in late.text


@pytest.mark.anyio
async def test_editing_a_plan_proposes_a_new_one_and_closes_the_old(console):
    plan_id = await propose(console)
    edited = '{"recipients": ["CUS-10001"], "message": "Your refund arrives tomorrow."}'
    async with asgi_client(create_app(console)) as client:
        await login(client, "alice@acme")
        answer = await _post(client, f"/plans/{plan_id}/revise", arguments=edited)
        assert answer.status_code == 303
        new_page = await client.get(answer.headers["location"], headers=HTML)
        old_page = await client.get(f"/plans/{plan_id}", headers=HTML)
        bad = await _post(client, answer.headers["location"] + "/revise", arguments="{nope")
    assert "arrives tomorrow" in new_page.text
    assert f'revises <a href="/plans/{plan_id}"' in new_page.text
    assert 'data-state="AWAITING_CONFIRMATION"' not in old_page.text
    assert 'data-state="PROPOSED"' not in old_page.text
    assert bad.status_code == 422


@pytest.mark.anyio
async def test_another_tenant_sees_nothing_of_the_first(console):
    plan_id = await propose(console)
    key = unknown_record(console, await propose(console, call_id="call_2"))
    run_id = await stored_run(console)
    flush(console)
    async with asgi_client(create_app(console)) as gina:
        await login(gina, "gina@globex")
        listing = await gina.get("/plans?state=ALL", headers=HTML)
        pages = [
            await gina.get(path, headers=HTML)
            for path in (f"/plans/{plan_id}", f"/executions/{key}", f"/runs/{run_id}")
        ]
        queue = await gina.get("/executions/unknown", headers=HTML)
        audit = await gina.get("/audit", headers=HTML)
        confirm = await _post(gina, f"/plans/{plan_id}/confirm")
    assert plan_id not in listing.text
    assert [p.status_code for p in pages] == [404, 404, 404]
    assert all('data-code="NOT_FOUND"' in p.text for p in pages)
    assert key not in queue.text
    assert "payments." not in audit.text
    assert confirm.status_code == 404
    assert console.handrail.store.get_plan(plan_id).state.value == "PROPOSED"  # type: ignore[union-attr]


@pytest.mark.anyio
async def test_the_unknown_queue_shows_a_record_and_a_person_resolves_it(console):
    key = unknown_record(console, await propose(console))
    async with asgi_client(create_app(console)) as client:
        await login(client, "oliver@acme")
        queue = await client.get("/executions/unknown", headers=HTML)
        assert key in queue.text
        assert "OUTCOME_UNKNOWN" in queue.text
        page = await client.get(f"/executions/{key}", headers=HTML)
        assert "Resolve" in page.text
        answer = await client.post(
            f"/executions/{key}/resolve",
            data={"csrf": csrf_of(page.text), "outcome": "succeeded", "note": "seen in the CRM"},
            headers=HTML,
        )
        assert answer.status_code == 303
        after = await client.get(f"/executions/{key}", headers=HTML)
        empty = await client.get("/executions/unknown", headers=HTML)
    assert 'data-status="SUCCEEDED"' in after.text
    assert key not in empty.text


@pytest.mark.anyio
async def test_people_without_the_operators_permission_are_refused_the_queue(console):
    async with asgi_client(create_app(console)) as client:
        await login(client, "alice@acme")
        queue = await client.get("/executions/unknown", headers=HTML)
        audit = await client.get("/audit", headers=HTML)
    assert queue.status_code == 403
    assert audit.status_code == 403


@pytest.mark.anyio
async def test_an_execution_page_shows_the_audit_timeline_of_its_stages(console):
    plan_id = await propose(console)
    await console.operations.confirm_and_execute(ALICE, plan_id)
    flush(console)
    [record] = console.handrail.store.list_executions(tenant_id="acme")
    async with asgi_client(create_app(console)) as client:
        await login(client, "oliver@acme")
        page = await client.get(f"/executions/{record.idempotency_key}", headers=HTML)
        search = await client.get(f"/audit?call_id={plan_id}", headers=HTML)
    assert page.status_code == 200
    assert "write · claim" in page.text
    assert "write · outcome" in page.text
    assert "succeeded" in page.text
    assert "write · outcome" in search.text


@pytest.mark.anyio
async def test_audit_search_pages_through_older_events(console):
    for n in range(3):
        await propose(console, call_id=f"call_{n}")
    flush(console)
    async with asgi_client(create_app(console)) as client:
        await login(client, "oliver@acme")
        first = await client.get("/audit?tool=payments.notify_customers&limit=5", headers=HTML)
        assert "Older events" in first.text
        older = first.text.split('<a href="/audit?', 2)[-1].split('"', 1)[0]
        second = await client.get(f"/audit?{older.replace('&amp;', '&')}", headers=HTML)
    assert second.status_code == 200
    assert "payments.notify_customers" in second.text


@pytest.mark.anyio
async def test_a_runs_page_shows_its_transcript_with_each_calls_envelope(console):
    run_id = await stored_run(console)
    async with asgi_client(create_app(console)) as client:
        await login(client, "alice@acme")
        runs = await client.get("/runs", headers=HTML)
        page = await client.get(f"/runs/{run_id}", headers=HTML)
    assert run_id in runs.text
    assert "Is ORD-1001 paid?" in page.text
    assert "Envelope of payments.get_order" in page.text
    assert "call_read" in page.text
