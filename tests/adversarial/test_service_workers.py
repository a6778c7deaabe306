"""Attacks on the state the workers share: forged lease owners, fenced writers, races, leaks.

A worker may name any owner it likes, so a lease is held only by compare-and-set: a
renewal under another's name keeps nothing alive, a worker whose run was taken over
cannot write it again, and a take-over racing a heartbeat leaves exactly one owner.
The store never holds a secret value in any form, and conversation keys cut to the
store's width never merge two conversations.
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest

from _records import RUN_T0, leased_run
from handrail import Gate, Principal, Registry
from handrail.authz.guard import ConversationGuard, StoreGuardState
from handrail.credentials import Secrets, StaticSecretProvider
from handrail.errors import ErrorCode, Refusal
from handrail.loop.agent import RunRefusedError
from handrail.loop.defaults import agent_loop
from handrail.loop.leases import RunLeasing
from handrail.loop.models import ModelReply, ModelRequest
from handrail.record.shared_ledger import SharedSecretLedger
from handrail.runs import RunRecord, RunState
from handrail.store import SqliteStore, Store
from handrail.testing import FixedClock

Race = Callable[[int, Callable[[int], bool]], list[bool]]

T0 = RUN_T0
LEASE = timedelta(seconds=30)
ALICE = Principal(user_id="alice", tenant_id="t1")
KEY = "sk_live_0123456789abcdef"


def _running(run_id: str = "run_1", **changes: object) -> RunRecord:
    return leased_run(run_id, **changes)


def test_a_renewal_under_a_forged_owner_keeps_a_dead_workers_run_from_nobody(
    store: Store,
) -> None:
    store.insert_run(_running())
    for forged in ("worker-b", "worker-a ", "WORKER-A", "worker-\u0430"):
        assert not store.renew_run_lease("run_1", owner=forged, until=T0 + 100 * LEASE)
    for impossible in ("worker-a\x00", "", "w" * 257):
        with pytest.raises(ValueError, match="lease owner"):
            store.renew_run_lease("run_1", owner=impossible, until=T0 + 100 * LEASE)
        with pytest.raises(ValueError, match="lease owner"):
            store.take_over_run("run_1", expect_version=1, owner=impossible, until=T0, at=T0)
    at = T0 + LEASE
    assert store.take_over_run("run_1", expect_version=1, owner="worker-b", until=at + LEASE, at=at)


def test_a_take_over_with_a_stale_version_or_an_early_clock_changes_nothing(
    store: Store,
) -> None:
    store.insert_run(_running())
    at = T0 + LEASE
    assert not store.take_over_run("run_1", expect_version=2, owner="b", until=at, at=at)
    assert not store.take_over_run("run_1", expect_version=0, owner="b", until=at, at=at)
    early = T0 + LEASE - timedelta(microseconds=1)
    assert not store.take_over_run("run_1", expect_version=1, owner="b", until=at, at=early)
    assert store.get_run("run_1") == _running()


def test_a_take_over_racing_a_heartbeat_leaves_exactly_one_owner(store: Store, race: Race) -> None:
    at = T0 + LEASE
    for n in range(8):
        store.insert_run(_running(f"run_{n}"))
        won = race(
            2,
            lambda who, n=n: (
                store.renew_run_lease(f"run_{n}", owner="worker-a", until=at + LEASE)
                if who == 0
                else store.take_over_run(
                    f"run_{n}", expect_version=1, owner="worker-b", until=at + LEASE, at=at
                )
            ),
        )
        assert won.count(True) == 1, won
        record = store.get_run(f"run_{n}")
        assert record is not None
        assert record.lease_owner == ("worker-a" if won[0] else "worker-b")


class _TakenOverMidStep:
    """A model that, while worker a waits on it, lets worker b take the run over."""

    name = "slow"

    def __init__(self) -> None:
        self.take_over: Callable[[], object] | None = None

    async def complete(self, request: ModelRequest, *, timeout: float) -> ModelReply:
        assert self.take_over is not None
        await self.take_over()  # type: ignore[misc]
        return ModelReply(text="Worker a's late answer.", model=self.name)


class _Answers:
    name = "answers"

    async def complete(self, request: ModelRequest, *, timeout: float) -> ModelReply:
        return ModelReply(text="Worker b's answer.", model=self.name)


@pytest.mark.anyio
async def test_a_worker_whose_run_was_taken_over_cannot_write_it_again(store: Store) -> None:
    gate = Gate(Registry(), clock=FixedClock(T0))
    slow = _TakenOverMidStep()
    first = agent_loop(
        gate=gate,
        model=slow,  # type: ignore[arg-type]
        store=store,
        clock=FixedClock(T0),
        leasing=RunLeasing(owner="worker-a", seconds=30),
    )
    second = agent_loop(
        gate=gate,
        model=_Answers(),  # type: ignore[arg-type]
        store=store,
        clock=FixedClock(T0 + LEASE),
        leasing=RunLeasing(owner="worker-b", seconds=30),
    )
    slow.take_over = lambda: second.take_over("run_1")
    with pytest.raises(RunRefusedError) as refused:
        await first.run("Say something.", ALICE, run_id="run_1")
    assert refused.value.code is ErrorCode.CONFLICT
    record = store.get_run("run_1")
    assert record is not None
    assert record.state is RunState.FINISHED
    assert "Worker b's answer." in record.data + "".join(record.entries)
    assert "Worker a's late answer." not in record.data + "".join(record.entries)


@pytest.mark.anyio
async def test_runs_not_running_under_a_lapsed_lease_are_never_taken_over(store: Store) -> None:
    store.insert_run(_running("run_free", lease_owner=None, lease_until=None))
    store.insert_run(_running("run_waiting", state=RunState.SUSPENDED))
    store.insert_run(_running("run_done", state=RunState.FAILED))
    loop = agent_loop(
        gate=Gate(Registry()),
        model=_Answers(),  # type: ignore[arg-type]
        store=store,
        clock=FixedClock(T0 + 100 * LEASE),
        leasing=RunLeasing(owner="worker-b", seconds=30),
    )
    for run_id in ("run_free", "run_waiting", "run_done"):
        before = store.get_run(run_id)
        with pytest.raises(RunRefusedError) as refused:
            await loop.take_over(run_id)
        assert refused.value.code is ErrorCode.CONFLICT
        assert store.get_run(run_id) == before


def test_the_store_never_holds_a_handed_out_secret_in_any_form(tmp_path: Path) -> None:
    store = SqliteStore.open(tmp_path / "h.db")
    try:
        provider = StaticSecretProvider({("*", "shop.key"): KEY})
        ledger = SharedSecretLedger(store, provider=provider, clock=FixedClock(T0))
        secrets = Secrets(
            provider, tenant_id="t1", allowed=frozenset({"shop.key"}), tool="t", ledger=ledger
        )
        secrets.get("shop.key")
        SharedSecretLedger(store, provider=provider, clock=FixedClock(T0)).refresh()
    finally:
        store.close()
    stored = b"".join(path.read_bytes() for path in tmp_path.iterdir() if path.is_file())
    for form in (KEY.encode(), base64.b64encode(KEY.encode()), KEY[4:16].encode()):
        assert form not in stored
    assert b"shop.key" in stored  # the handle is kept: the proof the file was read


@pytest.mark.anyio
async def test_long_conversation_ids_cut_to_the_columns_never_merge(store: Store) -> None:
    guard = ConversationGuard(state=StoreGuardState(store, clock=FixedClock(T0)), max_denials=1)
    prefix = "c" * 256
    assert await guard.record_denial(ALICE, prefix + "-one", tool="a", target=None)
    await guard.admit(ALICE, prefix + "-two")
    await guard.admit(ALICE, prefix)
    await guard.admit(Principal(user_id="alice", tenant_id="t2"), prefix + "-one")


@pytest.mark.anyio
@pytest.mark.parametrize("odd", ["order:\x001", "order:\ud800", "chat\x00"])
async def test_targets_and_conversations_no_store_could_keep_are_kept_by_hash(
    store: Store, odd: str
) -> None:
    guard = ConversationGuard(state=StoreGuardState(store, clock=FixedClock(T0)), max_denials=2)
    assert not await guard.record_denial(ALICE, odd, tool="a", target=odd)
    assert await guard.record_denial(ALICE, odd, tool="a", target=odd)
    with pytest.raises(Refusal) as refused:
        await guard.admit(ALICE, odd)
    assert refused.value.code is ErrorCode.BUDGET_EXHAUSTED


def test_concurrent_first_hand_outs_in_threads_note_the_handle_once(store: Store) -> None:
    provider = StaticSecretProvider({("*", "shop.key"): KEY})
    ledger = SharedSecretLedger(store, provider=provider, clock=FixedClock(T0))
    start = threading.Barrier(8)

    def hand_out() -> None:
        start.wait(60)
        Secrets(
            provider, tenant_id="t1", allowed=frozenset({"shop.key"}), tool="t", ledger=ledger
        ).get("shop.key")

    threads = [threading.Thread(target=hand_out) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(store.list_secret_handles()) == 1
