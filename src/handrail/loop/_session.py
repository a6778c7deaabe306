"""The working state of one run while the loop drives it, and what a turn adds to it.

`Session` holds a run's transcript (its history, then its own turns), replies, step
log, pending plans and execution keys between two stored versions; `pending_plans`
reads the plans a turn proposed, `command_keys` the keys of the writes a turn ran,
`execute_pending` runs a plan a person confirmed, and `confirmed_text` and
`not_executed` word that confirmation and its outcome for the model. It never asks a
model or stores anything.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from handrail.adapters.transcript import AssistantTurn, CallIdLedger, Turn
from handrail.errors import AccessRefusedError, ErrorCode, WriteRefusedError
from handrail.execution import command_key
from handrail.loop._agent_record import PendingPlan, RunData, RunEnd, StepLog, ToolsetChange
from handrail.loop._run_log import RunLog
from handrail.loop._streaming import Observer
from handrail.loop.budgets import BudgetTracker
from handrail.loop.models import ModelClient, ModelReply
from handrail.principal import Principal
from handrail.runs import RunRecord
from handrail.spec import IdempotencyMode

if TYPE_CHECKING:
    from handrail.calls import ToolCall
    from handrail.declare.exposure import Exposure
    from handrail.declare.registry import Registry
    from handrail.envelope import Envelope
    from handrail.shaping.marking import DataMarker
    from handrail.writes.service import Writes

__all__ = [
    "PLANNED",
    "RunRefusedError",
    "Session",
    "command_id",
    "command_keys",
    "confirmed_text",
    "execute_pending",
    "not_executed",
    "pending_plans",
]

PLANNED = frozenset({ErrorCode.NEEDS_CONFIRMATION, ErrorCode.NEEDS_APPROVAL})
"""The codes of a call that became a plan awaiting a person."""


class RunRefusedError(AccessRefusedError):
    """A request about a run that is refused, with its code.

    NOT_FOUND: no such run (or conversation) for this principal, or no such pending
    plan. CONFLICT: the run is not suspended, or another process moved it; the run id
    is taken; another run of the conversation is running or suspended.
    """


@dataclass(kw_only=True, slots=True)
class Session:
    """The working state of one run while the loop drives it."""

    run_id: str
    principal: Principal
    data: RunData
    tracker: BudgetTracker
    model: ModelClient
    record: RunRecord | None
    """The stored record this session last wrote; None while replaying (nothing stored)."""
    transcript: list[Turn]
    """The history the run started from, then the run's own turns (from `base` on)."""
    replies: list[ModelReply]
    steps: list[StepLog]
    pending: list[PendingPlan]
    keys: list[str]
    toolset: list[ToolsetChange]
    """How the run's toolset changed so far (`_toolset`): each step's exposure follows it."""
    conversation: str
    """What the gate's conversation guard knows the run by: its stored conversation's id,
    else its run id (a replay's own)."""
    base: int = 0
    """How many turns of `transcript` are history: the run's own turns follow them."""
    exposure: Exposure | None = None
    """What the model of the current step is shown; set by the loop before each step."""
    recorded: RunData | None = None
    """While replaying: the run being replayed."""
    observer: Observer = field(default_factory=Observer)
    """The hooks and stream of a live drive (`_streaming.observed`); quiet otherwise."""
    log: RunLog = field(default_factory=RunLog)
    """What of the run the store holds, so a save appends only the rest (`_run_log`)."""

    @classmethod
    def of(
        cls,
        data: RunData,
        *,
        run_id: str,
        principal: Principal,
        tracker: BudgetTracker,
        model: ModelClient,
        record: RunRecord | None,
        conversation: str | None = None,
        history: Sequence[Turn] = (),
        log: RunLog | None = None,
    ) -> Session:
        """A session that goes on from `data`, a run's document, after `history`.

        `conversation` is the run's stored conversation, else its run id, unless given
        (a replay gives its own). `log` says what the store holds; by default what
        `record` (read from the store, or None) holds.
        """
        if conversation is None:
            ref = data.conversation
            conversation = run_id if ref is None else ref.conversation_id
        return cls(
            run_id=run_id,
            conversation=conversation,
            base=len(history),
            principal=principal,
            data=data,
            tracker=tracker,
            model=model,
            record=record,
            transcript=[*history, *data.transcript],
            replies=list(data.replies),
            steps=list(data.steps),
            pending=list(data.pending),
            keys=list(data.keys),
            toolset=list(data.toolset),
            log=RunLog.of(data, record) if log is None else log,
        )

    def snapshot(self, end: RunEnd | None = None) -> RunData:
        """The run's document as the session stands, ended by `end` if given.

        Its budget leaves out the identical-call counts, which grow with the run: the
        store keeps the calls admitted instead (`log`), and a run read back has them.
        """
        return dataclasses.replace(
            self.data,
            budget=self.tracker.snapshot(identical=False),
            transcript=tuple(self.transcript[self.base :]),
            replies=tuple(self.replies),
            steps=tuple(self.steps),
            pending=tuple(self.pending),
            keys=tuple(self.keys),
            toolset=tuple(self.toolset),
            end=end,
        )

    @property
    def new_turns(self) -> tuple[Turn, ...]:
        """The run's own turns: its task's turn and every turn after it."""
        return tuple(self.transcript[self.base :])

    def ledger(self) -> CallIdLedger:
        """A call-id ledger that holds every call of the transcript so far."""
        ledger = CallIdLedger()
        for turn in self.transcript:
            if isinstance(turn, AssistantTurn):
                ledger.admit(turn.calls)
        return ledger


def pending_plans(calls: Sequence[ToolCall], envelopes: Sequence[Envelope]) -> list[PendingPlan]:
    """The plans a turn's calls became, each with the call that proposed it."""
    found: list[PendingPlan] = []
    for call, envelope in zip(calls, envelopes, strict=True):
        if envelope.error_type in PLANNED and isinstance(envelope.data, dict):
            plan_id = envelope.data.get("plan_id")
            if isinstance(plan_id, str):
                found.append(PendingPlan(plan_id=plan_id, call_id=call.id, tool=envelope.tool))
    return found


def confirmed_text(pending: PendingPlan, envelope: Envelope, marker: DataMarker) -> str:
    """The user turn that tells the model a person confirmed a plan, and its result."""
    return (
        f"[handrail] The user confirmed plan {pending.plan_id} (proposed by call "
        f"{pending.call_id} of {pending.tool}) in the application, and it was "
        f"submitted. Its result, for call {pending.call_id}, follows.\n"
        f"{marker.mark(envelope)}"
    )


def not_executed(envelope: Envelope) -> Envelope:
    """A refused execution's envelope, saying the confirmed plan did not run."""
    return dataclasses.replace(
        envelope, summary=f"The confirmed plan was not executed: {envelope.summary}"
    )


def command_id(run_id: str, call: ToolCall) -> str:
    """The command id a run's call runs under: the run's id and the call's."""
    return f"{run_id}:{call.id}"


def command_keys(
    registry: Registry, s: Session, calls: Sequence[ToolCall], envelopes: Sequence[Envelope]
) -> list[str]:
    """Keys of the writes a turn ran under the run's command ids (not plans)."""
    keys: list[str] = []
    for call, envelope in zip(calls, envelopes, strict=True):
        tool = registry.lookup(call.name, s.principal)
        if (
            tool is None
            or tool.spec.read_only
            or tool.spec.idempotency.mode is not IdempotencyMode.COMMAND_ID
            or envelope.error_type in PLANNED
        ):
            continue
        keys.append(
            command_key(
                tenant_id=s.principal.tenant_id,
                tool=tool.spec.name,
                command_id=command_id(s.run_id, call),
                user_id=s.principal.user_id,
                scope=tool.spec.idempotency.scope,
            )
        )
    return keys


async def execute_pending(
    writes: Writes,
    pending: PendingPlan,
    principal: Principal,
    token: str | None,
    *,
    timeout: float,
) -> tuple[Envelope, str | None]:
    """The plan confirmed and executed: its envelope, and its key if it ran under one.

    A refused confirmation raises; a refused execution (expired, conflicting, ...)
    is an envelope for the model, except "not confirmed yet", which raises.
    """
    if token is not None:
        await writes.confirm(pending.plan_id, token, principal)
    outcome = await writes.execute_plan(
        pending.plan_id, principal, timeout=timeout, call_id=pending.call_id
    )
    if outcome.key is None:
        # Refused before its key: nothing ran.
        if outcome.code in PLANNED:
            raise WriteRefusedError(outcome.code, outcome.envelope.summary)
        return not_executed(outcome.envelope), None
    return outcome.envelope, outcome.key
