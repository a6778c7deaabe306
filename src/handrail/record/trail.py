"""The audit trail of one call: each stage's outcome and time, emitted together.

Stages only note their outcome and clock readings as the call goes; at the end the call
is handed over as one `CallRecord`, so every event of the call shares one subject (ids,
tool, argument hash and summary) and the events themselves are made only when read.
"""

from __future__ import annotations

import time
import traceback
from typing import TYPE_CHECKING, Any, Protocol

from handrail.canonical import sha256_hex
from handrail.clock import SystemClock
from handrail.errors import ErrorCode

if TYPE_CHECKING:
    from handrail.authz.guard import ConversationGuard
    from handrail.calls import ToolCall
    from handrail.clock import Clock
    from handrail.declare.definition import Tool
    from handrail.principal import Principal
    from handrail.record.audit import Auditor

__all__ = ["MAX_NAME_IN_AUDIT", "CallTrail", "StageNotes", "count_denial", "describe_exception"]

_MAX_DETAIL = 8000

MAX_NAME_IN_AUDIT = 128
"""Tool names as proposed are clipped to this many characters in audit rows."""

_monotonic_ns = time.monotonic_ns


class StageNotes(Protocol):
    """What a stage's outcome is noted in: a CallTrail, or telemetry's stand-in for one."""

    def record(
        self,
        stage: str,
        decision: str,
        *,
        code: str | None = None,
        detail: str | None = None,
    ) -> None:
        """Note the outcome of `stage`."""


class CallTrail:
    """Times one call's stages; at the end, emits one event per stage about one subject.

    Recording a stage only notes its outcome and a clock reading; the record is emitted
    once, when the call is over, so every event of the call shares the same subject.
    Everything is noted in one flat list, kept as one tuple (see `CallNotes`).
    """

    __slots__ = ("_auditor", "_clock", "_notes", "_raw")

    def __init__(
        self,
        auditor: Auditor,
        clock: Clock,
        call: ToolCall,
        principal: Principal,
    ) -> None:
        self._auditor = auditor
        self._raw = call.arguments
        # The system clock is read once a stage, as `time.monotonic_ns`: when a stage
        # ended is the wall clock read at the start plus the monotonic time since, the
        # wall clock read first so that it is never later than the stage's end. Any
        # other clock is read as it always was: `monotonic`, then `now`, each stage.
        system = type(clock) is SystemClock
        self._clock: Clock | None = None if system else clock
        self._notes: list[Any] = [
            principal.request_id,
            str(call.id)[:256],
            str(call.name)[:MAX_NAME_IN_AUDIT],
            None,  # schema version
            None,  # arguments hash
            None,  # arguments summary
            principal.user_id,
            principal.tenant_id,
            time.time_ns() if system else None,
            _monotonic_ns() if system else clock.monotonic(),
        ]

    def tool(self, tool: Tool) -> None:
        """The call reached a registered tool: note its schema version."""
        self._notes[3] = tool.spec.schema_version

    def arguments(self, arguments: object) -> None:
        """The arguments the call's text parsed to: their hash and a short redacted summary."""
        self._notes[4:6] = self._auditor.arguments(self._raw, arguments)

    def raw_arguments(self, raw: object) -> None:
        """Arguments that could not be parsed: their hash and size only."""
        if isinstance(raw, str):
            data = raw.encode("utf-8", "surrogatepass")
        elif isinstance(raw, bytes | bytearray | memoryview):
            data = bytes(raw)
        else:
            data = repr(type(raw)).encode()
        self._notes[4:6] = (sha256_hex(data), f"[unparsed: {len(data)} bytes]")

    def record(
        self,
        stage: str,
        decision: str,
        *,
        code: str | None = None,
        detail: str | None = None,
    ) -> None:
        """Note the outcome of `stage`; it took the time since the previous one ended."""
        clock = self._clock
        if clock is None:
            self._notes += (stage, decision, code, detail, _monotonic_ns(), None)
        else:
            self._notes += (stage, decision, code, detail, clock.monotonic(), clock.now())

    def emit(self) -> None:
        """Emit one event per recorded stage, all about the same subject."""
        self._auditor.emit_noted(tuple(self._notes))


async def count_denial(
    guard: ConversationGuard,
    *,
    principal: Principal,
    conversation: str,
    tool: str,
    target: str | None,
    trail: StageNotes | None,
) -> None:
    """Tell the guard about a PERMISSION_DENIED; audit the breaker when this one trips it.

    The envelope is already a refusal; a guard whose state cannot be written must not
    turn it into an exception, so a failure here is audited and the refusal stands.
    """
    try:
        tripped = await guard.record_denial(principal, conversation, tool=tool, target=target)
    except Exception as exc:  # noqa: BLE001 - the gate's boundary: the refusal is already made
        if trail:
            trail.record("guard", "error", detail=describe_exception(exc))
        return
    if tripped and trail:
        trail.record(
            "guard",
            "tripped",
            code=ErrorCode.BUDGET_EXHAUSTED,
            detail=(
                f"breaker: {guard.max_denials} denials in this conversation; every further "
                f"call in it is refused"
            ),
        )


def describe_exception(exc: BaseException) -> str:
    """Full text of an exception for the audit log (operators only), bounded.

    Both ends are kept: the head names the frames and the exception type, the tail the
    end of the message, so a huge message cannot push out what the error was.
    """
    text = "".join(traceback.format_exception(exc))
    if len(text) <= _MAX_DETAIL:
        return text
    half = (_MAX_DETAIL - 40) // 2
    return f"{text[:half]}\n…[{len(text) - 2 * half} characters cut]…\n{text[-half:]}"
