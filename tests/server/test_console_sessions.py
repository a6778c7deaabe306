"""The console's login and sessions: cookies, expiry, logout, lock-out, CSRF.

A login answers a 303 with a fresh session cookie (HttpOnly, SameSite=Strict, Secure
and `__Host-` when configured); the session proves its person until logout, its idle
limit or its absolute end (an injected clock moves time); disabling a person or
setting their password ends their sessions; wrong passwords lock the account.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from _console import PASSWORD, add_person, console_services, csrf_of, login
from _service import asgi_client

from handrail.clock import FixedClock
from handrail.people import session_hash
from handrail.server import create_app
from handrail.server.config import ConsoleConfig
from handrail.server.console.directory import PeopleDirectory
from handrail.server.console.people import ConsolePeople
from handrail.server.services import Services
from handrail.store import open_store

HTML = {"Accept": "text/html"}
OTHER = "another long one!"


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock()


@pytest.fixture
def console(tmp_path: Path, clock: FixedClock) -> Iterator[Services]:
    store = open_store(tmp_path / "handrail.db")
    config = ConsoleConfig(idle_minutes=30, session_minutes=120, max_failed_logins=3)
    built = console_services(store, tmp_path, clock=clock, console=config)
    add_person(built, "alice@acme", permissions=frozenset({"order.read"}))
    try:
        yield built
    finally:
        built.handrail.close()
        store.close()


def _people(services: Services) -> ConsolePeople:
    assert isinstance(services.people, ConsolePeople)
    return services.people


@pytest.mark.anyio
async def test_a_login_sets_a_strict_httponly_session_cookie_and_goes_to_next(console):
    async with asgi_client(create_app(console)) as client:
        answer = await login(client, "alice@acme", next_path="/plans?state=ALL")
        assert answer.status_code == 303
        assert answer.headers["location"] == "/plans?state=ALL"
        cookie = answer.headers["set-cookie"]
        assert cookie.startswith("handrail_session=")
        assert "HttpOnly" in cookie
        assert "SameSite=strict" in cookie
        assert "Path=/" in cookie
        assert "Secure" not in cookie
        page = await client.get("/plans", headers=HTML)
    assert page.status_code == 200
    assert "Pending plans" in page.text
    assert "alice" in page.text


@pytest.mark.anyio
async def test_secure_cookies_are_host_only_and_secure(tmp_path):
    store = open_store(tmp_path / "handrail.db")
    services = console_services(store, tmp_path, secure=True)
    add_person(services, "alice@acme")
    try:
        async with asgi_client(create_app(services)) as client:
            client.base_url = "https://127.0.0.1"
            answer = await login(client, "alice@acme")
    finally:
        services.handrail.close()
        store.close()
    assert answer.status_code == 303
    cookie = answer.headers["set-cookie"]
    assert cookie.startswith("__Host-handrail_session=")
    assert "Secure" in cookie


@pytest.mark.anyio
async def test_pages_without_a_session_send_a_browser_to_login_and_others_get_401(console):
    async with asgi_client(create_app(console)) as client:
        browser = await client.get("/plans/abc?x=1", headers=HTML)
        machine = await client.get("/plans")
        posted = await client.post("/plans/abc/confirm", data={"csrf": "x"})
    assert browser.status_code == 303
    assert browser.headers["location"] == "/login?next=%2Fplans%2Fabc%3Fx%3D1"
    assert machine.status_code == 401
    assert machine.json()["error"]["code"] == "UNAUTHENTICATED"
    assert posted.status_code == 401


@pytest.mark.anyio
async def test_a_bearer_token_is_not_a_console_session(console):
    from _service import key_for  # noqa: PLC0415

    token = key_for(console, permissions=frozenset({"order.read"}))
    async with asgi_client(create_app(console), token) as client:
        answer = await client.get("/plans")
    assert answer.status_code == 401


@pytest.mark.anyio
async def test_an_idle_session_ends_and_activity_keeps_it_alive(console, clock):
    async with asgi_client(create_app(console)) as client:
        await login(client, "alice@acme")
        for _ in range(3):
            clock.advance(20 * 60)
            assert (await client.get("/plans")).status_code == 200
        clock.advance(31 * 60)
        assert (await client.get("/plans")).status_code == 401


@pytest.mark.anyio
async def test_a_session_ends_at_its_absolute_limit_however_active(console, clock):
    async with asgi_client(create_app(console)) as client:
        await login(client, "alice@acme")
        for _ in range(5):
            clock.advance(20 * 60)
            assert (await client.get("/plans")).status_code == 200
        clock.advance(20 * 60 + 1)  # 120 minutes and a second after the login
        assert (await client.get("/plans")).status_code == 401


@pytest.mark.anyio
async def test_logout_revokes_the_session_in_the_store(console):
    async with asgi_client(create_app(console)) as client:
        await login(client, "alice@acme")
        token = client.cookies["handrail_session"]
        page = await client.get("/plans", headers=HTML)
        answer = await client.post("/logout", data={"csrf": csrf_of(page.text)}, headers=HTML)
        assert answer.status_code == 303
        assert answer.headers["location"] == "/login"
        client.cookies.set("handrail_session", token)  # a copy kept by an attacker
        after = await client.get("/plans")
    assert after.status_code == 401
    found = console.handrail.store.get_session(session_hash(token))
    assert found is not None
    assert found.revoked_at is not None


@pytest.mark.anyio
async def test_disabling_a_person_or_a_new_password_ends_their_sessions(console):
    directory = PeopleDirectory(console.handrail.store, passwords=_people(console).passwords)
    async with asgi_client(create_app(console)) as client:
        await login(client, "alice@acme")
        assert directory.disable("alice@acme", tenant_id="acme")
        assert (await client.get("/plans")).status_code == 401
        assert (await login(client, "alice@acme")).status_code == 401
        assert directory.enable("alice@acme", tenant_id="acme")
        assert (await login(client, "alice@acme")).status_code == 303
        assert directory.set_password("alice@acme", tenant_id="acme", password=OTHER)
        assert (await client.get("/plans")).status_code == 401
        assert (await login(client, "alice@acme", OTHER)).status_code == 303


@pytest.mark.anyio
async def test_wrong_passwords_lock_the_account_until_the_lock_ends(console, clock):
    async with asgi_client(create_app(console)) as client:
        codes = []
        for _ in range(3):
            answer = await login(client, "alice@acme", "not the password")
            codes.append((answer.status_code, 'data-code="' in answer.text))
        locked = await login(client, "alice@acme")
        assert 'data-code="LOCKED_OUT"' in locked.text
        clock.advance(15 * 60)
        unlocked = await login(client, "alice@acme")
    assert codes[:2] == [(401, True), (401, True)]
    assert codes[2][0] == 429
    assert locked.status_code == 429
    assert unlocked.status_code == 303


@pytest.mark.anyio
async def test_an_operator_unlocks_a_locked_account(console):
    directory = PeopleDirectory(console.handrail.store, passwords=_people(console).passwords)
    async with asgi_client(create_app(console)) as client:
        for _ in range(3):
            await login(client, "alice@acme", "not the password")
        assert (await login(client, "alice@acme")).status_code == 429
        assert directory.unlock("alice@acme", tenant_id="acme")
        assert (await login(client, "alice@acme")).status_code == 303


@pytest.mark.anyio
async def test_an_unknown_login_and_a_wrong_password_look_the_same(console):
    async with asgi_client(create_app(console)) as client:
        unknown = await login(client, "nobody@acme", PASSWORD)
        wrong = await login(client, "alice@acme", "not the password")
    assert unknown.status_code == wrong.status_code == 401
    assert 'data-code="UNAUTHENTICATED"' in unknown.text
    assert 'data-code="UNAUTHENTICATED"' in wrong.text


@pytest.mark.anyio
async def test_logins_are_audited_without_the_password(console):
    async with asgi_client(create_app(console)) as client:
        await login(client, "alice@acme", "not the password")
        await login(client, "alice@acme")
    events = [e for e in console.handrail.store.read_audit(limit=100) if e.kind == "console_login"]
    assert [(e.decision, e.code) for e in events] == [
        ("refused", "UNAUTHENTICATED"),
        ("allowed", None),
    ]
    assert all(PASSWORD not in (e.detail or "") for e in events)
    assert events[1].tenant_id == "acme"


@pytest.mark.anyio
async def test_the_login_form_sends_a_person_already_logged_in_on(console):
    async with asgi_client(create_app(console)) as client:
        await login(client, "alice@acme")
        answer = await client.get("/login?next=/runs", headers=HTML)
    assert answer.status_code == 303
    assert answer.headers["location"] == "/runs"


@pytest.mark.anyio
async def test_console_pages_forbid_framing_and_caching(console):
    async with asgi_client(create_app(console)) as client:
        form = await client.get("/login", headers=HTML)
        css = await client.get("/static/console.css")
    assert form.headers["x-frame-options"] == "DENY"
    assert "frame-ancestors 'none'" in form.headers["content-security-policy"]
    assert form.headers["cache-control"] == "no-store"
    assert css.status_code == 200
    assert css.headers["content-type"].startswith("text/css")
