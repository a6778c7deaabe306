"""One object that wires Handrail for an application: store, audit, gate, writes, agent loop.

Owns the default wiring only: the store opened by URL, one audit sink writing to that
store (on unless turned off), one Shaper shared by the Gate and Writes (full results
kept in the store for people), Writes signed by the application's keyring, telemetry
as the `OTEL_*` variables configure it, and an agent loop with bounded defaults. It
decides nothing about a call; the Gate does.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from handrail.clock import Clock, SystemClock
from handrail.declare.definition import Tool
from handrail.declare.registry import Registry
from handrail.errors import ConfigurationError
from handrail.gate import Gate
from handrail.record.audit import Auditor, AuditSink
from handrail.record.batching import BatchingAuditSink
from handrail.record.raw_results import RawResults
from handrail.shaping.redact import Redactor
from handrail.shaping.shaper import Shaper
from handrail.signing import SigningKey
from handrail.store import MemoryStore, open_store
from handrail.store.base import Store
from handrail.writes.confirmation import Keyring
from handrail.writes.service import Writes

if TYPE_CHECKING:
    import random

    from handrail.authz.guard import ConversationGuard
    from handrail.authz.policy import Policy
    from handrail.authz.quota import Limiter
    from handrail.calls import ToolCall
    from handrail.credentials import SecretLedger, SecretProvider
    from handrail.declare.exposure import Exposure
    from handrail.envelope import Envelope
    from handrail.loop.agent import AgentLoop
    from handrail.loop.budgets import RunBudget
    from handrail.loop.models import ModelClient
    from handrail.principal import Principal
    from handrail.telemetry import Telemetry

__all__ = ["MEMORY", "Handrail"]

MEMORY = "memory://"
"""The store URL of an in-memory store: nothing survives the process."""

_DRAIN_SECONDS = 30.0


class Handrail:
    """A registry's tools served through one Gate, with writes, audit and a store.

    Build it with `Handrail.open(...)`. `gate`, `writes`, `store`, `audit` and `registry`
    are the ordinary objects, shared: every event of the gate, the writes and a registry
    built here goes to `audit`. `close()` (or leaving a `with` / `async with` block)
    writes the queued audit events and closes what `open` opened; a store or sink passed
    in stays the caller's to close.
    """

    def __init__(
        self,
        *,
        registry: Registry,
        store: Store,
        gate: Gate,
        writes: Writes | None,
        audit: AuditSink | None,
        clock: Clock,
        owned_sink: BatchingAuditSink | None = None,
        owned_store: Store | None = None,
        telemetry: Telemetry | None = None,
        owned_telemetry: Telemetry | None = None,
    ) -> None:
        self._registry = registry
        self._store = store
        self._gate = gate
        self._writes = writes
        self._audit = audit
        self._clock = clock
        # What `close` closes: only what `open` opened, the sink before its store.
        self._owned_sink = owned_sink
        self._owned_store = owned_store
        self._telemetry = telemetry
        self._owned_telemetry = owned_telemetry
        self._closed = False

    @classmethod
    def open(
        cls,
        store: str | Path | Store,
        *,
        registry: Registry | Iterable[Tool],
        keyring: Keyring | None = None,
        audit: bool | AuditSink = True,
        clock: Clock | None = None,
        migrate: bool = True,
        policy: Policy | None = None,
        guard: ConversationGuard | None = None,
        limiter: Limiter | None = None,
        secrets: SecretProvider | None = None,
        ledger: SecretLedger | None = None,
        redaction_key: bytes | None = None,
        max_result_chars: int = 16_000,
        new_id: Callable[[], str] | None = None,
        rng: random.Random | None = None,
        telemetry: bool | Telemetry = True,
    ) -> Handrail:
        """Open `store` and wire a Gate and Writes over `registry`, audited into the store.

        `store`: a SQLite path or `sqlite:///path`, a `postgresql://` URL (migrated
        unless `migrate=False`), `MEMORY` for a store that dies with the process, or a
        Store you opened (and close). `registry`: a Registry, or tools to register in a
        new one whose registrations are audited too.

        `audit`: True writes every event to the store through a BatchingAuditSink;
        False records none; a sink of yours receives them instead. `keyring` signs
        confirmation tokens and must be the same in every process that shares the
        store (`Keyring.from_env()`, `Keyring.from_file(path)`). It is required when
        the registry holds a write tool, except over `MEMORY`, where a random key is
        drawn, since its plans die with the process too. Without a keyring and with no
        write tool there is no `writes`, and the gate refuses writes (RISK_BLOCKED).

        `telemetry`: True records traces and metrics as the standard `OTEL_*`
        variables configure them (`Telemetry.from_environment()`: nothing when none is
        set and the application installed no OpenTelemetry SDK), shut down on close;
        False records none; a Telemetry of yours is used (and stays yours to shut
        down). It goes to the Gate, the Writes and the loops `agent` makes.

        `redaction_key` keys the hashes of values redacted by hashing (random per
        process by default, so equal values hash equally only within one process).
        `clock`, `new_id` (event and plan ids), `rng` (retry jitter), `secrets` (tool
        credentials), `ledger` (the secret values handed out; a shared one for several
        workers), `policy`, `guard`, `limiter` and `max_result_chars` go to the Gate
        and Writes as they are.
        """
        clock = SystemClock() if clock is None else clock
        recorder, built = _telemetry(telemetry)
        try:
            opened, owned = _open(store, migrate=migrate)
        except BaseException:
            _shut_down(built)
            raise
        owned_store = opened if owned else None
        owned_sink: BatchingAuditSink | None = None
        try:
            sink: AuditSink | None
            if audit is True:
                sink = owned_sink = BatchingAuditSink(opened, clock=clock)
            else:
                sink = None if audit is False else audit
            tools = _registry(registry, sink, clock, new_id)
            keys = keyring if keyring is not None else _default_keyring(tools, opened)
            auditor = None if sink is None else Auditor(sink, clock, new_id=new_id)
            shaper = Shaper(
                redactor=Redactor(hash_key=redaction_key or _random_key()),
                raw=RawResults(opened, clock, auditor=auditor),
                max_chars=max_result_chars,
            )
            writes = None
            if keys is not None:
                writes = Writes(
                    tools,
                    opened,
                    keys,
                    clock=clock,
                    audit=sink,
                    new_id=new_id,
                    max_result_chars=max_result_chars,
                    rng=rng,
                    shaper=shaper,
                    secrets=secrets,
                    ledger=ledger,
                    telemetry=recorder,
                )
            gate = Gate(
                tools,
                audit=sink,
                clock=clock,
                policy=policy,
                limiter=limiter,
                guard=guard,
                max_result_chars=max_result_chars,
                shaper=shaper,
                secrets=secrets,
                ledger=ledger,
                new_id=new_id,
                writes=writes,
                rng=rng,
                telemetry=recorder,
            )
        except BaseException:
            try:
                _close(owned_sink, owned_store)
            finally:
                _shut_down(built)
            raise
        return cls(
            registry=tools,
            store=opened,
            gate=gate,
            writes=writes,
            audit=sink,
            clock=clock,
            owned_sink=owned_sink,
            owned_store=owned_store,
            telemetry=recorder,
            owned_telemetry=built,
        )

    # --- the parts ------------------------------------------------------------------------------

    @property
    def registry(self) -> Registry:
        """The tools the gate serves."""
        return self._registry

    @property
    def store(self) -> Store:
        """Where audit events, plans, executions, raw results and runs are kept."""
        return self._store

    @property
    def gate(self) -> Gate:
        """The gate every proposed call goes through."""
        return self._gate

    @property
    def writes(self) -> Writes:
        """Plans, confirmations and executions; ConfigurationError when writes are off."""
        if self._writes is None:
            raise ConfigurationError(
                "writes are off: open Handrail with a keyring to plan, confirm and run writes"
            )
        return self._writes

    @property
    def audit(self) -> AuditSink | None:
        """The sink every audit event goes to; None when auditing is off."""
        return self._audit

    @property
    def telemetry(self) -> Telemetry | None:
        """What the gate, the writes and the loops made here record to; None for nothing."""
        return self._telemetry

    @property
    def clock(self) -> Clock:
        """The clock of the gate, the writes and the loops made here."""
        return self._clock

    # --- conveniences ---------------------------------------------------------------------------

    async def handle(
        self,
        call: ToolCall,
        principal: Principal,
        *,
        timeout: float | None = None,
        conversation: str | None = None,
        exposure: Exposure | None = None,
        command_id: str | None = None,
    ) -> Envelope:
        """`gate.handle`: one call through every stage to its envelope."""
        return await self._gate.handle(
            call,
            principal,
            timeout=timeout,
            conversation=conversation,
            exposure=exposure,
            command_id=command_id,
        )

    async def handle_batch(
        self,
        calls: Sequence[ToolCall],
        principal: Principal,
        *,
        timeout: float | None = None,
        conversation: str | None = None,
        exposure: Exposure | None = None,
        command_ids: Mapping[str, str] | None = None,
    ) -> list[Envelope]:
        """`gate.handle_batch`: the calls of one model turn, envelopes in call order."""
        return await self._gate.handle_batch(
            calls,
            principal,
            timeout=timeout,
            conversation=conversation,
            exposure=exposure,
            command_ids=command_ids,
        )

    def agent(
        self,
        model: ModelClient,
        *,
        budget: RunBudget | None = None,
        **options: Any,  # noqa: ANN401 - passed on to AgentLoop as they are
    ) -> AgentLoop:
        """An AgentLoop for `model` over this gate, store, writes and clock.

        `budget` defaults to `handrail.loop.defaults.DEFAULT_BUDGET` (finite steps,
        deadline and tokens); the evidence checker reads this store; runs suspended on a
        plan resume in any process that opens the same store with the same keyring.
        Its `telemetry` is this Handrail's unless given. Other keywords (`system`,
        `exposure`, `checker`, ...) go to `AgentLoop`.
        """
        # The loop (and the provider adapters it renders with) loads only when asked for.
        from handrail.loop.defaults import agent_loop  # noqa: PLC0415

        options.setdefault("telemetry", self._telemetry)
        return agent_loop(
            gate=self._gate,
            model=model,
            store=self._store,
            writes=self._writes,
            clock=self._clock,
            budget=budget,
            **options,
        )

    # --- closing --------------------------------------------------------------------------------

    def close(self) -> None:
        """Write the queued audit events, then close the sink and the store `open` opened.

        Then the telemetry `open` built from the environment exports what it holds and
        shuts down. Raises AuditSinkError if events could not be written (the store is
        closed and the telemetry shut down anyway). A second call does nothing.
        """
        if self._closed:
            return
        self._closed = True
        try:
            _close(self._owned_sink, self._owned_store)
        finally:
            _shut_down(self._owned_telemetry)

    async def aclose(self) -> None:
        """`close` for async hosts: waits (bounded) for writes still held, then closes."""
        if self._writes is not None and not self._closed:
            await self._writes.executor.drain(_DRAIN_SECONDS)
        await asyncio.to_thread(self.close)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


# --- helpers ------------------------------------------------------------------------------------


def _random_key() -> bytes:
    """32 random bytes for a key that lives as long as the process."""
    return secrets.token_bytes(32)


def _open(store: str | Path | Store, *, migrate: bool) -> tuple[Store, bool]:
    """The store and whether it was opened here (and so is closed here)."""
    if isinstance(store, str | Path):
        if str(store) == MEMORY:
            return MemoryStore(), True
        return open_store(store, migrate=migrate), True
    return store, False


def _registry(
    given: Registry | Iterable[Tool],
    sink: AuditSink | None,
    clock: Clock,
    new_id: Callable[[], str] | None,
) -> Registry:
    if isinstance(given, Registry):
        return given
    registry = Registry(audit=sink, clock=clock, new_id=new_id)
    for tool in given:
        registry.register(tool)
    return registry


def _default_keyring(registry: Registry, store: Store) -> Keyring | None:
    """None when no tool writes; a random key for a memory store; otherwise refused."""
    if all(spec.read_only for spec in registry.specs()):
        return None
    if isinstance(store, MemoryStore):
        return Keyring(SigningKey("memory", _random_key()))
    raise ConfigurationError(
        "the registry has write tools: pass keyring=Keyring.from_env() or "
        "Keyring.from_file(path), the same in every process that shares this store"
    )


def _telemetry(given: bool | Telemetry) -> tuple[Telemetry | None, Telemetry | None]:
    """What records, and what of it `open` built from the environment (and shuts down)."""
    if given is False:
        return None, None
    if given is not True:
        return given, None
    # Loaded only here: with no OTEL_* variable set, OpenTelemetry is not even imported.
    from handrail.telemetry import Telemetry  # noqa: PLC0415

    built = Telemetry.from_environment()
    return built, built


def _shut_down(telemetry: Telemetry | None) -> None:
    if telemetry is not None:
        telemetry.shutdown()


def _close(sink: BatchingAuditSink | None, store: Store | None) -> None:
    """The sink's queued events written, then the store closed, even if writing failed."""
    try:
        if sink is not None:
            sink.close()
    finally:
        if store is not None:
            store.close()
