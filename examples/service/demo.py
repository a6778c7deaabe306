"""`make demo`'s service line: start `handrail serve` on the payments example, use it, stop.

Starts the server on a free port of 127.0.0.1 with `examples/service/handrail.toml`
(a confirmation keyring drawn for this run unless HANDRAIL_CONFIRMATION_KEYS is set),
makes an API key for alice of tenant acme, asks /readyz, and posts one Anthropic turn
with a read and a refund of 15,000.00 EUR, which becomes a plan needing two approvers.
Two people of acme (bob and carol, holding `refund.approve`) log in to the console
as a browser would (form, CSRF token, session cookie) and approve it; alice then
executes it over the API, once: SUCCEEDED. Prints each step and the console URL, then
stops the server with SIGINT and waits for it to close.

    .venv/bin/python -m examples.service.demo
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from queue import Empty, Queue

import httpx

from examples.service.app import DATABASE_ENV
from handrail import Keyring, Principal
from handrail.mcp.keys import ApiKeys
from handrail.server.config import load_config
from handrail.server.console.directory import PeopleDirectory
from handrail.store import open_store
from handrail.writes.confirmation import KEYRING_ENV

CONFIG = Path(__file__).with_name("handrail.toml")
DEMO_PAYMENTS = Path(".handrail") / "service-demo-payments.db"
STARTUP_SECONDS = 120.0
_ANNOUNCED = re.compile(r"serving the API on (\S+)/v1")
_CSRF = re.compile(r'name="csrf" value="([^"]+)"')
_APPROVALS = re.compile(r"approved so far by ([^<]+)<")
ALICE = Principal(
    user_id="alice",
    tenant_id="acme",
    permissions=frozenset({"order.read", "order.refund"}),
)
TURN = {
    "role": "assistant",
    "content": [
        {
            "type": "tool_use",
            "id": "toolu_read",
            "name": "payments__get_order",
            "input": {"order_id": "ORD-1001"},
        },
        {
            "type": "tool_use",
            "id": "toolu_refund",
            "name": "payments__refund_order",
            "input": {"order_id": "ORD-1002", "amount_cents": 1_500_000, "reason": "damaged"},
        },
    ],
}


def _lines(stream: object, into: Queue[str]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        into.put(line)


def main() -> int:
    """Run the service once; 0 when it answered and stopped cleanly."""
    env = dict(os.environ)
    env.setdefault(KEYRING_ENV, Keyring.new_key_text("demo"))
    # The payments sample data, fresh for every run (the refund takes money off it).
    DEMO_PAYMENTS.unlink(missing_ok=True)
    env[DATABASE_ENV] = str(DEMO_PAYMENTS)
    command = [str(Path(sys.executable).with_name("handrail")), "serve", "--config", str(CONFIG)]
    server = subprocess.Popen(  # noqa: S603 - our own CLI, an argument list
        [*command, "--port", "0"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: Queue[str] = Queue()
    reader = threading.Thread(target=_lines, args=(server.stderr, lines), daemon=True)
    reader.start()
    try:
        url = _announced(lines)
        key = _key()
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}) as client:
            print(f"readyz: {client.get('/readyz').json()['status']}")
            answer = client.post("/v1/calls/anthropic", json=TURN).json()
            for envelope in answer["envelopes"]:
                print(f"{envelope['tool']}: {envelope['status']} {envelope['summary']}")
            plans = client.get("/v1/plans", params={"limit": 1}).json()  # the newest
            plan_id = plans["plans"][0]["plan_id"]
            for approver in _approvers():
                approved = _approve(url, approver, plan_id)
                print(f"console: {approver.login} approves {plan_id}: {approved}")
            outcome = client.post(f"/v1/plans/{plan_id}/execute").json()
            refunded = outcome["envelope"]["data"]["refunded_cents"]
            print(f"alice executes {plan_id}: {outcome['status']}, refunded {refunded} cents")
        print(f"console: {url}/ (OpenAPI: {url}/openapi.json)")
        print(
            "to keep it running: handrail serve --config examples/service/handrail.toml, "
            "then log in at http://127.0.0.1:8000/login as a person from `handrail people add`"
        )
    finally:
        server.send_signal(signal.SIGINT)
        code = server.wait(timeout=60)
        reader.join(timeout=60)  # the pipe's end, now that the server is gone
        if server.stderr is not None:
            server.stderr.close()
    print(f"server stopped (exit {code})")
    return code


def _announced(lines: Queue[str]) -> str:
    while True:
        try:
            line = lines.get(timeout=STARTUP_SECONDS)
        except Empty:
            raise SystemExit("the server did not announce its URL") from None
        sys.stderr.write(line)
        if (found := _announced_url(line)) is not None:
            return found


def _announced_url(line: str) -> str | None:
    match = _ANNOUNCED.search(line)
    return None if match is None else match.group(1)


@dataclass(frozen=True, slots=True)
class _Person:
    login: str
    password: str


def _approvers() -> list[_Person]:
    """bob and carol of acme, approvers of refunds, with passwords drawn for this run."""
    store = open_store(load_config(CONFIG).handrail.store)
    people = [
        _Person("bob", secrets.token_urlsafe(12)),
        _Person("carol", secrets.token_urlsafe(12)),
    ]
    try:
        directory = PeopleDirectory(store)
        for person in people:
            if (
                directory.add(
                    person.login,
                    tenant_id="acme",
                    user_id=person.login,
                    password=person.password,
                    permissions=frozenset({"refund.approve", "order.read"}),
                )
                is None
            ):
                directory.set_password(person.login, tenant_id="acme", password=person.password)
    finally:
        store.close()
    return people


def _approve(url: str, person: _Person, plan_id: str) -> str:
    """Log in to the console as `person` (form and CSRF token) and press Approve."""
    with httpx.Client(base_url=url, follow_redirects=True) as browser:
        form = browser.get("/login")
        answer = browser.post(
            "/login",
            data={
                "login": person.login,
                "password": person.password,
                "csrf": _csrf(form.text),
                "next": f"/plans/{plan_id}",
            },
        )
        answer = browser.post(f"/plans/{plan_id}/confirm", data={"csrf": _csrf(answer.text)})
        approvals = _APPROVALS.search(answer.text)
        return "refused" if approvals is None else f"approved so far by {approvals.group(1)}"


def _csrf(page: str) -> str:
    found = _CSRF.search(page)
    if found is None:
        raise SystemExit("the console page carries no CSRF token")
    return found.group(1)


def _key() -> str:
    store = open_store(load_config(CONFIG).handrail.store)
    try:
        return ApiKeys(store).create(ALICE, label="service demo").key
    finally:
        store.close()


if __name__ == "__main__":
    raise SystemExit(main())
