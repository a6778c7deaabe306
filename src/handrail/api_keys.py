"""API keys: bearer secrets bound to a principal, shown once, kept only as a hash.

Owns the key format, drawing and parsing keys, hashing and comparing their secrets,
and the stored record. A key reads `hrk_<key id>_<secret>`: the prefix makes a leaked
key recognisable to secret scanners, the key id finds the record without a scan, the
secret is compared as a hash in constant time. The service that makes, lists, revokes
and verifies keys over a store is `handrail.mcp.keys.ApiKeys`; this module never
touches a store.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType

from handrail.principal import Principal

__all__ = [
    "KEY_PREFIX",
    "ApiKeyRecord",
    "CreatedKey",
    "draw_key",
    "hash_secret",
    "key_text",
    "matches",
    "parse_key",
    "valid_key_id",
]

KEY_PREFIX = "hrk_"
_ID_BYTES = 8  # 16 hex characters: unique enough for a lookup key, never secret
_SECRET_BYTES = 32  # 256 bits of randomness
_KEY_ID = re.compile(r"[0-9a-f]{16}")
_SECRET = re.compile(r"[A-Za-z0-9_-]{43}")  # 32 bytes, URL-safe base64 without padding
_TOKEN = re.compile(r"hrk_([0-9a-f]{16})_([A-Za-z0-9_-]{43})")
_MAX_NAME = 256  # the store's column width for tenant, user and label
_HASH = re.compile(r"[0-9a-f]{64}")
_MAX_TOKEN = 64
_DOMAIN = b"handrail api key v1\x00"


def hash_secret(key_id: str, secret: str) -> str:
    """The stored form of a key's secret: SHA-256 over a domain tag, the key id and secret.

    A fast hash is right here, unlike for passwords: the secret is 256 uniformly random
    bits, so no guessing attack gets anywhere whatever the hash costs, and a slow key
    derivation would only make every request slower. Binding the key id means a hash
    copied onto another key's row never matches that key's secret.
    """
    material = _DOMAIN + key_id.encode() + b"\x00" + secret.encode()
    return hashlib.sha256(material).hexdigest()


@dataclass(frozen=True, kw_only=True, slots=True)
class ApiKeyRecord:
    """One stored API key: whom it stands for, its label and times, its secret's hash.

    The principal's identity and authority are fixed when the key is made; a key whose
    owner should hold other permissions is revoked and made again.
    """

    key_id: str
    tenant_id: str
    user_id: str
    permissions: frozenset[str] = frozenset()
    roles: frozenset[str] = frozenset()
    data_scope: Mapping[str, object] = field(default_factory=dict)
    label: str = ""
    secret_hash: str = field(repr=False)
    created_at: datetime
    expires_at: datetime | None = None
    revoked_at: datetime | None = None

    def __post_init__(self) -> None:
        if not _KEY_ID.fullmatch(self.key_id):
            msg = "an API key id is 16 lowercase hexadecimal characters"
            raise ValueError(msg)
        if not _HASH.fullmatch(self.secret_hash):
            msg = "an API key's secret hash is 64 lowercase hexadecimal characters"
            raise ValueError(msg)
        if max(len(self.tenant_id), len(self.user_id), len(self.label)) > _MAX_NAME:
            msg = f"an API key's tenant, user and label are at most {_MAX_NAME} characters"
            raise ValueError(msg)
        times = (self.created_at, self.expires_at, self.revoked_at)
        if any(t is not None and (t.tzinfo is None or t.utcoffset() is None) for t in times):
            msg = "an API key's times must be timezone-aware"
            raise ValueError(msg)
        # Validates user and tenant exactly as a Principal does.
        self.principal()
        object.__setattr__(self, "permissions", frozenset(self.permissions))
        object.__setattr__(self, "roles", frozenset(self.roles))
        object.__setattr__(self, "data_scope", MappingProxyType(dict(self.data_scope)))

    def principal(self) -> Principal:
        """The principal a verified key stands for."""
        return Principal(
            user_id=self.user_id,
            tenant_id=self.tenant_id,
            permissions=self.permissions,
            roles=self.roles,
            data_scope=self.data_scope,
        )

    def authority(self) -> str:
        """Permissions, roles and data scope as sorted JSON, the form the stores keep."""
        return json.dumps(
            {
                "permissions": sorted(self.permissions),
                "roles": sorted(self.roles),
                "data_scope": dict(self.data_scope),
            },
            sort_keys=True,
        )

    @staticmethod
    def authority_of(text: str) -> dict[str, object]:
        """The fields `authority()` wrote, as keyword arguments of the record."""
        data = json.loads(text)
        return {
            "permissions": frozenset(data["permissions"]),
            "roles": frozenset(data["roles"]),
            "data_scope": data["data_scope"],
        }

    def usable_at(self, now: datetime) -> bool:
        """Not revoked, and not yet expired at `now` (a key is dead from `expires_at` on)."""
        return self.revoked_at is None and (self.expires_at is None or now < self.expires_at)


@dataclass(frozen=True, kw_only=True, slots=True)
class CreatedKey:
    """A new key: its record and the plaintext, which exists only here and is never stored."""

    key: str = field(repr=False)
    record: ApiKeyRecord


def draw_key(random_bytes: Callable[[int], bytes]) -> tuple[str, str]:
    """A new key id and secret from `random_bytes` (16 hex digits; 256 random bits).

    Raises RuntimeError when the source gives the wrong number of bytes.
    """
    return random_bytes(_ID_BYTES).hex(), _encode(random_bytes(_SECRET_BYTES))


def key_text(key_id: str, secret: str) -> str:
    """The key as a client presents it: `hrk_<key id>_<secret>`."""
    return f"{KEY_PREFIX}{key_id}_{secret}"


def parse_key(token: str) -> tuple[str, str] | None:
    """The key id and secret of a well-formed key; None for anything else."""
    match = _TOKEN.fullmatch(token) if len(token) <= _MAX_TOKEN else None
    if match is None:
        return None
    key_id, secret = match.groups()
    return key_id, secret


def matches(record: ApiKeyRecord, key_id: str, secret: str) -> bool:
    """Whether `secret` is the key's: its hash compared with the stored one in constant time."""
    presented = hash_secret(key_id, secret).encode()
    return hmac.compare_digest(presented, record.secret_hash.encode())


def valid_key_id(key_id: str) -> bool:
    """Whether `key_id` has the form of a key id."""
    return _KEY_ID.fullmatch(key_id) is not None


def _encode(raw: bytes) -> str:
    text = base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
    if not _SECRET.fullmatch(text):
        msg = "the random source gave the wrong number of bytes"
        raise RuntimeError(msg)
    return text
