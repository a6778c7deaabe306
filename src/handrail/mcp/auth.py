"""Who is calling over HTTP: bearer tokens turned into a Principal, or refused.

An `Authenticator` maps a presented token to the Principal it stands for, or None;
it never reads identity from a tool's arguments. Two come with Handrail: API keys
kept in the store (`ApiKeyAuthenticator`) and JWTs checked against a JWKS file
(`JwtAuthenticator`: signature, issuer, audience, expiry). `AuthenticatorVerifier`
plugs either into the SDK's bearer middleware as its TokenVerifier, handing the
Principal on inside a `PrincipalToken`; `principal_from_request` reads it back in a
request's handler, as GatedServer's PrincipalSource for HTTP.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard

import anyio.to_thread
import jwt
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from pydantic import ConfigDict, InstanceOf
from starlette.responses import JSONResponse

from handrail.api_keys import KEY_PREFIX
from handrail.clock import Clock, SystemClock
from handrail.errors import ConfigurationError, ErrorCode
from handrail.mcp.keys import ApiKeys
from handrail.principal import Principal

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

    from handrail.app import Handrail

__all__ = [
    "ApiKeyAuthenticator",
    "Authenticator",
    "AuthenticatorUnavailableError",
    "AuthenticatorVerifier",
    "ClaimsMapping",
    "FirstOf",
    "JwtAuthenticator",
    "PrincipalToken",
    "UnavailableAs503",
    "bearer_authenticator",
    "principal_from_request",
]

_log = logging.getLogger(__name__)

_MAX_TOKEN = 16_384  # longer bearer tokens are refused before any parsing
_ASYMMETRIC = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"}) | frozenset(
    {"ES256", "ES384", "ES512", "EdDSA"}
)
_HMAC = frozenset({"HS256", "HS384", "HS512"})
_MIN_HMAC_SECRET = 32
_KEY_TYPES = {"R": "RSA", "P": "RSA", "E": "EC"}
_CURVES = {"ES256": "P-256", "ES384": "P-384", "ES512": "P-521"}


class Authenticator(Protocol):
    """Turns a bearer token into the Principal it stands for; None refuses the request."""

    async def authenticate(self, token: str) -> Principal | None:
        """The principal of `token`, or None when it proves nothing."""
        ...


class ApiKeyAuthenticator:
    """API keys from the store (`handrail.api_keys`), looked up on every request.

    The lookup runs in a worker thread, unless the store's reads by key never wait
    long (`ApiKeys.verify_blocks`; memory, SQLite): then it runs inline, saving the
    thread hop. Either way the store is read each time, so a revoked or expired key is
    refused at once.
    """

    def __init__(self, keys: ApiKeys) -> None:
        self._keys = keys

    async def authenticate(self, token: str) -> Principal | None:
        """The key's principal; tokens that are not Handrail keys are refused unread."""
        if not token.startswith(KEY_PREFIX):
            return None
        if not self._keys.verify_blocks:
            return self._keys.verify(token)
        return await anyio.to_thread.run_sync(self._keys.verify, token)


class FirstOf:
    """Several authenticators in order: the first principal found wins."""

    def __init__(self, *authenticators: Authenticator) -> None:
        if not authenticators:
            msg = "FirstOf needs at least one authenticator"
            raise ConfigurationError(msg)
        self._authenticators = authenticators

    async def authenticate(self, token: str) -> Principal | None:
        """The first authenticator's principal that is not None."""
        for authenticator in self._authenticators:
            found = await authenticator.authenticate(token)
            if found is not None:
                return found
        return None


def bearer_authenticator(
    app: Handrail,
    *,
    api_keys: bool,
    jwt_issuer: str | None,
    jwks: Path | None,
    jwt_audience: str,
    tenant_claim: str,
) -> Authenticator:
    """The authenticators asked for: API keys from the application's store, JWTs, or both.

    API keys are looked up in `app.store` (uses audited to `app.audit`); JWTs (when both
    an issuer and a JWKS file are given) are those of `jwt_issuer` signed by a key of the
    `jwks` file, for `jwt_audience`, the tenant
    read from `tenant_claim`. ConfigurationError when neither is asked for, or the JWKS
    file cannot be used.
    """
    found: list[Authenticator] = []
    if api_keys:
        found.append(ApiKeyAuthenticator(ApiKeys(app.store, clock=app.clock, audit=app.audit)))
    if jwt_issuer is not None and jwks is not None:
        found.append(
            JwtAuthenticator.from_file(
                jwks,
                issuer=jwt_issuer,
                audience=jwt_audience,
                claims=ClaimsMapping(tenant_claim=tenant_claim),
                clock=app.clock,
            )
        )
    if not found:
        raise ConfigurationError("accept API keys or JWTs (an issuer and a JWKS file), or both")
    return found[0] if len(found) == 1 else FirstOf(*found)


# --- JWT ---------------------------------------------------------------------------------------


_MAX_ID = 256
"""The longest user or tenant id the stores keep (their id columns' width)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ClaimsMapping:
    """Which claims make the Principal. The tenant comes from a claim, never an argument.

    Permissions are the union of the `permission_claims`: a space-separated string
    (OAuth `scope`) or a list of strings. A claim of the wrong type refuses the token.
    """

    user_claim: str = "sub"
    tenant_claim: str = "tenant"
    permission_claims: tuple[str, ...] = ("scope", "permissions")
    roles_claim: str | None = "roles"
    data_scope_claim: str | None = None

    def principal(self, claims: Mapping[str, Any]) -> Principal | None:
        """The Principal the claims describe, or None when one is missing or malformed."""
        user, tenant = claims.get(self.user_claim), claims.get(self.tenant_claim)
        if not isinstance(user, str) or not isinstance(tenant, str):
            return None
        if len(user) > _MAX_ID or len(tenant) > _MAX_ID:
            return None  # no store could record what this principal does
        permissions: set[str] = set()
        for name in self.permission_claims:
            found = _strings(claims.get(name))
            if found is None:
                return None
            permissions |= found
        roles = _strings(claims.get(self.roles_claim)) if self.roles_claim else frozenset()
        scope = claims.get(self.data_scope_claim, {}) if self.data_scope_claim else {}
        if roles is None or not isinstance(scope, dict):
            return None
        try:
            return Principal(
                user_id=user,
                tenant_id=tenant,
                permissions=frozenset(permissions),
                roles=frozenset(roles),
                data_scope=scope,
            )
        except ValueError:
            return None


def _strings(value: object) -> frozenset[str] | None:
    # None: absent (no strings); a str: space-separated; a list: of strings only.
    if value is None:
        return frozenset()
    if isinstance(value, str):
        return frozenset(value.split())
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return frozenset(value)
    return None


class JwtAuthenticator:
    """JWTs signed by a key of a configured JWKS, for this server (audience) by one issuer.

    Checked: the algorithm is one of `algorithms` (asymmetric by default; 'none' never,
    HS* only with an explicit `hmac_secret`, never with a key from the JWKS), the
    signature, `iss`, `aud`, and `exp`/`nbf`/`iat` against the injected clock with a
    small `leeway`. `exp`, `iss`, `aud` and the mapped user and tenant claims are
    required. The SDK's own expiry check is left out (tokens carry no `expires_at`),
    so the clock here alone decides.
    """

    def __init__(
        self,
        *,
        issuer: str,
        audience: str,
        jwks: Mapping[str, Any],
        algorithms: Collection[str] = ("RS256", "ES256", "EdDSA"),
        claims: ClaimsMapping | None = None,
        leeway: timedelta = timedelta(seconds=30),
        clock: Clock | None = None,
        hmac_secret: bytes | None = None,
    ) -> None:
        if not issuer or not audience:
            msg = "a JWT authenticator needs an issuer and an audience"
            raise ConfigurationError(msg)
        algorithms = frozenset(algorithms)
        unknown = algorithms - _ASYMMETRIC - _HMAC
        if unknown or not algorithms:
            msg = (
                f"JWT algorithms must be among {sorted(_ASYMMETRIC | _HMAC)}, not {sorted(unknown)}"
            )
            raise ConfigurationError(msg)
        if algorithms & _HMAC and (hmac_secret is None or len(hmac_secret) < _MIN_HMAC_SECRET):
            msg = (
                f"HS* algorithms need an explicit hmac_secret of at least {_MIN_HMAC_SECRET} bytes"
            )
            raise ConfigurationError(msg)
        if leeway < timedelta(0) or leeway > timedelta(minutes=5):
            msg = "the JWT leeway is between 0 and 5 minutes"
            raise ConfigurationError(msg)
        self._issuer = issuer
        self._audience = audience
        self._algorithms = algorithms
        self._claims = claims or ClaimsMapping()
        self._leeway = leeway
        self._clock = clock or SystemClock()
        self._hmac = hmac_secret
        self._keys = _load_jwks(jwks)

    @classmethod
    def from_file(cls, path: Path, **options: Any) -> JwtAuthenticator:  # noqa: ANN401
        """A JWT authenticator whose keys are the JWKS file at `path` (JSON `{"keys": [...]}`)."""
        try:
            jwks = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            msg = f"cannot read the JWKS file {path}: {type(exc).__name__}"
            raise ConfigurationError(msg) from None
        return cls(jwks=jwks, **options)

    async def authenticate(self, token: str) -> Principal | None:
        """The principal of a valid token; None for anything else (the reason is logged)."""
        claims = self.verified_claims(token)
        return None if claims is None else self._claims.principal(claims)

    def verified_claims(self, token: str) -> dict[str, Any] | None:
        """The claims of a token whose every check passes, or None."""
        if len(token) > _MAX_TOKEN:
            return None
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            return None
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in self._algorithms:
            _log.info("JWT refused: algorithm %r is not allowed", alg)
            return None
        kid = header.get("kid")
        for key in self._candidates(alg, kid if isinstance(kid, str) else None):
            try:
                claims = jwt.decode(
                    token,
                    key,
                    algorithms=[alg],
                    audience=self._audience,
                    issuer=self._issuer,
                    options={
                        "require": ["exp", "iss", "aud"],
                        "verify_exp": False,
                        "verify_nbf": False,
                        "verify_iat": False,
                    },
                )
            except jwt.InvalidSignatureError:
                continue
            except (jwt.PyJWTError, ValueError, TypeError) as exc:
                _log.info("JWT refused: %s", type(exc).__name__)
                return None
            return claims if self._in_time(claims) else None
        _log.info("JWT refused: no configured key verifies it")
        return None

    def _candidates(self, alg: str, kid: str | None) -> list[Any]:
        if alg in _HMAC:
            return [self._hmac]
        return [key.key for key in self._keys if (kid is None or key.kid == kid) and key.fits(alg)]

    def _in_time(self, claims: Mapping[str, Any]) -> bool:
        now = self._clock.now().timestamp()
        leeway = self._leeway.total_seconds()
        exp, nbf, iat = claims.get("exp"), claims.get("nbf"), claims.get("iat")
        if not _number(exp) or now >= exp + leeway:
            _log.info("JWT refused: expired or without a numeric exp")
            return False
        if nbf is not None and (not _number(nbf) or now + leeway < nbf):
            _log.info("JWT refused: not yet valid")
            return False
        if iat is not None and (not _number(iat) or now + leeway < iat):
            _log.info("JWT refused: issued in the future")
            return False
        return True


def _number(value: object) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True)
class _Key:
    """One verification key of the JWKS, with what the JWK says it is for."""

    key: Any  # the `cryptography` public key PyJWT loaded
    kid: str | None
    kty: str | None
    crv: str | None
    alg: str | None

    def fits(self, alg: str) -> bool:
        """The key's type (and curve) is the algorithm's, and its own `alg`, if any, matches."""
        if self.alg is not None and self.alg != alg:
            return False
        if alg == "EdDSA":
            return self.kty == "OKP" and self.crv in {"Ed25519", "Ed448"}
        if alg.startswith("ES"):
            return self.kty == "EC" and self.crv == _CURVES.get(alg)
        return self.kty == _KEY_TYPES.get(alg[0])


def _load_jwks(jwks: Mapping[str, Any]) -> list[_Key]:
    entries = jwks.get("keys")
    if not isinstance(entries, list) or not entries:
        msg = 'a JWKS is a JSON object {"keys": [...]} with at least one key'
        raise ConfigurationError(msg)
    loaded = []
    for entry in entries:
        if not isinstance(entry, dict):
            msg = "every JWKS key is a JSON object"
            raise ConfigurationError(msg)
        if entry.get("kty") == "oct" or "d" in entry:
            # A JWKS is public: a shared secret or a private key there is a mistake.
            msg = "a JWKS for verification holds public keys only (no 'oct' keys, no 'd')"
            raise ConfigurationError(msg)
        if entry.get("use", "sig") != "sig":
            continue
        try:
            key = jwt.PyJWK(entry).key
        except jwt.PyJWTError as exc:
            msg = f"a JWKS key cannot be loaded: {exc}"
            raise ConfigurationError(msg) from None
        fields = {name: entry.get(name) for name in ("kid", "kty", "crv", "alg")}
        loaded.append(
            _Key(key, **{k: v if isinstance(v, str) else None for k, v in fields.items()})
        )
    return loaded


# --- the SDK's side ----------------------------------------------------------------------------


class PrincipalToken(AccessToken):
    """The SDK's access token carrying the Principal an authenticator found.

    `expires_at` stays None: expiry was decided by the authenticator, on its clock.
    """

    model_config = ConfigDict(frozen=True)

    principal: InstanceOf[Principal]


class AuthenticatorVerifier:
    """The SDK's TokenVerifier over an Authenticator, for tokens meant for `resource_url`.

    Every accepted token is reported as issued for `resource_url` (the SDK checks that);
    the authenticator has already checked the audience where the token names one.
    """

    def __init__(self, authenticator: Authenticator, *, resource_url: str) -> None:
        self._authenticator = authenticator
        self._resource = resource_url

    async def verify_token(self, token: str) -> AccessToken | None:
        """A PrincipalToken for a token the authenticator accepts, else None (401).

        An authenticator that fails (its store unreachable) proves nothing either way:
        AuthenticatorUnavailableError, which `UnavailableAs503` answers. Never a 401,
        which would tell the client its good key is bad.
        """
        if not token or len(token) > _MAX_TOKEN:
            return None
        try:
            principal = await self._authenticator.authenticate(token)
        except Exception as exc:
            _log.exception("the authenticator failed; the request is refused (503)")
            raise AuthenticatorUnavailableError from exc
        if principal is None:
            return None
        return PrincipalToken(
            token=token,
            client_id=json.dumps([principal.tenant_id, principal.user_id]),
            scopes=sorted(principal.permissions),
            resource=self._resource,
            subject=principal.user_id,
            claims={"tenant": principal.tenant_id},
            principal=principal,
        )


def principal_from_request() -> Principal | None:
    """The Principal of the HTTP request being handled; None outside one (refused).

    The PrincipalSource of GatedServer over HTTP: the SDK's bearer middleware keeps the
    verified token in a context variable that follows each request into its handler.
    """
    token = get_access_token()
    return token.principal if isinstance(token, PrincipalToken) else None


class AuthenticatorUnavailableError(Exception):
    """The authenticator could not decide (its store is unreachable): nothing may run."""


_UNAVAILABLE = {
    "error": "temporarily_unavailable",
    "error_description": (
        "The credential could not be checked right now; nothing was run. Try again later."
    ),
    "code": ErrorCode.TRANSIENT.value,
}
_RETRY_AFTER = "5"


class UnavailableAs503:
    """ASGI middleware: an authenticator that failed is a 503 with a stable code.

    Without it the failure escapes the SDK's bearer middleware as a bare 500 (and its
    traceback in the server's log is all anyone learns). Fails closed: nothing runs.
    """

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on; answer 503 if the authenticator failed before any answer."""
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self._app(scope, receive, watched)
        except AuthenticatorUnavailableError:
            if started:
                raise
            response = JSONResponse(_UNAVAILABLE, 503, headers={"Retry-After": _RETRY_AFTER})
            await response(scope, receive, send)
