"""Conversations in the SQL stores: one row per conversation, one row per turn.

`SqlConversations` is the part of `SqlStore` that keeps conversations: claims and
appends are compare-and-set statements, and an append writes its turn rows and the
new count in one transaction. Never reads what a turn's text means.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, TypeVar

import sqlalchemy as sa

from handrail.conversations import ConversationRecord, check_turns
from handrail.errors import StoreError
from handrail.store._rows import aware, utc
from handrail.store._sql_part import SqlPart
from handrail.store._tables import conversation_turns, conversations

__all__ = ["SqlConversations"]

T = TypeVar("T")

_C = conversations.c
_T = conversation_turns.c

_SELECT = sa.select(conversations).where(_C.conversation_id == sa.bindparam("k_id"))

_CLAIM = (
    conversations.update()
    .where(
        _C.conversation_id == sa.bindparam("k_id"),
        # IS NOT DISTINCT FROM: a NULL holder matches an expected None.
        _C.run_id.is_not_distinct_from(sa.bindparam("k_run", type_=_C.run_id.type)),
    )
    .values(
        run_id=sa.bindparam("v_run", type_=_C.run_id.type),
        updated_at=sa.bindparam("v_at", type_=_C.updated_at.type),
    )
)

_COUNT = (
    conversations.update()
    .where(_C.conversation_id == sa.bindparam("k_id"), _C.turns == sa.bindparam("k_turns"))
    .values(
        turns=sa.bindparam("v_turns"),
        updated_at=sa.bindparam("v_at", type_=_C.updated_at.type),
    )
)


def _row(record: ConversationRecord) -> dict[str, Any]:
    return {
        "conversation_id": record.conversation_id,
        "tenant_id": record.tenant_id,
        "user_id": record.user_id,
        "turns": 0,
        "run_id": record.run_id,
        "created_at": utc(record.created_at),
        "updated_at": utc(record.updated_at),
    }


def _record(row: sa.RowMapping) -> ConversationRecord:
    return ConversationRecord(
        conversation_id=row["conversation_id"],
        tenant_id=row["tenant_id"],
        user_id=row["user_id"],
        turns=row["turns"],
        run_id=row["run_id"],
        created_at=aware(row["created_at"]),
        updated_at=aware(row["updated_at"]),
    )


class SqlConversations(SqlPart):
    """The conversation methods of `SqlStore` (a mixin over its engine and helpers)."""

    def insert_conversation(self, record: ConversationRecord) -> bool:
        """Insert unless the id exists: INSERT ... ON CONFLICT DO NOTHING; no turns yet."""
        row = _row(record)
        return self._write(
            "conversation insert",
            lambda c: c.execute(self._sql.insert_conversation, row).rowcount == 1,
            None,
            single=True,
        )

    def get_conversation(self, conversation_id: str) -> ConversationRecord | None:
        """The conversation of an id."""

        def read(c: sa.Connection) -> ConversationRecord | None:
            row = c.execute(_SELECT, {"k_id": conversation_id}).mappings().first()
            return None if row is None else _record(row)

        return self._read("conversation read", read, None)

    def claim_conversation(
        self,
        conversation_id: str,
        *,
        run_id: str | None,
        expect_run_id: str | None,
        at: datetime,
    ) -> bool:
        """Compare-and-set the holder: one UPDATE ... WHERE id AND run_id."""
        params = {"k_id": conversation_id, "k_run": expect_run_id, "v_run": run_id, "v_at": utc(at)}
        return self._write(
            "conversation claim",
            lambda c: c.execute(_CLAIM, params).rowcount == 1,
            None,
            single=True,
        )

    def append_turns(
        self,
        conversation_id: str,
        turns: Sequence[str],
        *,
        expect_turns: int,
        at: datetime,
    ) -> bool:
        """Move the count from `expect_turns`, then insert the rows, in one transaction.

        The count's UPDATE locks the row (PostgreSQL) or the database (SQLite's BEGIN
        IMMEDIATE): a second append at the same count waits, then matches no row.
        """
        check_turns(turns)
        count = {
            "k_id": conversation_id,
            "k_turns": expect_turns,
            "v_turns": expect_turns + len(turns),
            "v_at": utc(at),
        }
        rows = [
            {
                "conversation_id": conversation_id,
                "seq": expect_turns + n,
                "data": text,
                "created_at": utc(at),
            }
            for n, text in enumerate(turns)
        ]
        try:
            with self._engine.connect() as connection:
                immediate = connection.execution_options(handrail_immediate=True)
                with immediate.begin():
                    if connection.execute(_COUNT, count).rowcount != 1:
                        return False
                    if rows:
                        connection.execute(conversation_turns.insert(), rows)
                    return True
        except sa.exc.SQLAlchemyError as exc:
            raise StoreError(f"conversation append failed: {type(exc).__name__}") from exc

    def get_turns(
        self,
        conversation_id: str,
        *,
        start: int = 0,
        stop: int | None = None,
    ) -> list[str]:
        """The turns numbered `start` up to `stop`, in order."""
        query = (
            sa.select(_T.data)
            .where(_T.conversation_id == conversation_id, _T.seq >= max(0, start))
            .order_by(_T.seq)
        )
        if stop is not None:
            query = query.where(_T.seq < max(0, stop))
        return self._read(
            "conversation turns read",
            lambda c: [str(text) for text in c.execute(query).scalars()],
            None,
        )

    def list_conversations(
        self,
        *,
        tenant_id: str,
        user_id: str | None = None,
        limit: int = 50,
    ) -> list[ConversationRecord]:
        """A tenant's (or one user's) conversations, most recently updated first."""
        query = (
            sa.select(conversations)
            .where(_C.tenant_id == tenant_id)
            .order_by(_C.updated_at.desc(), _C.conversation_id.desc())
            .limit(max(0, limit))
        )
        if user_id is not None:
            query = query.where(_C.user_id == user_id)
        return self._read(
            "conversations read",
            lambda c: [_record(r) for r in c.execute(query).mappings()],
            None,
        )
