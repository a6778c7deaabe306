"""Every Store keeps console people and sessions by the same contract; migration 0011 adds them.

A person is inserted once (the login and the tenant's user are unique) and reads back
field for field; changes are compare-and-set on the version with identity fixed;
failed logins count atomically and lock at the limit, also under racing failures. A
session is inserted once, touched only forward, revoked once, and purged after it ended.
"""

from __future__ import annotations

import dataclasses
import hashlib
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from _migrations import EmptyDatabase, migrate, revision, table_names
from _stores import Race
from handrail.people import PersonRecord, SessionRecord
from handrail.store import Store

T0 = datetime(2026, 1, 1, tzinfo=UTC)
HASH = "$argon2id$v=19$m=8,t=1,p=1$c29tZXNhbHQ$aGFzaA"
RACERS = 12


def _person(login: str = "alice@acme", **changes: Any) -> PersonRecord:
    base = PersonRecord(
        login=login,
        tenant_id="acme",
        user_id=login.split("@", maxsplit=1)[0],
        permissions=frozenset({"refund.approve"}),
        roles=frozenset({"clerk"}),
        data_scope={"region": "eu"},
        display_name="Alice A.",
        password_hash=HASH,
        created_at=T0,
        updated_at=T0,
    )
    return dataclasses.replace(base, **changes)


def _session(n: int = 1, **changes: Any) -> SessionRecord:
    base = SessionRecord(
        session_hash=hashlib.sha256(str(n).encode()).hexdigest(),
        login="alice@acme",
        tenant_id="acme",
        user_id="alice",
        created_at=T0,
        last_seen_at=T0,
        expires_at=T0 + timedelta(hours=8),
    )
    return dataclasses.replace(base, **changes)


def test_a_person_reads_back_as_stored_and_times_come_back_in_utc(store: Store) -> None:
    east = timezone(timedelta(hours=5))
    record = _person(created_at=T0.astimezone(east), locked_until=T0 + timedelta(minutes=1))
    assert store.insert_person(record)
    found = store.get_person("alice@acme")
    assert found == record
    assert found is not None
    assert found.created_at.utcoffset() == timedelta(0)
    assert found.principal().permissions == {"refund.approve"}
    assert found.principal().data_scope == {"region": "eu"}
    assert store.get_person("bob@acme") is None


def test_a_login_or_a_tenants_user_is_never_stored_twice(store: Store) -> None:
    assert store.insert_person(_person())
    assert not store.insert_person(_person(display_name="someone else"))
    assert not store.insert_person(_person("alice2@acme", user_id="alice"))
    assert store.insert_person(_person("alice@globex", tenant_id="globex", user_id="alice"))
    assert store.get_person("alice@acme") == _person()


def test_people_are_listed_per_tenant_by_login(store: Store) -> None:
    for login in ("carol@acme", "alice@acme", "bob@acme"):
        assert store.insert_person(_person(login))
    assert store.insert_person(_person("dave@globex", tenant_id="globex"))
    assert [p.login for p in store.list_people(tenant_id="acme")] == [
        "alice@acme",
        "bob@acme",
        "carol@acme",
    ]
    assert [p.login for p in store.list_people(tenant_id="acme", limit=1)] == ["alice@acme"]
    assert store.list_people(tenant_id="nobody") == []


def test_a_person_changes_by_compare_and_set_and_keeps_its_identity(store: Store) -> None:
    assert store.insert_person(_person())
    changed = _person(
        version=2,
        disabled_at=T0 + timedelta(hours=1),
        updated_at=T0 + timedelta(hours=1),
        permissions=frozenset(),
        created_at=T0 + timedelta(days=9),
    )
    assert store.replace_person(changed, expect_version=1)
    assert not store.replace_person(_person(version=2), expect_version=1)
    found = store.get_person("alice@acme")
    assert found == dataclasses.replace(changed, created_at=T0)
    assert not store.replace_person(_person("nobody@acme", version=2), expect_version=1)
    with pytest.raises(ValueError, match="version"):
        store.replace_person(_person(version=5), expect_version=2)


def test_failed_logins_count_and_lock_at_the_limit(store: Store) -> None:
    assert store.insert_person(_person())
    until = T0 + timedelta(minutes=15)
    counts = []
    for _ in range(3):
        found = store.record_failed_login("alice@acme", at=T0, max_failed=3, lock_until=until)
        assert found is not None
        counts.append((found.failed_logins, found.locked_until))
    assert counts == [(1, None), (2, None), (0, until)]
    assert store.get_person("alice@acme").version == 4  # type: ignore[union-attr]
    assert store.record_failed_login("x@acme", at=T0, max_failed=3, lock_until=until) is None


def test_racing_failed_logins_lose_no_count(store: Store, race: Race) -> None:
    assert store.insert_person(_person())
    until = T0 + timedelta(minutes=15)

    def fail(_: int) -> bool:
        found = store.record_failed_login(
            "alice@acme", at=T0, max_failed=RACERS * 10, lock_until=until
        )
        return found is not None

    assert all(race(RACERS, fail))
    found = store.get_person("alice@acme")
    assert found is not None
    assert found.failed_logins == RACERS
    assert found.locked_until is None


def test_a_session_reads_back_and_is_never_stored_twice(store: Store) -> None:
    assert store.insert_session(_session())
    assert not store.insert_session(_session(login="mallory@acme"))
    assert store.get_session(_session().session_hash) == _session()
    assert store.get_session(_session(2).session_hash) is None


def test_a_session_is_touched_only_forward_and_never_once_revoked(store: Store) -> None:
    assert store.insert_session(_session())
    key = _session().session_hash
    later = T0 + timedelta(minutes=5)
    assert store.touch_session(key, at=later)
    assert not store.touch_session(key, at=T0)
    assert store.get_session(key).last_seen_at == later  # type: ignore[union-attr]
    assert store.revoke_session(key, at=later)
    assert not store.revoke_session(key, at=later + timedelta(minutes=1))
    assert not store.touch_session(key, at=later + timedelta(minutes=2))
    assert store.get_session(key).revoked_at == later  # type: ignore[union-attr]
    assert not store.revoke_session(_session(9).session_hash, at=later)


def test_revoking_a_logins_sessions_leaves_others(store: Store) -> None:
    assert store.insert_session(_session(1))
    assert store.insert_session(_session(2))
    assert store.insert_session(_session(3, login="bob@acme", user_id="bob"))
    assert store.revoke_session(_session(2).session_hash, at=T0)
    assert store.revoke_sessions("alice@acme", at=T0 + timedelta(seconds=1)) == 1
    assert store.get_session(_session(3).session_hash).revoked_at is None  # type: ignore[union-attr]
    assert store.get_session(_session(2).session_hash).revoked_at == T0  # type: ignore[union-attr]


def test_ended_sessions_are_purged_and_live_ones_stay(store: Store) -> None:
    assert store.insert_session(_session(1, expires_at=T0 + timedelta(minutes=1)))
    assert store.insert_session(_session(2, revoked_at=T0))
    assert store.insert_session(_session(3))
    assert store.purge_sessions(before=T0 + timedelta(minutes=2)) == 2
    assert store.get_session(_session(3).session_hash) is not None
    assert store.get_session(_session(1).session_hash) is None


def test_opening_a_store_of_revision_0010_adds_the_people_tables(
    empty_database: EmptyDatabase,
) -> None:
    engine = empty_database.engine
    migrate(engine, "0010")
    assert "console_people" not in table_names(engine)
    with empty_database.reopened() as store:
        assert store.insert_person(_person())
        assert store.get_person("alice@acme") == _person()
        migrate(store.engine, "0010", down=True)
        assert {"console_people", "console_sessions"} & table_names(store.engine) == set()
        assert revision(store.engine) == ["0010"]
