"""A task's trace: its submitter's context carried in the submission, its run a span.

`stamped(submission)` gives a submission that carries no trace context the current
span's `traceparent` / `tracestate` (a runner's `submit`, in the submitter's context);
`task_trace(telemetry, submission)` is the CONSUMER span `handrail.task {tool}` a
worker runs the task under, whose parent is that carried context (the trace of the
call that submitted it, in whichever process; a trace of its own without one). With no
telemetry it is `UNTRACED`, which records nothing and imports no part of OpenTelemetry.
Never decides anything about a task: runners report its moves here as they make them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Final

from handrail.tasking import TaskState
from handrail.tasks.runner import TaskFailure, TaskSubmission

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from handrail.telemetry import Telemetry

__all__ = ["UNTRACED", "TaskTrace", "stamped", "task_trace"]

_FAILED: Final = frozenset({TaskState.FAILED, TaskState.EXPIRED})


class TaskTrace:
    """What one run of a task tells its span: its attempts and how it ended. Records nothing."""

    __slots__ = ()

    def attempt(self, attempt: int) -> None:
        """Attempt `attempt` (1-based) of the task begins on this worker."""

    def ended(self, state: TaskState, failure: TaskFailure | None = None) -> None:
        """The run ended the task in `state` (with `failure`'s code when it failed)."""


UNTRACED: Final = TaskTrace()
"""The trace of a runner without telemetry: every report is a no-op."""


class _SpanTrace(TaskTrace):
    __slots__ = ("_span", "ended_as")

    def __init__(self, span: Span) -> None:
        self._span = span
        self.ended_as: TaskState | None = None

    def attempt(self, attempt: int) -> None:
        from handrail.telemetry import attributes  # noqa: PLC0415 - loaded with the span

        self._span.set_attribute(attributes.HANDRAIL_ATTEMPT, attempt)

    def ended(self, state: TaskState, failure: TaskFailure | None = None) -> None:
        from handrail.telemetry import attributes  # noqa: PLC0415 - telemetry on
        from handrail.telemetry.spans import failed  # noqa: PLC0415

        self.ended_as = state
        self._span.set_attribute(attributes.HANDRAIL_OUTCOME, state.value)
        if failure is not None:
            self._span.set_attribute(attributes.HANDRAIL_ERROR_CODE, failure.code.value)
        if state in _FAILED:
            failed(self._span, state.value if failure is None else failure.code.value)


def stamped(submission: TaskSubmission) -> TaskSubmission:
    """`submission` carrying the current span's trace context, unless it carries one already."""
    if submission.traceparent is not None:
        return submission
    from handrail.telemetry.propagation import TRACEPARENT, TRACESTATE, current  # noqa: PLC0415

    carrier = current()
    if TRACEPARENT not in carrier:
        return submission
    return dataclasses.replace(
        submission, traceparent=carrier[TRACEPARENT], tracestate=carrier.get(TRACESTATE)
    )


def task_trace(
    telemetry: Telemetry | None, submission: TaskSubmission
) -> AbstractContextManager[TaskTrace]:
    """The span one run of `submission` happens in (current while it runs); UNTRACED for none."""
    if telemetry is None:
        return nullcontext(UNTRACED)
    return _traced(telemetry, submission)


@contextmanager
def _traced(telemetry: Telemetry, submission: TaskSubmission) -> Iterator[TaskTrace]:
    from opentelemetry import trace  # noqa: PLC0415 - telemetry on
    from opentelemetry.context import Context  # noqa: PLC0415
    from opentelemetry.trace import SpanKind  # noqa: PLC0415

    from handrail.telemetry import attributes  # noqa: PLC0415
    from handrail.telemetry.propagation import context_of  # noqa: PLC0415
    from handrail.telemetry.spans import failed  # noqa: PLC0415

    parent = None
    if submission.traceparent is not None:
        parent = context_of(submission.traceparent, submission.tracestate)
    span = telemetry.tracer.start_span(
        f"handrail.task {submission.tool}",
        # Without a carried parent the run starts a trace of its own, whatever is ambient.
        context=parent if parent is not None else Context(),
        kind=SpanKind.CONSUMER,
        attributes={
            attributes.GEN_AI_TOOL_NAME: submission.tool,
            attributes.HANDRAIL_TASK_ID: submission.task_id,
            attributes.HANDRAIL_TENANT: submission.tenant_id,
        },
    )
    traced = _SpanTrace(span)
    with trace.use_span(
        span, end_on_exit=True, record_exception=False, set_status_on_exception=False
    ):
        try:
            yield traced
        except Exception as exc:
            # An end the run did not report (the engine stopped it, a store failed):
            # named by its type alone, its message may carry data.
            if traced.ended_as is None:
                failed(span, type(exc).__qualname__)
            raise
