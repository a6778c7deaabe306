"""Every POST under /v1 honours Idempotency-Key (IETF draft semantics).

Same key and same request: the kept answer, marked replayed, and the work done once.
Same key, another request: 422 IDEMPOTENCY_KEY_REUSED. The first still running: 409
IN_PROGRESS. Keys are per tenant and user; a malformed key is 400; an answer that
was a server failure keeps nothing, so a retry runs again; a kept answer expires.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from _running import READ_TURN
from _service import asgi_client, key_for
from starlette.types import Receive, Scope, Send

from handrail.clock import FixedClock
from handrail.idempotency_keys import IdempotencyRecord, IdempotencyState
from handrail.principal import Principal
from handrail.server import create_app
from handrail.server.idempotency import IdempotencyKeys, bound_fingerprint, parse_key
from handrail.server.services import Services

pytestmark = pytest.mark.anyio

READER = frozenset({"order.read"})
PATH = "/v1/calls/anthropic"


def keyed(key: str) -> dict[str, str]:
    return {"Idempotency-Key": key}


def calls_run(services: Services) -> int:
    """How many times the gate ran toolu_1 (its `execute` audit events)."""
    sink = services.handrail.audit
    assert sink is not None
    sink.flush()  # type: ignore[attr-defined]
    events = services.handrail.store.read_audit(limit=1000, tenant_id="acme")
    return sum(1 for e in events if e.tool_call_id == "toolu_1" and e.stage == "execute")


async def test_the_same_key_and_body_get_the_kept_answer_and_run_once(
    services: Services,
) -> None:
    token = key_for(services, permissions=READER)
    async with asgi_client(create_app(services), token) as client:
        first = await client.post(PATH, json=READ_TURN, headers=keyed('"k-1"'))
        again = await client.post(PATH, json=READ_TURN, headers=keyed('"k-1"'))
    assert first.status_code == again.status_code == 200
    assert first.content == again.content
    assert "idempotent-replayed" not in first.headers
    assert again.headers["idempotent-replayed"] == "true"
    assert again.headers["content-type"] == "application/json"
    assert calls_run(services) == 1


async def test_a_refusal_is_kept_and_replayed_too(services: Services) -> None:
    token = key_for(services, permissions=READER)
    async with asgi_client(create_app(services), token) as client:
        first = await client.post(PATH, content=b"nope", headers=keyed("k-2"))
        again = await client.post(PATH, content=b"nope", headers=keyed("k-2"))
    assert first.status_code == again.status_code == 415
    assert again.headers["idempotent-replayed"] == "true"


async def test_the_same_key_with_another_body_or_path_is_refused(services: Services) -> None:
    token = key_for(services, permissions=READER)
    other = {**READ_TURN, "content": [{**READ_TURN["content"][0], "id": "toolu_2"}]}  # type: ignore[dict-item]
    async with asgi_client(create_app(services), token) as client:
        await client.post(PATH, json=READ_TURN, headers=keyed('"k-3"'))
        body = await client.post(PATH, json=other, headers=keyed('"k-3"'))
        path = await client.post("/v1/calls/gemini", json=READ_TURN, headers=keyed('"k-3"'))
    for answer in (body, path):
        assert answer.status_code == 422
        assert answer.json()["error"]["code"] == "IDEMPOTENCY_KEY_REUSED"
    assert calls_run(services) == 1


async def test_a_key_whose_first_request_still_runs_is_409_in_progress(
    services: Services,
) -> None:
    token = key_for(services, permissions=READER)
    body = json.dumps(READ_TURN).encode()
    now = services.clock.now()
    services.handrail.store.claim_idempotency_key(
        IdempotencyRecord(
            tenant_id="acme",
            user_id="alice",
            key="k-4",
            fingerprint=bound_fingerprint(
                "POST",
                PATH,
                "",
                body,
                Principal(user_id="alice", tenant_id="acme", permissions=READER),
            ),
            claim="someone-else",
            state=IdempotencyState.RUNNING,
            created_at=now,
            expires_at=now + timedelta(minutes=5),
        )
    )
    async with asgi_client(create_app(services), token) as client:
        answer = await client.post(
            PATH, content=body, headers={**keyed("k-4"), "content-type": "application/json"}
        )
    assert answer.status_code == 409
    assert answer.json()["error"]["code"] == "IN_PROGRESS"
    assert calls_run(services) == 0


async def test_keys_are_per_tenant_and_user(services: Services) -> None:
    alice = key_for(services, permissions=READER)
    bob = key_for(services, user="bob", permissions=READER)
    gina = key_for(services, tenant="globex", user="alice", permissions=READER)
    app = create_app(services)
    answers = []
    for token in (alice, bob, gina):
        async with asgi_client(app, token) as client:
            answers.append(await client.post(PATH, json=READ_TURN, headers=keyed('"shared"')))
    assert all(a.status_code == 200 for a in answers)
    assert not any("idempotent-replayed" in a.headers for a in answers)
    assert answers[2].json()["envelopes"][0]["error_type"] == "NOT_FOUND"


@pytest.mark.parametrize(
    "value",
    ['""', '"', '"a', 'a"', "a b", "a\\b", 'a"b', "x" * 256, '"' + "x" * 256 + '"', "é".encode()],
)
async def test_a_malformed_key_is_400_and_runs_nothing(
    services: Services, value: str | bytes
) -> None:
    token = key_for(services, permissions=READER)
    async with asgi_client(create_app(services), token) as client:
        answer = await client.post(PATH, json=READ_TURN, headers={"Idempotency-Key": value})
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "IDEMPOTENCY_KEY_INVALID"
    assert calls_run(services) == 0


async def test_two_key_headers_are_400(services: Services) -> None:
    token = key_for(services, permissions=READER)
    async with asgi_client(create_app(services), token) as client:
        answer = await client.post(
            PATH, json=READ_TURN, headers=[("Idempotency-Key", "a"), ("Idempotency-Key", "b")]
        )
    assert answer.status_code == 400


def test_keys_parse_as_sf_strings_or_bare_tokens() -> None:
    assert parse_key('"8e03978e-40d5-43e8-bc93-6894a57f9324"') == (
        "8e03978e-40d5-43e8-bc93-6894a57f9324"
    )
    assert parse_key("abc:1/2") == "abc:1/2"
    assert parse_key("x" * 255) == "x" * 255


async def test_without_a_valid_bearer_the_key_is_not_looked_at(services: Services) -> None:
    async with asgi_client(create_app(services), "hrk_forged") as client:
        first = await client.post(PATH, json=READ_TURN, headers=keyed('"k-5"'))
        again = await client.post(PATH, json=READ_TURN, headers=keyed('"k-5"'))
    assert first.status_code == again.status_code == 401
    assert "idempotent-replayed" not in again.headers


async def test_gets_and_routes_outside_the_api_ignore_the_key(services: Services) -> None:
    token = key_for(services, permissions=READER)
    async with asgi_client(create_app(services), token) as client:
        answer = await client.get("/healthz", headers=keyed("bad key"))
    assert answer.status_code == 200


async def test_a_kept_answer_expires_after_the_replay_window(services: Services) -> None:
    clock = FixedClock(datetime(2026, 1, 1, tzinfo=UTC))
    timed = dataclasses.replace(services, clock=clock)
    token = key_for(services, permissions=READER)
    async with asgi_client(create_app(timed), token) as client:
        await client.post(PATH, json=READ_TURN, headers=keyed('"k-6"'))
        clock.advance(services.config.server.idempotency_seconds + 1)
        later = await client.post(PATH, json=READ_TURN, headers=keyed('"k-6"'))
    assert later.status_code == 200
    assert "idempotent-replayed" not in later.headers


def failing(status: int | None) -> Callable[[Scope, Receive, Send], Any]:
    """An app answering `status`, or raising when None, counting its runs."""
    runs: list[bytes] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        runs.append((await receive())["body"])
        if status is None:
            raise RuntimeError("boom")
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    app.runs = runs  # type: ignore[attr-defined]
    return app


@pytest.mark.parametrize("status", [500, 503, None])
async def test_a_server_failure_keeps_nothing_so_a_retry_runs_again(
    services: Services, status: int | None
) -> None:
    token = key_for(services, permissions=READER)
    inner = failing(status)
    app = IdempotencyKeys(inner, services=services)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": "k-7"}
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        for _ in range(2):
            await client.post("/v1/x", content=b"body", headers=headers)
    assert inner.runs == [b"body", b"body"]  # type: ignore[attr-defined]


class _CountingBearer:
    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls = 0

    async def authenticate(self, token: str) -> Principal | None:
        self.calls += 1
        found: Principal | None = await self.inner.authenticate(token)
        return found


async def test_a_keyed_request_looks_its_bearer_up_once(services: Services) -> None:
    counting = _CountingBearer(services.bearer)
    counted = dataclasses.replace(services, bearer=counting)
    token = key_for(services, permissions=READER)
    async with asgi_client(create_app(counted), token) as client:
        keyed_answer = await client.post(PATH, json=READ_TURN, headers=keyed('"once"'))
        assert counting.calls == 1
        plain = await client.post(PATH, json=READ_TURN)
        assert counting.calls == 2
    assert keyed_answer.status_code == plain.status_code == 200
