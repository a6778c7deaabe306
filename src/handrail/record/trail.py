"""The audit trail of one call: each stage's outcome and time, emitted together.

Stages only note their outcome and clock readings as the call goes; at the end the call
is handed over as one `CallRecord`, so every event of the call shares one subject (ids,
tool, argument hash and summary) and the events themselves are made only when read.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from handrail.canonical import canonical_json, sha256_hex
from handrail.clock import SystemClock
from handrail.errors import ErrorCode
from handrail.events import Stage
from handrail.record.audit import Auditor, summarize_arguments

if TYPE_CHECKING:
    from handrail.authz.guard import ConversationGuard
    from handrail.calls import ToolCall
    from handrail.clock import Clock
    from handrail.declare.definition import Tool
    from handrail.principal import Principal

__all__ = ["MAX_NAME_IN_AUDIT", "CallTrail", "StageNotes", "count_denial", "describe_exception"]

_MAX_DETAIL = 8000

MAX_NAME_IN_AUDIT = 128
"""Tool names as proposed are clipped to this many characters in audit rows."""


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

    Recording a stage only notes its outcome and clock readings; the record is emitted
    once, when the call is over, so every event of the call shares the same subject.
    """

    __slots__ = (
        "_args_hash",
        "_args_summary",
        "_auditor",
        "_call_id",
        "_mark",
        "_monotonic",
        "_now",
        "_principal",
        "_schema_version",
        "_stages",
        "_tool",
    )

    def __init__(
        self,
        auditor: Auditor,
        clock: Clock,
        call: ToolCall,
        principal: Principal,
    ) -> None:
        self._auditor = auditor
        # The system clock is read as `time.time_ns` and `time.monotonic`, the readings
        # its `now` and `monotonic` make: the datetime is made only when it is read.
        self._now: Callable[[], datetime | int]
        if type(clock) is SystemClock:
            self._now, self._monotonic = time.time_ns, time.monotonic
        else:
            self._now, self._monotonic = clock.now, clock.monotonic
        self._stages: list[Stage] = []
        self._mark = self._monotonic()
        self._principal = principal
        self._call_id = str(call.id)[:256]
        self._tool = str(call.name)[:MAX_NAME_IN_AUDIT]
        self._schema_version: str | None = None
        self._args_hash: str | None = None
        self._args_summary: str | None = None

    def tool(self, tool: Tool) -> None:
        """The call reached a registered tool: note its schema version."""
        self._schema_version = tool.spec.schema_version

    def arguments(self, arguments: object) -> None:
        """The parsed arguments: their hash and a short redacted summary."""
        try:
            digest = sha256_hex(canonical_json(arguments))
        except ValueError:
            digest = None
        self._args_hash = digest
        self._args_summary = summarize_arguments(arguments)

    def raw_arguments(self, raw: object) -> None:
        """Arguments that could not be parsed: their hash and size only."""
        if isinstance(raw, str):
            data = raw.encode("utf-8", "surrogatepass")
        elif isinstance(raw, bytes | bytearray | memoryview):
            data = bytes(raw)
        else:
            data = repr(type(raw)).encode()
        self._args_hash = sha256_hex(data)
        self._args_summary = f"[unparsed: {len(data)} bytes]"

    def record(
        self,
        stage: str,
        decision: str,
        *,
        code: str | None = None,
        detail: str | None = None,
    ) -> None:
        """Note the outcome of `stage` and the time it took since the previous one."""
        now = self._monotonic()
        self._stages.append((stage, decision, code, detail, now - self._mark, self._now()))
        self._mark = now

    def emit(self) -> None:
        """Emit one event per recorded stage, all about the same subject."""
        principal = self._principal
        subject = (
            principal.request_id,
            self._call_id,
            self._tool,
            self._schema_version,
            self._args_hash,
            self._args_summary,
            principal.user_id,
            principal.tenant_id,
        )
        self._auditor.emit_call(subject, tuple(self._stages))


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
