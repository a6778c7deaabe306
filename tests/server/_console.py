"""Helpers of the console's tests: people with cheap argon2 hashes, and logging in.

`console_services(store, tmp_path, clock=...)` is the payments services with a
`ConsolePeople` on a clock the test moves; `add_person` adds someone to it;
`login(client, ...)` fetches the login form (its cookie and CSRF token) and posts it.
`csrf_of(html)` reads a page's CSRF token the way a browser's form would send it.
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx
from _service import build_services
from argon2 import PasswordHasher

from handrail.clock import Clock, FixedClock
from handrail.people import Passwords
from handrail.server.config import ConsoleConfig, HandrailConfig, ServerConfig
from handrail.server.console.directory import PeopleDirectory
from handrail.server.console.people import ConsolePeople
from handrail.server.services import Services
from handrail.store.base import Store

PASSWORD = "correct horse battery staple"  # noqa: S105 - a test person's
_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def cheap_passwords() -> Passwords:
    """argon2id with the smallest parameters: tests hash many passwords."""
    return Passwords(PasswordHasher(time_cost=1, memory_cost=8, parallelism=1))


def console_services(
    store: Store,
    tmp_path: Path,
    *,
    clock: Clock | None = None,
    console: ConsoleConfig | None = None,
    secure: bool = False,
) -> Services:
    """The payments services with the console's people on `clock` (a FixedClock by default)."""
    config = ServerConfig(
        handrail=HandrailConfig(registry="examples.payments"), console=console or ConsoleConfig()
    )
    people = ConsolePeople(
        store,
        clock=clock or FixedClock(),
        config=config.console,
        secure_cookies=secure,
        passwords=cheap_passwords(),
    )
    return build_services(store, tmp_path, config=config, people=people)


def add_person(
    services: Services,
    login: str,
    *,
    tenant: str = "acme",
    user: str | None = None,
    permissions: frozenset[str] = frozenset(),
    password: str = PASSWORD,
) -> None:
    """Add a person to the services' store."""
    people = services.people
    assert isinstance(people, ConsolePeople)
    directory = PeopleDirectory(services.handrail.store, passwords=people.passwords)
    added = directory.add(
        login,
        tenant_id=tenant,
        user_id=user or login.split("@", 1)[0],
        password=password,
        permissions=permissions,
    )
    assert added is not None


def csrf_of(html: str) -> str:
    """The CSRF token in a page's forms."""
    found = _CSRF.search(html)
    assert found is not None, "the page has no form with a CSRF token"
    return found.group(1)


async def login(
    client: httpx.AsyncClient,
    login_name: str,
    password: str = PASSWORD,
    *,
    next_path: str = "/plans",
) -> httpx.Response:
    """Fetch the login form, post it; the answer to the POST (not followed)."""
    form = await client.get("/login", headers={"Accept": "text/html"})
    assert form.status_code == 200
    return await client.post(
        "/login",
        data={
            "csrf": csrf_of(form.text),
            "login": login_name,
            "password": password,
            "next": next_path,
        },
        headers={"Accept": "text/html"},
    )
