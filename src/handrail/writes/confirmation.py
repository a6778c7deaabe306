"""Confirmation tokens: an HMAC-SHA256 capability bound to one plan, person and nonce.

A token says "this principal agrees to the plan with this hash, until this expiry",
and can be used once. The MAC covers (plan id, plan hash, user, tenant, expiry, nonce)
under a key named by its key id, so keys rotate: the newest key signs, older keys
still verify until they are dropped from the keyring. Tokens go to the host's UI,
never to the model; a model cannot confirm anything, and chat text is never a token.

Text form: `hrc1.<key id>.<plan id>.<plan hash>.<expiry ms>.<nonce>.<mac>`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from handrail.canonical import canonical_json
from handrail.errors import ConfigurationError, ErrorCode, Refusal
from handrail.plans import Plan
from handrail.principal import Principal
from handrail.signing import KEY_ID, SigningKey

__all__ = ["KEYRING_ENV", "ConfirmationToken", "Keyring", "TokenClaims"]


_PREFIX = "hrc1"

KEYRING_ENV = "HANDRAIL_CONFIRMATION_KEYS"
"""The environment variable `Keyring.from_env` reads by default."""


_PLAN_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_HASH = re.compile(r"[0-9a-f]{64}")
_NONCE = re.compile(r"[A-Za-z0-9_-]{22,64}")
_MAC = re.compile(r"[A-Za-z0-9_-]{43}")
_EXPIRY = re.compile(r"[1-9][0-9]{0,14}")


_MAX_TOKEN = 512


@dataclass(frozen=True, slots=True)
class TokenClaims:
    """What a verified token states; `nonce` is the part stored to prevent reuse."""

    key_id: str
    plan_id: str
    plan_hash: str
    expires_at: datetime
    nonce: str


@dataclass(frozen=True, slots=True)
class ConfirmationToken:
    """An issued token: its text for the host, and its claims."""

    value: str
    claims: TokenClaims

    def __repr__(self) -> str:
        return f"ConfirmationToken(plan_id={self.claims.plan_id!r}, value=<hidden>)"


class Keyring:
    """Signs with the newest key and verifies with any key it still holds.

    `nonces` returns fresh URL-safe random nonces; injected so tests are deterministic.
    """

    def __init__(
        self,
        signing: SigningKey,
        *,
        verifying: Iterable[SigningKey] = (),
        nonces: Callable[[], str] | None = None,
    ) -> None:
        keys = {signing.key_id: signing}
        for key in verifying:
            if key.key_id in keys and keys[key.key_id].secret != key.secret:
                raise ConfigurationError(f"two different secrets share key id {key.key_id!r}")
            keys[key.key_id] = key
        self._signing = signing
        self._keys = keys
        self._nonces = nonces or (lambda: secrets.token_urlsafe(24))

    @classmethod
    def from_text(cls, text: str, *, nonces: Callable[[], str] | None = None) -> Keyring:
        """A keyring from key text: `KEY_ID:SECRET` entries, the first signs, the rest verify.

        Entries are separated by commas or line breaks; blank lines and `#` comments are
        skipped. SECRET is base64url of at least 32 random bytes (`Keyring.new_key_text`
        makes one). The same text in every process means a token issued in one is
        confirmed in another. ConfigurationError for anything else, never echoing a secret.
        """
        entries = [
            entry.strip()
            for line in text.splitlines()
            if not line.strip().startswith("#")
            for entry in line.split(",")
            if entry.strip()
        ]
        if not entries:
            raise ConfigurationError("the key text holds no KEY_ID:SECRET entry")
        signing, *verifying = (_key_of(number, entry) for number, entry in enumerate(entries, 1))
        return cls(signing, verifying=verifying, nonces=nonces)

    @classmethod
    def from_env(
        cls,
        name: str = KEYRING_ENV,
        *,
        environ: Mapping[str, str] | None = None,
        nonces: Callable[[], str] | None = None,
    ) -> Keyring:
        """A keyring from the key text (see `from_text`) in environment variable `name`."""
        text = (os.environ if environ is None else environ).get(name)
        if not text:
            raise ConfigurationError(f"environment variable {name} holds no confirmation keys")
        return cls.from_text(text, nonces=nonces)

    @classmethod
    def from_file(cls, path: str | Path, *, nonces: Callable[[], str] | None = None) -> Keyring:
        """A keyring from the key text (see `from_text`) in the file at `path`."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigurationError(
                f"cannot read confirmation keys from {str(path)!r}: {type(exc).__name__}"
            ) from None
        return cls.from_text(text, nonces=nonces)

    @staticmethod
    def new_key_text(
        key_id: str, *, token_bytes: Callable[[int], bytes] = secrets.token_bytes
    ) -> str:
        """One `KEY_ID:SECRET` entry with 32 fresh random bytes, for `from_text`."""
        key = SigningKey(key_id, token_bytes(32))  # checks the id and the secret's size
        return f"{key.key_id}:{base64.urlsafe_b64encode(key.secret).rstrip(b'=').decode()}"

    @property
    def signing_key_id(self) -> str:
        """The id of the key new tokens are signed with."""
        return self._signing.key_id

    def issue(self, plan: Plan, principal: Principal) -> ConfirmationToken:
        """A one-time token for `principal` to confirm (or approve) `plan`."""
        nonce = self._nonces()
        if not _NONCE.fullmatch(nonce):
            raise ConfigurationError("nonces must be 22-64 characters of [A-Za-z0-9_-]")
        claims = TokenClaims(
            key_id=self._signing.key_id,
            plan_id=plan.plan_id,
            plan_hash=plan.plan_hash,
            expires_at=plan.expires_at,
            nonce=nonce,
        )
        mac = _mac(self._signing.secret, claims, principal)
        expiry = _millis(plan.expires_at)
        value = ".".join(
            (_PREFIX, claims.key_id, plan.plan_id, plan.plan_hash, str(expiry), nonce, mac),
        )
        return ConfirmationToken(value=value, claims=claims)

    def verify(self, token: str, principal: Principal) -> TokenClaims:
        """The claims of a token that this keyring signed for this principal.

        Raises a CONFIRMATION_INVALID Refusal for anything else: malformed text, an
        unknown key id, a forged or altered token, or one issued to someone else. It
        does not check the plan, the expiry or reuse; the caller does, in that order.
        """
        parts = token.split(".") if isinstance(token, str) and len(token) <= _MAX_TOKEN else []
        if len(parts) != 7 or parts[0] != _PREFIX:  # noqa: PLR2004 - the token's fields
            raise _invalid("malformed token")
        _, key_id, plan_id, plan_hash, expiry, nonce, mac = parts
        checks = (
            (KEY_ID, key_id),
            (_PLAN_ID, plan_id),
            (_HASH, plan_hash),
            (_EXPIRY, expiry),
            (_NONCE, nonce),
            (_MAC, mac),
        )
        # fullmatch: a trailing newline or a second spelling of a field never passes.
        if not all(pattern.fullmatch(value) for pattern, value in checks):
            raise _invalid("malformed token field")
        try:
            expires_at = datetime.fromtimestamp(int(expiry) / 1000, tz=UTC)
        except (OverflowError, OSError, ValueError):
            raise _invalid("expiry out of range") from None
        if str(_millis(expires_at)) != expiry:
            raise _invalid("expiry not in canonical form")
        key = self._keys.get(key_id)
        if key is None:
            raise _invalid(f"unknown key id {key_id!r}")
        claims = TokenClaims(
            key_id=key_id,
            plan_id=plan_id,
            plan_hash=plan_hash,
            expires_at=expires_at,
            nonce=nonce,
        )
        expected = _mac(key.secret, claims, principal)
        if not hmac.compare_digest(expected.encode(), mac.encode()):
            raise _invalid("signature does not verify for this principal")
        return claims


def _key_of(number: int, entry: str) -> SigningKey:
    """Entry `number` of a key text as a SigningKey; the error names the entry, not its secret."""
    key_id, sep, encoded = entry.partition(":")
    if not sep:
        raise ConfigurationError(f"key entry {number} is not KEY_ID:SECRET")
    try:
        padded = encoded.strip() + "=" * (-len(encoded.strip()) % 4)
        secret = base64.b64decode(padded, altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        raise ConfigurationError(f"key entry {number}: the secret is not base64url") from None
    return SigningKey(key_id.strip(), secret)


def _millis(at: datetime) -> int:
    return round(at.timestamp() * 1000)


def _mac(secret: bytes, claims: TokenClaims, principal: Principal) -> str:
    message = canonical_json(
        {
            "v": 1,
            "kid": claims.key_id,
            "plan_id": claims.plan_id,
            "plan_hash": claims.plan_hash,
            "user": principal.user_id,
            "tenant": principal.tenant_id,
            "expires_at": _millis(claims.expires_at),
            "nonce": claims.nonce,
        },
    )
    digest = hmac.new(secret, message, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _invalid(detail: str) -> Refusal:
    return Refusal(
        ErrorCode.CONFIRMATION_INVALID,
        "The confirmation is not valid for this plan and user.",
        stage="confirmation",
        detail=detail,
    )
