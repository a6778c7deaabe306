"""People and console sessions in `MemoryStore`: the same contract as `SqlPeople`.

A person is unique by login and by tenant's user; a change is a compare-and-set on
its version; a failed login counts and locks under the store's lock. Never hashes a
password and never decides whether a session proves anyone.
"""

from __future__ import annotations

import dataclasses
import threading
from datetime import UTC, datetime

from handrail.people import PersonRecord, SessionRecord

__all__ = ["MemoryPeople"]

_FIXED = ("login", "tenant_id", "user_id", "created_at")


def _utc(value: datetime | None) -> datetime | None:
    return None if value is None else value.astimezone(UTC)


def _person(record: PersonRecord) -> PersonRecord:
    return dataclasses.replace(
        record,
        created_at=record.created_at.astimezone(UTC),
        updated_at=record.updated_at.astimezone(UTC),
        disabled_at=_utc(record.disabled_at),
        locked_until=_utc(record.locked_until),
    )


class MemoryPeople:
    """People and console sessions: `MemoryStore` methods."""

    _lock: threading.Lock
    _people: dict[str, PersonRecord]
    _sessions: dict[str, SessionRecord]

    def _init_people(self) -> None:
        """Called by `MemoryStore.__init__`: this part's empty state."""
        self._people = {}
        self._sessions = {}

    def insert_person(self, record: PersonRecord) -> bool:
        """Store a new person unless the login or the tenant's user is taken."""
        with self._lock:
            taken = record.login in self._people or any(
                (p.tenant_id, p.user_id) == (record.tenant_id, record.user_id)
                for p in self._people.values()
            )
            if taken:
                return False
            self._people[record.login] = _person(record)
            return True

    def get_person(self, login: str) -> PersonRecord | None:
        """The person of a login."""
        with self._lock:
            return self._people.get(login)

    def list_people(self, *, tenant_id: str, limit: int = 100) -> list[PersonRecord]:
        """A tenant's people, ordered by login."""
        with self._lock:
            found = [p for p in self._people.values() if p.tenant_id == tenant_id]
        found.sort(key=lambda p: p.login)
        return found[: max(0, limit)]

    def replace_person(self, record: PersonRecord, *, expect_version: int) -> bool:
        """Compare-and-set a person on its stored version; identity fields stay."""
        if record.version != expect_version + 1:
            msg = "a replaced person's version is expect_version + 1"
            raise ValueError(msg)
        with self._lock:
            found = self._people.get(record.login)
            if found is None or found.version != expect_version:
                return False
            fixed = {name: getattr(found, name) for name in _FIXED}
            self._people[record.login] = _person(dataclasses.replace(record, **fixed))
            return True

    def record_failed_login(
        self, login: str, *, at: datetime, max_failed: int, lock_until: datetime
    ) -> PersonRecord | None:
        """Count one failure and lock at the limit, under the lock."""
        with self._lock:
            found = self._people.get(login)
            if found is None:
                return None
            count = found.failed_logins + 1
            locked = count >= max_failed
            changed = dataclasses.replace(
                found,
                failed_logins=0 if locked else count,
                locked_until=lock_until if locked else found.locked_until,
                updated_at=at,
                version=found.version + 1,
            )
            self._people[login] = _person(changed)
            return self._people[login]

    def insert_session(self, record: SessionRecord) -> bool:
        """Store a new session unless its hash exists."""
        with self._lock:
            if record.session_hash in self._sessions:
                return False
            self._sessions[record.session_hash] = record
            return True

    def get_session(self, session_hash: str) -> SessionRecord | None:
        """The session of a hash."""
        with self._lock:
            return self._sessions.get(session_hash)

    def touch_session(self, session_hash: str, *, at: datetime) -> bool:
        """Move an unrevoked session's last use forward to `at`."""
        with self._lock:
            found = self._sessions.get(session_hash)
            if found is None or found.revoked_at is not None or found.last_seen_at >= at:
                return False
            self._sessions[session_hash] = dataclasses.replace(found, last_seen_at=at)
            return True

    def revoke_session(self, session_hash: str, *, at: datetime) -> bool:
        """Revoke one session unless it is already."""
        with self._lock:
            found = self._sessions.get(session_hash)
            if found is None or found.revoked_at is not None:
                return False
            self._sessions[session_hash] = dataclasses.replace(found, revoked_at=at)
            return True

    def revoke_sessions(self, login: str, *, at: datetime) -> int:
        """Revoke every unrevoked session of a login."""
        with self._lock:
            found = [
                s for s in self._sessions.values() if s.login == login and s.revoked_at is None
            ]
            for session in found:
                self._sessions[session.session_hash] = dataclasses.replace(session, revoked_at=at)
        return len(found)

    def purge_sessions(self, *, before: datetime) -> int:
        """Delete the sessions that expired or were revoked before `before`."""
        with self._lock:
            ended = [
                h
                for h, s in self._sessions.items()
                if s.expires_at < before or (s.revoked_at is not None and s.revoked_at < before)
            ]
            for key in ended:
                del self._sessions[key]
        return len(ended)
