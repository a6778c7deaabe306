"""The runs API over HTTP, on SQLite and PostgreSQL: list, show with its document, replay."""

from __future__ import annotations

import pytest
from _resources import OPERATOR, STAFF, stored_run
from _service import asgi_client, key_for

from handrail.server import create_app
from handrail.server.services import Services

pytestmark = pytest.mark.anyio


async def test_a_run_is_listed_shown_and_replayed(any_services: Services) -> None:
    run_id = await stored_run(any_services)
    app = create_app(any_services)
    async with asgi_client(app, key_for(any_services, permissions=STAFF)) as client:
        listed = (await client.get("/v1/runs", params={"state": "FINISHED"})).json()["runs"]
        assert [r["run_id"] for r in listed] == [run_id]
        shown = (await client.get(f"/v1/runs/{run_id}")).json()
        assert shown["document"]["task"] == "Is ORD-1001 paid?"
        assert "principal" not in shown["document"]
        replayed = (await client.post(f"/v1/runs/{run_id}/replay")).json()
        assert replayed["matched"] is True
        assert replayed["recorded"][0]["calls"][0]["call_id"] == "call_read"
    async with asgi_client(app, key_for(any_services, user="oliver", permissions=OPERATOR)) as c:
        assert [r["run_id"] for r in (await c.get("/v1/runs")).json()["runs"]] == [run_id]
    async with asgi_client(app, key_for(any_services, user="bob")) as client:
        assert (await client.get("/v1/runs")).json()["runs"] == []
        assert (await client.get(f"/v1/runs/{run_id}")).status_code == 404
