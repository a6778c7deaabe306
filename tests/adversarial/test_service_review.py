"""Attacks on the whole service over real HTTP (uvicorn on 127.0.0.1, httpx), from a review.

Each attack is refused with its code, changes nothing (every table but the audit trail
is byte-identical before and after) and leaves the service answering: a Host header
naming another site (DNS rebinding) is 421 MISDIRECTED before any route runs, the
console's login included; the console's CSRF, fixation, open-redirect and login-flood
refusals hold on the wire as they do in process.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))  # the service's helpers

from _console import PASSWORD, add_person, console_services, csrf_of
from _resources import STAFF, propose
from _running import READ_TURN, running
from _service import key_for

from _stores import STORE_TABLES
from handrail.server.config import ConsoleConfig
from handrail.server.limits import allowed_hosts
from handrail.server.services import Services
from handrail.store import open_store

pytestmark = pytest.mark.anyio

HTML = {"Accept": "text/html"}
WAIT_S = 60.0
PLANTED = "A" * 43  # a well-formed session token an attacker chose


@pytest.fixture
def console(tmp_path: Path) -> Iterator[Services]:
    """The payments services with two people, over a SQLite file the test can read."""
    store = open_store(tmp_path / "handrail.db")
    built = console_services(
        store, tmp_path, console=ConsoleConfig(login_rate="8/minute", max_failed_logins=50)
    )
    add_person(built, "alice@acme", permissions=STAFF)
    add_person(built, "mallory@acme", user="mallory", permissions=STAFF)
    try:
        yield built
    finally:
        built.handrail.close()
        store.close()


def _state(tmp_path: Path) -> dict[str, list[tuple[object, ...]]]:
    """Every row of every table but the audit trail (refusals are audited, nothing else)."""
    connection = sqlite3.connect(tmp_path / "handrail.db")
    try:
        return {
            table: sorted(map(tuple, connection.execute(f"SELECT * FROM {table}")), key=repr)  # noqa: S608 - our table names
            for table in STORE_TABLES
            if table != "audit_trails"
        }
    finally:
        connection.close()


def _client(base: str, **headers: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=base, headers=headers, timeout=WAIT_S)


async def _login(client: httpx.AsyncClient, login: str, password: str = PASSWORD, **form: str):
    page = await client.get("/login", headers=HTML)
    assert page.status_code == 200
    data = {"csrf": csrf_of(page.text), "login": login, "password": password, **form}
    return await client.post("/login", data=data, headers=HTML)


async def _still_up(base: str) -> None:
    async with _client(base) as client:
        assert (await client.get("/healthz")).status_code == 200


# --- DNS rebinding: the Host header ------------------------------------------------------------


@pytest.mark.parametrize(
    "host", ["evil.example", "evil.example:80", "127.0.0.1.evil.example", "[::2]", ""]
)
async def test_a_host_header_naming_another_site_is_421_and_changes_nothing(
    console: Services, tmp_path: Path, host: str
) -> None:
    plan_id = await propose(console)
    key = key_for(console, permissions=STAFF)
    before = _state(tmp_path)
    async with running(console) as base, _client(base, Host=host) as client:
        form = await client.get("/login", headers=HTML)
        login = await client.post(
            "/login",
            data={"csrf": "x", "login": "alice@acme", "password": PASSWORD},
            headers=HTML,
        )
        calls = await client.post(
            "/v1/calls/anthropic", json=READ_TURN, headers={"Authorization": f"Bearer {key}"}
        )
        token = await client.post(
            f"/v1/plans/{plan_id}/token", headers={"Authorization": f"Bearer {key}"}
        )
        answers = [form, login, calls, token]
        await _still_up(base)
    assert {a.status_code for a in answers} == {421}
    assert {a.json()["error"]["code"] for a in answers} == {"MISDIRECTED"}
    assert all("set-cookie" not in a.headers for a in answers)
    assert _state(tmp_path) == before


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "LOCALHOST.", "[::1]"])
async def test_every_loopback_name_reaches_a_loopback_service(console: Services, host: str) -> None:
    async with running(console) as base, _client(base) as client:
        port = base.rpartition(":")[2]
        answer = await client.get("/healthz", headers={"Host": f"{host}:{port}"})
    assert answer.status_code == 200


def test_the_allowed_hosts_come_from_the_public_url_else_the_bound_host() -> None:
    assert allowed_hosts("0.0.0.0", "https://Handrail.Example.com/") == {"handrail.example.com"}  # noqa: S104
    assert allowed_hosts("10.0.0.5", None) == {"10.0.0.5"}
    assert allowed_hosts("127.0.0.1", None) == {"127.0.0.1", "localhost", "::1"}
    assert allowed_hosts("0.0.0.0", None) is None  # noqa: S104 - bound everywhere: any name


# --- the console on the wire ---------------------------------------------------------------------


@pytest.mark.parametrize("token", [None, "", "forged", "x" * 5000, "theirs"])
async def test_a_console_confirm_without_its_csrf_token_is_refused_on_the_wire(
    console: Services, tmp_path: Path, token: str | None
) -> None:
    plan_id = await propose(console)
    async with running(console) as base, _client(base) as alice, _client(base) as mallory:
        assert (await _login(alice, "alice@acme")).status_code == 303
        assert (await _login(mallory, "mallory@acme")).status_code == 303
        theirs = csrf_of((await mallory.get("/plans", headers=HTML)).text)
        before = _state(tmp_path)
        sent = {"csrf": theirs if token == "theirs" else token}  # noqa: S105 - another session's
        answer = await alice.post(
            f"/plans/{plan_id}/confirm",
            data={"reason": "x"} if token is None else sent,
            headers=HTML,
        )
        after = _state(tmp_path)
        up = await alice.get(f"/plans/{plan_id}", headers=HTML)
    assert answer.status_code == 403
    assert 'data-code="CSRF_FAILED"' in answer.text
    assert after == before
    assert up.status_code == 200


async def test_a_planted_session_cookie_never_becomes_a_session_on_the_wire(
    console: Services,
) -> None:
    async with running(console) as base, _client(base) as client:
        client.cookies.set("handrail_session", PLANTED)
        answer = await _login(client, "alice@acme")
        issued = answer.cookies["handrail_session"]
        client.cookies.clear()
        client.cookies.set("handrail_session", PLANTED)
        planted = await client.get("/plans")
    assert answer.status_code == 303
    assert issued != PLANTED
    assert planted.status_code == 401
    assert planted.json()["error"]["code"] == "UNAUTHENTICATED"
    cookie = answer.headers["set-cookie"].lower()
    assert "httponly" in cookie
    assert "samesite=strict" in cookie


@pytest.mark.parametrize(
    "target",
    ["https://evil.example/", "//evil.example/x", "/\\evil.example", "/\t/evil.example", "x"],
)
async def test_a_login_never_redirects_off_the_site_on_the_wire(
    console: Services, target: str
) -> None:
    async with running(console) as base, _client(base) as client:
        answer = await _login(client, "alice@acme", next=target)
    assert answer.status_code == 303
    assert answer.headers["location"] == "/plans"


async def test_a_login_flood_is_rate_limited_on_the_wire_and_changes_nothing(
    console: Services, tmp_path: Path
) -> None:
    before = _state(tmp_path)
    async with running(console) as base, _client(base) as client:
        answers = [await _login(client, "alice@acme", f"guess {n:03d}") for n in range(12)]
        right = await _login(client, "alice@acme")
        await _still_up(base)
    codes = [a.status_code for a in answers]
    assert codes[:8] == [401] * 8
    assert set(codes[8:]) == {429}
    assert right.status_code == 429  # even the right password waits out the window
    assert "handrail_session" not in right.cookies
    after = _state(tmp_path)
    # Only alice's failed-login count moved; no session was opened.
    assert after["console_sessions"] == before["console_sessions"] == []
    assert {t: r for t, r in after.items() if t != "console_people"} == {
        t: r for t, r in before.items() if t != "console_people"
    }


# --- what the service's origin serves ----------------------------------------------------------


async def test_no_page_of_the_service_runs_a_script_from_another_origin(console: Services) -> None:
    async with running(console) as base, _client(base) as client:
        docs = await client.get("/docs")
        document = await client.get("/openapi.json")
        login = await client.get("/login", headers=HTML)
    assert docs.status_code == 404  # FastAPI's Swagger page loads its script from a CDN
    assert "<script" not in docs.text
    assert document.status_code == 200
    assert "/v1/calls/{wire}" in document.json()["paths"]
    assert "<script" not in login.text
    assert "default-src 'none'" in login.headers["content-security-policy"]


# --- Idempotency-Key replays ----------------------------------------------------------------


async def test_a_narrower_credential_of_the_same_user_never_gets_a_stored_answer(
    console: Services, tmp_path: Path
) -> None:
    broad = key_for(console, permissions=STAFF)
    narrow = key_for(console, permissions=frozenset())  # alice too, allowed to read nothing
    headers = {"Idempotency-Key": '"turn-1"'}
    async with running(console) as base:
        async with _client(base, Authorization=f"Bearer {broad}", **headers) as client:
            first = await client.post("/v1/calls/anthropic", json=READ_TURN)
        before = _state(tmp_path)
        async with _client(base, Authorization=f"Bearer {narrow}", **headers) as client:
            second = await client.post("/v1/calls/anthropic", json=READ_TURN)
        await _still_up(base)
    assert first.status_code == 200
    assert "ORD-1001" in json.dumps(first.json()["envelopes"][0]["data"])
    assert second.status_code == 422
    assert second.json()["error"]["code"] == "IDEMPOTENCY_KEY_REUSED"
    assert "ORD-1001" not in second.text
    assert _state(tmp_path) == before
