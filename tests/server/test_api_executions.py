"""The executions API over HTTP on SQLite and PostgreSQL: the UNKNOWN queue, reconcile, resolve."""

from __future__ import annotations

import pytest
from _resources import OPERATOR, propose, unknown_record
from _service import asgi_client, key_for

from handrail.server import create_app
from handrail.server.services import Services

pytestmark = pytest.mark.anyio


async def test_an_operator_works_the_unknown_queue(any_services: Services) -> None:
    key = unknown_record(any_services, await propose(any_services))
    operator = key_for(any_services, user="oliver", permissions=OPERATOR)
    async with asgi_client(create_app(any_services), operator) as client:
        queue = (await client.get("/v1/executions/unknown")).json()["executions"]
        assert [r["key"] for r in queue] == [key]
        assert "principal" not in queue[0]
        listed = await client.get("/v1/executions", params={"status": "UNKNOWN", "limit": 10})
        assert [r["key"] for r in listed.json()["executions"]] == [key]
        checked = (await client.post(f"/v1/executions/{key}/reconcile")).json()
        assert checked["status"] == "UNKNOWN"
        assert checked["checks"] == 1
        body = {"succeeded": False, "note": "no refund in the ledger"}
        resolved = await client.post(f"/v1/executions/{key}/resolve", json=body)
        assert resolved.status_code == 200
        assert resolved.json()["status"] == "FAILED_FINAL"
        again = await client.post(f"/v1/executions/{key}/resolve", json=body)
        assert again.status_code == 409
        assert again.json()["error"]["code"] == "CONFLICT"
        shown = (await client.get(f"/v1/executions/{key}")).json()
        assert shown["status"] == "FAILED_FINAL"


async def test_without_the_permission_the_queue_is_refused(any_services: Services) -> None:
    key = unknown_record(any_services, await propose(any_services))
    async with asgi_client(create_app(any_services), key_for(any_services)) as client:
        refused = await client.get("/v1/executions/unknown")
        assert refused.status_code == 403
        assert refused.json()["error"]["code"] == "PERMISSION_DENIED"
        assert (await client.get(f"/v1/executions/{key}")).json()["status"] == "UNKNOWN"
        body = {"succeeded": True, "note": "trust me"}
        denied = await client.post(f"/v1/executions/{key}/resolve", json=body)
        assert denied.json()["error"]["code"] == "PERMISSION_DENIED"
        empty = await client.post(f"/v1/executions/{key}/resolve", json={"succeeded": True})
        assert empty.json()["error"]["code"] == "INVALID_ARGUMENTS"
