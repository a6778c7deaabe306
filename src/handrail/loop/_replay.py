"""Replay: a stored run driven again from its task, and how it compares with the record.

`replay_session` sets a run up to be driven again (its recorded replies as the model,
its recorded principal and budget); reads go through the gate again while writes and
resumes are answered by their recorded outcomes; `replay_report` says what differs
(step outcomes, the end, and the toolset's changes). It
never runs a write again and stores nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from secrets import token_hex
from typing import TYPE_CHECKING

from handrail.adapters.transcript import Turn, UserTurn
from handrail.calls import ToolCall
from handrail.envelope import Envelope, ErrorDetail, Status, Trust
from handrail.errors import ErrorCode
from handrail.loop._agent_record import (
    CallOutcome,
    PendingPlan,
    RunData,
    StepLog,
    ToolsetChange,
)
from handrail.loop._session import PLANNED, Session, confirmed_text
from handrail.loop.budgets import BudgetTracker
from handrail.loop.models import ModelClient, ScriptedModelClient
from handrail.principal import Principal

if TYPE_CHECKING:
    from handrail.clock import Clock
    from handrail.gate import Gate
    from handrail.loop._agent_record import RunStatus
    from handrail.runs import RunRecord
    from handrail.shaping.marking import DataMarker

__all__ = [
    "ReplayReport",
    "replay_report",
    "replay_resumes",
    "replay_session",
    "replayed_calls",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class ReplayReport:
    """A replay against the recorded run: both step logs and ends, and what differs."""

    run_id: str
    recorded: tuple[StepLog, ...]
    replayed: tuple[StepLog, ...]
    recorded_end: str
    replayed_end: str
    differences: tuple[str, ...]

    @property
    def matched(self) -> bool:
        """True when every step's outcomes and the end are the recorded ones."""
        return not self.differences


def replay_session(
    recorded: RunData,
    *,
    run_id: str,
    clock: Clock,
    model: ModelClient | None,
    principal: Principal | None,
    history: Sequence[Turn] = (),
) -> Session:
    """A session that drives `recorded` again from its task after `history`, its budget started.

    The model is by default a ScriptedModelClient of the recorded replies; the
    principal is the recorded one; the budget has the recorded limits. The skills
    selected at the run's start stay active; every later toolset change is derived
    again from the replayed steps. The gate's
    conversation guard sees the replay as a conversation of its own, which starts
    empty as the run did, and never adds to what it remembers of the run.
    """
    tracker = BudgetTracker(recorded.limits, clock)
    fresh = dataclasses.replace(
        recorded,
        budget=tracker.snapshot(),
        # The task's turn as the run's model read it (with any skills selected at its start).
        transcript=recorded.transcript[:1] or (UserTurn(text=recorded.task),),
        replies=(),
        steps=(),
        pending=(),
        keys=(),
        toolset=tuple(change for change in recorded.toolset if change.step == 0),
        end=None,
    )
    session = Session.of(
        fresh,
        run_id=run_id,
        principal=principal or Principal.from_snapshot(recorded.principal),
        tracker=tracker,
        model=model or ScriptedModelClient(recorded.replies, record_requests=False),
        record=None,
        conversation=f"{run_id}:replay:{token_hex(8)}",
        history=history,
    )
    session.recorded = recorded
    session.keys = list(recorded.keys)
    tracker.start()
    return session


def replay_report(record: RunRecord, s: Session, status: RunStatus) -> ReplayReport:
    """How the replay in `s`, which ended with `status`, compares with the recorded run."""
    assert s.recorded is not None  # noqa: S101 - only replays get here
    recorded = s.recorded
    recorded_end = recorded.end.label() if recorded.end is not None else record.state.value
    replayed_end = s.data.end.label() if s.data.end is not None else status.value
    return ReplayReport(
        run_id=s.run_id,
        recorded=recorded.steps,
        replayed=tuple(s.steps),
        recorded_end=recorded_end,
        replayed_end=replayed_end,
        differences=(
            *_differences(recorded.steps, s.steps, recorded_end, replayed_end),
            *_toolset_differences(recorded.toolset, s.toolset),
        ),
    )


async def replayed_calls(gate: Gate, calls: Sequence[ToolCall], s: Session) -> list[Envelope]:
    """Reads through the gate again; writes answered by their recorded outcomes.

    The reads are told the session's exposure and conversation, as the run's were.
    """
    assert s.recorded is not None  # noqa: S101 - only replays use this runner
    index = len(s.steps)
    logged = s.recorded.steps[index].calls if index < len(s.recorded.steps) else ()
    by_id = {outcome.call_id: outcome for outcome in logged}
    reads: list[ToolCall] = []
    written: dict[str, Envelope] = {}
    for call in calls:
        tool = gate.registry.lookup(call.name, s.principal)
        if tool is None or tool.spec.read_only:
            reads.append(call)
        else:
            written[call.id] = _stand_in(call, by_id.get(call.id))
    envelopes = iter(
        await gate.handle_batch(
            reads,
            s.principal,
            timeout=s.tracker.remaining_seconds(),
            conversation=s.conversation,
            exposure=s.exposure,
        )
        if reads
        else []
    )
    return [written[call.id] if call.id in written else next(envelopes) for call in calls]


def replay_resumes(s: Session, marker: DataMarker) -> bool:
    """Apply the recorded resumes that followed this step; True when none is left."""
    assert s.recorded is not None  # noqa: S101 - only replays get here
    later = s.recorded.steps[len(s.steps) :]
    for step in later:
        if step.kind != "resume" or not step.calls:
            break
        # Matched by the proposing call's id: a replayed plan has no real plan id.
        pending = next((p for p in s.pending if p.call_id == step.calls[0].call_id), None)
        if pending is None:
            break
        s.pending.remove(pending)
        envelope = _stand_in(_call_named(pending), step.calls[0], executed=True)
        s.transcript.append(UserTurn(text=confirmed_text(pending, envelope, marker)))
        s.steps.append(step)
    return not s.pending


def _call_named(pending: PendingPlan) -> ToolCall:
    return ToolCall(id=pending.call_id, name=pending.tool, arguments=None)


def _stand_in(call: ToolCall, logged: CallOutcome | None, *, executed: bool = False) -> Envelope:
    """The recorded outcome of a write, as an envelope a replay shows the model."""
    what = "execution" if executed else "call"
    if logged is None:
        return Envelope(
            call_id=call.id,
            tool=call.name,
            status=Status.ERROR,
            summary="A replay does not run writes, and this one has no recorded outcome.",
            error=ErrorDetail(code=ErrorCode.RISK_BLOCKED),
            trust=Trust.HANDRAIL,
            source="handrail",
        )
    status = Status(logged.status)
    code = None if logged.code is None else ErrorCode(logged.code)
    return Envelope(
        call_id=call.id,
        tool=logged.tool,
        status=status,
        summary=f"Replayed: the recorded {what} of this write.",
        truncated=status is Status.TRUNCATED,
        error=None if code is None else ErrorDetail(code=code),
        data={"plan_id": f"replayed-{call.id}"} if code in PLANNED else None,
        trust=Trust.HANDRAIL,
        source="handrail",
    )


def _differences(
    recorded: Sequence[StepLog],
    replayed: Sequence[StepLog],
    recorded_end: str,
    replayed_end: str,
) -> tuple[str, ...]:
    found: list[str] = []
    for index in range(max(len(recorded), len(replayed))):
        if index >= len(recorded):
            found.append(f"step {index + 1}: only in the replay")
            continue
        if index >= len(replayed):
            found.append(f"step {index + 1}: only in the recorded run")
            continue
        found.extend(_step_differences(index + 1, recorded[index], replayed[index]))
    if recorded_end != replayed_end:
        found.append(f"end: recorded {recorded_end!r}, replayed {replayed_end!r}")
    return tuple(found)


def _toolset_differences(
    recorded: Sequence[ToolsetChange], replayed: Sequence[ToolsetChange]
) -> list[str]:
    """The toolset changes (discoveries, active skills) that differ, by step."""
    found: list[str] = []
    for index in range(max(len(recorded), len(replayed))):
        a = recorded[index] if index < len(recorded) else None
        b = replayed[index] if index < len(replayed) else None
        if a != b:
            found.append(
                f"toolset change {index + 1}: recorded {_change(a)}, replayed {_change(b)}"
            )
    return found


def _change(change: ToolsetChange | None) -> str:
    if change is None:
        return "none"
    return f"{change.kind} {list(change.names)} after step {change.step}"


def _step_differences(number: int, recorded: StepLog, replayed: StepLog) -> list[str]:
    if recorded.kind != replayed.kind:
        return [f"step {number}: recorded a {recorded.kind} step, replayed a {replayed.kind} step"]
    if [c.call_id for c in recorded.calls] != [c.call_id for c in replayed.calls]:
        return [f"step {number}: the calls differ"]
    return [
        f"step {number}: call {a.call_id!r} ({a.tool}) was {a.describe()}, replayed {b.describe()}"
        for a, b in zip(recorded.calls, replayed.calls, strict=True)
        if (a.tool, a.status, a.code) != (b.tool, b.status, b.code)
    ]
