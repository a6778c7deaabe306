"""Workers of one service in their own OS processes, sharing one PostgreSQL (and Redis).

Each `*_worker` function is the body of a child started with multiprocessing's spawn
context: it opens the store (no migration: the test's database is at HEAD), builds its
parts through `handrail.server.shared.shared_state` as a service worker does, waits
for its cue (a Barrier or an Event, each wait bounded), acts, and puts what it saw on a
queue. Nothing here sleeps to wait for another process.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier, Event
from typing import Annotated, Any

from pydantic import Field

from handrail import Handrail, Principal, Registry, RiskLevel, ToolCall, ToolContext, tool
from handrail.credentials import Secrets, StaticSecretProvider
from handrail.errors import ErrorCode, WriteRefusedError
from handrail.loop.defaults import agent_loop
from handrail.loop.leases import RunLeaseWatcher, RunLeasing
from handrail.loop.models import ModelReply, ModelRequest, ScriptedModelClient
from handrail.server.shared import shared_state
from handrail.store import PostgresStore
from handrail.testing import FixedClock
from handrail.writes.service import Writes

BOUND = 120.0
"""Seconds any wait on another process may take before the test fails (spawned
interpreters importing Handrail are slow on a loaded machine)."""
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
LEASE = 30.0
ALICE = Principal(user_id="alice", tenant_id="t1", permissions=frozenset({"books.read"}))
API_KEY = "sk_live_0123456789abcdef"
PROVIDER = StaticSecretProvider({("*", "shop.api_key"): API_KEY})


@tool(risk=RiskLevel.L1_INTERNAL_READ, namespace="shop", permissions={"books.read"})
async def search(query: Annotated[str, Field(min_length=1, max_length=50)]) -> dict[str, str]:
    """Search the catalogue by title words."""
    return {"query": query}


@tool(
    risk=RiskLevel.L1_INTERNAL_READ,
    namespace="shop",
    permissions={"books.read"},
    rate_limit="3/hour",
)
async def stock(book_id: Annotated[str, Field(pattern=r"^b[0-9]+$")]) -> dict[str, str]:
    """Read a book's stock level (the warehouse allows three reads an hour)."""
    return {"book_id": book_id, "stock": "3"}


@tool(risk=RiskLevel.L1_INTERNAL_READ, namespace="shop", permissions={"refunds.read"})
async def refunds(order_id: Annotated[str, Field(pattern=r"^o[0-9]+$")]) -> dict[str, str]:
    """Read an order's refunds (alice may not)."""
    return {"order_id": order_id}


@tool(
    risk=RiskLevel.L1_INTERNAL_READ,
    namespace="shop",
    permissions={"books.read"},
    secrets={"shop.api_key"},
)
async def echo_key(ctx: ToolContext, note: Annotated[str, Field(max_length=50)]) -> dict[str, str]:
    """Read the shop's API key and (wrongly) echo it back."""
    assert ctx.secrets is not None
    return {"note": note, "echo": ctx.secrets.get("shop.api_key")}


def registry() -> Registry:
    """The tools every worker serves."""
    tools = Registry()
    for made in (search, stock, refunds, echo_key):
        tools.register(made)
    return tools


def call(name: str, arguments: str, n: int) -> ToolCall:
    """A call as a model would propose it."""
    return ToolCall(id=f"call_{name}_{n}", name=name, arguments=arguments, provider="test")


def open_store(url: str) -> PostgresStore:
    """The test's database, already at HEAD."""
    return PostgresStore.open(url, migrate=False, pool_size=4)


# --- the conversation guard -------------------------------------------------------------------


def guard_race_worker(
    url: str, conversation: str, denials: int, start: Barrier, out: Queue[int]
) -> None:
    """Record `denials` denials at once after the barrier; how many tripped the breaker."""

    async def run() -> int:
        store = open_store(url)
        try:
            shared = shared_state(store, redis_url=None, clock=FixedClock(T0), worker_id="w")
            guard = shared.guard
            await guard.admit(ALICE, "warm-up")  # connected before the race
            start.wait(BOUND)
            tripped = await asyncio.gather(
                *(
                    guard.record_denial(ALICE, conversation, tool="shop.refunds", target=None)
                    for _ in range(denials)
                )
            )
            return sum(tripped)
        finally:
            store.close()

    out.put(asyncio.run(run()))


def gate_worker(
    url: str, worker: str, script: list[tuple[str, str, str]], steps: list[Any], out: Queue[Any]
) -> None:
    """Serve the calls of `script` through Handrail.open with the shared state, in turns.

    `steps[i]` is (wait_for, then_set): an Event to wait for before call i (or None)
    and an Event to set after it (or None). Each envelope's error code (or "ok") and
    the first 200 characters of its data go on `out` as (worker, i, code, text).
    """

    async def run() -> None:
        store = open_store(url)
        shared = shared_state(
            store,
            redis_url=None,
            clock=FixedClock(T0),
            worker_id=worker,
            secrets=PROVIDER,
            max_denials=3,
        )
        try:
            async with shared:
                with Handrail.open(
                    store,
                    registry=registry(),
                    audit=False,
                    clock=FixedClock(T0),
                    secrets=PROVIDER,
                    **shared.handrail_options(),
                ) as handrail:
                    for i, ((name, arguments, conversation), (wait, then)) in enumerate(
                        zip(script, steps, strict=True)
                    ):
                        if wait is not None:
                            assert wait.wait(BOUND), f"{worker}: no cue for call {i}"
                            await asyncio.to_thread(shared.ledger.refresh)
                        envelope = await handrail.gate.handle(
                            call(name, arguments, i), ALICE, conversation=conversation
                        )
                        code = "ok" if envelope.error_type is None else envelope.error_type.value
                        out.put((worker, i, code, str(envelope.data)[:200]))
                        if then is not None:
                            then.set()
        finally:
            store.close()

    asyncio.run(run())


def limit_worker(
    url: str, redis_url: str, prefix: str, calls: int, start: Barrier, out: Queue[list[str]]
) -> None:
    """After the barrier, call the rate-limited tool `calls` times at once; each call's code."""

    async def run() -> list[str]:
        store = open_store(url)
        shared = shared_state(
            store, redis_url=redis_url, clock=FixedClock(T0), worker_id="w", redis_prefix=prefix
        )
        try:
            async with shared:
                with Handrail.open(
                    store, registry=registry(), audit=False, **shared.handrail_options()
                ) as handrail:
                    gate = handrail.gate
                    warm = await gate.handle(call("shop.search", '{"query": "x"}', 0), ALICE)
                    assert warm.error_type is None
                    start.wait(BOUND)
                    envelopes = await asyncio.gather(
                        *(
                            gate.handle(call("shop.stock", '{"book_id": "b1"}', n), ALICE)
                            for n in range(calls)
                        )
                    )
        finally:
            store.close()
        return ["ok" if e.error_type is None else e.error_type.value for e in envelopes]

    out.put(asyncio.run(run()))


# --- the secret ledger ------------------------------------------------------------------------


def hand_out_worker(url: str, done: Event) -> None:
    """Hand the shop's key to a tool for tenant t1, as a tool's `ctx.secrets.get` does."""
    store = open_store(url)
    try:
        shared = shared_state(
            store, redis_url=None, clock=FixedClock(T0), worker_id="a", secrets=PROVIDER
        )
        secrets = Secrets(
            PROVIDER,
            tenant_id="t1",
            allowed=frozenset({"shop.api_key"}),
            tool="shop.echo_key",
            ledger=shared.ledger,
        )
        assert secrets.get("shop.api_key") == API_KEY
    finally:
        store.close()
    done.set()


def scrub_worker(url: str, done: Event, out: Queue[tuple[str, str]]) -> None:
    """After the cue: what this worker's ledger makes of the key, before and after a refresh."""
    store = open_store(url)
    try:
        shared = shared_state(
            store, redis_url=None, clock=FixedClock(T0), worker_id="b", secrets=PROVIDER
        )
        assert done.wait(BOUND), "the other worker never handed the key out"
        before = shared.ledger.scrub(f"key={API_KEY}")
        shared.ledger.refresh()
        out.put((before, shared.ledger.scrub(f"key={API_KEY}")))
    finally:
        store.close()


# --- run leases -------------------------------------------------------------------------------


class _StuckModel:
    """A model that says it was asked, then never answers: its worker dies mid-step."""

    name = "stuck"

    def __init__(self, asked: Event) -> None:
        self._asked = asked

    async def complete(self, request: ModelRequest, *, timeout: float) -> ModelReply:
        self._asked.set()
        await asyncio.Event().wait()
        raise AssertionError  # pragma: no cover - never answers


def _loop(store: PostgresStore, model: Any, *, owner: str, now: datetime) -> Any:
    gate = Handrail.open(store, registry=registry(), audit=False, clock=FixedClock(now)).gate
    return agent_loop(
        gate=gate,
        model=model,
        store=store,
        clock=FixedClock(now),
        leasing=RunLeasing(owner=owner, seconds=LEASE),
    )


def stuck_run_worker(url: str, run_id: str, asked: Event) -> None:
    """Start a run under a lease at T0 and hang in its first model step (the test kills us)."""

    async def run() -> None:
        store = open_store(url)
        loop = _loop(store, _StuckModel(asked), owner="worker-a", now=T0)
        await loop.run("How many copies of Dune are in stock?", ALICE, run_id=run_id)

    asyncio.run(run())


def take_over_worker(
    url: str, seconds_after: float, out: Queue[tuple[list[str], str | None]]
) -> None:
    """At T0 + `seconds_after`, sweep for lapsed leases; the runs won and the last one's status."""

    async def run() -> tuple[list[str], str | None]:
        store = open_store(url)
        try:
            reply = ModelReply(text="Dune has three copies in stock.", model="scripted")
            now = T0 + timedelta(seconds=seconds_after)
            loop = _loop(store, ScriptedModelClient([reply]), owner="worker-b", now=now)
            statuses: list[str] = []

            async def take_over(run_id: str) -> None:
                statuses.append((await loop.take_over(run_id)).status.value)

            watcher = RunLeaseWatcher(store, clock=FixedClock(now), take_over=take_over)
            won = await watcher.sweep()
            return won, statuses[-1] if statuses else None
        finally:
            store.close()

    out.put(asyncio.run(run()))


def lease_race_worker(
    url: str, role: str, run_ids: list[str], start: Barrier, out: Queue[tuple[str, list[bool]]]
) -> None:
    """For each run, after the barrier: renew as its owner ("renew") or take it over ("take")."""
    store = open_store(url)
    at = T0 + timedelta(seconds=LEASE)
    until = at + timedelta(seconds=LEASE)
    results: list[bool] = []
    try:
        store.get_run(run_ids[0])  # connected before the races
        for run_id in run_ids:
            start.wait(BOUND)
            if role == "renew":
                results.append(store.renew_run_lease(run_id, owner="worker-a", until=until))
            else:
                results.append(
                    store.take_over_run(
                        run_id, expect_version=1, owner="worker-b", until=until, at=at
                    )
                )
    finally:
        store.close()
    out.put((role, results))


# --- confirmation nonces ----------------------------------------------------------------------


def confirm_worker(url: str, plan_id: str, token: str, start: Barrier, out: Queue[str]) -> None:
    """Confirm one plan with one token after the barrier; "confirmed" or the refusal's code."""
    from _write_tools import Downstream, keyring, ticket_tool  # noqa: PLC0415 - the child's path

    async def run() -> str:
        store = open_store(url)
        try:
            tools = Registry()
            tools.register(ticket_tool(Downstream()))
            writes = Writes(tools, store, keyring(), clock=FixedClock(T0))
            await asyncio.to_thread(store.get_plan, plan_id)  # connected before the race
            start.wait(BOUND)
            try:
                await writes.confirm(plan_id, token, TICKETS)
            except WriteRefusedError as exc:
                return exc.code.value
            return "confirmed"
        finally:
            store.close()

    out.put(asyncio.run(run()))


TICKETS = Principal(user_id="alice", tenant_id="t1", permissions=frozenset({"tickets.create"}))
REFUSED = {ErrorCode.CONFIRMATION_REPLAYED.value, ErrorCode.CONFLICT.value}
"""What the second confirmation of one token may get: the nonce was used, or the plan moved."""
