"""The API key service: make, list, revoke and verify keys kept in a Store.

`create` draws a key and returns its plaintext once (the store keeps its hash);
`list` and `revoke` work within one tenant; `verify` turns a presented key into the
Principal it was made for, or None. Creating and revoking are audited; verifying is
not (it runs on every request; the gate audits what the principal then does). The
key format and record are `handrail.api_keys`'. Imports no part of the MCP SDK.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from handrail.api_keys import (
    ApiKeyRecord,
    CreatedKey,
    draw_key,
    hash_secret,
    key_text,
    matches,
    parse_key,
    valid_key_id,
)
from handrail.clock import Clock, SystemClock
from handrail.events import AuditSubject
from handrail.principal import Principal
from handrail.record.audit import Auditor
from handrail.store.base import point_reads_block

if TYPE_CHECKING:
    from handrail.events import AuditEvent
    from handrail.record.audit import AuditSink
    from handrail.store.base import Store

__all__ = ["ApiKeys"]


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
        self._verify_blocks = point_reads_block(store)

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
            key_id, secret = draw_key(self._random)
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
                return CreatedKey(key=key_text(key_id, secret), record=record)
        msg = "could not draw an unused API key id (is the random source broken?)"
        raise RuntimeError(msg)

    @property
    def verify_blocks(self) -> bool:
        """Whether `verify` may wait on the store; async callers then run it in a thread.

        It reads one key by its id, so it may wait unless the store's reads by key never
        wait long (`point_reads_block`: memory, SQLite).
        """
        return self._verify_blocks

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
        if not valid_key_id(key_id):
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
        (hashes compared in constant time), a revoked or an expired key. An unknown id
        answers sooner than a wrong secret; key ids are not secret (listings and the
        audit show them), so that tells an attacker nothing about any secret.
        """
        parsed = parse_key(token)
        if parsed is None:
            return None
        record = self._store.get_api_key(parsed[0])
        if record is None or not matches(record, *parsed):
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
