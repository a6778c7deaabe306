"""State shared by the workers of one service in `SqlStore`: guard counts, handles, run leases.

`SqlShared` keeps each conversation's denial count (an atomic upsert that returns the
new count, so exactly one denial sees a limit reached, across processes) with the
targets denied in it, the secret handles handed out per tenant (names only), and the
lease of a RUNNING run: renewed by its owner, taken over by compare-and-set once it
ran out. Never decides what a count or a lease means: the guard and the loop do.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TypeVar

import sqlalchemy as sa

from handrail.errors import StoreError
from handrail.runs import RunState, check_lease_owner
from handrail.sharing import MAX_GUARD_TARGETS, GuardRecord, HandedSecret
from handrail.store._rows import aware, utc
from handrail.store._sql_part import SqlPart
from handrail.store._statements import _dialect_insert, _ignoring_conflict
from handrail.store._tables import metadata, runs

__all__ = ["SqlShared", "guard_conversations", "guard_targets", "secret_handles"]

T = TypeVar("T")

_TIME = sa.DateTime(timezone=True)

guard_conversations = sa.Table(
    "guard_conversations",
    metadata,
    sa.Column("tenant_id", sa.String(256), primary_key=True),
    sa.Column("conversation", sa.String(256), primary_key=True),
    sa.Column("denials", sa.Integer(), nullable=False),
    sa.Column("updated_at", _TIME, nullable=False),
    sa.Index("ix_guard_conversations_updated", "updated_at"),
)

guard_targets = sa.Table(
    "guard_targets",
    metadata,
    sa.Column("tenant_id", sa.String(256), primary_key=True),
    sa.Column("conversation", sa.String(256), primary_key=True),
    sa.Column("target", sa.String(512), primary_key=True),
    sa.Column("tool", sa.String(256), primary_key=True),
)

secret_handles = sa.Table(
    "secret_handles",
    metadata,
    sa.Column("tenant_id", sa.String(256), primary_key=True),
    sa.Column("handle", sa.String(128), primary_key=True),
    sa.Column("first_at", _TIME, nullable=False),
)

_C = guard_conversations.c
_T = guard_targets.c
_H = secret_handles.c
_R = runs.c
_RUNNING = RunState.RUNNING.value


def _targets(c: sa.Connection, tenant_id: str, conversation: str) -> dict[str, frozenset[str]]:
    rows = c.execute(
        sa.select(_T.target, _T.tool).where(
            _T.tenant_id == tenant_id, _T.conversation == conversation
        )
    )
    found: dict[str, set[str]] = {}
    for target, tool in rows:
        found.setdefault(str(target), set()).add(str(tool))
    return {target: frozenset(tools) for target, tools in found.items()}


class SqlShared(SqlPart):
    """State shared by the workers of one service: the `SqlStore` methods."""

    # --- the conversation guard ---------------------------------------------------------------

    def guard_state(self, tenant_id: str, conversation: str) -> GuardRecord:
        """The conversation's count and denied targets; an empty record if never denied."""
        count = sa.select(_C.denials).where(
            _C.tenant_id == tenant_id, _C.conversation == conversation
        )

        def read(c: sa.Connection) -> GuardRecord:
            denials = c.execute(count).scalar()
            if denials is None:
                return GuardRecord()
            return GuardRecord(denials=int(denials), targets=_targets(c, tenant_id, conversation))

        return self._read("guard read", read, None)

    def add_guard_denial(
        self,
        tenant_id: str,
        conversation: str,
        *,
        tool: str,
        target: str | None,
        at: datetime,
    ) -> GuardRecord:
        """One transaction: INSERT ... ON CONFLICT DO UPDATE SET denials = denials + 1 RETURNING.

        The upsert locks the conversation's row until the commit, so concurrent denials
        of one conversation also add their targets one after the other.
        """
        insert = _dialect_insert(self._engine.dialect.name)(guard_conversations).values(
            tenant_id=tenant_id, conversation=conversation, denials=1, updated_at=utc(at)
        )
        upsert = insert.on_conflict_do_update(
            index_elements=[_C.tenant_id, _C.conversation],
            set_={"denials": _C.denials + 1, "updated_at": insert.excluded.updated_at},
        ).returning(_C.denials)

        def work(c: sa.Connection) -> GuardRecord:
            denials = int(c.execute(upsert).scalar_one())
            targets = _targets(c, tenant_id, conversation)
            if target is not None and (target in targets or len(targets) < MAX_GUARD_TARGETS):
                insert_target = _ignoring_conflict(self._engine.dialect.name, guard_targets)
                c.execute(
                    insert_target.values(
                        tenant_id=tenant_id, conversation=conversation, target=target, tool=tool
                    )
                )
                targets[target] = targets.get(target, frozenset()) | {tool}
            return GuardRecord(denials=denials, targets=targets)

        return self._immediately("guard denial", work)

    def purge_guard_states(self, *, before: datetime) -> int:
        """Forget conversations last denied before `before` (their count and targets)."""
        stale = sa.select(_C.tenant_id, _C.conversation).where(_C.updated_at < utc(before))

        def work(c: sa.Connection) -> int:
            keys = [tuple(row) for row in c.execute(stale)]
            for tenant_id, conversation in keys:
                c.execute(
                    guard_targets.delete().where(
                        _T.tenant_id == tenant_id, _T.conversation == conversation
                    )
                )
            return int(
                c.execute(guard_conversations.delete().where(_C.updated_at < utc(before))).rowcount
            )

        return self._immediately("guard purge", work)

    # --- secret handles handed out ------------------------------------------------------------

    def note_secret_handle(self, tenant_id: str, handle: str, *, at: datetime) -> bool:
        """Insert unless noted before (ON CONFLICT DO NOTHING); True for the first note."""
        insert = _ignoring_conflict(self._engine.dialect.name, secret_handles).values(
            tenant_id=tenant_id, handle=handle, first_at=utc(at)
        )
        return self._write(
            "secret handle note", lambda c: c.execute(insert).rowcount == 1, None, single=True
        )

    def list_secret_handles(self) -> list[HandedSecret]:
        """Every handle handed out, oldest first (then by tenant and handle)."""
        query = sa.select(secret_handles).order_by(_H.first_at, _H.tenant_id, _H.handle)
        return self._read(
            "secret handles read",
            lambda c: [
                HandedSecret(
                    tenant_id=r["tenant_id"], handle=r["handle"], first_at=aware(r["first_at"])
                )
                for r in c.execute(query).mappings()
            ],
            None,
        )

    # --- run leases ---------------------------------------------------------------------------

    def renew_run_lease(self, run_id: str, *, owner: str, until: datetime) -> bool:
        """UPDATE ... WHERE run_id AND lease_owner = owner AND state = RUNNING."""
        check_lease_owner(owner)
        statement = (
            runs.update()
            .where(_R.run_id == run_id, _R.lease_owner == owner, _R.state == _RUNNING)
            .values(lease_until=utc(until))
        )
        return self._write(
            "run lease renewal", lambda c: c.execute(statement).rowcount == 1, None, single=True
        )

    def take_over_run(
        self, run_id: str, *, expect_version: int, owner: str, until: datetime, at: datetime
    ) -> bool:
        """One UPDATE: a new owner and version, only on a RUNNING row whose lease ran out."""
        check_lease_owner(owner)
        statement = (
            runs.update()
            .where(
                _R.run_id == run_id,
                _R.version == expect_version,
                _R.state == _RUNNING,
                _R.lease_until.is_not(None),
                _R.lease_until <= utc(at),
            )
            .values(
                lease_owner=owner,
                lease_until=utc(until),
                version=expect_version + 1,
                updated_at=utc(at),
            )
        )
        return self._write(
            "run take-over", lambda c: c.execute(statement).rowcount == 1, None, single=True
        )

    def expired_runs(self, *, now: datetime, limit: int) -> list[str]:
        """RUNNING runs whose lease ran out by `now`, the longest expired first."""
        query = (
            sa.select(_R.run_id)
            .where(_R.state == _RUNNING, _R.lease_until.is_not(None), _R.lease_until <= utc(now))
            .order_by(_R.lease_until, _R.run_id)
            .limit(max(0, limit))
        )
        return self._read(
            "expired runs read", lambda c: [str(r) for r in c.execute(query).scalars()], None
        )

    def _immediately(self, what: str, work: Callable[[sa.Connection], T]) -> T:
        """`work` in one transaction; SQLite takes its write lock before the first statement."""
        try:
            with (
                self._engine.connect() as connection,
                connection.execution_options(handrail_immediate=True).begin(),
            ):
                return work(connection)
        except sa.exc.SQLAlchemyError as exc:
            raise StoreError(f"{what} failed: {type(exc).__name__}") from exc
