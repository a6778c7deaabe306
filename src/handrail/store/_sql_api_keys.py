"""API keys in the SQL stores: one row per key, its secret kept only as a hash.

`SqlApiKeys` is the part of `SqlStore` that keeps keys: an insert that never
overwrites, reads by id and by tenant, and revocation as one compare-and-set UPDATE
bound to the tenant. Never sees a key's secret and never decides whether a key is
usable (that is `handrail.api_keys`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from handrail.api_keys import ApiKeyRecord
from handrail.store._rows import aware, maybe_aware, utc
from handrail.store._sql_part import SqlPart
from handrail.store._tables import api_keys

__all__ = ["SqlApiKeys", "api_key_record"]

_K = api_keys.c

_SELECT = sa.select(api_keys).where(_K.key_id == sa.bindparam("k_id"))

_REVOKE = (
    api_keys.update()
    .where(
        _K.key_id == sa.bindparam("k_id"),
        _K.tenant_id == sa.bindparam("k_tenant"),
        _K.revoked_at.is_(None),
    )
    .values(revoked_at=sa.bindparam("v_at", type_=_K.revoked_at.type))
)


def _row(record: ApiKeyRecord) -> dict[str, Any]:
    return {
        "key_id": record.key_id,
        "tenant_id": record.tenant_id,
        "user_id": record.user_id,
        "label": record.label,
        "authority": record.authority(),
        "secret_hash": record.secret_hash,
        "created_at": utc(record.created_at),
        "expires_at": utc(record.expires_at),
        "revoked_at": utc(record.revoked_at),
    }


def api_key_record(row: sa.RowMapping | Mapping[str, Any]) -> ApiKeyRecord:
    """The record of a row of `api_keys`, its times made aware (UTC)."""
    return ApiKeyRecord(
        key_id=row["key_id"],
        tenant_id=row["tenant_id"],
        user_id=row["user_id"],
        label=row["label"],
        secret_hash=row["secret_hash"],
        created_at=aware(row["created_at"]),
        expires_at=maybe_aware(row["expires_at"]),
        revoked_at=maybe_aware(row["revoked_at"]),
        **ApiKeyRecord.authority_of(row["authority"]),  # type: ignore[arg-type]
    )


class SqlApiKeys(SqlPart):
    """The API key methods of `SqlStore` (a mixin over its engine and helpers)."""

    def insert_api_key(self, record: ApiKeyRecord) -> bool:
        """Insert unless the id exists: INSERT ... ON CONFLICT DO NOTHING."""
        row = _row(record)
        return self._write(
            "API key insert",
            lambda c: c.execute(self._sql.insert_api_key, row).rowcount == 1,
            None,
            single=True,
        )

    def get_api_key(self, key_id: str) -> ApiKeyRecord | None:
        """The key of an id."""

        def read(c: sa.Connection) -> ApiKeyRecord | None:
            row = c.execute(_SELECT, {"k_id": key_id}).mappings().first()
            return None if row is None else api_key_record(row)

        return self._read("API key read", read, None)

    def list_api_keys(
        self,
        *,
        tenant_id: str,
        user_id: str | None = None,
        limit: int = 100,
    ) -> list[ApiKeyRecord]:
        """A tenant's (or one user's) keys, newest first."""
        query = (
            sa.select(api_keys)
            .where(_K.tenant_id == tenant_id)
            .order_by(_K.created_at.desc(), _K.key_id.desc())
            .limit(max(0, limit))
        )
        if user_id is not None:
            query = query.where(_K.user_id == user_id)
        return self._read(
            "API keys read",
            lambda c: [api_key_record(r) for r in c.execute(query).mappings()],
            None,
        )

    def revoke_api_key(self, key_id: str, *, tenant_id: str, at: datetime) -> bool:
        """Compare-and-set: one UPDATE ... WHERE id AND tenant AND not yet revoked."""
        params = {"k_id": key_id, "k_tenant": tenant_id, "v_at": utc(at)}
        return self._write(
            "API key revoke",
            lambda c: c.execute(_REVOKE, params).rowcount == 1,
            None,
            single=True,
        )
