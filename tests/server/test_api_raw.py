"""The raw API over HTTP, on SQLite and PostgreSQL: a record by ref, audited, in its tenant."""

from __future__ import annotations

import pytest
from _resources import ALICE, OPERATOR, flush, keep_raw
from _service import asgi_client, key_for

from handrail.server import create_app
from handrail.server.services import Services

pytestmark = pytest.mark.anyio


async def test_a_raw_record_is_read_by_its_owner_and_an_auditor(any_services: Services) -> None:
    ref = keep_raw(any_services)
    binary = keep_raw(any_services, ALICE, b"\xff\x00")
    app = create_app(any_services)
    async with asgi_client(app, key_for(any_services)) as client:
        record = (await client.get(f"/v1/raw/{ref}")).json()
        assert record["body"] == '{"x": 1}'
        assert record["complete"] is True
        assert (await client.get(f"/v1/raw/{binary}")).json()["body_base64"] == "/wA="
    operator = key_for(any_services, user="oliver", permissions=OPERATOR)
    async with asgi_client(app, operator) as client:
        assert (await client.get(f"/v1/raw/{ref}")).status_code == 200
        flush(any_services)
        params = {"user": "oliver", "decision": "pass"}
        reads = (await client.get("/v1/audit", params=params)).json()["events"]
        assert "raw" in [e["kind"] for e in reads]
    async with asgi_client(app, key_for(any_services, user="bob")) as client:
        denied = await client.get(f"/v1/raw/{ref}")
        assert denied.status_code == 403
        assert denied.json()["error"]["code"] == "PERMISSION_DENIED"
