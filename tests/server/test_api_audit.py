"""The audit API over HTTP, on SQLite and PostgreSQL: filtered search, pages, one call's stages."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from _resources import OPERATOR, STAFF, flush, propose
from _service import asgi_client, key_for

from handrail.server import create_app
from handrail.server.services import Services

pytestmark = pytest.mark.anyio


async def test_the_search_filters_and_pages_with_an_opaque_cursor(any_services: Services) -> None:
    for n in range(3):
        await propose(any_services, call_id=f"call_{n}")
    flush(any_services)
    operator = key_for(any_services, user="oliver", permissions=OPERATOR)
    async with asgi_client(create_app(any_services), operator) as client:
        everything = (await client.get("/v1/audit", params={"limit": 200})).json()
        assert everything["next_cursor"] is None
        ids, params = [], {"limit": 5}
        while True:
            page = (await client.get("/v1/audit", params=params)).json()
            ids += [e["event_id"] for e in page["events"]]
            if page["next_cursor"] is None:
                break
            params = {"limit": 5, "cursor": page["next_cursor"]}
        assert ids == [e["event_id"] for e in everything["events"]]
        one = (await client.get("/v1/audit", params={"call_id": "call_1"})).json()["events"]
        assert one
        assert {e["call_id"] for e in one} == {"call_1"}
        by_stage = await client.get(
            "/v1/audit", params={"tool": "payments.notify_customers", "user": "alice"}
        )
        assert {e["user_id"] for e in by_stage.json()["events"]} == {"alice"}
        later = (datetime.now(UTC) + timedelta(days=1)).isoformat()
        future = await client.get("/v1/audit", params={"since": later})
        assert future.json()["events"] == []
        naive = await client.get("/v1/audit", params={"until": "2000-01-01T00:00:00"})
        assert naive.json()["events"] == []
        bad = await client.get("/v1/audit", params={"cursor": "YTE6LTE"})
        assert bad.status_code == 422
        assert bad.json()["error"]["code"] == "INVALID_ARGUMENTS"
        # A cursor of the numbering before one row per call ("a1:5") is refused, not misread.
        old = await client.get("/v1/audit", params={"cursor": "YTE6NQ"})
        assert old.status_code == 422
        assert old.json()["error"]["code"] == "INVALID_ARGUMENTS"


async def test_a_calls_timeline_lists_its_stages_in_order(any_services: Services) -> None:
    await propose(any_services, call_id="call_t")
    flush(any_services)
    alice = key_for(any_services, permissions=STAFF)
    async with asgi_client(create_app(any_services), alice) as client:
        timeline = (await client.get("/v1/audit/calls/call_t")).json()
        stages = [e["stage"] for e in timeline["events"]]
        assert stages[0] == "lookup"
        assert "authorization" in stages
        denied = await client.get("/v1/audit")
        assert denied.status_code == 403
        missing = await client.get("/v1/audit/calls/call_none")
        assert missing.status_code == 404
