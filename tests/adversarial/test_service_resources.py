"""Attacks on the service's resources over real HTTP (uvicorn on 127.0.0.1, httpx).

Another tenant's plan, execution, audit call, raw record or run is answered exactly
like a missing one, byte for byte; a confirmation posted by another person, a
tampered token and a replayed one are refused with their codes; raw refs that try
to leave their namespace are "not found". After each refusal nothing changed and the
service still answers.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from _mcp_http import running

# The service's test helpers live with its tests (tests/server), found from here too.
_SERVER_TESTS = str(Path(__file__).resolve().parents[1] / "server")
if _SERVER_TESTS not in sys.path:
    sys.path.insert(0, _SERVER_TESTS)

from _resources import (  # noqa: E402
    APPROVER,
    GINA,
    LARGE_REFUND,
    OPERATOR,
    REFUND,
    STAFF,
    flush,
    keep_raw,
    propose,
    stored_run,
    unknown_record,
)
from _service import build_services, key_for  # noqa: E402

from handrail.server import create_app  # noqa: E402
from handrail.server.services import Services  # noqa: E402
from handrail.store import open_store  # noqa: E402

pytestmark = pytest.mark.anyio

WAIT_S = 60.0


@pytest.fixture
def services(tmp_path: Path) -> Iterator[Services]:
    """The payments services over a fresh SQLite store."""
    store = open_store(tmp_path / "handrail.db")
    built = build_services(store, tmp_path)
    try:
        yield built
    finally:
        built.handrail.close()
        store.close()


@pytest.fixture
def base(services: Services) -> Iterator[str]:
    """The service over real HTTP on a free port of 127.0.0.1."""
    with running(lambda _url: create_app(services)) as served:
        yield served.base


def _client(base: str, token: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=WAIT_S
    )


def _globex(services: Services) -> str:
    return key_for(services, tenant="globex", user="gina", permissions=GINA.permissions)


_BODIES = {
    "/confirm": {"token": "t"},
    "/reject": {"reason": "r"},
    "/revise": {"arguments": "{}"},
    "/resolve": {"succeeded": True, "note": "n"},
}


async def _same(client: httpx.AsyncClient, method: str, foreign: str, missing: str) -> None:
    body = next((b for end, b in _BODIES.items() if foreign.endswith(end)), None)
    first = await client.request(method, foreign, json=body)
    second = await client.request(method, missing, json=body)
    assert first.status_code == second.status_code == 404, (foreign, first.text)
    assert first.content == second.content
    assert first.json()["error"]["code"] == "NOT_FOUND"


async def test_another_tenants_ids_are_answered_like_missing_ones(
    services: Services, base: str
) -> None:
    plan_id = await propose(services)
    key = unknown_record(services, await propose(services, call_id="call_2"))
    ref = keep_raw(services)
    run_id = await stored_run(services)
    flush(services)
    fake_key = "hk1_" + "0" * 64
    async with _client(base, _globex(services)) as client:
        for method, suffix in (
            ("GET", ""),
            ("POST", "/token"),
            ("POST", "/confirm"),
            ("POST", "/reject"),
            ("POST", "/revise"),
            ("POST", "/execute"),
        ):
            await _same(client, method, f"/v1/plans/{plan_id}{suffix}", f"/v1/plans/p_0{suffix}")
        for method, suffix in (("GET", ""), ("POST", "/reconcile"), ("POST", "/resolve")):
            await _same(
                client,
                method,
                f"/v1/executions/{key}{suffix}",
                f"/v1/executions/{fake_key}{suffix}",
            )
        await _same(client, "GET", "/v1/audit/calls/call_1", "/v1/audit/calls/call_none")
        await _same(client, "GET", f"/v1/raw/{ref}", "/v1/raw/raw_missing")
        await _same(client, "GET", f"/v1/runs/{run_id}", "/v1/runs/r_missing")
        await _same(client, "POST", f"/v1/runs/{run_id}/replay", "/v1/runs/r_missing/replay")
        assert (await client.get("/v1/plans")).json()["plans"] == []
        assert (await client.get("/v1/executions")).json()["executions"] == []
        assert (await client.get("/v1/runs")).json()["runs"] == []
        # Globex sees only its own trail: its refused reads, never an acme event.
        seen = (await client.get("/v1/audit", params={"limit": 200})).json()["events"]
        assert all(e["user_id"] in {"gina", None} for e in seen)
        assert not any(e["call_id"] in {"call_1", "call_2"} for e in seen)
    # Nothing changed in acme.
    record = services.handrail.store.get_plan(plan_id)
    assert record is not None
    assert record.state.value == "PROPOSED"
    execution = services.handrail.store.get_execution(key)
    assert execution is not None
    assert execution.status.value == "UNKNOWN"
    assert execution.version == 1


async def test_a_confirmation_posted_by_another_person_is_refused(
    services: Services, base: str
) -> None:
    plan_id = await propose(services, tool=REFUND, arguments=LARGE_REFUND)
    bob = key_for(services, user="bob", permissions=APPROVER)
    carol = key_for(services, user="carol", permissions=APPROVER)
    alice = key_for(services, user="alice", permissions=STAFF)
    async with _client(base, bob) as as_bob:
        token = (await as_bob.post(f"/v1/plans/{plan_id}/token")).json()["token"]
    for thief in (carol, alice):
        async with _client(base, thief) as client:
            stolen = await client.post(f"/v1/plans/{plan_id}/confirm", json={"token": token})
            assert stolen.status_code == 403
            assert stolen.json()["error"]["code"] == "CONFIRMATION_INVALID"
    # A CONFIRM plan's token, posted by a person who may not decide it: the plan is not theirs.
    own = await propose(services, call_id="call_own")
    async with _client(base, alice) as as_alice:
        own_token = (await as_alice.post(f"/v1/plans/{own}/token")).json()["token"]
    async with _client(base, bob) as as_bob:
        posted = await as_bob.post(f"/v1/plans/{own}/confirm", json={"token": own_token})
        assert posted.status_code == 404
        assert posted.json()["error"]["code"] == "NOT_FOUND"
    refund = services.handrail.store.get_plan(plan_id)
    assert refund is not None
    assert refund.approvals == frozenset()
    notice = services.handrail.store.get_plan(own)
    assert notice is not None
    assert notice.state.value == "AWAITING_CONFIRMATION"
    # The token still works for its own person: the refusals used nothing up.
    async with _client(base, bob) as as_bob:
        ok = await as_bob.post(f"/v1/plans/{plan_id}/confirm", json={"token": token})
        assert ok.status_code == 200


async def test_tampered_and_replayed_tokens_are_refused(services: Services, base: str) -> None:
    plan_id = await propose(services)
    other = await propose(services, call_id="call_other")
    alice = key_for(services, user="alice", permissions=STAFF)
    async with _client(base, alice) as client:
        token = (await client.post(f"/v1/plans/{plan_id}/token")).json()["token"]
        flipped = token[:-2] + ("A" if token[-2] != "A" else "B") + token[-1]
        for bad in (flipped, token + "x", token[:20], "x" * 4096):
            answer = await client.post(f"/v1/plans/{plan_id}/confirm", json={"token": bad})
            assert answer.status_code == 403, bad
            assert answer.json()["error"]["code"] == "CONFIRMATION_INVALID"
        elsewhere = await client.post(f"/v1/plans/{other}/confirm", json={"token": token})
        assert elsewhere.status_code == 409
        assert elsewhere.json()["error"]["code"] == "PLAN_CHANGED"
        assert (await client.get(f"/v1/plans/{plan_id}")).json()["state"] == (
            "AWAITING_CONFIRMATION"
        )
        first = await client.post(f"/v1/plans/{plan_id}/confirm", json={"token": token})
        assert first.json()["state"] == "CONFIRMED"
        replayed = await client.post(f"/v1/plans/{plan_id}/confirm", json={"token": token})
        assert replayed.status_code == 409
        assert replayed.json()["error"]["code"] == "CONFIRMATION_REPLAYED"
        assert (await client.get(f"/v1/plans/{other}")).json()["state"] == "PROPOSED"
        assert (await client.get("/v1/plans")).status_code == 200


@pytest.mark.parametrize(
    "path",
    [
        "/v1/raw/..%2F..%2Fetc%2Fpasswd",
        "/v1/raw/%2E%2E/%2E%2E/etc/passwd",
        "/v1/raw/raw_x%00",
        "/v1/raw/raw_x%2F..%2Fraw_y",
        "/v1/raw/" + "a" * 65,
        "/v1/raw/%C3%A9t%C3%A9",
        "/v1/raw/raw_missing",
    ],
)
async def test_raw_refs_that_leave_their_namespace_are_not_found(
    services: Services, base: str, path: str
) -> None:
    ref = keep_raw(services)
    operator = key_for(services, user="oliver", permissions=OPERATOR)
    async with _client(base, operator) as client:
        missing = await client.get("/v1/raw/raw_missing")
        answer = await client.send(client.build_request("GET", httpx.URL(base + path)))
        assert answer.status_code == 404
        assert answer.content == missing.content
        assert (await client.get(f"/v1/raw/{ref}")).status_code == 200
