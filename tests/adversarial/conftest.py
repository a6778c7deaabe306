"""Fixtures for attacks: a probe tool that records every run, and strict checks.

`refuse` and `accept` send arguments to the probe; `wire` checks what a model would
read; `untouched` checks that a refused call ran nothing.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

import pytest
from pydantic import Field

from handrail import (
    Envelope,
    ErrorCode,
    Gate,
    Principal,
    Registry,
    RiskLevel,
    Status,
    ToolCall,
    tool,
)
from handrail.testing import MemoryAuditSink

WireCheck = Callable[[Envelope, ToolCall], dict[str, Any]]
Untouched = Callable[[ToolCall, str | None], None]
Refuse = Callable[..., Awaitable[dict[str, Any]]]
Accept = Callable[[object], Awaitable[dict[str, object]]]

# An envelope is read by a model; whatever the attack, it stays this small.
MAX_ENVELOPE_CHARS = 8_000


def _no_constants(name: str) -> object:
    msg = f"{name} is not JSON"
    raise ValueError(msg)


@pytest.fixture
def received() -> list[dict[str, object]]:
    """Every set of arguments the probe tool ran with, in order."""
    return []


@pytest.fixture
def probe(registry: Registry, received: list[dict[str, object]]) -> str:
    """Registers `probe.echo` (every parameter optional) and returns its name."""

    @tool(risk=RiskLevel.L0_PUBLIC_READ, namespace="probe")
    async def echo(
        note: Annotated[str, Field(max_length=10_000)] = "",
        count: int = 0,
    ) -> dict[str, object]:
        """Return the arguments it was given."""
        arguments: dict[str, object] = {"note": note, "count": count}
        received.append(arguments)
        return arguments

    registry.register(echo)
    return echo.name


@pytest.fixture
def wire() -> WireCheck:
    """Check what the model would read: same call id, strict JSON, UTF-8, bounded."""

    def check(envelope: Envelope, call: ToolCall) -> dict[str, Any]:
        assert envelope.call_id == call.id
        text = envelope.to_json()
        text.encode("utf-8")  # raises on anything a wire could not carry
        assert len(text) <= MAX_ENVELOPE_CHARS + len(call.id)
        shown: dict[str, Any] = json.loads(text, parse_constant=_no_constants)
        assert shown["status"] == envelope.status.value
        return shown

    return check


@pytest.fixture
def untouched(audit: MemoryAuditSink, received: list[dict[str, object]]) -> Untouched:
    """Assert that a refused call ran nothing: no tool body, no execute stage.

    With a `stage`, the refusal must have come from that stage.
    """

    def check(call: ToolCall, stage: str | None = None) -> None:
        assert received == []
        events = audit.for_call(call.id)
        assert events, "every call leaves an audit trail"
        assert events[-1].decision == "refused"
        assert stage is None or events[-1].stage == stage
        assert all(event.stage != "execute" for event in events)
        assert all(len(event.args_summary or "") <= 512 for event in events)

    return check


@pytest.fixture
def refuse(
    gate: Gate,
    principal: Principal,
    probe: str,
    wire: WireCheck,
    untouched: Untouched,
) -> Refuse:
    """`await refuse(arguments)`: send an attack to the probe, expect INVALID_ARGUMENTS.

    The refusal must come from `stage` (stage 1, syntax, unless told otherwise). Returns
    the envelope as the model would read it, after checking that nothing ran.
    """

    async def attempt(
        arguments: object,
        *,
        name: str | None = None,
        call_id: str = "call_attack",
        stage: str = "syntax",
    ) -> dict[str, Any]:
        call = ToolCall(id=call_id, name=name or probe, arguments=arguments)  # type: ignore[arg-type]
        envelope = await gate.handle(call, principal)
        assert envelope.status is Status.ERROR
        assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS
        assert envelope.retryable
        untouched(call, stage)
        return wire(envelope, call)

    return attempt


@pytest.fixture
def accept(
    gate: Gate,
    principal: Principal,
    probe: str,
    received: list[dict[str, object]],
    wire: WireCheck,
) -> Accept:
    """`await accept(arguments)`: the probe runs once; returns what it received."""

    async def attempt(arguments: object) -> dict[str, object]:
        call = ToolCall(id="call_ok", name=probe, arguments=arguments)  # type: ignore[arg-type]
        envelope = await gate.handle(call, principal)
        assert envelope.status is Status.OK
        wire(envelope, call)
        assert len(received) == 1
        return received[0]

    return attempt
