"""API keys: bearer secrets bound to a principal, shown once, kept only as a hash.

Owns the key format, the stored record and the `ApiKeys` service over a Store:
`create` draws a key and returns its plaintext once; `list` and `revoke` work within
one tenant; `verify` turns a presented key into the Principal it was made for, or None.
A key reads `hrk_<key id>_<secret>`: the prefix makes a leaked key recognisable to
secret scanners, the key id finds the record without a scan, the secret is compared
as a hash in constant time. Creating and revoking are audited; verifying is not (it
runs on every request; the gate audits what the principal then does).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import TYPE_CHECKING

from handrail.clock import Clock, SystemClock
from handrail.events import AuditSubject
from handrail.principal import Principal
from handrail.record.audit import Auditor

if TYPE_CHECKING:
    from handrail.events import AuditEvent
    from handrail.record.audit import AuditSink
    from handrail.store.base import Store

__all__ = ["KEY_PREFIX", "ApiKeyRecord", "ApiKeys", "CreatedKey", "hash_secret"]

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


class _StoreAudit:
    # Key events are rare: written straight to the store, no batching needed.
    def __init__(self, store: Store) -> None:
        self._store = store

    def emit(self, events: Sequence[AuditEvent]) -> None:
        self._store.append_audit(events)


class ApiKeys:
    """Make, list, revoke and verify API keys kept in a Store.

    `clock` decides expiry; `random_bytes` draws ids and secrets (a test passes its
    own); `audit` receives the created and revoked events (by default they go to the
    store; None records nothing).
    """

    def __init__(
        self,
        store: Store,
        *,
        clock: Clock | None = None,
        audit: AuditSink | bool | None = True,
        random_bytes: Callable[[int], bytes] = secrets.token_bytes,
    ) -> None:
        self._store = store
        self._clock = clock or SystemClock()
        sink = _StoreAudit(store) if audit is True else (audit or None)
        self._auditor = Auditor(sink, self._clock)
        self._random = random_bytes

    @property
    def clock(self) -> Clock:
        """The clock that decides expiry."""
        return self._clock

    def create(
        self,
        principal: Principal,
        *,
        label: str = "",
        expires_at: datetime | None = None,
        actor: str | None = None,
    ) -> CreatedKey:
        """A new key for `principal`; the plaintext is in the answer and nowhere else.

        `actor` names who made it, for the audit (default: the principal's user).
        Raises ValueError for an expiry that is naive or not in the future.
        """
        now = self._clock.now()
        if expires_at is not None and (expires_at.tzinfo is None or expires_at <= now):
            msg = "an API key's expiry must be a timezone-aware time in the future"
            raise ValueError(msg)
        for _ in range(3):
            key_id = self._random(_ID_BYTES).hex()
            secret = _encode(self._random(_SECRET_BYTES))
            record = ApiKeyRecord(
                key_id=key_id,
                tenant_id=principal.tenant_id,
                user_id=principal.user_id,
                permissions=principal.permissions,
                roles=principal.roles,
                data_scope=principal.data_scope,
                label=label,
                secret_hash=hash_secret(key_id, secret),
                created_at=now,
                expires_at=expires_at,
            )
            if self._store.insert_api_key(record):
                self._note(record, "create", "created", actor)
                return CreatedKey(key=f"{KEY_PREFIX}{key_id}_{secret}", record=record)
        msg = "could not draw an unused API key id (is the random source broken?)"
        raise RuntimeError(msg)

    def list(
        self, tenant_id: str, *, user_id: str | None = None, limit: int = 100
    ) -> list[ApiKeyRecord]:
        """A tenant's (or one user's) keys, newest first; revoked and expired ones too."""
        return self._store.list_api_keys(tenant_id=tenant_id, user_id=user_id, limit=limit)

    def revoke(self, key_id: str, *, tenant_id: str, actor: str | None = None) -> bool:
        """Revoke a key of this tenant, audited.

        False, and nothing changes, for an unknown key, another tenant's, or one already
        revoked.
        """
        if not _KEY_ID.fullmatch(key_id):
            return False
        at = self._clock.now()
        if not self._store.revoke_api_key(key_id, tenant_id=tenant_id, at=at):
            return False
        record = self._store.get_api_key(key_id)
        if record is not None:
            self._note(record, "revoke", "revoked", actor)
        return True

    def verify(self, token: str) -> Principal | None:
        """The principal of a usable key, or None.

        None for a malformed token, an unknown key id, a secret that does not match
        (hashes compared in constant time), a revoked or an expired key.
        """
        match = _TOKEN.fullmatch(token) if len(token) <= _MAX_TOKEN else None
        if match is None:
            return None
        key_id, secret = match.groups()
        record = self._store.get_api_key(key_id)
        if record is None:
            return None
        presented = hash_secret(key_id, secret)
        if not hmac.compare_digest(presented.encode(), record.secret_hash.encode()):
            return None
        if not record.usable_at(self._clock.now()):
            return None
        return record.principal()

    def _note(self, record: ApiKeyRecord, stage: str, decision: str, actor: str | None) -> None:
        self._auditor.note(
            kind="api_key",
            stage=stage,
            decision=decision,
            subject=AuditSubject(user_id=actor or record.user_id, tenant_id=record.tenant_id),
            facts={
                "key_id": record.key_id,
                "for_user": record.user_id,
                "label": record.label or None,
                "permissions": sorted(record.permissions),
                "expires_at": None if record.expires_at is None else record.expires_at.isoformat(),
            },
        )


def _encode(raw: bytes) -> str:
    text = base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
    if not _SECRET.fullmatch(text):
        msg = "the random source gave the wrong number of bytes"
        raise RuntimeError(msg)
    return text
