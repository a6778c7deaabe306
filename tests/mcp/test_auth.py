"""Authenticators: a bearer token becomes a Principal only when every check passes.

JWTs: signature by a JWKS key of the header's algorithm (only the configured ones;
never 'none', HS* only with an explicit secret), issuer, audience, exp/nbf/iat on the
injected clock with its leeway, and the claims mapping (user, tenant from a claim,
permissions from `scope` and `permissions`). API keys: the store's verdict. The SDK
side: the verifier hands the Principal on in a PrincipalToken, the SDK's own bearer
backend agrees with the clock's verdict (it is given no expiry of its own), and
`principal_from_request` reads it back only inside an authenticated request.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from mcp.server.auth.middleware.auth_context import auth_context_var
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, BearerAuthBackend
from pydantic import AnyHttpUrl
from starlette.requests import HTTPConnection

from _mcp_http import Signer
from handrail.api_keys import ApiKeyRecord
from handrail.clock import FixedClock
from handrail.errors import ConfigurationError
from handrail.mcp.auth import (
    ApiKeyAuthenticator,
    AuthenticatorVerifier,
    ClaimsMapping,
    FirstOf,
    JwtAuthenticator,
    PrincipalToken,
    principal_from_request,
)
from handrail.mcp.keys import ApiKeys
from handrail.principal import Principal
from handrail.store import MemoryStore
from handrail.store.base import reads_block

AUDIENCE = "http://127.0.0.1:8765/mcp"
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
T = NOW.timestamp()
ALICE = Principal(user_id="alice", tenant_id="t1", permissions=frozenset({"notes.admin"}))

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def signer() -> Signer:
    return Signer()


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock(NOW)


def _jwt_auth(signer: Signer, clock: FixedClock, **options: Any) -> JwtAuthenticator:
    settings: dict[str, Any] = {"issuer": signer.issuer, "audience": AUDIENCE, "clock": clock}
    settings.update(options)
    return JwtAuthenticator(jwks=signer.jwks(), **settings)


async def test_a_valid_token_of_each_algorithm_gives_its_principal(
    signer: Signer, clock: FixedClock
) -> None:
    auth = _jwt_auth(signer, clock)
    for alg in ("RS256", "ES256", "EdDSA"):
        token = signer.token(AUDIENCE, alg=alg, now=T, scope="a b", permissions=["c"])
        assert await auth.authenticate(token) == Principal(
            user_id="alice", tenant_id="t1", permissions=frozenset({"a", "b", "c"})
        )


async def test_a_token_without_a_kid_is_tried_with_each_key_of_its_type(
    signer: Signer, clock: FixedClock
) -> None:
    token = jwt.encode(
        {"iss": signer.issuer, "aud": AUDIENCE, "sub": "alice", "tenant": "t1", "exp": T + 60},
        signer.ec_key,
        algorithm="ES256",
    )
    assert await _jwt_auth(signer, clock).authenticate(token) == Principal(
        user_id="alice", tenant_id="t1"
    )


async def test_expiry_and_not_before_follow_the_injected_clock_with_its_leeway(
    signer: Signer, clock: FixedClock
) -> None:
    auth = _jwt_auth(signer, clock, leeway=timedelta(seconds=30))
    token = signer.token(AUDIENCE, now=T, lifetime=60)
    assert await auth.authenticate(token) is not None
    clock.advance(60 + 29)
    assert await auth.authenticate(token) is not None
    clock.advance(1)
    assert await auth.authenticate(token) is None
    future = signer.token(AUDIENCE, now=T + 3600, lifetime=60)
    assert await auth.authenticate(future) is None
    early = signer.token(AUDIENCE, now=T, nbf=int(clock.now().timestamp()) + 31)
    assert await auth.authenticate(early) is None


@pytest.mark.parametrize(
    ("claims", "why"),
    [
        ({"aud": "http://127.0.0.1:9999/mcp"}, "another audience"),
        ({"aud": None}, "no audience"),
        ({"iss": "https://evil.example.test"}, "another issuer"),
        ({"iss": None}, "no issuer"),
        ({"exp": None}, "no expiry"),
        ({"exp": "soon"}, "an expiry that is not a number"),
        ({"tenant": None}, "no tenant"),
        ({"tenant": 7}, "a tenant that is not a string"),
        ({"sub": None}, "no user"),
        ({"sub": "a\x00b"}, "a user a store cannot keep"),
        ({"sub": "u" * 257}, "a user longer than a store's id column"),
        ({"tenant": "t" * 257}, "a tenant longer than a store's id column"),
        ({"scope": ["a", 1]}, "permissions of the wrong type"),
        ({"roles": "admin"}, "roles as a string are fine, so this passes"),
    ],
)
async def test_claims_that_do_not_fit_are_refused(
    signer: Signer, clock: FixedClock, claims: dict[str, Any], why: str
) -> None:
    token = signer.token(AUDIENCE, now=T, **claims)
    found = await _jwt_auth(signer, clock).authenticate(token)
    if why.endswith("passes"):
        assert found is not None
        assert found.roles == frozenset({"admin"})
    else:
        assert found is None, why


async def test_a_signature_by_a_key_outside_the_jwks_is_refused(clock: FixedClock) -> None:
    trusted, other = Signer(), Signer()
    auth = _jwt_auth(trusted, clock)
    for alg in ("RS256", "ES256", "EdDSA"):
        assert await auth.authenticate(other.token(AUDIENCE, alg=alg, now=T)) is None


async def test_a_key_is_used_only_for_its_own_algorithm(signer: Signer, clock: FixedClock) -> None:
    auth = _jwt_auth(signer, clock)
    token = signer.token(AUDIENCE, alg="ES256", kid="rsa", now=T)
    assert await auth.authenticate(token) is None


async def test_none_and_hmac_are_refused_unless_hmac_is_configured(
    signer: Signer, clock: FixedClock
) -> None:
    claims = {"iss": signer.issuer, "aud": AUDIENCE, "sub": "alice", "tenant": "t1", "exp": T + 60}
    unsigned = jwt.encode(claims, None, algorithm="none")
    public_pem = signer.rsa_key.public_key().public_bytes(
        encoding=serialization.Encoding.PEM,
        format=serialization.PublicFormat.SubjectPublicKeyInfo,
    )
    confused = _hs256(claims, public_pem, kid="rsa")
    auth = _jwt_auth(signer, clock)
    assert await auth.authenticate(unsigned) is None
    assert await auth.authenticate(confused) is None
    secret = b"s" * 32
    with_hmac = _jwt_auth(signer, clock, algorithms=("RS256", "HS256"), hmac_secret=secret)
    assert await with_hmac.authenticate(_hs256(claims, secret)) is not None
    assert await with_hmac.authenticate(confused) is None
    assert await with_hmac.authenticate(unsigned) is None


def _hs256(claims: dict[str, Any], secret: bytes, kid: str | None = None) -> str:
    # PyJWT refuses a PEM key as an HMAC secret, so the token is signed by hand.
    def b64(data: bytes) -> bytes:
        return base64.urlsafe_b64encode(data).rstrip(b"=")

    header = {"alg": "HS256", "typ": "JWT"} | ({"kid": kid} if kid else {})
    signing = b64(json.dumps(header).encode()) + b"." + b64(json.dumps(claims).encode())
    signature = hmac.new(secret, signing, hashlib.sha256).digest()
    return (signing + b"." + b64(signature)).decode()


async def test_garbage_is_refused_without_an_error(signer: Signer, clock: FixedClock) -> None:
    auth = _jwt_auth(signer, clock)
    for token in ("", "x", "a.b.c", "e30.e30.", "hrk_whatever", "." * 20_000):
        assert await auth.authenticate(token) is None


def test_bad_configurations_are_refused(signer: Signer, tmp_path: Path) -> None:
    jwks = signer.jwks()
    with pytest.raises(ConfigurationError, match="among"):
        JwtAuthenticator(issuer="i", audience="a", jwks=jwks, algorithms=("none",))
    with pytest.raises(ConfigurationError, match="hmac_secret"):
        JwtAuthenticator(issuer="i", audience="a", jwks=jwks, algorithms=("HS256",))
    with pytest.raises(ConfigurationError, match="hmac_secret"):
        JwtAuthenticator(
            issuer="i", audience="a", jwks=jwks, algorithms=("HS256",), hmac_secret=b"short"
        )
    with pytest.raises(ConfigurationError, match="issuer"):
        JwtAuthenticator(issuer="", audience="a", jwks=jwks)
    with pytest.raises(ConfigurationError, match="keys"):
        JwtAuthenticator(issuer="i", audience="a", jwks={"keys": []})
    private = jwt.algorithms.RSAAlgorithm.to_jwk(signer.rsa_key, as_dict=True)
    with pytest.raises(ConfigurationError, match="public keys only"):
        JwtAuthenticator(issuer="i", audience="a", jwks={"keys": [private]})
    with pytest.raises(ConfigurationError, match="public keys only"):
        JwtAuthenticator(issuer="i", audience="a", jwks={"keys": [{"kty": "oct", "k": "AAAA"}]})
    with pytest.raises(ConfigurationError, match="leeway"):
        JwtAuthenticator(issuer="i", audience="a", jwks=jwks, leeway=timedelta(hours=1))
    with pytest.raises(ConfigurationError, match="JWKS file"):
        JwtAuthenticator.from_file(tmp_path / "missing.json", issuer="i", audience="a")


def test_the_claims_mapping_is_configurable() -> None:
    mapping = ClaimsMapping(
        user_claim="email",
        tenant_claim="org",
        permission_claims=("scp",),
        roles_claim=None,
        data_scope_claim="scope_data",
    )
    claims = {"email": "a@x", "org": "acme", "scp": "r w", "roles": 5, "scope_data": {"r": "eu"}}
    assert mapping.principal(claims) == Principal(
        user_id="a@x", tenant_id="acme", permissions=frozenset({"r", "w"}), data_scope={"r": "eu"}
    )
    assert mapping.principal(claims | {"scope_data": "eu"}) is None


async def test_api_keys_and_first_of(clock: FixedClock, signer: Signer) -> None:
    keys = ApiKeys(MemoryStore(), clock=clock, audit=None)
    key = keys.create(ALICE).key
    api = ApiKeyAuthenticator(keys)
    both = FirstOf(api, _jwt_auth(signer, clock))
    assert await api.authenticate(key) == ALICE
    assert await api.authenticate(signer.token(AUDIENCE, now=T)) is None
    assert await both.authenticate(key) == ALICE
    assert await both.authenticate(signer.token(AUDIENCE, now=T, scope="")) == Principal(
        user_id="alice", tenant_id="t1"
    )
    assert await both.authenticate("hrk_nothing") is None
    with pytest.raises(ConfigurationError):
        FirstOf()


class _WaitingStore(MemoryStore):
    """A memory store whose reads may wait (as a SQL store's do): counts the threads used."""

    reads_block = True

    def __init__(self) -> None:
        super().__init__()
        self.reader_threads: list[int] = []

    def get_api_key(self, key_id: str) -> ApiKeyRecord | None:
        self.reader_threads.append(threading.get_ident())
        return super().get_api_key(key_id)


async def test_the_key_lookup_is_inline_only_for_a_store_whose_reads_never_wait(
    clock: FixedClock,
) -> None:
    memory, waiting = MemoryStore(), _WaitingStore()
    assert not reads_block(memory)
    assert reads_block(waiting)
    assert reads_block(object())  # a store that says nothing may wait
    for store in (memory, waiting):
        keys = ApiKeys(store, clock=clock, audit=None)
        assert keys.verify_blocks is reads_block(store)
        key = keys.create(ALICE).key
        api = ApiKeyAuthenticator(keys)
        assert await api.authenticate(key) == ALICE
        # Inline or not, the store is read every time: a revoked key is refused at once.
        assert keys.revoke(keys.list("t1")[0].key_id, tenant_id="t1")
        waiting.reader_threads.clear()
        assert await api.authenticate(key) is None
    assert waiting.reader_threads
    assert threading.get_ident() not in waiting.reader_threads


async def test_the_verifier_hands_the_principal_on_and_the_sdk_backend_agrees(
    signer: Signer, clock: FixedClock
) -> None:
    verifier = AuthenticatorVerifier(
        _jwt_auth(signer, clock, leeway=timedelta(seconds=30)), resource_url=AUDIENCE
    )
    backend = BearerAuthBackend(verifier, resource_server_url=AnyHttpUrl(AUDIENCE))
    # Expired 10 s ago by the wall clock, within the leeway: the injected clock decides.
    token = signer.token(AUDIENCE, now=T - 70, lifetime=60)
    access = await verifier.verify_token(token)
    assert isinstance(access, PrincipalToken)
    assert access.expires_at is None
    assert access.principal == Principal(
        user_id="alice", tenant_id="t1", permissions=frozenset({"notes.admin"})
    )
    found = await backend.authenticate(_connection(token))
    assert found is not None
    credentials, user = found
    assert isinstance(user, AuthenticatedUser)
    assert user.access_token.principal == access.principal  # type: ignore[attr-defined]
    assert credentials.scopes == ["notes.admin"]
    clock.advance(30)
    assert await verifier.verify_token(token) is None
    assert await backend.authenticate(_connection(token)) is None
    assert await verifier.verify_token("") is None


def _connection(token: str) -> HTTPConnection:
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/mcp",
        "headers": [(b"authorization", f"Bearer {token}".encode())],
    }
    return HTTPConnection(scope)


def test_principal_from_request_reads_only_an_authenticated_request() -> None:
    assert principal_from_request() is None
    token = PrincipalToken(token="t", client_id="c", scopes=[], principal=ALICE)  # noqa: S106
    reset = auth_context_var.set(AuthenticatedUser(token))
    try:
        assert principal_from_request() == ALICE
    finally:
        auth_context_var.reset(reset)
    assert principal_from_request() is None


async def test_a_token_issued_in_the_future_is_refused(signer: Signer, clock: FixedClock) -> None:
    auth = _jwt_auth(signer, clock)
    assert await auth.authenticate(signer.token(AUDIENCE, now=T, iat=int(T) + 3600)) is None
    assert await auth.authenticate(signer.token(AUDIENCE, now=T, iat="now")) is None


async def test_a_key_declared_for_another_algorithm_is_not_used(clock: FixedClock) -> None:
    signer = Signer()
    jwks = signer.jwks()
    jwks["keys"][0]["alg"] = "RS384"
    auth = JwtAuthenticator(issuer=signer.issuer, audience=AUDIENCE, jwks=jwks, clock=clock)
    assert await auth.authenticate(signer.token(AUDIENCE, now=T)) is None
    assert await auth.authenticate(signer.token(AUDIENCE, alg="ES256", now=T)) is not None


async def test_encryption_keys_in_the_jwks_are_left_out(clock: FixedClock) -> None:
    signer = Signer()
    jwks = signer.jwks()
    jwks["keys"][1]["use"] = "enc"
    auth = JwtAuthenticator(issuer=signer.issuer, audience=AUDIENCE, jwks=jwks, clock=clock)
    assert await auth.authenticate(signer.token(AUDIENCE, alg="ES256", now=T)) is None
    assert await auth.authenticate(signer.token(AUDIENCE, now=T)) is not None


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("a string", "JSON object"),
        ({"kty": "RSA", "n": "AQAB"}, "cannot be loaded"),
        ({"kty": "XYZ"}, "cannot be loaded"),
    ],
)
def test_a_jwks_with_a_broken_key_is_refused(entry: object, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        JwtAuthenticator(issuer="i", audience="a", jwks={"keys": [entry]})
