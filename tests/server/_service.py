"""Helpers of the service's tests: the payments app served over one store.

`build_services(store)` wires a `Services` the way `open_services` does, from parts
the test owns: the payments example's tools and policy, API keys from the store, and
the operations. `key_for(services, ...)` makes an API key and returns its bearer text.
`asgi_client(app)` talks to the app in process; tests of the real server start
uvicorn on 127.0.0.1 instead.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import httpx
from examples.payments.app import build_app

from handrail.app import Handrail
from handrail.authz.policy import PolicyEngine
from handrail.clock import SystemClock
from handrail.declare.registry import Registry
from handrail.mcp.auth import ApiKeyAuthenticator
from handrail.mcp.keys import ApiKeys
from handrail.principal import Principal
from handrail.server.config import HandrailConfig, ServerConfig
from handrail.server.operations import Operations
from handrail.server.services import PeopleAuthority, Services
from handrail.signing import SigningKey
from handrail.store.base import Store
from handrail.writes.confirmation import Keyring

_ids = itertools.count(1)


def build_services(
    store: Store,
    tmp_path: Path,
    *,
    config: ServerConfig | None = None,
    people: PeopleAuthority | None = None,
    registry: Registry | None = None,
) -> Services:
    """Services over `store` serving the payments example (database under tmp_path).

    `people` is the console's authority (None: the console logs nobody in). `registry`
    serves those tools instead of the payments example's (and no policy).
    """
    clock = SystemClock()
    policy: PolicyEngine | None = None
    if registry is None:
        payments = build_app(database=tmp_path / f"payments-{next(_ids)}.db", clock=clock)
        payments.database.reset()
        registry, policy = payments.registry, payments.policy
    app = Handrail.open(
        store,
        registry=registry,
        policy=policy,
        keyring=Keyring(SigningKey("test", b"k" * 32)),
        clock=clock,
    )
    return Services(
        config=config or ServerConfig(handrail=HandrailConfig(registry="examples.payments")),
        handrail=app,
        bearer=ApiKeyAuthenticator(ApiKeys(app.store, clock=clock)),
        operations=Operations(app, clock=clock),
        people=people,
        clock=clock,
        worker_id="test-worker",
        new_id=lambda: f"id{next(_ids)}",
    )


def key_for(
    services: Services,
    *,
    tenant: str = "acme",
    user: str = "alice",
    permissions: frozenset[str] = frozenset(),
) -> str:
    """A new API key for that principal: the bearer token text."""
    principal = Principal(user_id=user, tenant_id=tenant, permissions=permissions)
    return ApiKeys(services.handrail.store, clock=services.clock).create(principal).key


def asgi_client(app: object, token: str | None = None) -> httpx.AsyncClient:
    """An httpx client talking to `app` in process, with a bearer token if given."""
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),  # type: ignore[arg-type]
        base_url="http://127.0.0.1",
        headers=headers,
    )
