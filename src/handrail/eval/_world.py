"""One scenario's world: a clock, the shop, a store, audit, and the real Gate, Writes and loop.

Wired as `Handrail.open` wires an application (one shaper shared by the Gate and
Writes, audit of every stage), with what an evaluation needs on top: a clock that moves
only when simulated time passes (or with real time too, for a real model), retry waits
that move that clock instead of sleeping, plan and event ids in sequence, and hooks that
keep every request the model was sent and every envelope it was shown. No raw-results
store: nobody reads raw results in an evaluation, and a read that never leaves the event
loop keeps simulated latencies exact. It decides nothing about a call.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from handrail.calls import ToolCall
from handrail.declare.definition import Tool
from handrail.declare.registry import Registry
from handrail.envelope import Envelope
from handrail.eval._downstream import Shop
from handrail.eval._scenario import Scenario
from handrail.eval._tools import shop_policy, shop_tools
from handrail.gate import Gate
from handrail.loop.agent import AgentLoop
from handrail.loop.answers import EvidenceChecker
from handrail.loop.hooks import NoHooks
from handrail.loop.models import ModelClient, ModelReply, ModelRequest
from handrail.record.audit import MemoryAuditSink
from handrail.shaping.redact import Redactor
from handrail.shaping.shaper import Shaper
from handrail.signing import SigningKey
from handrail.store import MemoryStore, SqliteStore
from handrail.testing import sequential_ids
from handrail.writes.confirmation import Keyring
from handrail.writes.reconcile import Reconciler
from handrail.writes.service import Writes

if TYPE_CHECKING:
    from handrail.store.base import Store
    from handrail.telemetry import Telemetry

__all__ = ["BUSINESS_IDS", "EvalClock", "RecordingModel", "SeenCall", "Watcher", "World"]

BUSINESS_IDS = (r"\bRF-\d{4}\b", r"\bTK-\d{4}\b")
"""The shop's refund and ticket numbers, as free-text answers may name them."""

_START = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
_MONOTONIC_START = 1000.0


class EvalClock:
    """A clock that moves when simulated time is spent, and optionally with real time too.

    With `real=False` (scripted models) only `advance` moves it, so every duration in a
    report is the simulated one and the same in every run. With `real=True` (a real
    model) it also runs with the process's monotonic clock.
    """

    def __init__(self, *, real: bool = False) -> None:
        self._real = real
        self._origin = time.monotonic()
        self._skipped = 0.0

    def monotonic(self) -> float:
        """Seconds on the clock's monotonic scale."""
        running = time.monotonic() - self._origin if self._real else 0.0
        return _MONOTONIC_START + self._skipped + running

    def now(self) -> datetime:
        """The clock's current time in UTC."""
        return _START + timedelta(seconds=self.monotonic() - _MONOTONIC_START)

    def advance(self, seconds: float) -> None:
        """Spend `seconds` of simulated time."""
        self._skipped += max(0.0, seconds)

    async def sleep(self, seconds: float) -> None:
        """A retry's wait: simulated time spent, nothing waited for."""
        self.advance(seconds)
        await asyncio.sleep(0)


@dataclass(frozen=True, kw_only=True, slots=True)
class SeenCall:
    """One call and the envelope the model was shown for it.

    `resumed`: the envelope of a plan a resume executed (the call proposed it earlier).
    `host`: a repeat the host sent on its own (a second submission), not the model.
    """

    run_id: str
    step: int
    call: ToolCall
    envelope: Envelope
    resumed: bool = False
    host: bool = False


class Watcher(NoHooks):
    """Step hooks that keep every request sent to the model and every envelope shown."""

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []
        self.calls: list[SeenCall] = []
        self.resuming = False

    async def before_model(self, *, run_id: str, step: int, request: ModelRequest) -> None:
        """Keep the request: it is what the model saw."""
        del run_id, step
        self.requests.append(request)

    async def after_envelope(
        self, *, run_id: str, step: int, call: ToolCall, envelope: Envelope
    ) -> None:
        """Keep the call and its envelope; the first one after a resume is the plan's."""
        self.calls.append(
            SeenCall(run_id=run_id, step=step, call=call, envelope=envelope, resumed=self.resuming)
        )
        self.resuming = False


class RecordingModel:
    """Passes requests to a model and keeps its replies (their calls and token usage)."""

    def __init__(self, inner: ModelClient) -> None:
        self.name = inner.name
        self.inner = inner
        self.replies: list[ModelReply] = []

    async def complete(self, request: ModelRequest, *, timeout: float) -> ModelReply:
        """The inner model's reply, kept."""
        reply = await self.inner.complete(request, timeout=timeout)
        self.replies.append(reply)
        return reply


@dataclass(kw_only=True, slots=True)
class World:
    """Everything one scenario runs in; `open` builds it, `close` closes its store."""

    scenario: Scenario
    clock: EvalClock
    shop: Shop
    store: Store
    audit: MemoryAuditSink
    registry: Registry
    gate: Gate
    writes: Writes
    loop: AgentLoop
    reconciler: Reconciler
    watcher: Watcher
    model: RecordingModel
    host_calls: list[SeenCall] = field(default_factory=list)

    @classmethod
    def open(
        cls,
        scenario: Scenario,
        model: ModelClient,
        *,
        real_time: bool = False,
        sqlite: Path | None = None,
        telemetry: Telemetry | None = None,
    ) -> World:
        """A fresh world for `scenario`, driven by `model`; `sqlite`: the store's file.

        The file is replaced if it exists: each run of a scenario starts from nothing.
        """
        clock = EvalClock(real=real_time)
        shop = Shop(clock, latency=scenario.latency)
        if scenario.setup is not None:
            scenario.setup(shop)
        if sqlite is not None:
            sqlite.unlink(missing_ok=True)  # a store of an earlier run of this scenario
        store: Store = MemoryStore() if sqlite is None else SqliteStore.open(sqlite)
        audit = MemoryAuditSink()
        registry = Registry(clock=clock)
        for built in (*shop_tools(shop), *_extra(scenario, shop)):
            registry.register(built, actor="eval")
        shaper = Shaper(redactor=Redactor(hash_key=secrets.token_bytes(32)))
        keyring = Keyring(SigningKey("eval", secrets.token_bytes(32)))
        writes = Writes(
            registry,
            store,
            keyring,
            clock=clock,
            audit=audit,
            worker_id="eval-worker",
            new_id=sequential_ids("plan"),
            sleep=clock.sleep,
            shaper=shaper,
            telemetry=telemetry,
        )
        gate = Gate(
            registry,
            audit=audit,
            clock=clock,
            policy=shop_policy(shop) if scenario.policy is None else scenario.policy(shop),
            shaper=shaper,
            new_id=sequential_ids("event"),
            writes=writes,
            sleep=clock.sleep,
            telemetry=telemetry,
        )
        watcher = Watcher()
        recorded = RecordingModel(model)
        loop = AgentLoop(
            gate=gate,
            model=recorded,
            store=store,
            budget=scenario.budget,
            clock=clock,
            checker=EvidenceChecker(store, business_id_patterns=BUSINESS_IDS),
            writes=writes,
            new_run_id=sequential_ids("run"),
            hooks=watcher,
            telemetry=telemetry,
        )
        reconciler = Reconciler(registry, store, clock=clock, audit=audit, sleep=clock.sleep)
        return cls(
            scenario=scenario,
            clock=clock,
            shop=shop,
            store=store,
            audit=audit,
            registry=registry,
            gate=gate,
            writes=writes,
            loop=loop,
            reconciler=reconciler,
            watcher=watcher,
            model=recorded,
        )

    async def execute_again(self, plan_id: str) -> Envelope:
        """The person's confirmation submitted a second time: the plan executed again."""
        outcome = await self.writes.execute_plan(plan_id, self.scenario.principal)
        self.host_calls.append(
            SeenCall(
                run_id="host",
                step=0,
                call=ToolCall(id=f"host-{plan_id}", name=outcome.envelope.tool, arguments={}),
                envelope=outcome.envelope,
                host=True,
            )
        )
        return outcome.envelope

    def close(self) -> None:
        """Close the store."""
        self.store.close()


def _extra(scenario: Scenario, shop: Shop) -> tuple[Tool, ...]:
    return () if scenario.extra_tools is None else tuple(scenario.extra_tools(shop))
