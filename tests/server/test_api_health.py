"""/healthz says the process is up; /readyz says whether the store and Redis answer."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

import pytest
from _service import asgi_client

from handrail.server import create_app
from handrail.server.services import Services

pytestmark = pytest.mark.anyio


async def test_healthz_answers_without_a_credential(services: Services) -> None:
    async with asgi_client(create_app(services)) as client:
        answer = await client.get("/healthz")
    assert answer.status_code == 200
    assert answer.json() == {"status": "ok"}


async def test_readyz_is_ready_while_the_store_answers(services: Services) -> None:
    async with asgi_client(create_app(services)) as client:
        answer = await client.get("/readyz")
    assert answer.status_code == 200
    assert answer.json() == {"status": "ready", "checks": {"store": "ok"}}


async def test_readyz_is_503_naming_the_part_that_does_not_answer(services: Services) -> None:
    async def down() -> bool:
        return False

    async def up() -> bool:
        return True

    probed = dataclasses.replace(services, probes=MappingProxyType({"redis": down, "x": up}))
    async with asgi_client(create_app(probed)) as client:
        answer = await client.get("/readyz")
    assert answer.status_code == 503
    error = answer.json()["error"]
    assert error["code"] == "UNAVAILABLE"
    assert error["details"]["checks"] == {"store": "ok", "redis": "down", "x": "ok"}


async def test_readyz_is_503_when_the_store_fails(services: Services) -> None:
    with services.handrail.store.engine.begin() as connection:  # type: ignore[attr-defined]
        connection.exec_driver_sql("DROP TABLE api_keys")
    async with asgi_client(create_app(services)) as client:
        answer = await client.get("/readyz")
    assert answer.status_code == 503
    assert answer.json()["error"]["details"]["checks"]["store"] == "down"
