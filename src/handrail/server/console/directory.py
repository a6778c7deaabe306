"""The people directory: adding, listing, disabling, unlocking people and setting passwords.

What `handrail people ...` does, over a store, within one tenant: a login of another
tenant is "not found", exactly like a missing one. Disabling a person or setting their
password revokes their sessions at once (on every worker: sessions live in the store).
Every change is audited; a password is hashed here and never stored, logged or audited.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from handrail.clock import Clock, SystemClock
from handrail.events import AuditSubject
from handrail.people import Passwords, PersonRecord
from handrail.record.audit import Auditor

if TYPE_CHECKING:
    from handrail.events import AuditEvent
    from handrail.store.base import Store

__all__ = ["PeopleDirectory", "StoreAudit"]

_CAS_TRIES = 5


class StoreAudit:
    """An audit sink writing straight to the store: people's changes and logins are rare."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def emit(self, events: Sequence[AuditEvent]) -> None:
        """Append the events to the store's audit trail."""
        self._store.append_audit(events)


class PeopleDirectory:
    """The console's people in a store, changed by an operator (blocking calls)."""

    def __init__(
        self, store: Store, *, clock: Clock | None = None, passwords: Passwords | None = None
    ) -> None:
        self._store = store
        self._clock = clock or SystemClock()
        self._passwords = passwords or Passwords()
        self._auditor = Auditor(StoreAudit(store), self._clock)

    def add(
        self,
        login: str,
        *,
        tenant_id: str,
        user_id: str,
        password: str,
        permissions: frozenset[str] = frozenset(),
        roles: frozenset[str] = frozenset(),
        data_scope: Mapping[str, object] | None = None,
        display_name: str = "",
        actor: str | None = None,
    ) -> PersonRecord | None:
        """A new person, or None when the login or the tenant's user is taken.

        Raises ValueError for a malformed login or name, or a password too short or long.
        """
        now = self._clock.now()
        record = PersonRecord(
            login=login,
            tenant_id=tenant_id,
            user_id=user_id,
            permissions=permissions,
            roles=roles,
            data_scope=data_scope or {},
            display_name=display_name,
            password_hash=self._passwords.hash(password),
            created_at=now,
            updated_at=now,
        )
        if not self._store.insert_person(record):
            return None
        self._note(record, "add", actor, {"permissions": sorted(permissions)})
        return record

    def list(self, tenant_id: str, *, limit: int = 100) -> list[PersonRecord]:
        """The tenant's people, by login."""
        return self._store.list_people(tenant_id=tenant_id, limit=limit)

    def get(self, login: str, *, tenant_id: str) -> PersonRecord | None:
        """The tenant's person of a login, or None (also for another tenant's)."""
        found = self._store.get_person(login)
        return found if found is not None and found.tenant_id == tenant_id else None

    def disable(self, login: str, *, tenant_id: str, actor: str | None = None) -> bool:
        """Disable a person and end their sessions; False if not found or already disabled."""
        changed = self._change(
            login,
            tenant_id,
            lambda p, now: None if p.disabled_at else dataclasses.replace(p, disabled_at=now),
        )
        return self._after(changed, "disable", actor, revoke=True)

    def enable(self, login: str, *, tenant_id: str, actor: str | None = None) -> bool:
        """Enable a disabled person again; False if not found or not disabled."""
        changed = self._change(
            login,
            tenant_id,
            lambda p, _: dataclasses.replace(p, disabled_at=None) if p.disabled_at else None,
        )
        return self._after(changed, "enable", actor, revoke=False)

    def unlock(self, login: str, *, tenant_id: str, actor: str | None = None) -> bool:
        """Clear a person's lock and failed-login count; False if not found."""
        changed = self._change(
            login,
            tenant_id,
            lambda p, _: dataclasses.replace(p, locked_until=None, failed_logins=0),
        )
        return self._after(changed, "unlock", actor, revoke=False)

    def set_password(
        self, login: str, *, tenant_id: str, password: str, actor: str | None = None
    ) -> bool:
        """A new password (hashed here); ends the person's sessions. False if not found.

        Raises ValueError for a password too short or too long.
        """
        new_hash = self._passwords.hash(password)
        changed = self._change(
            login,
            tenant_id,
            lambda p, _: dataclasses.replace(
                p, password_hash=new_hash, locked_until=None, failed_logins=0
            ),
        )
        return self._after(changed, "password", actor, revoke=True)

    def _change(
        self,
        login: str,
        tenant_id: str,
        change: Callable[[PersonRecord, datetime], PersonRecord | None],
    ) -> PersonRecord | None:
        """Compare-and-set `change(person, now)` (None: nothing to do); the record written."""
        for _ in range(_CAS_TRIES):
            found = self.get(login, tenant_id=tenant_id)
            if found is None:
                return None
            now = self._clock.now()
            new = change(found, now)
            if new is None:
                return None
            new = dataclasses.replace(new, updated_at=now, version=found.version + 1)
            if self._store.replace_person(new, expect_version=found.version):
                return new
        msg = f"the person {login!r} kept changing; try again"
        raise RuntimeError(msg)

    def _after(
        self, changed: PersonRecord | None, stage: str, actor: str | None, *, revoke: bool
    ) -> bool:
        if changed is None:
            return False
        ended = self._store.revoke_sessions(changed.login, at=self._clock.now()) if revoke else 0
        self._note(changed, stage, actor, {"sessions_ended": ended or None})
        return True

    def _note(
        self, record: PersonRecord, stage: str, actor: str | None, facts: Mapping[str, object]
    ) -> None:
        self._auditor.note(
            kind="console_person",
            stage=stage,
            decision="done",
            subject=AuditSubject(user_id=actor or record.user_id, tenant_id=record.tenant_id),
            facts={"login": record.login, "for_user": record.user_id, **facts},
        )
