"""The shared state of one worker, in one process: guard, ledger, leases and their wiring.

Each mechanism over every store (memory, SQLite, PostgreSQL) where the store matters;
the same mechanisms across real processes are in test_workers_processes.py. Waits on
the heartbeat are on events its controlled sleep sets, never on time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

import pytest

from _records import RUN_T0, leased_run
from _write_tools import keyring
from handrail import Gate, Handrail, Principal, Registry
from handrail.authz.guard import ConversationGuard, StoreGuardState
from handrail.credentials import SecretLedger, Secrets, StaticSecretProvider
from handrail.errors import ConfigurationError, ErrorCode, Refusal, StoreError
from handrail.loop.agent import AgentLoop, RunRefusedError
from handrail.loop.defaults import agent_loop
from handrail.loop.leases import RunLeaseWatcher, RunLeasing, stamped
from handrail.loop.models import ModelReply, ModelRequest
from handrail.record.shared_ledger import SharedSecretLedger
from handrail.runs import RunRecord, RunState
from handrail.server.shared import shared_state
from handrail.store import MemoryStore, Store
from handrail.testing import FixedClock
from handrail.writes.service import Writes

pytestmark = pytest.mark.anyio

T0 = RUN_T0
ALICE = Principal(user_id="alice", tenant_id="t1", permissions=frozenset({"books.read"}))
KEY = "sk_live_0123456789abcdef"
BOUND = 60.0


def _secrets(ledger: SecretLedger, provider: StaticSecretProvider, tenant: str = "t1") -> Secrets:
    return Secrets(
        provider, tenant_id=tenant, allowed=frozenset({"shop.key"}), tool="t", ledger=ledger
    )


# --- the guard --------------------------------------------------------------------------------


async def test_a_store_backed_guard_trips_its_breaker_for_every_guard_on_the_store(
    store: Store,
) -> None:
    first = ConversationGuard(state=StoreGuardState(store, clock=FixedClock(T0)), max_denials=2)
    other = ConversationGuard(state=StoreGuardState(store, clock=FixedClock(T0)), max_denials=2)
    assert not await first.record_denial(ALICE, "chat", tool="shop.refunds", target=None)
    assert await other.record_denial(ALICE, "chat", tool="shop.refunds", target=None)
    with pytest.raises(Refusal) as refused:
        await first.admit(ALICE, "chat")
    assert refused.value.code is ErrorCode.BUDGET_EXHAUSTED
    await first.admit(Principal(user_id="alice", tenant_id="t2"), "chat")


async def test_conversation_ids_and_targets_longer_than_the_columns_are_kept_by_hash(
    store: Store,
) -> None:
    state = StoreGuardState(store, clock=FixedClock(T0))
    guard = ConversationGuard(state=state, max_denials=5)
    long_chat, other_chat = "c" * 300, "c" * 299 + "d"
    await guard.record_denial(ALICE, long_chat, tool="a.pay", target="order:" + "9" * 600)
    assert (await state.load("t1", long_chat)).denials == 1
    assert (await state.load("t1", other_chat)).denials == 0
    (target,) = (await state.load("t1", long_chat)).targets
    assert target.startswith("sha256:")


# --- the ledger -------------------------------------------------------------------------------


def test_a_value_handed_out_by_one_ledger_is_scrubbed_by_another_after_its_refresh(
    store: Store,
) -> None:
    provider = StaticSecretProvider({("*", "shop.key"): KEY})
    first = SharedSecretLedger(store, provider=provider, clock=FixedClock(T0))
    second = SharedSecretLedger(store, provider=provider, clock=FixedClock(T0))
    assert _secrets(first, provider).get("shop.key") == KEY
    assert first.scrub(KEY) == "[SECRET:shop.key]"
    assert second.scrub(KEY) == KEY
    assert second.refresh() == 1
    assert second.scrub(f"Basic {KEY}") == "Basic [SECRET:shop.key]"
    assert [(h.tenant_id, h.handle) for h in store.list_secret_handles()] == [("t1", "shop.key")]


def test_a_rotated_value_is_learned_at_the_next_refresh_and_the_old_one_kept(
    store: Store,
) -> None:
    values = {("*", "shop.key"): KEY}
    first = SharedSecretLedger(store, provider=StaticSecretProvider(values), clock=FixedClock(T0))
    _secrets(first, StaticSecretProvider(values)).get("shop.key")
    rotated = StaticSecretProvider({("*", "shop.key"): "sk_live_rotated_9876543210"})
    second = SharedSecretLedger(store, provider=rotated, clock=FixedClock(T0))
    second.refresh()
    assert second.scrub("sk_live_rotated_9876543210") == "[SECRET:shop.key]"
    assert first.refresh() == 1  # its provider still has the old value, recorded already
    assert first.scrub(KEY) == "[SECRET:shop.key]"


def test_a_ledger_without_a_provider_or_value_learns_nothing(store: Store) -> None:
    provider = StaticSecretProvider({("t1", "shop.key"): KEY})
    _secrets(SharedSecretLedger(store, provider=provider, clock=FixedClock(T0)), provider).get(
        "shop.key"
    )
    assert SharedSecretLedger(store, provider=None, clock=FixedClock(T0)).refresh() == 0
    short = StaticSecretProvider({("t1", "shop.key"): "short"})
    learner = SharedSecretLedger(store, provider=short, clock=FixedClock(T0))
    assert learner.refresh() == 0
    assert len(learner) == 0


class _FailingNotes(MemoryStore):
    def note_secret_handle(self, tenant_id: str, handle: str, *, at: datetime) -> bool:
        raise StoreError("the store is down")


def test_a_value_whose_handle_cannot_be_noted_is_not_handed_out() -> None:
    provider = StaticSecretProvider({("*", "shop.key"): KEY})
    ledger = SharedSecretLedger(_FailingNotes(), provider=provider, clock=FixedClock(T0))
    with pytest.raises(StoreError):
        _secrets(ledger, provider).get("shop.key")
    assert len(ledger) == 0


def test_a_handle_is_noted_once_per_tenant_and_process(store: Store) -> None:
    provider = StaticSecretProvider({("*", "shop.key"): KEY})
    ledger = SharedSecretLedger(store, provider=provider, clock=FixedClock(T0))
    for tenant in ("t1", "t1", "t2"):
        _secrets(ledger, provider, tenant).get("shop.key")
    assert sorted(h.tenant_id for h in store.list_secret_handles()) == ["t1", "t2"]
    assert "sk_live" not in repr(ledger)


def test_the_gate_and_its_writes_share_one_ledger() -> None:
    ledger = SecretLedger()
    assert Gate(Registry(), ledger=ledger).ledger is ledger
    with Handrail.open(MemoryStore(), registry=Registry(), ledger=ledger) as handrail:
        assert handrail.gate.ledger is ledger


def test_a_gate_given_another_ledger_than_its_writes_is_refused() -> None:
    writes = Writes(Registry(), MemoryStore(), keyring(), clock=FixedClock(T0))
    with pytest.raises(ConfigurationError):
        Gate(Registry(), writes=writes, ledger=SecretLedger())


# --- leases -----------------------------------------------------------------------------------


class _Model:
    """A model whose one step runs `during` before answering with a final text."""

    name = "during"

    def __init__(self, during: Callable[[], Awaitable[None]]) -> None:
        self._during = during

    async def complete(self, request: ModelRequest, *, timeout: float) -> ModelReply:
        await self._during()
        return ModelReply(text="Done.", model=self.name)


def _loop(store: Store, clock: FixedClock, model: object, owner: str, **lease: object) -> AgentLoop:
    gate = Gate(Registry(), clock=clock)
    leasing = RunLeasing(owner=owner, seconds=30, **lease)  # type: ignore[arg-type]
    return agent_loop(gate=gate, model=model, store=store, clock=clock, leasing=leasing)  # type: ignore[arg-type]


async def test_a_driven_run_is_leased_to_its_worker_and_freed_when_it_ends(store: Store) -> None:
    seen: list[RunRecord | None] = []

    async def look() -> None:
        seen.append(await asyncio.to_thread(store.get_run, "run_1"))

    loop = _loop(store, FixedClock(T0), _Model(look), "worker-a")
    outcome = await loop.run("Say done.", ALICE, run_id="run_1")
    assert outcome.status.value == "FINISHED"
    (during,) = seen
    assert during is not None
    assert (during.lease_owner, during.lease_until) == ("worker-a", T0 + timedelta(seconds=30))
    after = store.get_run("run_1")
    assert after is not None
    assert (after.lease_owner, after.lease_until) == (None, None)


async def test_the_heartbeat_renews_the_lease_while_the_run_is_driven(store: Store) -> None:
    clock = FixedClock(T0)
    beaten = asyncio.Event()
    sleeps = 0

    async def sleep(_: float) -> None:
        nonlocal sleeps
        sleeps += 1
        if sleeps > 1:  # the first renewal is done: say so, and renew no more
            beaten.set()
            await asyncio.Event().wait()

    async def during() -> None:
        clock.advance(20)
        await asyncio.wait_for(beaten.wait(), BOUND)

    seen: list[RunRecord | None] = []

    async def look() -> None:
        await during()
        seen.append(await asyncio.to_thread(store.get_run, "run_1"))

    loop = _loop(store, clock, _Model(look), "worker-a", sleep=sleep)
    await loop.run("Say done.", ALICE, run_id="run_1")
    (renewed,) = seen
    assert renewed is not None
    assert renewed.lease_until == T0 + timedelta(seconds=50)
    assert renewed.version == 1  # a renewal never moves the version


async def test_a_run_whose_lease_runs_is_not_taken_over_and_an_unknown_one_is_not_found(
    store: Store,
) -> None:
    store.insert_run(_running("run_1", until=T0 + timedelta(seconds=30)))
    loop = _loop(store, FixedClock(T0 + timedelta(seconds=29)), _Model(_nothing), "worker-b")
    for run_id, code in (("run_1", ErrorCode.CONFLICT), ("run_x", ErrorCode.NOT_FOUND)):
        with pytest.raises(RunRefusedError) as refused:
            await loop.take_over(run_id)
        assert refused.value.code is code
    record = store.get_run("run_1")
    assert record is not None
    assert (record.lease_owner, record.version) == ("worker-a", 1)


async def test_taking_over_needs_leasing() -> None:
    store = MemoryStore()
    loop = agent_loop(gate=Gate(Registry()), model=_Model(_nothing), store=store)  # type: ignore[arg-type]
    store.insert_run(_running("run_1", until=T0))
    with pytest.raises(ConfigurationError):
        await loop.take_over("run_1")


async def test_the_watcher_takes_over_only_lapsed_runs(store: Store) -> None:
    store.insert_run(_running("run_old", until=T0))
    store.insert_run(_running("run_live", until=T0 + timedelta(minutes=5)))
    taken: list[str] = []

    async def take_over(run_id: str) -> None:
        taken.append(run_id)

    watcher = RunLeaseWatcher(store, clock=FixedClock(T0), take_over=take_over)
    assert await watcher.sweep() == ["run_old"]
    assert taken == ["run_old"]


def test_stamping_leases_running_records_and_frees_the_others() -> None:
    leasing = RunLeasing(owner="w", seconds=30)
    running = _running("run_1", until=T0)
    assert stamped(leasing, running, at=T0).lease_until == T0 + timedelta(seconds=30)
    ended = running.advanced(at=T0, state=RunState.FINISHED)
    assert stamped(leasing, ended, at=T0).lease_owner is None
    assert stamped(None, running, at=T0).lease_owner is None
    with pytest.raises(ConfigurationError):
        RunLeasing(owner="", seconds=30)
    with pytest.raises(ConfigurationError):
        RunLeasing(owner="w", seconds=0)


async def _nothing() -> None:
    return None


def _running(run_id: str, *, until: datetime) -> RunRecord:
    return leased_run(run_id, lease_until=until)


# --- the wiring -------------------------------------------------------------------------------


async def test_shared_state_gives_handrail_open_its_guard_limiter_and_ledger() -> None:
    store = MemoryStore()
    shared = shared_state(store, redis_url=None, clock=FixedClock(T0), worker_id="w1")
    options = shared.handrail_options()
    assert set(options) == {"guard", "limiter", "ledger"}
    assert options["limiter"] is None
    assert shared.leasing.owner == "w1"
    with Handrail.open(store, registry=Registry(), audit=False, **options) as handrail:
        assert handrail.gate.ledger is shared.ledger


async def test_shared_state_learns_handles_on_start_and_stops_its_background_work() -> None:
    store = MemoryStore()
    provider = StaticSecretProvider({("*", "shop.key"): KEY})
    store.note_secret_handle("t1", "shop.key", at=T0)
    ticks = asyncio.Event()

    async def sleep(_: float) -> None:
        ticks.set()
        await asyncio.Event().wait()

    shared = shared_state(
        store, redis_url=None, clock=FixedClock(T0), worker_id="w", secrets=provider, sleep=sleep
    )
    taken: list[str] = []

    async def take_over(run_id: str) -> None:
        taken.append(run_id)

    shared.watch_runs(take_over)
    async with shared:
        assert shared.ledger.scrub(KEY) == "[SECRET:shop.key]"
        await asyncio.wait_for(ticks.wait(), BOUND)
    await shared.stop()  # stopping twice is harmless


def test_a_quota_for_every_worker_needs_redis() -> None:
    from handrail.authz.quota import QuotaPolicy  # noqa: PLC0415

    with pytest.raises(ConfigurationError):
        shared_state(
            MemoryStore(), redis_url=None, clock=FixedClock(T0), worker_id="w", quota=QuotaPolicy()
        )
    with pytest.raises(ConfigurationError):
        shared_state(
            MemoryStore(), redis_url=None, clock=FixedClock(T0), worker_id="w", refresh_seconds=0
        )
