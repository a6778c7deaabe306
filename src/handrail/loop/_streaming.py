"""How a drive of the agent loop reaches its hooks and its stream, and ends when stopped.

`Observer` is a session's link to the host: the hooks, and the sink of a streamed run.
`ask`, `proposed`, `shown`, `resumed` and `suspended` are the loop's insertion points;
`observed` wraps a drive so that a cancelled run, one whose hook raised and one an
unexpected exception stopped are stored FAILED rather than left RUNNING; `streamed`
turns a run into its events. It never decides a call, and what it passes on is what
the loop already used.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TypeVar

from handrail.errors import AccessRefusedError, ErrorCode
from handrail.loop._agent_record import RunStatus
from handrail.loop._visible import VisibleText
from handrail.loop.events import (
    BudgetStopped,
    CallEnvelope,
    CallProposed,
    LoopEvent,
    ModelTextDelta,
    PlanAwaitingConfirmation,
    RunFailed,
    RunFinished,
    RunSuspended,
    TerminalEvent,
)
from handrail.loop.hooks import HOOK_FAILED, HookFailedError, NoHooks, StepHooks
from handrail.loop.models import ModelClient, ModelError, ModelReply, StreamingModelClient
from handrail.runs import RunState

if TYPE_CHECKING:
    from handrail.adapters.transcript import Turn
    from handrail.calls import ToolCall
    from handrail.envelope import Envelope
    from handrail.loop._agent_record import PendingPlan
    from handrail.loop._telemetry import LoopTelemetry
    from handrail.loop.answers import CheckedAnswer, TextCheck
    from handrail.loop.budgets import BudgetTracker, BudgetTrip
    from handrail.loop.final import RunAnswer
    from handrail.loop.models import ModelRequest
    from handrail.runs import RunRecord

__all__ = [
    "INTERNAL",
    "Observer",
    "ask",
    "observed",
    "proposed",
    "resumed",
    "shown",
    "streamed",
    "suspending",
]

Sink = Callable[[LoopEvent], Awaitable[None]]
"""Takes one event; returns once the stream's reader has taken it."""

INTERNAL = "INTERNAL"
"""The error a run is stored FAILED with when an unexpected exception stopped it."""

_SINK: ContextVar[Sink | None] = ContextVar("handrail_loop_sink", default=None)
"""The sink `streamed` sets in its drive task, for the first drive there to take."""


@dataclass(kw_only=True, slots=True)
class Observer:
    """A session's hooks and stream sink; quiet (no hooks, no sink) until `observed`."""

    run_id: str = ""
    hooks: StepHooks = field(default_factory=NoHooks)
    sink: Sink | None = None
    attached: bool = False
    envelopes: dict[str, Envelope] = field(default_factory=dict)
    """The last batch's envelopes by call id, for the plans a suspension reports."""

    @property
    def hooked(self) -> bool:
        """False for the default `NoHooks`: the loop then skips the hook calls entirely."""
        return type(self.hooks) is not NoHooks

    async def emit(self, event: LoopEvent) -> None:
        """Hand `event` to the stream, if any, and wait until its reader took it."""
        if self.sink is not None:
            await self.sink(event)

    async def hook(
        self, name: str, hook: Callable[..., Awaitable[None]], **arguments: object
    ) -> None:
        """Await one hook; whatever it raises ends the run as HookFailedError."""
        try:
            await hook(run_id=self.run_id, **arguments)
        except Exception as exc:  # a host's hook is a boundary: any failure is reported as one
            raise HookFailedError(name) from exc


class Observed(Protocol):
    """What the insertion points read of a session (`_session.Session`)."""

    @property
    def run_id(self) -> str: ...
    @property
    def conversation(self) -> str: ...
    @property
    def model(self) -> ModelClient: ...
    @property
    def tracker(self) -> BudgetTracker: ...
    @property
    def transcript(self) -> Sequence[Turn]: ...
    @property
    def pending(self) -> Sequence[PendingPlan]: ...
    @property
    def recorded(self) -> object: ...

    record: RunRecord | None
    observer: Observer


S = TypeVar("S", bound=Observed)


# --- the loop's insertion points -------------------------------------------------------------


async def ask(
    s: Observed, request: ModelRequest, telemetry: LoopTelemetry | None = None
) -> ModelReply:
    """The model's reply to `request`; streamed as deltas when the run is streamed.

    With `telemetry`, the exchange with the model (not the hook before it) is a span.
    """
    step, observer = s.tracker.steps, s.observer
    if observer.hooked:
        await observer.hook("before_model", observer.hooks.before_model, step=step, request=request)
        s.tracker.check_deadline()  # the hook's time is the run's
    if telemetry is None:
        return await _reply(s, step, request)
    return await telemetry.chat(s.model.name, s.conversation, lambda: _reply(s, step, request))


async def _reply(s: Observed, step: int, request: ModelRequest) -> ModelReply:
    timeout = s.tracker.remaining_seconds()
    if s.observer.sink is None or not isinstance(s.model, StreamingModelClient):
        return await s.model.complete(request, timeout=timeout)
    items = s.model.stream(request, timeout=timeout)
    visible = VisibleText()  # a structured final answer shows only its message
    try:
        async for item in items:
            if isinstance(item, ModelReply):
                await _show(s, step, visible.finish(item.text or ""))
                return item
            await _show(s, step, visible.feed(item.text))
    finally:
        close = getattr(items, "aclose", None)
        if close is not None:
            await close()
    msg = "the model's stream ended without a reply"
    raise ModelError(msg, provider=s.model.name, code=ErrorCode.FAILED_FINAL)


async def _show(s: Observed, step: int, text: str) -> None:
    if text:
        await s.observer.emit(ModelTextDelta(run_id=s.run_id, step=step, text=text))


async def proposed(s: Observed, calls: Sequence[ToolCall]) -> None:
    """Each admitted call, before the gate sees it (a copy: the reader cannot alter it)."""
    if s.observer.sink is None:
        return
    for call in calls:
        await s.observer.emit(CallProposed(run_id=s.run_id, step=s.tracker.steps, call=_copy(call)))


async def shown(s: Observed, calls: Sequence[ToolCall], envelopes: Sequence[Envelope]) -> None:
    """Each call's envelope, once the turn's transcript, log and plans are taken from it."""
    observer, step = s.observer, s.tracker.steps
    observer.envelopes = {}
    for call, envelope in zip(calls, envelopes, strict=True):
        observer.envelopes[call.id] = envelope
        if observer.hooked:
            await observer.hook(
                "after_envelope",
                observer.hooks.after_envelope,
                step=step,
                call=_copy(call),
                envelope=envelope,
            )
        if observer.sink is not None:
            await observer.emit(
                CallEnvelope(run_id=s.run_id, step=step, call_id=call.id, envelope=envelope)
            )


async def resumed(s: Observed, call_id: str, envelope: Envelope) -> None:
    """The envelope of a plan a resume executed, for the call that proposed it."""
    calls = [c for turn in s.transcript for c in getattr(turn, "calls", ()) if c.id == call_id]
    if calls:
        await shown(s, calls[-1:], [envelope])


async def suspending(s: Observed) -> None:
    """After the run was stored SUSPENDED: the hook, then this step's new plans."""
    observer, step = s.observer, s.tracker.steps
    plan_ids = tuple(plan.plan_id for plan in s.pending)
    await observer.hook("on_suspend", observer.hooks.on_suspend, plan_ids=plan_ids)
    for plan in s.pending:
        envelope = observer.envelopes.get(plan.call_id)
        if envelope is None or envelope.error is None:
            continue  # an earlier step's plan, reported when that step suspended
        data: Mapping[str, object] = envelope.data if isinstance(envelope.data, Mapping) else {}
        impact, expires_at = data.get("impact"), data.get("expires_at")
        await observer.emit(
            PlanAwaitingConfirmation(
                run_id=s.run_id,
                step=step,
                plan_id=plan.plan_id,
                call_id=plan.call_id,
                tool=plan.tool,
                code=envelope.error.code,
                summary=envelope.summary,
                impact=copy.deepcopy(impact) if isinstance(impact, Mapping) else None,
                expires_at=expires_at if isinstance(expires_at, str) else None,
            )
        )


@asynccontextmanager
async def observed(
    s: S, hooks: StepHooks | None, end: Callable[[S, str], Awaitable[object]]
) -> AsyncIterator[None]:
    """Attach the hooks (and a stream's sink) to a live session; end it if it is stopped.

    Inside, a cancellation stores the run FAILED with CANCELLED, a raising hook FAILED
    with HOOK_FAILED and any other exception (a store error, a checker's bug) FAILED
    with INTERNAL, each re-raised; a refusal (another process moved the run) and a run
    already stored as stopped (SUSPENDED, FINISHED, FAILED) stay as they are. A replay
    (nothing stored) is never observed.
    """
    if s.recorded is None and not s.observer.attached:
        sink = _SINK.get()
        _SINK.set(None)  # a run started inside this one (by a tool) is not streamed here
        s.observer = Observer(run_id=s.run_id, hooks=hooks or NoHooks(), sink=sink, attached=True)
    try:
        yield
    except asyncio.CancelledError:
        await _store_end(s, end, ErrorCode.CANCELLED.value)
        raise
    except HookFailedError:
        await _store_end(s, end, HOOK_FAILED)
        raise
    except AccessRefusedError:
        raise  # another process moved the run (CONFLICT): it is theirs to end
    except Exception as exc:
        await _store_failure(s, end, exc)
        raise


async def _store_end(s: S, end: Callable[[S, str], Awaitable[object]], code: str) -> None:
    if s.record is None or s.record.state is not RunState.RUNNING:
        return
    try:
        await end(s, code)
    except AccessRefusedError:
        # A store write was under way when the task was cancelled, and it landed.
        s.record = s.record.advanced(at=s.record.updated_at)
        await end(s, code)


async def _store_failure(
    s: S, end: Callable[[S, str], Awaitable[object]], error: Exception
) -> None:
    """Store a run that `error` stopped FAILED with INTERNAL, if it is still RUNNING.

    Only from the version this drive last stored (never over another's write). When
    that fails too (the store is down, or its last write landed unseen), the run is
    left as it is, to be cancelled once its deadline has passed (`AgentLoop.cancel`),
    and `error` propagates all the same, with a note.
    """
    if s.record is None or s.record.state is not RunState.RUNNING:
        return
    try:
        await end(s, INTERNAL)
    except Exception as exc:  # noqa: BLE001 - the run's own error propagates, not this one
        error.add_note(f"handrail: the run could not be stored FAILED ({type(exc).__name__})")


def _copy(call: ToolCall) -> ToolCall:
    if isinstance(call.arguments, Mapping):
        return dataclasses.replace(call, arguments=copy.deepcopy(dict(call.arguments)))
    return call


# --- the stream ------------------------------------------------------------------------------


class Outcome(Protocol):
    """What `streamed` reads of a `RunOutcome`."""

    @property
    def run_id(self) -> str: ...
    @property
    def status(self) -> RunStatus: ...
    @property
    def steps(self) -> int: ...
    @property
    def final(self) -> RunAnswer | None: ...
    @property
    def answer(self) -> CheckedAnswer | None: ...
    @property
    def text(self) -> str | None: ...
    @property
    def text_check(self) -> TextCheck | None: ...
    @property
    def plan_ids(self) -> tuple[str, ...]: ...
    @property
    def trip(self) -> BudgetTrip | None: ...
    @property
    def error(self) -> str | None: ...


@dataclass(frozen=True, kw_only=True, slots=True)
class _End:
    event: TerminalEvent | None = None
    error: BaseException | None = None


async def streamed(start: Callable[[], Awaitable[Outcome]]) -> AsyncGenerator[LoopEvent, None]:
    """The events of the run `start` drives, live, ending with the terminal one.

    The run is driven in a task of its own that waits at each event until the reader
    asks for the next, so a reader that stops stops the run: closing the generator or
    cancelling its reader cancels the task (see `observed`) and waits for it to end.
    An error of the run is raised to the reader.
    """
    queue: asyncio.Queue[LoopEvent | _End] = asyncio.Queue()

    async def sink(event: LoopEvent) -> None:
        queue.put_nowait(event)
        await queue.join()

    async def drive() -> None:
        _SINK.set(sink)
        try:
            outcome = await start()
        except BaseException as exc:  # handed to the reader, which raises it
            queue.put_nowait(_End(error=exc))
            if not isinstance(exc, Exception):
                raise
        else:
            queue.put_nowait(_End(event=_terminal(outcome)))

    task = asyncio.create_task(drive())
    try:
        while True:
            item = await queue.get()
            if isinstance(item, _End):
                if item.event is None:
                    raise item.error or asyncio.CancelledError
                yield item.event
                return
            yield item
            queue.task_done()
    finally:
        task.cancel()
        await asyncio.wait({task})


def _terminal(outcome: Outcome) -> TerminalEvent:
    run_id, steps = outcome.run_id, outcome.steps
    if outcome.status is RunStatus.FINISHED:
        return RunFinished(
            run_id=run_id,
            steps=steps,
            final=outcome.final,
            answer=outcome.answer,
            text=outcome.text,
            text_check=outcome.text_check,
        )
    if outcome.status is RunStatus.SUSPENDED:
        return RunSuspended(run_id=run_id, steps=steps, plan_ids=outcome.plan_ids)
    if outcome.status is RunStatus.BUDGET_EXHAUSTED and outcome.trip is not None:
        return BudgetStopped(run_id=run_id, steps=steps, trip=outcome.trip)
    return RunFailed(run_id=run_id, steps=steps, error=outcome.error or RunStatus.FAILED.value)
