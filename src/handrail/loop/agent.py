"""The agent loop: a model's turns through the Gate under hard budgets, durably stored.

Each step asks the model (with the exposed tools and the transcript so far), admits
its calls against the budget, runs them through `Gate.handle_batch` and feeds the
envelopes back. A run starts from a host's history or a stored conversation's turns
(`_conversation`), and a run in a conversation appends its turns to it when it stops.
Every gate call is told the step's exposure (a tool the model was not shown is
UNKNOWN_TOOL; searches and skills change it step by step, `_toolset`) and, as its
conversation, the stored conversation's id or else the run id (the gate's guard sees
the whole chat, or the whole run, across resumes). A write that becomes a plan
suspends the run in the store; `resume` confirms and executes that plan (possibly in
another process) and goes on. A reply without calls is the final answer, checked
against execution records before it is accepted. Every step is stored
(compare-and-set), with the model's replies, so `replay` re-runs a run from the store.
The model never decides when a budget ends.
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from secrets import token_hex
from typing import TYPE_CHECKING, Any, TypeVar

from handrail.adapters.transcript import AssistantTurn, CallIdLedger, Turn, UserTurn, pair_results
from handrail.declare.exposure import ExposureRequest
from handrail.envelope import Envelope
from handrail.errors import ConfigurationError, ErrorCode, WriteRefusedError
from handrail.loop._agent_record import CallOutcome, RunData, RunEnd, RunStatus, StepLog, outcomes
from handrail.loop._cancel import cancelled_text, check_cancellable, check_reason, claim_declined
from handrail.loop._conversation import Conversations
from handrail.loop._invoked import invoked, loop_telemetry
from handrail.loop._outcome import RunOutcome
from handrail.loop._replay import (
    ReplayReport,
    replay_report,
    replay_resumes,
    replay_session,
    replayed_calls,
)
from handrail.loop._run_log import RunLog, read_run
from handrail.loop._session import (
    RunRefusedError,
    Session,
    command_id,
    command_keys,
    confirmed_text,
    execute_pending,
    pending_plans,
)
from handrail.loop._streaming import (
    INTERNAL,
    ask,
    observed,
    proposed,
    resumed,
    shown,
    streamed,
    suspending,
)
from handrail.loop._toolset import RunToolset, ToolsetOptions
from handrail.loop.answers import EvidenceChecker, tool_names_of
from handrail.loop.budgets import BudgetExhausted, BudgetTracker, BudgetTrip, RunBudget
from handrail.loop.final import LOOP_INSTRUCTIONS, RunAnswer, checked_json, parse_final_answer
from handrail.loop.leases import RunLeasing, claim_expired, heartbeat, stamped
from handrail.loop.models import (
    ModelClient,
    ModelError,
    ModelReply,
    ModelRequest,
    ScriptExhaustedError,
)
from handrail.principal import Principal
from handrail.runs import RunRecord, RunState
from handrail.shaping.marking import MODEL_INSTRUCTIONS, DataMarker

if TYPE_CHECKING:
    from handrail.calls import ToolCall
    from handrail.clock import Clock
    from handrail.gate import Gate
    from handrail.loop.events import LoopEvent
    from handrail.loop.hooks import StepHooks
    from handrail.store.base import Store
    from handrail.telemetry import Telemetry
    from handrail.writes.service import Writes

__all__ = [
    "DEFAULT_SYSTEM",
    "INTERNAL",
    "LOOP_INSTRUCTIONS",
    "AgentLoop",
    "CallOutcome",
    "ReplayReport",
    "RunAnswer",
    "RunData",
    "RunOutcome",
    "RunRefusedError",
    "RunStatus",
    "StepLog",
    "ToolsetOptions",
    "read_run",
]

T = TypeVar("T")

DEFAULT_SYSTEM = f"{MODEL_INSTRUCTIONS}\n\n{LOOP_INSTRUCTIONS}"

_RUN_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_SCRIPT_EXHAUSTED = "SCRIPT_EXHAUSTED"


Runner = Callable[[Sequence["ToolCall"], Session], Awaitable[list[Envelope]]]


class AgentLoop:
    """Drives a model through the Gate under a RunBudget, storing every step.

    Every dependency is explicit. `writes` is needed to resume suspended runs. `system`
    is the system prompt (data-block rules and final-answer format by default);
    `new_run_id` draws run ids. `exposure` chooses the tools each step shows the model
    (`Registry.exposure`; by default every tool the principal may see); the gate is
    told that exposure and the run's conversation id (else its run id) as the
    conversation, so every protection it offers holds inside a run and a chat. `toolset`
    lets searches and skills change the exposure step by step (`_toolset`). Model
    errors end a run FAILED with their code: the loop does not retry a model (a retry
    would need its own budget; left to the host). With `leasing`, a run is leased to its
    worker while driven, and `take_over` goes on with one whose lease ran out (`leases`).
    """

    def __init__(
        self,
        *,
        gate: Gate,
        model: ModelClient,
        store: Store,
        budget: RunBudget,
        clock: Clock,
        checker: EvidenceChecker,
        writes: Writes | None = None,
        system: str = DEFAULT_SYSTEM,
        new_run_id: Callable[[], str] | None = None,
        marker: DataMarker | None = None,
        exposure: ExposureRequest | None = None,
        hooks: StepHooks | None = None,
        toolset: ToolsetOptions | None = None,
        leasing: RunLeasing | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        self._gate = gate
        # None records no spans or metrics (and loads no OpenTelemetry).
        self._telemetry = loop_telemetry(telemetry, clock)
        self._model = model
        self._store = store
        self._budget = budget
        self._clock = clock
        self._checker = checker
        self._writes = writes
        self._system = system
        self._new_run_id = new_run_id or (lambda: token_hex(16))
        self._marker = marker or DataMarker()
        self._toolset = RunToolset(
            gate.registry, exposure or ExposureRequest(), toolset, self._marker
        )
        self._conversations = Conversations(store, clock)
        self._hooks = hooks
        self._leasing = leasing
        self._lease = functools.partial(heartbeat, leasing, store, clock)

    # --- run ------------------------------------------------------------------------------------

    @invoked("run")
    async def run(
        self,
        task: str,
        principal: Principal,
        *,
        run_id: str | None = None,
        history: Sequence[Turn] = (),
        conversation_id: str | None = None,
    ) -> RunOutcome:
        """Start a run for `task` on behalf of `principal` and drive it until it stops.

        The model sees `history` (earlier turns the host kept; ConfigurationError if an
        adapter could not send it) or the stored conversation `conversation_id`'s turns
        (a new id creates it), then the task. Raises RunRefusedError: CONFLICT when
        `run_id` is taken or the conversation's last run is running or suspended;
        NOT_FOUND for another principal's conversation; a refusal stores nothing.
        """
        run_id = self._new_run_id() if run_id is None else run_id
        if not _RUN_ID.fullmatch(run_id):
            msg = "a run id is 1-64 characters of [A-Za-z0-9_-]"
            raise ConfigurationError(msg)
        if not isinstance(task, str) or not task.strip():
            msg = "a task is text that is not blank (every adapter refuses blank user text)"
            raise ConfigurationError(msg)
        opened = await self._conversations.open(
            principal, run_id=run_id, conversation_id=conversation_id, history=history
        )
        tracker = BudgetTracker(self._budget, self._clock)
        first, changes = self._toolset.start(task)
        data = RunData(
            task=task,
            principal=principal.snapshot(),
            limits=self._budget,
            budget=tracker.snapshot(),
            transcript=(UserTurn(text=first),),
            history=opened.inline,
            conversation=opened.ref,
            toolset=changes,
        )
        now = self._clock.now()
        log = RunLog()
        record = RunRecord(
            run_id=run_id,
            tenant_id=principal.tenant_id,
            user_id=principal.user_id,
            state=RunState.RUNNING,
            version=1,
            created_at=now,
            updated_at=now,
            data=log.header(data),
            entries=(log.entry(data),),
        )
        record = stamped(self._leasing, record, at=now)
        if not await self._io(self._store.insert_run, record):
            await self._conversations.release(opened, run_id)
            raise RunRefusedError(ErrorCode.CONFLICT, "A run with this id exists.")
        log.stored(data)
        tracker.start()
        session = Session.of(
            data,
            run_id=run_id,
            principal=principal,
            tracker=tracker,
            model=self._model,
            record=record,
            history=opened.history,
            log=log,
        )
        return await self._drive(session, self._live)

    async def _drive(self, s: Session, runner: Runner) -> RunOutcome:
        """Steps until the run finishes, suspends, fails or a budget trips."""
        async with self._lease(s), observed(s, self._hooks, self._end_error):
            ledger = s.ledger()
            while True:
                try:
                    outcome = await self._step(s, runner, ledger)
                except BudgetExhausted as exc:
                    return await self._end_budget(s, exc.trip)
                if outcome is not None:
                    return outcome

    async def _step(self, s: Session, runner: Runner, ledger: CallIdLedger) -> RunOutcome | None:
        """One model turn and its calls; an outcome when the run stops, else None."""
        s.tracker.before_step()
        s.exposure = self._toolset.exposure(s.principal, s.toolset)
        request = ModelRequest(
            transcript=s.transcript, tools=s.exposure.included, system=self._system
        )
        try:
            reply = await ask(s, request, self._telemetry)
        except ModelError as exc:
            return await self._end_error(s, exc.code.value)
        except ScriptExhaustedError:
            if s.recorded is None:
                raise
            # A replay past the recorded replies: the original run's model stopped here.
            return await self._end_error(s, _SCRIPT_EXHAUSTED)
        s.replies.append(reply)
        s.tracker.record_usage(
            reply.model,
            input_tokens=reply.usage.input_tokens,
            output_tokens=reply.usage.output_tokens,
        )
        if not reply.calls:
            return await self._finish(s, reply)
        calls = ledger.admit(reply.calls)
        await proposed(s, calls)
        # Fail closed: none of the turn's calls runs once one of them is refused.
        for call in calls:
            s.tracker.admit_call(call)
            s.log.admit(call.name, call)
        envelopes = await runner(calls, s)
        trip: BudgetExhausted | None = None
        for call, envelope in zip(calls, envelopes, strict=True):
            try:
                s.tracker.record_result(call, envelope)
            except BudgetExhausted as exc:
                trip = trip or exc
        s.transcript.append(AssistantTurn(text=reply.text, calls=tuple(calls)))
        s.transcript.append(pair_results(calls, envelopes, marker=self._marker))
        s.steps.append(StepLog(kind="model", calls=outcomes(envelopes)))
        s.toolset += self._toolset.after_step(
            s.principal, s.toolset, step=len(s.steps), calls=calls, envelopes=envelopes
        )
        if s.recorded is None:
            s.keys.extend(command_keys(self._gate.registry, s, calls, envelopes))
        plans = pending_plans(calls, envelopes)
        await shown(s, calls, envelopes)
        if trip is not None:
            raise trip
        s.pending.extend(plans)
        if not s.pending:
            await self._save(s, RunState.RUNNING)
            return None
        if s.recorded is None:
            await self._save(s, RunState.SUSPENDED)
            await suspending(s)
            return self._outcome(s, RunStatus.SUSPENDED)
        return None if replay_resumes(s, self._marker) else self._outcome(s, RunStatus.SUSPENDED)

    async def _live(self, calls: Sequence[ToolCall], s: Session) -> list[Envelope]:
        return await self._gate.handle_batch(
            calls,
            s.principal,
            timeout=s.tracker.remaining_seconds(),
            conversation=s.conversation,
            exposure=s.exposure,
            command_ids={call.id: command_id(s.run_id, call) for call in calls},
        )

    async def _finish(self, s: Session, reply: ModelReply) -> RunOutcome:
        text = reply.text or ""
        if text.strip():
            # A blank reply is no turn: no adapter could send it in the next run's history.
            s.transcript.append(AssistantTurn(text=text))
        answer = parse_final_answer(text)
        if answer is not None:
            # The model may cite a tool by any name this run showed it under (at any step).
            shown = self._toolset.citable(s.principal, s.toolset)
            checked = await self._checker.check(
                answer, s.principal, run_calls=tuple(s.keys), tool_names=tool_names_of(shown)
            )
            await self._save(
                s,
                RunState.FINISHED,
                RunEnd(status=RunStatus.FINISHED, answer=checked_json(checked)),
            )
            final = RunAnswer.of_answer(checked)
            return self._outcome(s, RunStatus.FINISHED, answer=checked, final=final)
        check = await self._checker.check_text(text, s.principal)
        end = RunEnd(status=RunStatus.FINISHED, text=text, text_ok=check.ok)
        await self._save(s, RunState.FINISHED, end)
        final = RunAnswer.of_text(text, check)
        return self._outcome(s, RunStatus.FINISHED, text=text, text_check=check, final=final)

    async def _end_budget(self, s: Session, trip: BudgetTrip) -> RunOutcome:
        end = RunEnd(status=RunStatus.BUDGET_EXHAUSTED, trip=trip.to_dict())
        await self._save(s, RunState.FAILED, end)
        return self._outcome(s, RunStatus.BUDGET_EXHAUSTED, trip=trip)

    async def _end_error(self, s: Session, code: str) -> RunOutcome:
        await self._save(s, RunState.FAILED, RunEnd(status=RunStatus.FAILED, error=code))
        return self._outcome(s, RunStatus.FAILED, error=code)

    def _outcome(self, s: Session, status: RunStatus, **fields: Any) -> RunOutcome:  # noqa: ANN401
        if status is RunStatus.SUSPENDED:
            fields["plan_ids"] = tuple(p.plan_id for p in s.pending)
        return RunOutcome(
            run_id=s.run_id, status=status, steps=s.tracker.steps, new_turns=s.new_turns, **fields
        )

    async def _save(self, s: Session, state: RunState, end: RunEnd | None = None) -> None:
        """Store the session as the run's next version; CONFLICT if another moved it.

        The header moves by compare-and-set and one entry with what the run added since
        its last version is appended, in one transaction (`_run_log`). A run that stops
        appends its turns to its conversation first (`_conversation`).
        """
        s.data = s.snapshot(end)
        if s.record is None:
            return
        synced = state is RunState.RUNNING or await self._conversations.sync(s)
        at = self._clock.now()
        record = s.record.advanced(
            at=at, state=state, data=s.log.header(s.data), entries=(s.log.entry(s.data),)
        )
        record = stamped(self._leasing, record, at=at)
        if not await self._io(self._store.update_run, record, expect_version=s.record.version):
            raise RunRefusedError(ErrorCode.CONFLICT, "The run was changed by another process.")
        s.log.stored(s.data)
        s.record = record
        if not synced:
            raise RunRefusedError(ErrorCode.CONFLICT, "The run's conversation moved on without it.")

    def stream(
        self,
        task: str,
        principal: Principal,
        *,
        run_id: str | None = None,
        history: Sequence[Turn] = (),
        conversation_id: str | None = None,
    ) -> AsyncGenerator[LoopEvent, None]:
        """`run`'s events as they happen, the terminal one last (`handrail.loop.events`)."""
        return streamed(
            lambda: self.run(
                task, principal, run_id=run_id, history=history, conversation_id=conversation_id
            )
        )

    # --- resume ---------------------------------------------------------------------------------

    @invoked("resume")
    async def resume(
        self, run_id: str, principal: Principal, *, plan_id: str, token: str | None
    ) -> RunOutcome:
        """Confirm a suspended run's plan with the person's token, execute it, go on.

        `token` None means the plan was confirmed (or approved) already, out of band.
        The execution's envelope reaches the model as a user message: the person's
        confirmation in Handrail's words, then the envelope in a data block (the call's
        earlier NEEDS_CONFIRMATION result stays as it was, so the transcript stays
        valid for every adapter). The run waits until every pending plan is resumed.
        A refused confirmation (WriteRefusedError) leaves the run SUSPENDED as it was.
        """
        writes = self._writes
        if writes is None:
            msg = "resuming a run needs an AgentLoop configured with writes"
            raise ConfigurationError(msg)
        record = await self._stored(run_id, principal)
        if record.state is not RunState.SUSPENDED:
            raise RunRefusedError(
                ErrorCode.CONFLICT, f"The run is {record.state.value.lower()}, not suspended."
            )
        data = read_run(record)
        pending = next((p for p in data.pending if p.plan_id == plan_id), None)
        if pending is None:
            raise RunRefusedError(ErrorCode.NOT_FOUND, "The run awaits no such plan.")
        # What may fail before the claim: a claimed run is never left behind RUNNING.
        history = await self._conversations.history_of(data)
        tracker = BudgetTracker.restore(data.budget, self._budget, self._clock)
        # Claim the run first, so two resumes of one run never both proceed.
        at = self._clock.now()
        claimed = stamped(self._leasing, record.advanced(at=at, state=RunState.RUNNING), at=at)
        if not await self._io(self._store.update_run, claimed, expect_version=record.version):
            raise RunRefusedError(ErrorCode.CONFLICT, "The run is being resumed elsewhere.")
        tracker.start()
        s = Session.of(
            data,
            run_id=run_id,
            principal=principal,
            tracker=tracker,
            model=self._model,
            record=claimed,
            history=history,
        )
        async with self._lease(s), observed(s, self._hooks, self._end_error):
            if tracker.remaining_seconds() <= 0:
                try:
                    tracker.before_step()  # trips the deadline: nothing is confirmed or run
                except BudgetExhausted as exc:
                    return await self._end_budget(s, exc.trip)
            try:
                envelope, key = await execute_pending(
                    writes, pending, principal, token, timeout=tracker.remaining_seconds()
                )
            except WriteRefusedError:
                released = stamped(None, claimed.advanced(at=at, state=RunState.SUSPENDED), at=at)
                if await self._io(self._store.update_run, released, expect_version=claimed.version):
                    s.record = released
                raise
            s.pending = [p for p in s.pending if p.plan_id != plan_id]
            if key is not None:
                s.keys.append(key)
            s.transcript.append(UserTurn(text=confirmed_text(pending, envelope, self._marker)))
            s.steps.append(StepLog(kind="resume", plan_id=plan_id, calls=outcomes([envelope])))
            await resumed(s, pending.call_id, envelope)
            if s.pending:
                await self._save(s, RunState.SUSPENDED)
                await suspending(s)
                return self._outcome(s, RunStatus.SUSPENDED)
            await self._save(s, RunState.RUNNING)
            return await self._drive(s, self._live)

    def resume_stream(
        self, run_id: str, principal: Principal, *, plan_id: str, token: str | None
    ) -> AsyncGenerator[LoopEvent, None]:
        """`resume`'s events as they happen, the terminal one last, as `stream`."""
        return streamed(lambda: self.resume(run_id, principal, plan_id=plan_id, token=token))

    @invoked("take_over")
    async def take_over(self, run_id: str) -> RunOutcome:
        """Go on with a RUNNING run whose lease ran out, as this worker (`claim_expired`)."""
        found = await self._stored(run_id)
        record = await claim_expired(self._store, self._leasing, self._clock, found)
        data = read_run(record)
        s = Session.of(
            data,
            run_id=run_id,
            principal=Principal.from_snapshot(data.principal),
            tracker=BudgetTracker.restore(data.budget, self._budget, self._clock),
            model=self._model,
            record=record,
            history=await self._conversations.history_of(data),
        )
        s.tracker.start()
        if s.pending:  # it died executing a confirmed plan: resumable again, as it was
            await self._save(s, RunState.SUSPENDED)
            return self._outcome(s, RunStatus.SUSPENDED)
        return await self._drive(s, self._live)

    # --- cancel ---------------------------------------------------------------------------------

    async def cancel(self, run_id: str, principal: Principal, *, reason: str) -> RunOutcome:
        """End a run that waits for a person, or whose process stopped: FAILED, CANCELLED.

        A SUSPENDED run's plans are rejected through `writes` for `reason`, and a user
        turn in Handrail's words names them as declined and not executed, so the next
        run of its conversation does not claim them; the conversation is free again. A
        RUNNING run only once its deadline and a grace margin have passed (`_cancel`).
        RunRefusedError: NOT_FOUND for no run or another principal's; CONFLICT for an
        ended run, one that may still run, a plan that executed (resume with it first).
        """
        reason = check_reason(reason)
        record = await self._stored(run_id, principal)
        data = read_run(record)
        tracker = BudgetTracker.restore(data.budget, self._budget, self._clock)
        check_cancellable(record, data, self._budget, now=self._clock.now())
        claimed = await claim_declined(
            self._store,
            self._clock,
            record,
            writes=self._writes,
            principal=principal,
            reason=reason,
        )
        s = Session.of(
            data,
            run_id=run_id,
            principal=principal,
            tracker=tracker,
            model=self._model,
            record=claimed,
        )
        s.transcript = [*await self._conversations.own_turns(data, run_id)]
        s.pending = []
        s.transcript.append(UserTurn(text=cancelled_text(data.pending, reason)))
        code = ErrorCode.CANCELLED.value
        await self._save(s, RunState.FAILED, RunEnd(status=RunStatus.FAILED, error=code))
        declined = tuple(plan.plan_id for plan in data.pending)
        return self._outcome(s, RunStatus.FAILED, error=code, plan_ids=declined)

    async def _stored(self, run_id: str, principal: Principal | None = None) -> RunRecord:
        """The stored run (`principal`'s, if given); NOT_FOUND for none or another's, alike."""
        record = await self._io(self._store.get_run, run_id) if _RUN_ID.fullmatch(run_id) else None
        owner = None if record is None else (record.tenant_id, record.user_id)
        if record is None or (principal and owner != (principal.tenant_id, principal.user_id)):
            raise RunRefusedError(ErrorCode.NOT_FOUND, "There is no such run.")
        return record

    # --- replay ---------------------------------------------------------------------------------

    @invoked("replay")
    async def replay(
        self,
        run_id: str,
        *,
        model: ModelClient | None = None,
        principal: Principal | None = None,
    ) -> ReplayReport:
        """Re-run a stored run from its task and compare each step with the record.

        The model is by default a ScriptedModelClient of the recorded replies; the
        principal is the recorded one. Reads run through the gate again; writes are
        never run again: their recorded outcomes stand in, as do the recorded resumes.
        The replay runs under the recorded budget and stores nothing.
        """
        record = await self._stored(run_id)
        recorded = read_run(record)
        session = replay_session(
            recorded,
            run_id=run_id,
            clock=self._clock,
            model=model,
            principal=principal,
            history=await self._conversations.history_of(recorded),
        )
        outcome = await self._drive(session, self._replayed)
        return replay_report(record, session, outcome.status)

    async def _replayed(self, calls: Sequence[ToolCall], s: Session) -> list[Envelope]:
        """The replay's runner: reads through the gate, writes as recorded (`_replay`)."""
        return await replayed_calls(self._gate, calls, s)

    async def conversation(self, conversation_id: str, principal: Principal) -> tuple[Turn, ...]:
        """The turns of `principal`'s stored conversation; RunRefusedError(NOT_FOUND) if none."""
        return await self._conversations.read(conversation_id, principal)

    async def _io(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:  # noqa: ANN401
        return await asyncio.to_thread(fn, *args, **kwargs)
