"""Two `handrail serve` processes on one PostgreSQL (and one Redis) act as one service.

Each test starts two real servers (`handrail serve --config`, each on 127.0.0.1 at a
free port) with one config over a fresh database and a Redis key prefix of its own,
waits until both answer /readyz, and proves over real HTTP that what one server did
binds the other: the conversation guard's denial count, the secret-handle ledger,
confirmation nonces and exactly-once execution, the tools' declared rate limits, the
console's sessions and lock-out, and Idempotency-Key records. Run leases are not
here: the service drives no agent runs; `test_workers_processes` proves their
takeover across two processes. Both servers are killed in a `finally`. Without
PostgreSQL or Redis these tests skip, except under CI=true, where they fail.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from _console import PASSWORD, cheap_passwords, csrf_of
from _served import WAIT_S, start_serving
from _two_servers_app import API_KEY, EFFECTS_ENV

from _stores import fresh_postgres_database
from handrail import Keyring, Principal
from handrail.mcp.keys import ApiKeys
from handrail.server.console.directory import PeopleDirectory
from handrail.server.operations import PLANS_DECIDE_PERMISSION
from handrail.store import PostgresStore
from handrail.writes.confirmation import KEYRING_ENV

pytestmark = [pytest.mark.postgres, pytest.mark.anyio]

MAX_FAILED_LOGINS = 4
READER = frozenset({"books.read"})
TICKETS = frozenset({"books.read", "tickets.create", PLANS_DECIDE_PERMISSION})
TICKET = {"asset_id": "asset-7", "reason": "CONNECT_TIMEOUT since 09:30"}


@dataclass(frozen=True, kw_only=True, slots=True)
class Pair:
    """Two servers of one service: their URLs, their database, their effects file."""

    a: str
    b: str
    store_url: str
    effects: Path

    def api_key(self, user: str, permissions: frozenset[str]) -> str:
        """A new API key of `user` of tenant t1, created in the shared store."""
        principal = Principal(user_id=user, tenant_id="t1", permissions=permissions)
        with _store(self.store_url) as store:
            return ApiKeys(store).create(principal).key

    def add_person(self, login: str) -> None:
        """A console person of tenant t1 whose password is PASSWORD."""
        with _store(self.store_url) as store:
            directory = PeopleDirectory(store, passwords=cheap_passwords())
            added = directory.add(
                login,
                tenant_id="t1",
                user_id=login.split("@", 1)[0],
                password=PASSWORD,
                permissions=TICKETS,
            )
            assert added is not None

    def effect_lines(self) -> list[str]:
        """Every effect the write tool had, in either server."""
        return self.effects.read_text().splitlines() if self.effects.exists() else []


class _store:  # noqa: N801 - used like a function in `with`
    """The shared store, opened by the test (already at HEAD), closed on leaving."""

    def __init__(self, url: str) -> None:
        self.store = PostgresStore.open(url, migrate=False, pool_size=1)

    def __enter__(self) -> PostgresStore:
        return self.store

    def __exit__(self, *_: object) -> None:
        self.store.close()


@pytest.fixture
def pair(tmp_path: Path, redis_url: str, key_prefix: str) -> Iterator[Pair]:
    """Two servers started at once over a fresh database; both ready, both killed after."""
    with fresh_postgres_database() as store_url:
        config = tmp_path / "handrail.toml"
        config.write_text(
            "[handrail]\n"
            'registry = "_two_servers_app:build"\n'
            f'store = "{store_url}"\n'
            f'redis = "{redis_url}"\n'
            f'redis_prefix = "{key_prefix}"\n'
            "[server]\nport = 0\n"
            f"[console]\nmax_failed_logins = {MAX_FAILED_LOGINS}\n"
        )
        here = str(Path(__file__).parent)
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")])),
            KEYRING_ENV: Keyring.new_key_text("k1"),
            EFFECTS_ENV: str(tmp_path / "effects"),
        }
        servers = []
        try:
            servers = [start_serving(config, env=env) for _ in range(2)]
            a, b = (server.ready() for server in servers)
            yield Pair(a=a, b=b, store_url=store_url, effects=tmp_path / "effects")
        finally:
            for server in servers:
                server.kill()


def _client(url: str, key: str | None = None) -> httpx.AsyncClient:
    headers = {} if key is None else {"Authorization": f"Bearer {key}"}
    return httpx.AsyncClient(base_url=url, headers=headers, timeout=WAIT_S)


def _turn(name: str, arguments: dict[str, Any], n: int = 1) -> dict[str, Any]:
    """An Anthropic assistant message with one call of `shop.<name>`."""
    use = {"type": "tool_use", "id": f"toolu_{n}", "name": f"shop__{name}", "input": arguments}
    return {"role": "assistant", "content": [use]}


async def _call(
    client: httpx.AsyncClient,
    name: str,
    arguments: dict[str, Any],
    *,
    n: int = 1,
    conversation: str | None = None,
) -> dict[str, Any]:
    """The envelope of one call posted to `client`'s server."""
    headers = {} if conversation is None else {"Handrail-Conversation": conversation}
    answer = await client.post(
        "/v1/calls/anthropic", json=_turn(name, arguments, n), headers=headers
    )
    assert answer.status_code == 200, answer.text
    (envelope,) = answer.json()["envelopes"]
    assert isinstance(envelope, dict)
    return envelope


def _code(envelope: dict[str, Any]) -> str:
    return str(envelope["error_type"] or "ok")


# --- (a) the conversation guard ---------------------------------------------------------------


@pytest.mark.parametrize("first", [0, 1])
async def test_denials_alternating_between_servers_trip_the_breaker_on_the_one_with_the_third(
    pair: Pair, first: int
) -> None:
    key = pair.api_key("alice", READER)
    async with _client(pair.a, key) as a, _client(pair.b, key) as b:
        servers = [a, b] if first == 0 else [b, a]
        denied = [
            await _call(servers[n % 2], "refunds", {"order_id": "o1"}, n=n, conversation="chat-1")
            for n in range(3)
        ]
        # max_denials is 3: the third denial (on the first server again) trips the breaker,
        # and both servers refuse the conversation from then on, even a read.
        after = [await _call(c, "search", {"query": "dune"}, conversation="chat-1") for c in (a, b)]
        elsewhere = await _call(servers[1], "search", {"query": "dune"}, conversation="chat-2")
    assert [_code(e) for e in denied] == ["PERMISSION_DENIED"] * 3
    assert [_code(e) for e in after] == ["BUDGET_EXHAUSTED"] * 2
    assert _code(elsewhere) == "ok"


# --- (b) the secret-handle ledger -------------------------------------------------------------


async def _scrubbed_on(client: httpx.AsyncClient) -> dict[str, Any]:
    """The status page's envelope, once this server scrubs the key from it (bounded poll)."""
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while True:
        envelope = await _call(client, "status", {})
        if API_KEY not in str(envelope):
            return envelope
        assert asyncio.get_running_loop().time() < deadline, "the key was never scrubbed"
        await asyncio.sleep(0.1)


async def test_a_value_server_a_handed_to_a_tool_is_scrubbed_from_results_by_server_b(
    pair: Pair,
) -> None:
    key = pair.api_key("alice", READER)
    async with _client(pair.a, key) as a, _client(pair.b, key) as b:
        echoed = await _call(a, "echo_key", {"note": "hi"})
        # B never handed the key out: it learns the handle A noted in the store (the
        # name only) and reads the value from its own provider.
        status = await _scrubbed_on(b)
        smuggled = await _call(b, "search", {"query": API_KEY})
        later = await _call(b, "status", {})
    assert echoed["data"]["echo"] == "[SECRET:shop.api_key]"
    assert status["data"]["debug"] == "called with [SECRET:shop.api_key]"
    assert _code(smuggled) == "INVALID_ARGUMENTS"
    assert API_KEY not in str(smuggled)
    assert later == status
    with _store(pair.store_url) as store, store.engine.connect() as connection:
        handles = connection.execute(sa.text("SELECT tenant_id, handle FROM secret_handles")).all()
    assert [tuple(row) for row in handles] == [("t1", "shop.api_key")]


# --- (c) confirmation nonces and exactly-once execution ---------------------------------------


async def _plan(client: httpx.AsyncClient) -> str:
    envelope = await _call(client, "create_ticket", TICKET)
    assert _code(envelope) == "NEEDS_CONFIRMATION", envelope
    return str(envelope["data"]["plan_id"])


async def test_a_token_used_on_one_server_is_replayed_on_the_other(pair: Pair) -> None:
    key = pair.api_key("alice", TICKETS)
    async with _client(pair.a, key) as a, _client(pair.b, key) as b:
        plan_id = await _plan(a)
        token = (await a.post(f"/v1/plans/{plan_id}/token")).json()["token"]
        confirmed = await a.post(f"/v1/plans/{plan_id}/confirm", json={"token": token})
        replayed = await b.post(f"/v1/plans/{plan_id}/confirm", json={"token": token})
    assert confirmed.json()["state"] == "CONFIRMED"
    assert replayed.json()["error"]["code"] == "CONFIRMATION_REPLAYED", replayed.text


async def test_a_plan_confirmed_on_one_server_runs_once_when_both_are_told_to_execute_it(
    pair: Pair,
) -> None:
    key = pair.api_key("alice", TICKETS)
    async with _client(pair.a, key) as a, _client(pair.b, key) as b:
        plan_id = await _plan(b)
        token = (await a.post(f"/v1/plans/{plan_id}/token")).json()["token"]
        assert (await a.post(f"/v1/plans/{plan_id}/confirm", json={"token": token})).is_success
        both = await asyncio.gather(*(c.post(f"/v1/plans/{plan_id}/execute") for c in (a, b)))
        again = [await c.post(f"/v1/plans/{plan_id}/execute") for c in (a, b)]
    assert len(pair.effect_lines()) == 1
    answers = [answer.json() for answer in both]
    assert "SUCCEEDED" in {answer.get("status") for answer in answers}, answers
    keys = {answer["key"] for answer in answers if "key" in answer}
    for answer in again:
        assert answer.status_code == 200
        assert answer.json()["status"] == "SUCCEEDED"
        assert answer.json()["replayed"] is True
        keys.add(answer.json()["key"])
    assert keys == set(pair.effect_lines())


# --- (d) rate limits ----------------------------------------------------------------------------


async def test_a_declared_rate_of_three_an_hour_lets_three_calls_through_across_both_servers(
    pair: Pair,
) -> None:
    key = pair.api_key("alice", READER)
    async with _client(pair.a, key) as a, _client(pair.b, key) as b:
        envelopes = await asyncio.gather(
            *(_call((a, b)[n % 2], "stock", {"book_id": "b1"}, n=n) for n in range(10))
        )
    codes = [_code(e) for e in envelopes]
    assert codes.count("ok") == 3
    assert codes.count("RATE_LIMITED") == 7


# --- (e) console sessions and lock-out ----------------------------------------------------------


async def _log_in(client: httpx.AsyncClient, login: str, password: str) -> httpx.Response:
    """Fetch the login form from this server and post it there; the POST's answer."""
    form = await client.get("/login", headers={"Accept": "text/html"})
    assert form.status_code == 200
    return await client.post(
        "/login",
        data={"csrf": csrf_of(form.text), "login": login, "password": password, "next": "/plans"},
        headers={"Accept": "text/html"},
    )


async def test_a_person_logged_in_on_one_server_is_logged_in_on_the_other(pair: Pair) -> None:
    pair.add_person("pat@t1")
    async with _client(pair.a) as a, _client(pair.b) as b:
        logged_in = await _log_in(a, "pat@t1", PASSWORD)
        assert logged_in.status_code == 303, logged_in.text
        token = logged_in.cookies["handrail_session"]
        b.cookies.set("handrail_session", token)  # the same cookie, taken to the other server
        on_b = await b.get("/plans", headers={"Accept": "text/html"})
        assert on_b.status_code == 200
        assert "pat" in on_b.text
        out = await b.post(
            "/logout", data={"csrf": csrf_of(on_b.text)}, headers={"Accept": "text/html"}
        )
        assert out.status_code == 303
        assert a.cookies["handrail_session"] == token  # A's browser still holds it
        on_a = await a.get("/plans", headers={"Accept": "text/html"})
    assert on_a.status_code == 303
    assert on_a.headers["location"].startswith("/login")


async def test_failed_logins_split_across_the_servers_lock_the_account_at_the_count(
    pair: Pair,
) -> None:
    pair.add_person("lee@t1")
    async with _client(pair.a) as a, _client(pair.b) as b:
        failed = [
            await _log_in((a, b)[n % 2], "lee@t1", "not the password")
            for n in range(MAX_FAILED_LOGINS)
        ]
        right = [await _log_in(c, "lee@t1", PASSWORD) for c in (a, b)]
    statuses = [answer.status_code for answer in failed]
    assert statuses == [401] * (MAX_FAILED_LOGINS - 1) + [429]
    assert [answer.status_code for answer in right] == [429, 429]
    assert all("handrail_session" not in answer.cookies for answer in right)


# --- (f) Idempotency-Key -----------------------------------------------------------------------


async def test_a_post_answered_by_one_server_is_replayed_by_the_other(pair: Pair) -> None:
    key = pair.api_key("alice", TICKETS)
    turn = _turn("create_ticket", TICKET)
    headers = {"Idempotency-Key": "turn-1"}
    async with _client(pair.a, key) as a, _client(pair.b, key) as b:
        first = await a.post("/v1/calls/anthropic", json=turn, headers=headers)
        replayed = await b.post("/v1/calls/anthropic", json=turn, headers=headers)
        other = await b.post(
            "/v1/calls/anthropic", json=_turn("search", {"query": "x"}), headers=headers
        )
        plans = (await b.get("/v1/plans")).json()["plans"]
    assert first.status_code == 200
    assert "idempotent-replayed" not in first.headers
    assert replayed.headers["idempotent-replayed"] == "true"
    assert (replayed.status_code, replayed.json()) == (200, first.json())
    assert other.status_code == 422
    assert other.json()["error"]["code"] == "IDEMPOTENCY_KEY_REUSED"
    assert len(plans) == 1  # the write was proposed once, not once per server
