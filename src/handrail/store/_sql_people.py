"""People and console sessions in the SQL stores: the tables and the `SqlStore` methods.

A person is one row keyed by login (unique, and one login per tenant's user); a change
is a compare-and-set on its version, a failed login one atomic transaction that counts
and, at the limit, locks. A session is one row keyed by the hash of its cookie's
secret. Never hashes a password and never decides whether a session proves anyone
(that is `handrail.server.console.people`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa

from handrail.people import PersonRecord, SessionRecord
from handrail.store._rows import aware, maybe_aware, utc
from handrail.store._sql_part import SqlPart
from handrail.store._statements import _ignoring_conflict
from handrail.store._tables import metadata

__all__ = ["SqlPeople", "console_people", "console_sessions"]

_TIME = sa.DateTime(timezone=True)

console_people = sa.Table(
    "console_people",
    metadata,
    sa.Column("login", sa.String(256), primary_key=True),
    sa.Column("tenant_id", sa.String(256), nullable=False),
    sa.Column("user_id", sa.String(256), nullable=False),
    sa.Column("principal", sa.Text(), nullable=False),
    sa.Column("display_name", sa.String(256), nullable=False),
    sa.Column("password_hash", sa.String(512), nullable=False),
    sa.Column("disabled_at", _TIME),
    sa.Column("failed_logins", sa.Integer(), nullable=False),
    sa.Column("locked_until", _TIME),
    sa.Column("created_at", _TIME, nullable=False),
    sa.Column("updated_at", _TIME, nullable=False),
    sa.Column("version", sa.Integer(), nullable=False),
    sa.UniqueConstraint("tenant_id", "user_id", name="uq_console_people_tenant_user"),
)

console_sessions = sa.Table(
    "console_sessions",
    metadata,
    sa.Column("session_hash", sa.String(64), primary_key=True),
    sa.Column("login", sa.String(256), nullable=False),
    sa.Column("tenant_id", sa.String(256), nullable=False),
    sa.Column("user_id", sa.String(256), nullable=False),
    sa.Column("created_at", _TIME, nullable=False),
    sa.Column("last_seen_at", _TIME, nullable=False),
    sa.Column("expires_at", _TIME, nullable=False),
    sa.Column("revoked_at", _TIME),
    sa.Index("ix_console_sessions_login", "login"),
    sa.Index("ix_console_sessions_expires", "expires_at"),
)

_P = console_people.c
_S = console_sessions.c
_MUTABLE = ("principal", "display_name", "password_hash", "disabled_at", "failed_logins")
_MUTABLE_TIMES = ("locked_until", "updated_at")


def _person_row(record: PersonRecord) -> dict[str, Any]:
    return {
        "login": record.login,
        "tenant_id": record.tenant_id,
        "user_id": record.user_id,
        "principal": record.principal().snapshot(),
        "display_name": record.display_name,
        "password_hash": record.password_hash,
        "disabled_at": utc(record.disabled_at),
        "failed_logins": record.failed_logins,
        "locked_until": utc(record.locked_until),
        "created_at": utc(record.created_at),
        "updated_at": utc(record.updated_at),
        "version": record.version,
    }


def _person(row: sa.RowMapping) -> PersonRecord:
    return PersonRecord(
        login=row["login"],
        tenant_id=row["tenant_id"],
        user_id=row["user_id"],
        display_name=row["display_name"],
        password_hash=row["password_hash"],
        disabled_at=maybe_aware(row["disabled_at"]),
        failed_logins=row["failed_logins"],
        locked_until=maybe_aware(row["locked_until"]),
        created_at=aware(row["created_at"]),
        updated_at=aware(row["updated_at"]),
        version=row["version"],
        **PersonRecord.authority_of(row["principal"]),  # type: ignore[arg-type]
    )


def _session_row(record: SessionRecord) -> dict[str, Any]:
    return {
        "session_hash": record.session_hash,
        "login": record.login,
        "tenant_id": record.tenant_id,
        "user_id": record.user_id,
        "created_at": utc(record.created_at),
        "last_seen_at": utc(record.last_seen_at),
        "expires_at": utc(record.expires_at),
        "revoked_at": utc(record.revoked_at),
    }


def _session(row: sa.RowMapping) -> SessionRecord:
    return SessionRecord(
        session_hash=row["session_hash"],
        login=row["login"],
        tenant_id=row["tenant_id"],
        user_id=row["user_id"],
        created_at=aware(row["created_at"]),
        last_seen_at=aware(row["last_seen_at"]),
        expires_at=aware(row["expires_at"]),
        revoked_at=maybe_aware(row["revoked_at"]),
    )


_SELECT_PERSON = sa.select(console_people).where(_P.login == sa.bindparam("k_login"))
_SELECT_SESSION = sa.select(console_sessions).where(
    _S.session_hash == sa.bindparam("k_hash"),
)
_COUNT_FAILURE = (
    console_people.update()
    .where(_P.login == sa.bindparam("k_login"))
    .values(
        failed_logins=_P.failed_logins + 1,
        version=_P.version + 1,
        updated_at=sa.bindparam("v_at", type_=_TIME),
    )
)
_LOCK = (
    console_people.update()
    .where(_P.login == sa.bindparam("k_login"), _P.failed_logins >= sa.bindparam("k_max"))
    .values(failed_logins=0, locked_until=sa.bindparam("v_until", type_=_TIME))
)
_REPLACE_PERSON = (
    console_people.update()
    .where(_P.login == sa.bindparam("k_login"), _P.version == sa.bindparam("k_version"))
    .values(
        **{name: sa.bindparam(f"v_{name}") for name in (*_MUTABLE, "version")},
        **{name: sa.bindparam(f"v_{name}", type_=_TIME) for name in _MUTABLE_TIMES},
    )
)
_TOUCH = (
    console_sessions.update()
    .where(
        _S.session_hash == sa.bindparam("k_hash"),
        _S.revoked_at.is_(None),
        _S.last_seen_at < sa.bindparam("k_at", type_=_TIME),
    )
    .values(last_seen_at=sa.bindparam("v_at", type_=_TIME))
)
_REVOKE = console_sessions.update().values(revoked_at=sa.bindparam("v_at", type_=_TIME))


class SqlPeople(SqlPart):
    """People and console sessions: the `SqlStore` methods (a mixin over its engine)."""

    def insert_person(self, record: PersonRecord) -> bool:
        """INSERT ... ON CONFLICT DO NOTHING (the login and the tenant's user are unique)."""
        row = _person_row(record)
        statement = _ignoring_conflict(self._engine.dialect.name, console_people)
        return self._write(
            "person insert",
            lambda c: c.execute(statement, row).rowcount == 1,
            None,
            single=True,
        )

    def get_person(self, login: str) -> PersonRecord | None:
        """The person of a login."""

        def read(c: sa.Connection) -> PersonRecord | None:
            row = c.execute(_SELECT_PERSON, {"k_login": login}).mappings().first()
            return None if row is None else _person(row)

        return self._read("person read", read, None)

    def list_people(self, *, tenant_id: str, limit: int = 100) -> list[PersonRecord]:
        """A tenant's people, ordered by login."""
        query = (
            sa.select(console_people)
            .where(_P.tenant_id == tenant_id)
            .order_by(_P.login)
            .limit(max(0, limit))
        )
        return self._read(
            "people read", lambda c: [_person(r) for r in c.execute(query).mappings()], None
        )

    def replace_person(self, record: PersonRecord, *, expect_version: int) -> bool:
        """Compare-and-set: one UPDATE ... WHERE login AND version."""
        if record.version != expect_version + 1:
            msg = "a replaced person's version is expect_version + 1"
            raise ValueError(msg)
        row = _person_row(record)
        params = {f"v_{name}": row[name] for name in (*_MUTABLE, *_MUTABLE_TIMES, "version")}
        params |= {"k_login": record.login, "k_version": expect_version}
        return self._write(
            "person replace",
            lambda c: c.execute(_REPLACE_PERSON, params).rowcount == 1,
            None,
            single=True,
        )

    def record_failed_login(
        self, login: str, *, at: datetime, max_failed: int, lock_until: datetime
    ) -> PersonRecord | None:
        """Count, lock at the limit and read back, in one transaction."""

        def work(c: sa.Connection) -> PersonRecord | None:
            if c.execute(_COUNT_FAILURE, {"k_login": login, "v_at": utc(at)}).rowcount != 1:
                return None
            lock = {"k_login": login, "k_max": max_failed, "v_until": utc(lock_until)}
            c.execute(_LOCK, lock)
            row = c.execute(_SELECT_PERSON, {"k_login": login}).mappings().first()
            return None if row is None else _person(row)

        return self._write("failed login count", work, None)

    def insert_session(self, record: SessionRecord) -> bool:
        """INSERT ... ON CONFLICT DO NOTHING."""
        row = _session_row(record)
        statement = _ignoring_conflict(self._engine.dialect.name, console_sessions)
        return self._write(
            "session insert",
            lambda c: c.execute(statement, row).rowcount == 1,
            None,
            single=True,
        )

    def get_session(self, session_hash: str) -> SessionRecord | None:
        """The session of a hash."""

        def read(c: sa.Connection) -> SessionRecord | None:
            row = c.execute(_SELECT_SESSION, {"k_hash": session_hash}).mappings().first()
            return None if row is None else _session(row)

        return self._read("session read", read, None)

    def touch_session(self, session_hash: str, *, at: datetime) -> bool:
        """UPDATE ... WHERE hash AND not revoked AND last seen before `at`."""
        params = {"k_hash": session_hash, "k_at": utc(at), "v_at": utc(at)}
        return self._write(
            "session touch",
            lambda c: c.execute(_TOUCH, params).rowcount == 1,
            None,
            single=True,
        )

    def revoke_session(self, session_hash: str, *, at: datetime) -> bool:
        """UPDATE ... WHERE hash AND not yet revoked."""
        statement = _REVOKE.where(_S.session_hash == session_hash, _S.revoked_at.is_(None))
        return self._write(
            "session revoke",
            lambda c: c.execute(statement, {"v_at": utc(at)}).rowcount == 1,
            None,
            single=True,
        )

    def revoke_sessions(self, login: str, *, at: datetime) -> int:
        """UPDATE ... WHERE login AND not yet revoked."""
        statement = _REVOKE.where(_S.login == login, _S.revoked_at.is_(None))
        return self._write(
            "sessions revoke",
            lambda c: int(c.execute(statement, {"v_at": utc(at)}).rowcount),
            None,
            single=True,
        )

    def purge_sessions(self, *, before: datetime) -> int:
        """DELETE the sessions that expired or were revoked before `before`."""
        cutoff = utc(before)
        statement = console_sessions.delete().where(
            sa.or_(_S.expires_at < cutoff, _S.revoked_at < cutoff)
        )
        return self._write(
            "sessions purge", lambda c: int(c.execute(statement).rowcount), None, single=True
        )
