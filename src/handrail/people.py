"""People of the console and their sessions: the stored records, passwords, session tokens.

Owns the person record (login, tenant, user, authority, password hash, lock-out state),
the session record (kept under a hash of the cookie's secret, never the secret), the
password hashing (argon2id through argon2-cffi), and drawing session tokens and the
CSRF token each session's forms carry. The service that logs people in over a store is
`handrail.server.console.people`; this module never touches a store.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

from handrail.principal import Principal

__all__ = [
    "MAX_PASSWORD",
    "MIN_PASSWORD",
    "Passwords",
    "PersonRecord",
    "SessionRecord",
    "csrf_token",
    "draw_token",
    "session_hash",
    "valid_login",
    "valid_token",
]

MIN_PASSWORD = 12
"""A console password's fewest characters (people choose them; no composition rules)."""
MAX_PASSWORD = 1024
"""A console password's most characters: hashing a megabyte on every attempt is a DoS."""

_LOGIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,255}")
_HASH = re.compile(r"[0-9a-f]{64}")
_TOKEN_BYTES = 32
_TOKEN = re.compile(r"[A-Za-z0-9_-]{43}")
_MAX_NAME = 256
_SESSION_DOMAIN = b"handrail console session v1\x00"
_CSRF_DOMAIN = b"handrail console csrf v1"


def valid_login(login: str) -> bool:
    """Whether `login` has a login's form: letters, digits and `._@+-`, at most 256."""
    return _LOGIN.fullmatch(login) is not None


def _aware(*times: datetime | None) -> bool:
    return all(t is None or (t.tzinfo is not None and t.utcoffset() is not None) for t in times)


@dataclass(frozen=True, kw_only=True, slots=True)
class PersonRecord:
    """One person who may log in to the console, as the store keeps them.

    `login` is what they type (unique across tenants); they act as `user_id` in
    `tenant_id` with the permissions, roles and data scope given here, read again on
    every request, so a change takes effect at once. `version` moves on every change
    (compare-and-set). `login`, `tenant_id` and `user_id` never change.
    """

    login: str
    tenant_id: str
    user_id: str
    permissions: frozenset[str] = frozenset()
    roles: frozenset[str] = frozenset()
    data_scope: Mapping[str, object] = field(default_factory=dict)
    display_name: str = ""
    password_hash: str = field(repr=False)
    disabled_at: datetime | None = None
    failed_logins: int = 0
    locked_until: datetime | None = None
    created_at: datetime
    updated_at: datetime
    version: int = 1

    def __post_init__(self) -> None:
        if not valid_login(self.login):
            msg = "a login is letters, digits and ._@+- (at most 256, starting alphanumeric)"
            raise ValueError(msg)
        if max(len(self.tenant_id), len(self.user_id), len(self.display_name)) > _MAX_NAME:
            msg = f"a person's tenant, user and name are at most {_MAX_NAME} characters"
            raise ValueError(msg)
        if not self.password_hash.startswith("$argon2") or len(self.password_hash) > 512:  # noqa: PLR2004
            msg = "a person's password hash is an argon2 hash"
            raise ValueError(msg)
        if not _aware(self.created_at, self.updated_at, self.disabled_at, self.locked_until):
            msg = "a person's times must be timezone-aware"
            raise ValueError(msg)
        if self.failed_logins < 0 or self.version < 1:
            msg = "a person's failed logins are >= 0 and version >= 1"
            raise ValueError(msg)
        self.principal()  # validates user and tenant as a Principal does
        object.__setattr__(self, "permissions", frozenset(self.permissions))
        object.__setattr__(self, "roles", frozenset(self.roles))
        object.__setattr__(self, "data_scope", MappingProxyType(dict(self.data_scope)))

    def principal(self) -> Principal:
        """The principal this person acts as."""
        return Principal(
            user_id=self.user_id,
            tenant_id=self.tenant_id,
            permissions=self.permissions,
            roles=self.roles,
            data_scope=self.data_scope,
        )

    def locked_at(self, now: datetime) -> bool:
        """Whether the account waits out a lock at `now`."""
        return self.locked_until is not None and now < self.locked_until

    @staticmethod
    def authority_of(snapshot: str) -> dict[str, object]:
        """Permissions, roles and data scope from a `Principal.snapshot()` the stores keep."""
        found = Principal.from_snapshot(snapshot)
        return {
            "permissions": found.permissions,
            "roles": found.roles,
            "data_scope": found.data_scope,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class SessionRecord:
    """One console session, keyed by the hash of its cookie's secret.

    A session proves its person only while not revoked, before `expires_at` (its
    absolute end) and within the idle limit of `last_seen_at`; the console decides that.
    """

    session_hash: str
    login: str
    tenant_id: str
    user_id: str
    created_at: datetime
    last_seen_at: datetime
    expires_at: datetime
    revoked_at: datetime | None = None

    def __post_init__(self) -> None:
        if not _HASH.fullmatch(self.session_hash):
            msg = "a session hash is 64 lowercase hexadecimal characters"
            raise ValueError(msg)
        if not valid_login(self.login):
            msg = "a session's login is not a login"
            raise ValueError(msg)
        if not _aware(self.created_at, self.last_seen_at, self.expires_at, self.revoked_at):
            msg = "a session's times must be timezone-aware"
            raise ValueError(msg)


def draw_token(random_bytes: Callable[[int], bytes]) -> str:
    """A new session (or login form) token: 256 random bits, URL-safe base64.

    Raises RuntimeError when the source gives the wrong number of bytes.
    """
    text = base64.urlsafe_b64encode(random_bytes(_TOKEN_BYTES)).rstrip(b"=").decode()
    if not _TOKEN.fullmatch(text):
        msg = "the random source gave the wrong number of bytes"
        raise RuntimeError(msg)
    return text


def valid_token(text: str) -> bool:
    """Whether `text` has the form of a token `draw_token` makes."""
    return _TOKEN.fullmatch(text) is not None


def session_hash(token: str) -> str:
    """The stored key of a session: SHA-256 over a domain tag and the token.

    A fast hash is enough: the token is 256 random bits. A copy of the table then
    holds no cookie that logs anyone in.
    """
    return hashlib.sha256(_SESSION_DOMAIN + token.encode()).hexdigest()


def csrf_token(token: str) -> str:
    """The CSRF token of the forms of a session (or login form) with this token.

    An HMAC keyed by the token: a page may show it, since it reveals nothing of the
    cookie, and a cross-site page cannot compute it without reading the cookie.
    """
    digest = hmac.new(token.encode(), _CSRF_DOMAIN, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


class Passwords:
    """Hashes and checks console passwords with argon2id (argon2-cffi's PasswordHasher).

    The default parameters are argon2-cffi's (RFC 9106 low-memory profile); tests pass a
    cheaper hasher. `verify` is constant-work for an unknown person too (`verify_nothing`).
    """

    def __init__(self, hasher: PasswordHasher | None = None) -> None:
        self._hasher = hasher or PasswordHasher()
        self._decoy = self._hasher.hash("handrail decoy password, never anyone's")

    def hash(self, password: str) -> str:
        """The stored form of a new password; ValueError for one too short or too long."""
        if not MIN_PASSWORD <= len(password) <= MAX_PASSWORD:
            msg = f"a password has {MIN_PASSWORD} to {MAX_PASSWORD} characters"
            raise ValueError(msg)
        return self._hasher.hash(password)

    def verify(self, stored: str, password: str) -> bool:
        """Whether `password` is the one `stored` was made from."""
        if len(password) > MAX_PASSWORD:
            return False
        try:
            return self._hasher.verify(stored, password)
        except (VerifyMismatchError, VerificationError, InvalidHashError):
            return False

    def verify_nothing(self, password: str) -> None:
        """Spend what `verify` spends, for a login that names nobody (no timing oracle)."""
        self.verify(self._decoy, password[:MAX_PASSWORD])

    def needs_rehash(self, stored: str) -> bool:
        """Whether `stored` was made with other parameters than this hasher's."""
        try:
            return self._hasher.check_needs_rehash(stored)
        except InvalidHashError:
            return True
