"""The JSON an agent run keeps in its RunRecord's `data`, and how it reads back.

One versioned document: the task, the principal as authenticated, the budget's limits
and counters, the history it started from (the turns themselves, or a reference to
the conversation that holds them), the run's own transcript from its task on, every
model reply (as a cassette, for replay),
a log of each step's call outcomes, the plans awaiting a person, the execution keys
the run made, how its toolset changed (tools a search found, skills made active) and
how the run ended. It never decides anything about a run.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum
from typing import Annotated, Any, Literal

import pydantic

from handrail.adapters._common import plain_json
from handrail.adapters.transcript import (
    AssistantTurn,
    ToolResult,
    ToolResultsTurn,
    Turn,
    UserTurn,
)
from handrail.calls import ToolCall
from handrail.envelope import Envelope
from handrail.errors import ConfigurationError
from handrail.loop.budgets import ModelPrice, PriceTable, RunBudget
from handrail.loop.models import ModelReply, cassette_items, parse_cassette

__all__ = [
    "DOCUMENT_VERSION",
    "CallOutcome",
    "ConversationRef",
    "PendingPlan",
    "RunData",
    "RunEnd",
    "RunStatus",
    "StepLog",
    "ToolsetChange",
    "budget_json",
    "call_json",
    "call_of",
    "dump_turn",
    "end_json",
    "load_turn",
    "outcomes",
    "step_json",
    "toolset_json",
    "turn_json",
]

DOCUMENT_VERSION = 4
"""Version of the whole run document (`to_json`); a document of another version is refused.

Version 1 had no history: it reads as a run that started from none. Version 2 had no
toolset changes: it reads as a run whose toolset never changed. A run is stored as a
header and appended entries (`_run_log`, layouts 3 and 5: the versions share one
numbering, so a document and a header never carry the same one), read back into this
document.
"""
_READABLE = frozenset({1, 2, DOCUMENT_VERSION})


class RunStatus(StrEnum):
    """How a call to `run` or `resume` ended."""

    FINISHED = "FINISHED"
    """The model gave its final answer, checked against execution records."""
    SUSPENDED = "SUSPENDED"
    """A write waits for a person's confirmation or approval; resume by plan id."""
    BUDGET_EXHAUSTED = "BUDGET_EXHAUSTED"
    """A budget tripped; the run ended fail-closed with the trip as its reason."""
    FAILED = "FAILED"
    """No answer: `error` is the model error's code, CANCELLED, HOOK_FAILED or INTERNAL."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CallOutcome:
    """What one call came to: its id, tool, envelope status and error code."""

    call_id: str
    tool: str
    status: str
    code: str | None = None

    @classmethod
    def of(cls, envelope: Envelope) -> CallOutcome:
        """The outcome an envelope reports."""
        code = envelope.error_type
        return cls(
            call_id=envelope.call_id,
            tool=envelope.tool,
            status=envelope.status.value,
            code=None if code is None else code.value,
        )

    def describe(self) -> str:
        """`status` or `status/CODE`, for reports."""
        return self.status if self.code is None else f"{self.status}/{self.code}"


@dataclass(frozen=True, kw_only=True, slots=True)
class StepLog:
    """One step of a run: a model turn's calls, or a person's resume of one plan."""

    kind: Literal["model", "resume"]
    calls: tuple[CallOutcome, ...] = ()
    plan_id: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolsetChange:
    """One change of a run's toolset, kept for the record and to go on from.

    `kind` "discovered": `names` are deferred tools a `search_tools` call found (each
    re-checked against the run's exposure first); "skill": `names` is the one skill
    made active, by a `load_skill` call or the host's `selector` at the run's start.
    `step` is how many entries the run's step log had when it was made (0: at the start).
    """

    step: int
    kind: Literal["discovered", "skill"]
    source: Literal["search_tools", "load_skill", "selector"]
    names: tuple[str, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class PendingPlan:
    """A plan the run waits for, and the call that proposed it."""

    plan_id: str
    call_id: str
    tool: str


@dataclass(frozen=True, kw_only=True, slots=True)
class RunEnd:
    """How a run ended: its status and, by status, the answer, the trip or the error.

    `answer` is the checked structured answer as JSON; `text_ok` the verdict on a
    free-text answer; `trip` a BudgetTrip's `to_dict()`; `error` a model error's code,
    or CANCELLED (the run was cancelled), HOOK_FAILED (a step hook raised) or INTERNAL
    (an unexpected exception stopped it).
    """

    status: RunStatus
    answer: Mapping[str, Any] | None = None
    text: str | None = None
    text_ok: bool | None = None
    trip: Mapping[str, Any] | None = None
    error: str | None = None

    def label(self) -> str:
        """A one-line summary two ends can be compared by."""
        if self.status is RunStatus.FINISHED:
            if self.answer is not None:
                return f"FINISHED {self.answer['state']} (claimed {self.answer['claimed']})"
            return f"FINISHED free text, {'proven' if self.text_ok else 'unproven'}"
        if self.status is RunStatus.BUDGET_EXHAUSTED and self.trip is not None:
            tool = f" {self.trip['tool']}" if self.trip.get("tool") else ""
            return f"BUDGET_EXHAUSTED {self.trip['reason']}{tool}"
        if self.status is RunStatus.FAILED:
            return f"FAILED {self.error}"
        return self.status.value


@dataclass(frozen=True, kw_only=True, slots=True)
class ConversationRef:
    """The stored conversation a run belongs to, and how many of its turns came before.

    The run's history is the conversation's turns `0 .. start - 1`, read from the store
    when the run resumes or is replayed, never copied into the run's document.
    """

    conversation_id: str
    start: int


@dataclass(frozen=True, kw_only=True, slots=True)
class RunData:
    """Everything a run needs to go on in another process, or to be replayed."""

    task: str
    principal: str
    """`Principal.snapshot()` of who started the run; replays run as them."""
    limits: RunBudget
    budget: Mapping[str, Any]
    """`BudgetTracker.snapshot()` after the last stored step."""
    transcript: tuple[Turn, ...] = ()
    """The run's own turns, from its task on (its history comes before them)."""
    history: tuple[Turn, ...] = ()
    """The turns a host gave the run to start from, when it is in no stored conversation."""
    conversation: ConversationRef | None = None
    replies: tuple[ModelReply, ...] = ()
    steps: tuple[StepLog, ...] = ()
    pending: tuple[PendingPlan, ...] = ()
    keys: tuple[str, ...] = ()
    """Idempotency keys of the executions this run made (evidence must be among them)."""
    toolset: tuple[ToolsetChange, ...] = ()
    """How the run's toolset changed, in order (`loop._toolset` reads its state from it)."""
    end: RunEnd | None = None

    def to_json(self) -> str:
        """The document as ASCII JSON text (storable in every store)."""
        document = {
            "version": DOCUMENT_VERSION,
            "task": self.task,
            "principal": self.principal,
            "limits": budget_json(self.limits),
            "budget": dict(self.budget),
            "transcript": [turn_json(turn) for turn in self.transcript],
            "history": [turn_json(turn) for turn in self.history],
            "conversation": None
            if self.conversation is None
            else {"id": self.conversation.conversation_id, "start": self.conversation.start},
            # The cassette's objects as they are: no indent, no decode and encode again.
            "replies": cassette_items(self.replies),
            "steps": [step_json(step) for step in self.steps],
            "pending": [
                {"plan_id": p.plan_id, "call_id": p.call_id, "tool": p.tool} for p in self.pending
            ],
            "keys": list(self.keys),
            "toolset": [toolset_json(change) for change in self.toolset],
            "end": None if self.end is None else end_json(self.end),
        }
        return json.dumps(document, allow_nan=False, separators=(",", ":"))

    @classmethod
    def parse(cls, text: str) -> RunData:
        """The document of a stored run; ConfigurationError for anything else."""
        try:
            doc = _Document.model_validate_json(text)
        except pydantic.ValidationError as exc:
            msg = "the run's data is not a run document"
            raise ConfigurationError(msg) from exc
        if doc.version not in _READABLE:
            msg = f"run document version {doc.version} is not {DOCUMENT_VERSION}"
            raise ConfigurationError(msg)
        return cls(
            task=doc.task,
            principal=doc.principal,
            limits=_budget_of(doc.limits),
            budget=doc.budget,
            transcript=tuple(_turn_of(turn) for turn in doc.transcript),
            history=tuple(_turn_of(turn) for turn in doc.history),
            conversation=None
            if doc.conversation is None
            else ConversationRef(conversation_id=doc.conversation.id, start=doc.conversation.start),
            replies=parse_cassette(json.dumps(doc.replies)),
            steps=tuple(
                StepLog(
                    kind=step.kind,
                    plan_id=step.plan_id,
                    calls=tuple(CallOutcome(**c.model_dump()) for c in step.calls),
                )
                for step in doc.steps
            ),
            pending=tuple(PendingPlan(**p.model_dump()) for p in doc.pending),
            keys=tuple(doc.keys),
            toolset=tuple(
                ToolsetChange(step=c.step, kind=c.kind, source=c.source, names=tuple(c.names))
                for c in doc.toolset
            ),
            end=None
            if doc.end is None
            else RunEnd(
                status=doc.end.status,
                answer=doc.end.answer,
                text=doc.end.text,
                text_ok=doc.end.text_ok,
                trip=doc.end.trip,
                error=doc.end.error,
            ),
        )


# --- budgets ------------------------------------------------------------------------------------


def budget_json(budget: RunBudget) -> dict[str, Any]:
    """A budget's limits as JSON: money and prices as decimal strings."""
    prices = budget.prices
    return {
        "max_steps": budget.max_steps,
        "deadline_seconds": budget.deadline_seconds,
        "max_input_tokens": budget.max_input_tokens,
        "max_output_tokens": budget.max_output_tokens,
        "max_cost": None if budget.max_cost is None else str(budget.max_cost),
        "prices": None
        if prices is None
        else {
            model: [str(p.input_per_million), str(p.output_per_million)]
            for model, p in prices.prices.items()
        },
        "max_tool_calls": budget.max_tool_calls,
        "tool_call_limits": dict(budget.tool_call_limits),
        "max_identical_calls": budget.max_identical_calls,
        "max_same_error": budget.max_same_error,
    }


def _decimal(text: str) -> Decimal:
    try:
        return Decimal(text)
    except ArithmeticError:
        msg = "a stored budget holds an amount that is not a number"
        raise ConfigurationError(msg) from None


def _budget_of(doc: _Limits) -> RunBudget:
    prices = (
        None
        if doc.prices is None
        else PriceTable(
            prices={
                model: ModelPrice(
                    input_per_million=_decimal(pair[0]), output_per_million=_decimal(pair[1])
                )
                for model, pair in doc.prices.items()
            },
        )
    )
    return RunBudget(
        max_steps=doc.max_steps,
        deadline_seconds=doc.deadline_seconds,
        max_input_tokens=doc.max_input_tokens,
        max_output_tokens=doc.max_output_tokens,
        max_cost=None if doc.max_cost is None else _decimal(doc.max_cost),
        prices=prices,
        max_tool_calls=doc.max_tool_calls,
        tool_call_limits=doc.tool_call_limits,
        max_identical_calls=doc.max_identical_calls,
        max_same_error=doc.max_same_error,
    )


# --- turns --------------------------------------------------------------------------------------


def call_json(call: ToolCall) -> dict[str, Any]:
    entry: dict[str, Any] = {"id": call.id, "name": call.name, "provider": call.provider}
    if isinstance(call.arguments, bytes):
        entry["arguments_base64"] = base64.b64encode(call.arguments).decode("ascii")
    else:
        entry["arguments"] = plain_json(call.arguments)
    if call.defect is not None:
        entry["defect"] = call.defect
    return entry


def turn_json(turn: Turn) -> dict[str, Any]:
    if isinstance(turn, UserTurn):
        return {"kind": "user", "text": turn.text}
    if isinstance(turn, AssistantTurn):
        return {
            "kind": "assistant",
            "text": turn.text,
            "calls": [call_json(call) for call in turn.calls],
        }
    return {
        "kind": "results",
        "results": [
            {"call_id": r.call_id, "tool": r.tool, "content": r.content, "is_error": r.is_error}
            for r in turn.results
        ],
    }


def call_of(item: object) -> ToolCall:
    """The call `call_json` wrote; ConfigurationError for anything else."""
    try:
        return _call_of(_Call.model_validate(item))
    except pydantic.ValidationError as exc:
        msg = "a stored call is not a call"
        raise ConfigurationError(msg) from exc


def _call_of(doc: _Call) -> ToolCall:
    arguments: str | bytes | dict[str, Any] | None = doc.arguments
    if doc.arguments_base64 is not None:
        try:
            arguments = base64.b64decode(doc.arguments_base64, validate=True)
        except (binascii.Error, ValueError):
            msg = "a stored call's arguments_base64 is not base64"
            raise ConfigurationError(msg) from None
    return ToolCall(
        id=doc.id,
        name=doc.name,
        arguments=arguments,
        provider=doc.provider,
        defect=doc.defect,
    )


def _turn_of(doc: _User | _Assistant | _Results) -> Turn:
    if isinstance(doc, _User):
        return UserTurn(text=doc.text)
    if isinstance(doc, _Assistant):
        return AssistantTurn(text=doc.text, calls=tuple(_call_of(c) for c in doc.calls))
    return ToolResultsTurn(results=tuple(ToolResult(**r.model_dump()) for r in doc.results))


def dump_turn(turn: Turn) -> str:
    """One turn as ASCII JSON text, as a run's document holds it (a conversation's row)."""
    return json.dumps(turn_json(turn), allow_nan=False, separators=(",", ":"))


def load_turn(text: str) -> Turn:
    """The turn `dump_turn` wrote; ConfigurationError for anything else."""
    try:
        return _turn_of(_TURN.validate_json(text))
    except pydantic.ValidationError as exc:
        msg = "a stored conversation turn is not a turn"
        raise ConfigurationError(msg) from exc


def step_json(step: StepLog) -> dict[str, Any]:
    return {
        "kind": step.kind,
        "plan_id": step.plan_id,
        "calls": [
            {"call_id": c.call_id, "tool": c.tool, "status": c.status, "code": c.code}
            for c in step.calls
        ],
    }


def toolset_json(change: ToolsetChange) -> dict[str, Any]:
    return {
        "step": change.step,
        "kind": change.kind,
        "source": change.source,
        "names": list(change.names),
    }


def end_json(end: RunEnd) -> dict[str, Any]:
    return {
        "status": end.status.value,
        "answer": None if end.answer is None else dict(end.answer),
        "text": end.text,
        "text_ok": end.text_ok,
        "trip": None if end.trip is None else dict(end.trip),
        "error": end.error,
    }


# --- the document's shape ---------------------------------------------------------------------


class _Strict(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True, strict=True)


class _Call(_Strict):
    id: str
    name: str
    arguments: str | dict[str, Any] | None = None
    arguments_base64: str | None = None
    provider: str = "unknown"
    defect: str | None = None


class _User(_Strict):
    kind: Literal["user"]
    text: str


class _Assistant(_Strict):
    kind: Literal["assistant"]
    text: str | None
    calls: list[_Call]


class _Result(_Strict):
    call_id: str
    tool: str
    content: str
    is_error: bool


class _Results(_Strict):
    kind: Literal["results"]
    results: list[_Result]


_AnyTurn = Annotated[_User | _Assistant | _Results, pydantic.Field(discriminator="kind")]
_TURN: pydantic.TypeAdapter[_User | _Assistant | _Results] = pydantic.TypeAdapter(_AnyTurn)


class _Conversation(_Strict):
    id: str
    start: int = pydantic.Field(ge=0)


class _Outcome(_Strict):
    call_id: str
    tool: str
    status: str
    code: str | None


class _Step(_Strict):
    kind: Literal["model", "resume"]
    plan_id: str | None
    calls: list[_Outcome]


class _Pending(_Strict):
    plan_id: str
    call_id: str
    tool: str


class _Change(_Strict):
    step: int = pydantic.Field(ge=0)
    kind: Literal["discovered", "skill"]
    source: Literal["search_tools", "load_skill", "selector"]
    names: list[str]


class _End(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    status: RunStatus
    answer: dict[str, Any] | None
    text: pydantic.StrictStr | None
    text_ok: pydantic.StrictBool | None
    trip: dict[str, Any] | None
    error: pydantic.StrictStr | None


class _Limits(_Strict):
    max_steps: int
    deadline_seconds: float = pydantic.Field(strict=False)
    max_input_tokens: int | None
    max_output_tokens: int | None
    max_cost: str | None
    prices: dict[str, tuple[str, str]] | None = pydantic.Field(strict=False)
    max_tool_calls: int | None
    tool_call_limits: dict[str, int]
    max_identical_calls: int | None
    max_same_error: int | None


class _Document(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    version: pydantic.StrictInt
    task: pydantic.StrictStr
    principal: pydantic.StrictStr
    limits: _Limits
    budget: dict[str, Any]
    transcript: list[_AnyTurn]
    history: list[_AnyTurn] = []
    conversation: _Conversation | None = None
    replies: list[Any]
    steps: list[_Step]
    pending: list[_Pending]
    keys: list[pydantic.StrictStr]
    toolset: list[_Change] = []
    end: _End | None


def outcomes(envelopes: Sequence[Envelope]) -> tuple[CallOutcome, ...]:
    """The outcomes of a turn's envelopes, in order."""
    return tuple(CallOutcome.of(envelope) for envelope in envelopes)
