"""open_services: the parts `handrail serve` opens from its config, and what it refuses."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from _service import asgi_client
from examples.service.app import DATABASE_ENV

from handrail import Keyring, Principal
from handrail.errors import ConfigurationError
from handrail.mcp.keys import ApiKeys
from handrail.server import create_app, load_config, open_services
from handrail.server.config import ServerConfig
from handrail.server.console.people import ConsolePeople
from handrail.server.services import load_application
from handrail.writes.confirmation import KEYRING_ENV

pytestmark = pytest.mark.anyio

KEYS = {KEYRING_ENV: Keyring.new_key_text("k1")}


def config_in(folder: Path, extra: str = "", *, handrail: str = "") -> ServerConfig:
    """A config serving examples/service's app over a store in `folder`."""
    text = f"""
[handrail]
registry = "examples.service.app:build"
store = "sqlite:///h.db"
{handrail}
{extra}
"""
    path = folder / "handrail.toml"
    path.write_text(text)
    return load_config(path)


@pytest.fixture(autouse=True)
def _payments_db_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DATABASE_ENV, str(tmp_path / "payments.db"))


async def test_the_config_opens_the_app_its_store_and_api_keys(tmp_path: Path) -> None:
    config = config_in(tmp_path)
    async with open_services(config, environ=KEYS) as services:
        assert isinstance(services.people, ConsolePeople)
        assert services.worker_id.endswith(f":{os.getpid()}")
        assert "payments.get_order" in {s.name for s in services.handrail.registry.specs()}
        principal = Principal(
            user_id="alice", tenant_id="acme", permissions=frozenset({"order.read"})
        )
        token = ApiKeys(services.handrail.store).create(principal).key
        async with asgi_client(create_app(services), token) as client:
            answer = await client.get("/v1/tools/anthropic")
        assert answer.status_code == 200
    assert (tmp_path / "h.db").exists()


async def test_without_the_console_no_person_is_served(tmp_path: Path) -> None:
    config = config_in(tmp_path, "[console]\nenabled = false")
    async with open_services(config, environ=KEYS) as services:
        assert services.people is None
        async with asgi_client(create_app(services)) as client:
            assert (await client.get("/login")).status_code == 404


async def test_the_workers_share_the_guard_counts_through_the_store(tmp_path: Path) -> None:
    config = config_in(tmp_path)
    principal = Principal(user_id="alice", tenant_id="acme")
    async with open_services(config, environ=KEYS) as first:
        guard = first.handrail.gate._guard
        assert guard is not None
        await guard.record_denial(principal, "chat-1", tool="payments.get_order", target=None)
    async with open_services(config, environ=KEYS) as second:
        guard = second.handrail.gate._guard
        assert guard is not None
        state = await guard._state.load("acme", "chat-1")
    assert state.denials == 1


async def test_a_keyring_file_readable_by_others_is_refused(tmp_path: Path) -> None:
    keyring = tmp_path / "keys.txt"
    keyring.write_text(Keyring.new_key_text("k1"))
    keyring.chmod(0o644)
    config = config_in(tmp_path, handrail='keyring = "keys.txt"')
    with pytest.raises(ConfigurationError, match="chmod 600"):
        async with open_services(config, environ={}):
            pass
    keyring.chmod(0o600)
    async with open_services(config, environ={}) as services:
        assert services.handrail.writes is not None


async def test_write_tools_without_any_keyring_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError):
        async with open_services(config_in(tmp_path), environ={}):
            pass


async def test_neither_api_keys_nor_jwts_is_refused(tmp_path: Path) -> None:
    config = config_in(tmp_path, "[auth]\napi_keys = false")
    with pytest.raises(ConfigurationError, match="API keys or JWTs"):
        async with open_services(config, environ=KEYS):
            pass


async def test_a_jwt_issuer_without_its_jwks_is_refused(tmp_path: Path) -> None:
    config = config_in(tmp_path, '[auth]\njwt_issuer = "https://id.example"')
    with pytest.raises(ConfigurationError, match="JWKS"):
        async with open_services(config, environ=KEYS):
            pass


@pytest.mark.parametrize(
    ("target", "says"),
    [
        ("examples.payments", "module:attribute"),
        ("examples.nothing_here:app", "ModuleNotFoundError"),
        ("examples.payments:nothing", "AttributeError"),
        ("examples.payments:TENANTS", "neither a Registry"),
    ],
)
def test_a_registry_target_that_gives_no_registry_is_refused(target: str, says: str) -> None:
    with pytest.raises(ConfigurationError, match=says):
        load_application(target)


def test_an_object_with_a_registry_and_policy_gives_both() -> None:
    application = load_application("examples.service.app:build")
    assert application.registry.specs()
    assert application.policy is not None
    assert application.secrets is None


async def test_with_redis_the_limiter_is_shared_and_readyz_asks_redis(
    tmp_path: Path, redis_url: str
) -> None:
    config = config_in(tmp_path, handrail=f'redis = "{redis_url}"')
    async with (
        open_services(config, environ=KEYS) as services,
        asgi_client(create_app(services)) as client,
    ):
        assert set(services.probes) == {"redis"}
        answer = await client.get("/readyz")
    assert answer.json() == {"status": "ready", "checks": {"store": "ok", "redis": "ok"}}


async def test_readyz_is_503_while_redis_does_not_answer(tmp_path: Path) -> None:
    import socket  # noqa: PLC0415

    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    config = config_in(tmp_path, handrail=f'redis = "redis://127.0.0.1:{port}"')
    async with (
        open_services(config, environ=KEYS) as services,
        asgi_client(create_app(services)) as client,
    ):
        answer = await client.get("/readyz")
    assert answer.status_code == 503
    assert answer.json()["error"]["details"]["checks"] == {"store": "ok", "redis": "down"}
