"""One gate call as OpenTelemetry sees it: its `execute_tool` span, its stages, its measures.

Owns the call's span (current while the call runs, so that spans made in the tool, the
write path or the store nest under it), a child span `handrail.{stage}` per stage the
gate passed or refused at, and the call's measurements: the duration of each stage and
of the whole call, the count by status and code, and the values redacted by kind. It
stands in for the audit's CallTrail (the same methods, at the same stage boundaries)
and feeds it when the audit is on. Arguments and results never become attributes; the
redacted argument summary does only when the operator opted in.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from contextvars import Token
from typing import TYPE_CHECKING, Any, Final

from opentelemetry import context as otel_context
from opentelemetry.trace import SpanKind, StatusCode, set_span_in_context

from handrail.errors import ErrorCode
from handrail.record.audit import summarize_arguments
from handrail.telemetry import attributes as key

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span

    from handrail.calls import ToolCall
    from handrail.declare.definition import Tool
    from handrail.envelope import Envelope
    from handrail.principal import Principal
    from handrail.record.trail import CallTrail
    from handrail.telemetry import Telemetry
    from handrail.writes.outcome import WriteOutcome

__all__ = ["OTHER_TOOL", "CallSpans"]

OTHER_TOOL: Final = "_OTHER"
"""The tool name of measurements of a call whose name no registered tool has.

A model may propose any name: as a metric attribute it would have no bound.
"""

_EXECUTE_TOOL: Final = "execute_tool"
_CALL_STAGE: Final = "call"
_MAX_CALL_ID = 256
_FAILED: Final = frozenset({"error", "cancelled", "aborted"})
_PASSED: Final = frozenset({"pass", "ok"})
# Stages with spans of their own elsewhere: the write path makes plan/execute/reconcile
# spans under the call's; a failure of the gate itself ("gate") belongs to the call.
_NOT_A_STAGE: Final = frozenset({"write", "plan", "gate"})


class CallSpans:
    """The span and measurements of one call through the gate; the audit trail inside.

    Stages are noted as the gate passes them (`record`, after the stage), like the
    audit's; their spans are made then, with the stage's start and end times. The
    execute stage (`running`) and then the shape stage (`shaping`) are instead the
    current span while they run. `run` awaits the call inside the call's span.
    """

    __slots__ = (
        "_audit",
        "_context",
        "_epoch",
        "_mark",
        "_open",
        "_open_span",
        "_open_start",
        "_recording",
        "_scrub",
        "_span",
        "_started",
        "_telemetry",
        "_token",
        "_tool",
    )

    def __init__(
        self,
        telemetry: Telemetry,
        call: ToolCall,
        principal: Principal,
        *,
        name: str,
        audit: CallTrail | None,
        scrub: Callable[[str], str],
    ) -> None:
        """`name`: the tool name the call proposed, bounded and printable."""
        self._telemetry = telemetry
        self._audit = audit
        self._scrub = scrub
        self._tool: str | None = None  # a registered tool's name, once looked up
        # Stage times are read off the monotonic counter; span times are wall clock
        # derived from it, so a stage's span lasts exactly what its measurement says.
        self._started = self._mark = time.perf_counter_ns()
        self._epoch = time.time_ns()
        self._open: str | None = None
        self._open_span: Span | None = None
        self._open_start = 0
        self._token: Token[Context] | None = None
        self._span: Span | None = None
        self._context: Context | None = None
        self._recording = False
        if telemetry.tracing:
            span = telemetry.tracer.start_span(
                f"{_EXECUTE_TOOL} {name}",
                kind=SpanKind.INTERNAL,
                attributes={
                    key.GEN_AI_OPERATION_NAME: _EXECUTE_TOOL,
                    key.GEN_AI_TOOL_NAME: name,
                    key.GEN_AI_TOOL_CALL_ID: str(call.id)[:_MAX_CALL_ID],
                    key.GEN_AI_TOOL_TYPE: "function",
                    key.HANDRAIL_TENANT: principal.tenant_id,
                },
                start_time=self._epoch,
            )
            self._span = span
            self._context = set_span_in_context(span)
            # Not sampled: no stage spans either (their parent would not be kept).
            self._recording = span.is_recording()

    # --- what the gate notes, as it notes it for the audit ----------------------------------

    def tool(self, tool: Tool) -> None:
        """The call reached a registered tool: its name and risk level."""
        if self._audit is not None:
            self._audit.tool(tool)
        spec = tool.spec
        self._tool = spec.name
        if self._recording and self._span is not None:
            self._span.set_attributes(
                {
                    key.GEN_AI_TOOL_NAME: spec.name,
                    key.HANDRAIL_RISK: spec.risk.name,
                }
            )

    def arguments(self, arguments: object) -> None:
        """The parsed arguments: only their redacted summary, and only when opted in."""
        if self._audit is not None:
            self._audit.arguments(arguments)
        if self._telemetry.record_summaries and self._recording and self._span is not None:
            summary = self._scrub(summarize_arguments(arguments))
            self._span.set_attribute(key.HANDRAIL_ARGUMENTS_SUMMARY, summary)

    def raw_arguments(self, raw: object) -> None:
        """Arguments that could not be parsed: never shown, not even summarised."""
        if self._audit is not None:
            self._audit.raw_arguments(raw)
        if self._telemetry.record_summaries and self._recording and self._span is not None:
            self._span.set_attribute(key.HANDRAIL_ARGUMENTS_SUMMARY, "[unparsed]")

    def record(
        self,
        stage: str,
        decision: str,
        *,
        code: str | None = None,
        detail: str | None = None,
    ) -> None:
        """The outcome of `stage`: it ran from the previous stage's end until now."""
        if self._audit is not None:
            self._audit.record(stage, decision, code=code, detail=detail)
        now = time.perf_counter_ns()
        if self._open is not None:
            self._close(now, decision, code)
        elif stage not in _NOT_A_STAGE:
            self._stage(stage, self._mark, now, decision, code)
        self._mark = now

    def emit(self) -> None:
        """The call is over for the audit: its events go out (the span ends in `run`)."""
        if self._audit is not None:
            self._audit.emit()

    # --- the stages that are current while they run -----------------------------------------

    def running(self) -> None:
        """The tool starts: the execute stage is the current span until it returns."""
        self._begin("execute", self._mark)

    def shaping(self) -> None:
        """The tool returned: execute ends, the shape stage is current until `record`."""
        now = time.perf_counter_ns()
        self._close(now, "ok", None)
        self._mark = now
        self._begin("shape", now)

    # --- the call ---------------------------------------------------------------------------

    async def run(
        self, work: Coroutine[Any, Any, Envelope], outcomes: list[WriteOutcome]
    ) -> Envelope:
        """Await the call (`work`) with its span current, then end it by the envelope.

        `outcomes` is the list the gate appends a write's outcome to: its plan id, key
        hash and attempt become attributes.
        """
        token = None if self._context is None else otel_context.attach(self._context)
        try:
            envelope = await work
        except BaseException as exc:
            self._failed(exc)
            raise
        finally:
            if token is not None:
                otel_context.detach(token)
        self._finish(envelope, outcomes)
        return envelope

    def _finish(self, envelope: Envelope, outcomes: list[WriteOutcome]) -> None:
        now = time.perf_counter_ns()
        if self._open is not None:  # pragma: no cover - every path records its end
            self._close(now, "error", None)
        code = envelope.error_type
        status = envelope.status.value
        telemetry = self._telemetry
        span = self._span
        if span is not None:
            if self._recording:
                found: dict[str, str | int] = {key.HANDRAIL_STATUS: status}
                if code is not None:
                    found[key.HANDRAIL_ERROR_CODE] = code.value
                outcome = _outcome_of(envelope, outcomes)
                if outcome is not None:
                    found.update(_write_attributes(outcome))
                span.set_attributes(found)
                if code in key.FAILURES:
                    span.set_attribute(key.ERROR_TYPE, code.value)
                    span.set_status(StatusCode.ERROR)
            self._end(span, now)
        if telemetry.metering:
            tool = self._tool or OTHER_TOOL
            telemetry.tool_duration.record(
                (now - self._started) / 1e9,
                {key.GEN_AI_TOOL_NAME: tool, key.HANDRAIL_STAGE: _CALL_STAGE},
            )
            counted: dict[str, str] = {key.GEN_AI_TOOL_NAME: tool, key.HANDRAIL_STATUS: status}
            if code is not None:
                counted[key.HANDRAIL_ERROR_CODE] = code.value
            telemetry.tool_calls.add(1, counted)
            for kind, count in envelope.redacted.items():
                telemetry.redactions.add(
                    count, {key.GEN_AI_TOOL_NAME: tool, key.HANDRAIL_REDACTION_KIND: kind}
                )

    def _failed(self, exc: BaseException) -> None:
        """The call ended in an exception (cancelled, interrupted): no envelope came."""
        now = time.perf_counter_ns()
        if self._open is not None:  # pragma: no cover - the gate records it first
            self._close(now, "error", None)
        cancelled = isinstance(exc, asyncio.CancelledError)
        error = ErrorCode.CANCELLED.value if cancelled else type(exc).__qualname__
        span = self._span
        if span is not None:
            if self._recording:
                span.set_attributes({key.HANDRAIL_STATUS: "error", key.ERROR_TYPE: error})
                span.set_status(StatusCode.ERROR)
            self._end(span, now)
        telemetry = self._telemetry
        if telemetry.metering:
            tool = self._tool or OTHER_TOOL
            telemetry.tool_duration.record(
                (now - self._started) / 1e9,
                {key.GEN_AI_TOOL_NAME: tool, key.HANDRAIL_STAGE: _CALL_STAGE},
            )
            counted = {key.GEN_AI_TOOL_NAME: tool, key.HANDRAIL_STATUS: "error"}
            if cancelled:
                counted[key.HANDRAIL_ERROR_CODE] = error
            telemetry.tool_calls.add(1, counted)

    # --- internals --------------------------------------------------------------------------

    def _end(self, span: Span, now: int) -> None:
        """End the call's span; named after no tool if the name proposed was none of ours."""
        if self._tool is None:
            span.update_name(_EXECUTE_TOOL)
        span.end(end_time=self._at(now))

    def _at(self, perf_ns: int) -> int:
        """The wall-clock time (ns since the epoch) of a monotonic reading."""
        return self._epoch + (perf_ns - self._started)

    def _stage(self, stage: str, start: int, end: int, decision: str, code: str | None) -> None:
        """A stage that already ran: its span after the fact, and its duration."""
        if self._recording:
            span = self._child(stage, start)
            _outcome(span, decision, code)
            span.end(end_time=self._at(end))
        self._measure(stage, start, end)

    def _begin(self, stage: str, start: int) -> None:
        self._open, self._open_start = stage, start
        if self._recording:
            span = self._open_span = self._child(stage, start)
            self._token = otel_context.attach(set_span_in_context(span, self._context))

    def _child(self, stage: str, start: int) -> Span:
        return self._telemetry.tracer.start_span(
            f"handrail.{stage}",
            context=self._context,
            attributes={key.HANDRAIL_STAGE: stage},
            start_time=self._at(start),
        )

    def _close(self, end: int, decision: str, code: str | None) -> None:
        stage, span, token = self._open, self._open_span, self._token
        self._open = self._open_span = self._token = None
        if token is not None:
            otel_context.detach(token)
        if span is not None:
            _outcome(span, decision, code)
            span.end(end_time=self._at(end))
        if stage is not None:
            self._measure(stage, self._open_start, end)

    def _measure(self, stage: str, start: int, end: int) -> None:
        telemetry = self._telemetry
        if telemetry.metering:
            telemetry.tool_duration.record(
                (end - start) / 1e9,
                {key.GEN_AI_TOOL_NAME: self._tool or OTHER_TOOL, key.HANDRAIL_STAGE: stage},
            )


def _outcome(span: Span, decision: str, code: str | None) -> None:
    """A stage span's outcome: the code it refused with; ERROR only for a failure."""
    if decision in _PASSED:
        return
    if code is not None:
        span.set_attribute(key.HANDRAIL_ERROR_CODE, str(code))
    if decision in _FAILED or code in key.FAILURES:
        span.set_attribute(key.ERROR_TYPE, str(code or decision))
        span.set_status(StatusCode.ERROR)


def _outcome_of(envelope: Envelope, outcomes: list[WriteOutcome]) -> WriteOutcome | None:
    """The write outcome the gate appended for this envelope, if it was a write."""
    for outcome in reversed(outcomes):
        if outcome.envelope is envelope:
            return outcome
    return None


def _write_attributes(outcome: WriteOutcome) -> dict[str, str | int]:
    """Plan id, the idempotency key's hash (never the key) and the attempt of a write."""
    found: dict[str, str | int] = {}
    if outcome.plan_id is not None:
        found[key.HANDRAIL_PLAN_ID] = outcome.plan_id
    if outcome.key is not None:
        found[key.HANDRAIL_IDEMPOTENCY_KEY_HASH] = key.key_hash(outcome.key)
    if outcome.record is not None:
        found[key.HANDRAIL_ATTEMPT] = outcome.record.attempts
    return found
