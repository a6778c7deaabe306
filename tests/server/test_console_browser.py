"""The console in a real browser: Chromium (Debian's /usr/bin/chromium) driven by Playwright.

The service runs under uvicorn on 127.0.0.1 on a free port. A person logs in, reads a
pending plan's impact, confirms it and sees SUCCEEDED; a person of another tenant sees
nothing of it; a form posted without its CSRF token is refused. A screenshot of the
pending-plan page is kept under `.handrail/` (CI keeps it as an artifact). Without
chromium the tests skip, except under CI=true, where they fail.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from _console import PASSWORD, add_person, console_services
from _resources import APPROVER, OPERATOR, STAFF, propose

from _chromium import launched_chromium, require_chromium
from handrail.clock import SystemClock
from handrail.server import create_app
from handrail.server.services import Services
from handrail.store import open_store

SCREENSHOTS = Path(__file__).resolve().parents[2] / ".handrail"
WAIT_S = 60.0
"""Bound on waiting for the server to listen; never reached when it works."""

require_chromium()
pytest.importorskip("playwright.sync_api")


@pytest.fixture
def console(tmp_path: Path) -> Iterator[Services]:
    store = open_store(tmp_path / "handrail.db")
    built = console_services(store, tmp_path, clock=SystemClock())
    add_person(built, "alice@acme", permissions=STAFF)
    add_person(built, "gina@globex", tenant="globex", permissions=APPROVER | OPERATOR)
    try:
        yield built
    finally:
        built.handrail.close()
        store.close()


@pytest.fixture
def base_url(console: Services) -> Iterator[str]:
    """The console served by uvicorn in a thread on 127.0.0.1, on a free port."""
    config = uvicorn.Config(
        create_app(console), host="127.0.0.1", port=0, log_level="warning", lifespan="off"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + WAIT_S
    while not server.started:
        assert thread.is_alive(), "the server stopped before it listened"
        assert time.monotonic() < deadline, "the server never listened"
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=WAIT_S)


@pytest.fixture
def browser() -> Iterator[object]:
    with launched_chromium() as launched:
        yield launched


def _proposed(services: Services) -> str:
    """A plan proposed through the gate, on a loop of its own (Playwright holds this one)."""
    found: list[str] = []
    thread = threading.Thread(target=lambda: found.append(asyncio.run(propose(services))))
    thread.start()
    thread.join(timeout=WAIT_S)
    assert found, "proposing the plan failed"
    return found[0]


def _log_in(browser, base_url: str, login: str):
    page = browser.new_page()
    page.goto(f"{base_url}/plans")
    assert page.url.startswith(f"{base_url}/login?next=")
    page.get_by_label("Login").fill(login)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_label("Password").press("Enter")  # the keyboard submits the form
    page.wait_for_url(f"{base_url}/plans")
    return page


def test_a_person_reads_a_plans_impact_confirms_it_and_sees_succeeded(console, base_url, browser):
    plan_id = _proposed(console)
    page = _log_in(browser, base_url, "alice@acme")
    assert page.get_by_role("heading", name="Pending plans").is_visible()
    page.get_by_role("link", name="payments.notify_customers").click()
    page.wait_for_url(f"{base_url}/plans/{plan_id}")
    impact = page.locator("dl.facts").inner_text()
    for fact in ("Action", "Target", "Money", "Counts", "Reversible", "Expires"):
        assert fact in impact
    SCREENSHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "console-pending-plan.png"), full_page=True)
    page.get_by_role("button", name="Confirm").click()
    page.wait_for_url(f"{base_url}/plans/{plan_id}?done=confirmed")
    assert page.locator("#execution-status").inner_text().count("SUCCEEDED") == 1
    assert page.locator("#plan-state [data-state]").inner_text() == "EXECUTED"


def test_a_person_of_another_tenant_sees_nothing_of_the_first(console, base_url, browser):
    plan_id = _proposed(console)
    page = _log_in(browser, base_url, "gina@globex")
    page.goto(f"{base_url}/plans?state=ALL")
    assert plan_id not in page.content()
    assert page.get_by_text("No plans to show.").is_visible()
    answer = page.goto(f"{base_url}/plans/{plan_id}")
    assert answer is not None
    assert answer.status == 404
    assert "NOT_FOUND" in page.locator("[data-code]").inner_text()


def test_a_form_without_its_csrf_token_is_refused(console, base_url, browser):
    plan_id = _proposed(console)
    page = _log_in(browser, base_url, "alice@acme")
    page.goto(f"{base_url}/plans/{plan_id}")
    page.locator('form[aria-label="Reject"] input[name="csrf"]').evaluate("e => e.remove()")
    page.get_by_label("Reason for rejecting").fill("no token")
    with page.expect_response(f"{base_url}/plans/{plan_id}/reject") as answer:
        page.get_by_role("button", name="Reject").click()
    assert answer.value.status == 403
    assert "CSRF_FAILED" in page.locator("[data-code]").inner_text()
    found = console.handrail.store.get_plan(plan_id)
    assert found is not None
    assert found.state.value == "PROPOSED"
