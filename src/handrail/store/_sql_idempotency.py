"""Idempotency-Key records in the SQL stores: one row per (tenant, user, key).

`SqlIdempotency` is the part of `SqlStore` that keeps them: a claim is one transaction
(drop the key's expired row, insert unless one is there, read who holds it), finishing
and releasing are compare-and-sets on the claim, and a purge drops expired rows. The
table is defined here, on the shared metadata; migration 0012 creates it. Never
decides what a key means (that is `handrail.server.idempotency`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from handrail.errors import StoreError
from handrail.idempotency_keys import IdempotencyRecord, IdempotencyState
from handrail.store._rows import aware, utc
from handrail.store._sql_part import SqlPart
from handrail.store._tables import metadata

__all__ = ["SqlIdempotency", "idempotency_keys"]

_TIME = sa.DateTime(timezone=True)

idempotency_keys = sa.Table(
    "idempotency_keys",
    metadata,
    sa.Column("tenant_id", sa.String(256), primary_key=True),
    sa.Column("user_id", sa.String(256), primary_key=True),
    sa.Column("idempotency_key", sa.String(255), primary_key=True),
    sa.Column("fingerprint", sa.String(64), nullable=False),
    sa.Column("claim", sa.String(64), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("status", sa.Integer()),
    sa.Column("content_type", sa.String(256)),
    sa.Column("body", sa.LargeBinary()),
    sa.Column("created_at", _TIME, nullable=False),
    sa.Column("expires_at", _TIME, nullable=False),
    sa.Index("ix_idempotency_keys_expires", "expires_at"),
)

_I = idempotency_keys.c
_KEY = (
    (_I.tenant_id == sa.bindparam("k_tenant"))
    & (_I.user_id == sa.bindparam("k_user"))
    & (_I.idempotency_key == sa.bindparam("k_key"))
)
_SELECT = sa.select(idempotency_keys).where(_KEY)
_DROP_EXPIRED = idempotency_keys.delete().where(
    _KEY, _I.expires_at <= sa.bindparam("k_now", type_=_TIME)
)
_HELD = (_I.claim == sa.bindparam("k_claim")) & (_I.state == IdempotencyState.RUNNING.value)
_FINISH = (
    idempotency_keys.update()
    .where(_KEY, _HELD)
    .values(
        state=IdempotencyState.DONE.value,
        status=sa.bindparam("v_status", type_=_I.status.type),
        content_type=sa.bindparam("v_type", type_=_I.content_type.type),
        body=sa.bindparam("v_body", type_=_I.body.type),
        expires_at=sa.bindparam("v_expires", type_=_TIME),
    )
)
_RELEASE = idempotency_keys.delete().where(_KEY, _HELD)
_CLAIM_ATTEMPTS = 3


# SQLAlchemy keeps an INSERT's row count only when asked; it says who won.
_INSERT = {
    name: insert(idempotency_keys)
    .on_conflict_do_nothing()
    .execution_options(preserve_rowcount=True)
    for name, insert in (("postgresql", postgresql.insert), ("sqlite", sqlite.insert))
}


def _row(record: IdempotencyRecord) -> dict[str, Any]:
    return {
        "tenant_id": record.tenant_id,
        "user_id": record.user_id,
        "idempotency_key": record.key,
        "fingerprint": record.fingerprint,
        "claim": record.claim,
        "state": record.state.value,
        "status": record.status,
        "content_type": record.content_type,
        "body": record.body,
        "created_at": utc(record.created_at),
        "expires_at": utc(record.expires_at),
    }


def _record(row: sa.RowMapping) -> IdempotencyRecord:
    body = row["body"]
    return IdempotencyRecord(
        tenant_id=row["tenant_id"],
        user_id=row["user_id"],
        key=row["idempotency_key"],
        fingerprint=row["fingerprint"],
        claim=row["claim"],
        state=IdempotencyState(row["state"]),
        status=row["status"],
        content_type=row["content_type"],
        body=None if body is None else bytes(body),
        created_at=aware(row["created_at"]),
        expires_at=aware(row["expires_at"]),
    )


def _key_of(record: IdempotencyRecord) -> dict[str, Any]:
    return {"k_tenant": record.tenant_id, "k_user": record.user_id, "k_key": record.key}


class SqlIdempotency(SqlPart):
    """The Idempotency-Key methods of `SqlStore` (a mixin over its engine and helpers)."""

    def claim_idempotency_key(self, record: IdempotencyRecord) -> IdempotencyRecord | None:
        """DELETE the expired row, INSERT ... ON CONFLICT DO NOTHING, else SELECT the holder."""
        if record.state is not IdempotencyState.RUNNING:
            msg = "a key is claimed by a RUNNING record"
            raise ValueError(msg)
        row = _row(record)
        key = _key_of(record)
        insert = _INSERT[self._engine.dialect.name]

        def claim(c: sa.Connection) -> tuple[bool, IdempotencyRecord | None]:
            c.execute(_DROP_EXPIRED, {**key, "k_now": utc(record.created_at)})
            if c.execute(insert, row).rowcount == 1:
                return True, None
            held = c.execute(_SELECT, key).mappings().first()
            return False, None if held is None else _record(held)

        # A holder can vanish between the insert and the read (released, or dropped as
        # expired by a racing claim); then the claim is simply asked again.
        for _ in range(_CLAIM_ATTEMPTS):
            won, holder = self._write("idempotency claim", claim, None)
            if won or holder is not None:
                return holder
        raise StoreError("idempotency claim failed: the key kept changing hands")

    def finish_idempotency_key(self, record: IdempotencyRecord) -> bool:
        """Compare-and-set: one UPDATE ... WHERE key AND claim AND state RUNNING."""
        if record.state is not IdempotencyState.DONE:
            msg = "a key is finished with a DONE record"
            raise ValueError(msg)
        params = {
            **_key_of(record),
            "k_claim": record.claim,
            "v_status": record.status,
            "v_type": record.content_type,
            "v_body": record.body,
            "v_expires": utc(record.expires_at),
        }
        return self._write(
            "idempotency finish",
            lambda c: c.execute(_FINISH, params).rowcount == 1,
            None,
            single=True,
        )

    def release_idempotency_key(
        self, *, tenant_id: str, user_id: str, key: str, claim: str
    ) -> bool:
        """Compare-and-set: one DELETE ... WHERE key AND claim AND state RUNNING."""
        params = {"k_tenant": tenant_id, "k_user": user_id, "k_key": key, "k_claim": claim}
        return self._write(
            "idempotency release",
            lambda c: c.execute(_RELEASE, params).rowcount == 1,
            None,
            single=True,
        )

    def purge_idempotency_keys(self, *, before: datetime, limit: int = 1000) -> int:
        """DELETE the oldest expired rows (at most `limit`) in one statement."""
        oldest = (
            sa.select(_I.tenant_id, _I.user_id, _I.idempotency_key)
            .where(_I.expires_at <= utc(before))
            .order_by(_I.expires_at)
            .limit(max(0, limit))
        )
        statement = idempotency_keys.delete().where(
            sa.tuple_(_I.tenant_id, _I.user_id, _I.idempotency_key).in_(oldest)
        )
        return self._write(
            "idempotency purge",
            lambda c: c.execute(statement).rowcount,
            None,
            single=True,
        )
