"""An unreachable key store fails closed over HTTP: 503 with a stable code, nothing runs.

Before, the store's exception escaped the SDK's bearer middleware as a bare 500 (its
traceback in the log); a 401 would be as wrong, telling a client its good key is bad.
The answer is a 503 with `Retry-After` and the TRANSIENT code, no exception text, and
once the store is back the same key works.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import anyio
import httpx2
import pytest
from starlette.types import ASGIApp

from _mcp_http import WAIT_S, App, Served, build_app, client, running, text_of
from handrail.api_keys import ApiKeyRecord
from handrail.errors import ErrorCode
from handrail.mcp.auth import ApiKeyAuthenticator, principal_from_request
from handrail.mcp.http import http_app
from handrail.mcp.keys import ApiKeys
from handrail.mcp.server import GatedServer
from handrail.principal import Principal
from handrail.store import MemoryStore

pytestmark = pytest.mark.anyio

ALICE = Principal(user_id="alice", tenant_id="t1")
WHERE = "/var/lib/handrail/keys.sqlite"
CALL = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "tools/call",
    "params": {"name": "notes.echo", "arguments": {"text": "hi"}},
}
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


class FlakyStore(MemoryStore):
    """A memory store whose key reads fail while `down` is set."""

    down = False

    def get_api_key(self, key_id: str) -> ApiKeyRecord | None:
        if self.down:
            raise OSError(f"unable to open database file {WHERE}")
        return super().get_api_key(key_id)


@pytest.fixture
def world() -> Iterator[tuple[App, FlakyStore, Served]]:
    app = build_app()
    store = FlakyStore()

    def make(resource_url: str) -> ASGIApp:
        server = GatedServer(app.handrail, principal=principal_from_request)
        authenticator = ApiKeyAuthenticator(ApiKeys(store, audit=None))
        return http_app(server, authenticator, resource_url=resource_url)

    with running(make) as served:
        yield app, store, served
    app.handrail.close()


async def test_an_unreachable_key_store_is_503_with_its_code_and_nothing_runs(
    world: tuple[App, FlakyStore, Served],
) -> None:
    app, store, served = world
    key = ApiKeys(store, audit=None).create(ALICE).key
    store.down = True
    with anyio.fail_after(WAIT_S):
        async with httpx2.AsyncClient(timeout=WAIT_S) as http:
            answer = await http.post(
                served.resource_url,
                content=json.dumps(CALL),
                headers=ACCEPT | {"Authorization": f"Bearer {key}"},
            )

    assert answer.status_code == 503
    assert answer.headers["retry-after"]
    assert answer.json()["code"] == ErrorCode.TRANSIENT.value
    assert WHERE not in answer.text
    assert app.calls == []

    store.down = False
    with anyio.fail_after(WAIT_S):
        async with client(served.resource_url, key) as c:
            result = await c.call_tool("notes.echo", {"text": "back"})
    assert "back" in text_of(result)
    assert app.calls == [("echo", "alice")]
