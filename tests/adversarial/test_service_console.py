"""Attacks on the console: session fixation, CSRF, login floods, open redirects, forgeries.

Each is refused with its code, changes nothing, and the service keeps answering: a
session id planted before login never becomes a session; a form without its session's
token (or with another session's) is CSRF_FAILED and the plan stays as it was; a flood
of logins from one client is RATE_LIMITED before it can guess; `next` never leaves the
site; a forged or revoked cookie, or a bearer token, proves nobody.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from argon2 import PasswordHasher

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))  # the service's helpers

from _console import PASSWORD, add_person, console_services, csrf_of, login
from _resources import STAFF, propose
from _service import asgi_client, key_for

from handrail.people import session_hash
from handrail.plans import PlanState
from handrail.server import create_app
from handrail.server.config import ConsoleConfig
from handrail.server.services import Services
from handrail.store import open_store

HTML = {"Accept": "text/html"}
PLANTED = "A" * 43  # a well-formed token an attacker chose


@pytest.fixture
def console(tmp_path: Path) -> Iterator[Services]:
    store = open_store(tmp_path / "handrail.db")
    built = console_services(
        store, tmp_path, console=ConsoleConfig(login_rate="10/minute", max_failed_logins=5)
    )
    add_person(built, "alice@acme", permissions=STAFF)
    add_person(built, "mallory@acme", user="mallory", permissions=STAFF)
    try:
        yield built
    finally:
        built.handrail.close()
        store.close()


def _state(services: Services, plan_id: str) -> PlanState:
    found = services.handrail.store.get_plan(plan_id)
    assert found is not None
    return found.state


@pytest.mark.anyio
async def test_a_session_id_planted_before_login_never_becomes_a_session(console):
    async with asgi_client(create_app(console)) as client:
        client.cookies.set("handrail_session", PLANTED)
        answer = await login(client, "alice@acme")
        issued = answer.cookies["handrail_session"]
        assert issued != PLANTED
        assert console.handrail.store.get_session(session_hash(PLANTED)) is None
        client.cookies.clear()
        client.cookies.set("handrail_session", PLANTED)
        assert (await client.get("/plans")).status_code == 401


@pytest.mark.anyio
async def test_a_login_revokes_the_session_the_browser_brought(console):
    async with asgi_client(create_app(console)) as client:
        first = (await login(client, "alice@acme")).cookies["handrail_session"]
        client.cookies.delete("handrail_session")
        form = await client.get("/login", headers=HTML)
        client.cookies.set("handrail_session", first)  # the browser still holds its session
        again = await client.post(
            "/login",
            data={"csrf": csrf_of(form.text), "login": "alice@acme", "password": PASSWORD},
        )
        second = again.cookies["handrail_session"]
        client.cookies.clear()
        client.cookies.set("handrail_session", first)
        old = await client.get("/plans")
        client.cookies.set("handrail_session", second)
        new = await client.get("/plans")
    assert first != second
    assert old.status_code == 401
    assert new.status_code == 200


@pytest.mark.anyio
@pytest.mark.parametrize("token", [None, "", "forged", "x" * 5000])
async def test_a_confirm_without_its_sessions_csrf_token_is_refused_and_changes_nothing(
    console, token
):
    plan_id = await propose(console)
    async with asgi_client(create_app(console)) as client:
        await login(client, "alice@acme")
        data = {"reason": "x"} if token is None else {"csrf": token}
        answer = await client.post(f"/plans/{plan_id}/confirm", data=data, headers=HTML)
        up = await client.get("/plans", headers=HTML)
    assert answer.status_code == 403
    assert 'data-code="CSRF_FAILED"' in answer.text
    assert _state(console, plan_id) is PlanState.PROPOSED
    assert up.status_code == 200


@pytest.mark.anyio
async def test_another_sessions_csrf_token_does_not_pass(console):
    plan_id = await propose(console)
    app = create_app(console)
    async with asgi_client(app) as alice, asgi_client(app) as mallory:
        await login(alice, "alice@acme")
        await login(mallory, "mallory@acme")
        theirs = csrf_of((await mallory.get("/plans", headers=HTML)).text)
        answer = await alice.post(f"/plans/{plan_id}/confirm", data={"csrf": theirs})
    assert answer.status_code == 403
    assert answer.json()["error"]["code"] == "CSRF_FAILED"
    assert _state(console, plan_id) is PlanState.PROPOSED


@pytest.mark.anyio
async def test_a_json_body_is_not_a_form_even_with_the_token(console):
    plan_id = await propose(console)
    async with asgi_client(create_app(console)) as client:
        await login(client, "alice@acme")
        token = csrf_of((await client.get("/plans", headers=HTML)).text)
        answer = await client.post(f"/plans/{plan_id}/confirm", json={"csrf": token})
    assert answer.status_code == 415
    assert answer.json()["error"]["code"] == "UNSUPPORTED_MEDIA_TYPE"
    assert _state(console, plan_id) is PlanState.PROPOSED


@pytest.mark.anyio
async def test_a_cross_site_login_post_without_the_login_forms_cookie_is_refused(console):
    async with asgi_client(create_app(console)) as client:
        answer = await client.post(
            "/login",
            data={"csrf": "guess", "login": "alice@acme", "password": PASSWORD},
            headers=HTML,
        )
    assert answer.status_code == 403
    assert 'data-code="CSRF_FAILED"' in answer.text
    assert "handrail_session" not in answer.cookies


@pytest.mark.anyio
async def test_logout_without_its_token_keeps_the_session(console):
    async with asgi_client(create_app(console)) as client:
        await login(client, "alice@acme")
        answer = await client.post("/logout", data={"csrf": "none"})
        still = await client.get("/plans")
    assert answer.status_code == 403
    assert still.status_code == 200


@pytest.mark.anyio
async def test_a_login_flood_from_one_client_is_rate_limited_and_the_service_stays_up(console):
    async with asgi_client(create_app(console)) as client:
        answers = [await login(client, "alice@acme", f"guess number {n:04d}") for n in range(30)]
        health = await client.get("/static/console.css")
    codes = [a.status_code for a in answers]
    limited = [a for a in answers if 'data-code="RATE_LIMITED"' in a.text]
    assert codes[:5] == [401, 401, 401, 401, 429]  # the fifth failure locks the account
    assert len(limited) == 20  # 10 attempts a minute from one client, whatever they try
    assert all(int(a.headers["retry-after"]) >= 1 for a in limited)
    person = console.handrail.store.get_person("alice@acme")
    assert person is not None
    assert person.locked_until is not None
    assert health.status_code == 200


@pytest.mark.anyio
async def test_a_locked_account_refuses_even_the_right_password(console):
    async with asgi_client(create_app(console)) as client:
        for n in range(5):
            await login(client, "alice@acme", f"wrong guess {n:04d}")
        right = await login(client, "alice@acme")
    assert right.status_code == 429
    assert 'data-code="LOCKED_OUT"' in right.text
    assert "handrail_session" not in right.cookies


@pytest.mark.anyio
@pytest.mark.parametrize(
    "target",
    [
        "https://evil.example/",
        "//evil.example/",
        "/\\evil.example/",
        "\\\\evil.example",
        "http:/evil.example",
        "javascript:alert(1)",
        "/plans\r\nSet-Cookie: x=1",
        "evil.example",
        "/%2F%2Fevil.example",
    ],
)
async def test_next_after_login_never_leaves_the_site(console, target):
    async with asgi_client(create_app(console)) as client:
        answer = await login(client, "alice@acme", next_path=target)
    location = answer.headers["location"]
    assert answer.status_code == 303
    assert location.startswith("/")
    assert not location.startswith("//")
    assert "\\" not in location
    assert "\n" not in location
    assert "evil.example" not in location or location.startswith("/%2F")


@pytest.mark.anyio
async def test_a_forged_cookie_and_a_bearer_token_prove_nobody_at_the_console(console):
    token = key_for(console, permissions=STAFF)
    async with asgi_client(create_app(console), token) as client:
        client.cookies.set("handrail_session", "not-a-token")
        forged = await client.get("/plans")
        client.cookies.set("handrail_session", "B" * 43)
        unknown = await client.get("/plans")
    assert forged.status_code == unknown.status_code == 401
    assert forged.json()["error"]["code"] == "UNAUTHENTICATED"


@pytest.mark.anyio
async def test_a_huge_password_is_refused_without_hashing_it(console, monkeypatch):
    hashed: list[int] = []
    verify = PasswordHasher.verify

    def counted(hasher: PasswordHasher, stored: str, password: str) -> bool:
        hashed.append(len(password))
        return verify(hasher, stored, password)

    monkeypatch.setattr(PasswordHasher, "verify", counted)
    async with asgi_client(create_app(console)) as client:
        answer = await login(client, "alice@acme", "p" * 100_000)
    assert answer.status_code == 401
    assert hashed == []
