"""Several workers act as one: each shared mechanism holds across two processes on one database.

Children are spawned (`_workers`), each with its own interpreter, event loop and
connections, and coordinated by barriers and events; every wait is bounded and every
child is reaped (killed if need be) in a `finally`. PostgreSQL tests skip without a
server except under CI=true; the rate-limit test needs Redis in the same way.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.process import BaseProcess
from typing import Any

import anyio.to_thread
import pytest
import sqlalchemy as sa
from _workers import (
    API_KEY,
    BOUND,
    LEASE,
    REFUSED,
    T0,
    TICKETS,
    confirm_worker,
    gate_worker,
    guard_race_worker,
    hand_out_worker,
    lease_race_worker,
    limit_worker,
    scrub_worker,
    stuck_run_worker,
    take_over_worker,
)

from _records import leased_run
from _stores import empty_postgres_store
from _write_tools import ARGS, Downstream, keyring, ticket_tool
from handrail import Gate, Registry, ToolCall
from handrail.plans import PlanState
from handrail.runs import RunState
from handrail.store import PostgresStore
from handrail.testing import FixedClock
from handrail.writes.service import Writes

pytestmark = [pytest.mark.postgres, pytest.mark.anyio]

SPAWN = multiprocessing.get_context("spawn")


@pytest.fixture
def pg(postgres_url: str) -> Iterator[PostgresStore]:
    """The test database at HEAD, emptied; the parent's own connection to it."""
    store = empty_postgres_store(postgres_url)
    try:
        yield store
    finally:
        store.close()


@contextmanager
def _children(*specs: tuple[Callable[..., None], tuple[Any, ...]]) -> Iterator[list[BaseProcess]]:
    """Start a child per (target, args); on leaving, join each (bounded), else kill it."""
    started = [SPAWN.Process(target=target, args=args) for target, args in specs]
    for child in started:
        child.start()
    try:
        yield started
    finally:
        for child in started:
            child.join(BOUND)
            if child.is_alive():
                child.kill()
                child.join(BOUND)


def _take(results: Any, children: list[BaseProcess], n: int) -> list[Any]:
    """`n` results from the queue; fails at once when a child died without giving its own."""
    found: list[Any] = []
    deadline = time.monotonic() + BOUND
    while len(found) < n:
        try:
            found.append(results.get(timeout=0.5))
        except queue.Empty:
            dead = [c.exitcode for c in children if c.exitcode not in (None, 0)]
            assert not dead, f"a worker died: exit codes {dead}"
            assert time.monotonic() < deadline, f"only {len(found)} of {n} results"
    return found


def _exits(children: list[BaseProcess]) -> list[int | None]:
    for child in children:
        child.join(BOUND)
    return [child.exitcode for child in children]


def _outcomes(
    results: Any, n: int, *specs: tuple[Callable[..., None], tuple[Any, ...]]
) -> list[Any]:
    """Run a child per spec; their `n` results once every child exited cleanly."""
    with _children(*specs) as children:
        seen = _take(results, children, n)
        assert _exits(children) == [0] * len(children)
    return seen


# --- the conversation guard -------------------------------------------------------------------


def _guard_race(url: str) -> list[int]:
    start = SPAWN.Barrier(2)
    results = SPAWN.Queue()
    spec = (guard_race_worker, (url, "chat-1", 10, start, results))
    return _outcomes(results, 2, spec, spec)


async def test_denials_in_two_workers_at_once_count_once_each_and_trip_the_breaker_once(
    pg: PostgresStore, postgres_url: str
) -> None:
    tripped = await anyio.to_thread.run_sync(_guard_race, postgres_url)
    # max_denials is 3: of the twenty denials of both workers, exactly one is the third.
    assert sum(tripped) == 1
    assert pg.guard_state("t1", "chat-1").denials == 20


def _breaker_in_turns(url: str) -> list[tuple[str, int, str, str]]:
    denied = ("shop.refunds", '{"order_id": "o1"}', "chat-9")
    read = ("shop.search", '{"query": "dune"}', "chat-9")
    a_done, b_done = SPAWN.Event(), SPAWN.Event()
    results = SPAWN.Queue()
    # Worker a is denied twice; worker b, after it, once (the third: the breaker trips),
    # then b's read is refused before lookup, and so is a's read after b.
    a = (
        gate_worker,
        (url, "a", [denied, denied, read], [(None, None), (None, a_done), (b_done, None)], results),
    )
    b = (gate_worker, (url, "b", [denied, read], [(a_done, None), (None, b_done)], results))
    seen = _outcomes(results, 5, a, b)
    return sorted(seen)


async def test_a_breaker_tripped_in_one_worker_refuses_the_conversation_in_the_other(
    pg: PostgresStore, postgres_url: str
) -> None:
    seen = await anyio.to_thread.run_sync(_breaker_in_turns, postgres_url)
    codes = [(worker, i, code) for worker, i, code, _ in seen]
    assert codes == [
        ("a", 0, "PERMISSION_DENIED"),
        ("a", 1, "PERMISSION_DENIED"),
        ("a", 2, "BUDGET_EXHAUSTED"),
        ("b", 0, "PERMISSION_DENIED"),
        ("b", 1, "BUDGET_EXHAUSTED"),
    ]
    assert pg.guard_state("t1", "chat-9").denials == 3


# --- the secret ledger ------------------------------------------------------------------------


def _hand_out_then_scrub(url: str) -> tuple[str, str]:
    done = SPAWN.Event()
    results = SPAWN.Queue()
    (seen,) = _outcomes(
        results, 1, (hand_out_worker, (url, done)), (scrub_worker, (url, done, results))
    )
    return seen


async def test_a_value_handed_out_by_one_worker_is_scrubbed_by_the_other(
    pg: PostgresStore, postgres_url: str
) -> None:
    before, after = await anyio.to_thread.run_sync(_hand_out_then_scrub, postgres_url)
    assert before == f"key={API_KEY}"  # not known until the worker learns the handle
    assert after == "key=[SECRET:shop.api_key]"
    with pg.engine.connect() as connection:
        rows = connection.execute(sa.text("SELECT * FROM secret_handles")).all()
    assert [tuple(row)[:2] for row in rows] == [("t1", "shop.api_key")]
    assert API_KEY not in repr(rows)


def _echo_in_turns(url: str) -> list[tuple[str, int, str, str]]:
    echo = ("shop.echo_key", '{"note": "hi"}', None)
    passed = (
        "shop.search",
        '{"query": "' + API_KEY + '"}',
        None,
    )
    a_done = SPAWN.Event()
    results = SPAWN.Queue()
    a = (gate_worker, (url, "a", [echo], [(None, a_done)], results))
    b = (gate_worker, (url, "b", [passed], [(a_done, None)], results))
    seen = _outcomes(results, 2, a, b)
    return sorted(seen)


async def test_a_key_one_worker_handed_out_is_refused_as_an_argument_by_the_other(
    pg: PostgresStore, postgres_url: str
) -> None:
    (a, b) = await anyio.to_thread.run_sync(_echo_in_turns, postgres_url)
    assert a[2] == "ok"
    assert API_KEY not in a[3]
    assert "[SECRET:shop.api_key]" in a[3]
    assert b[2] == "INVALID_ARGUMENTS"


# --- run leases -------------------------------------------------------------------------------


def _die_then_take_over(url: str, run_id: str) -> list[tuple[list[str], str | None]]:
    asked = SPAWN.Event()
    results = SPAWN.Queue()
    with _children((stuck_run_worker, (url, run_id, asked))) as (stuck,):
        assert asked.wait(BOUND), "the first worker never reached its model"
        assert stuck.pid is not None
        os.kill(stuck.pid, signal.SIGKILL)  # the worker dies mid-step, its run RUNNING
        stuck.join(BOUND)
    seen = _outcomes(results, 1, (take_over_worker, (url, LEASE - 1, results)))
    late = (take_over_worker, (url, LEASE, results))
    return seen + _outcomes(results, 2, late, late)


async def test_a_dead_workers_run_is_taken_over_by_exactly_one_worker_once_its_lease_ran_out(
    pg: PostgresStore, postgres_url: str
) -> None:
    seen = await anyio.to_thread.run_sync(_die_then_take_over, postgres_url, "run_dead")
    # Before the lease ran out nobody takes it; after, exactly one of two sweepers does.
    assert seen[0] == ([], None)
    assert sorted(seen[1:]) == [([], None), (["run_dead"], "FINISHED")]
    record = pg.get_run("run_dead")
    assert record is not None
    assert record.state is RunState.FINISHED
    assert (record.lease_owner, record.lease_until) == (None, None)


def _lease_races(url: str, run_ids: list[str]) -> dict[str, list[bool]]:
    start = SPAWN.Barrier(2)
    results = SPAWN.Queue()
    renew = (lease_race_worker, (url, "renew", run_ids, start, results))
    take = (lease_race_worker, (url, "take", run_ids, start, results))
    return dict(_outcomes(results, 2, renew, take))


async def test_a_heartbeat_racing_a_take_over_leaves_exactly_one_owner(
    pg: PostgresStore, postgres_url: str
) -> None:
    run_ids = [f"run_{n}" for n in range(20)]
    for run_id in run_ids:
        pg.insert_run(leased_run(run_id))
    seen = await anyio.to_thread.run_sync(_lease_races, postgres_url, run_ids)
    for n, run_id in enumerate(run_ids):
        renewed, taken = seen["renew"][n], seen["take"][n]
        assert renewed != taken, run_id
        record = pg.get_run(run_id)
        assert record is not None
        assert record.lease_owner == ("worker-b" if taken else "worker-a")
        assert record.version == (2 if taken else 1)


# --- rate limits ----------------------------------------------------------------------------


def _limited(url: str, redis_url: str, prefix: str) -> list[list[str]]:
    start = SPAWN.Barrier(2)
    results = SPAWN.Queue()
    spec = (limit_worker, (url, redis_url, prefix, 5, start, results))
    return _outcomes(results, 2, spec, spec)


async def test_a_tools_declared_rate_counts_across_workers_in_the_shared_limiter(
    pg: PostgresStore, postgres_url: str, redis_url: str, key_prefix: str
) -> None:
    seen = await anyio.to_thread.run_sync(_limited, postgres_url, redis_url, key_prefix)
    codes = [code for worker in seen for code in worker]
    # shop.stock declares 3/hour: three of the ten calls of both workers pass, in all.
    assert codes.count("ok") == 3
    assert codes.count("RATE_LIMITED") == 7


# --- confirmation nonces ----------------------------------------------------------------------


def _confirm_twice(url: str, plan_id: str, token: str) -> list[str]:
    start = SPAWN.Barrier(2)
    results = SPAWN.Queue()
    spec = (confirm_worker, (url, plan_id, token, start, results))
    seen = _outcomes(results, 2, spec, spec)
    return sorted(seen)


async def test_one_confirmation_token_confirms_once_across_two_workers(
    pg: PostgresStore, postgres_url: str
) -> None:

    tools = Registry()
    tools.register(ticket_tool(Downstream()))
    writes = Writes(tools, pg, keyring(), clock=FixedClock(T0))
    gate = Gate(tools, clock=FixedClock(T0), writes=writes)
    planned = await gate.handle(
        ToolCall(id="c1", name="create_ticket", arguments=ARGS, provider="test"), TICKETS
    )
    assert isinstance(planned.data, dict)
    plan_id = str(planned.data["plan_id"])
    token = (await writes.issue_token(plan_id, TICKETS)).value
    seen = await anyio.to_thread.run_sync(_confirm_twice, postgres_url, plan_id, token)
    assert seen.count("confirmed") == 1
    (refusal,) = set(seen) - {"confirmed"}
    assert refusal in REFUSED
    plan = pg.get_plan(plan_id)
    assert plan is not None
    assert plan.state is PlanState.CONFIRMED
