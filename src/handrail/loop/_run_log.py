"""How a run is stored: a small header rewritten each step, and entries only appended.

A run's record holds a header (layout version 5: the task, principal, limits, budget
counters, conversation, pending plans and end) that each step rewrites by
compare-and-set, and one entry per stored step with only what the step added (its
turns, model replies, step log, execution keys, toolset changes and the identities of
the calls it admitted), appended in the same transaction. So a step writes the same number of
bytes at step 200 as at step 2. Reading a run assembles the whole document
(`RunData`); runs stored whole (document versions 1, 2 and 4) still read as they were,
and their next write stores everything so far in its entry. Layout 3 (entries without
toolset changes) reads as a run whose toolset never changed. Never decides anything
about a run.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pydantic

from handrail.errors import ConfigurationError
from handrail.loop._agent_record import (
    DOCUMENT_VERSION,
    RunData,
    budget_json,
    call_json,
    call_of,
    end_json,
    step_json,
    toolset_json,
    turn_json,
)
from handrail.loop.budgets import arguments_fingerprint
from handrail.loop.models import cassette_items

if TYPE_CHECKING:
    from handrail.calls import ToolCall
    from handrail.runs import RunRecord

__all__ = ["LAYOUT_VERSION", "RunLog", "read_run"]

LAYOUT_VERSION = 5
"""Version of a stored run's header; its entries' shape goes with it."""
_LAYOUTS = frozenset({3, LAYOUT_VERSION})

_IDENTICAL = "identical"


@dataclass(kw_only=True, slots=True)
class RunLog:
    """What of a session the store holds already, and what the next entry must add.

    `turns`, `replies`, `steps`, `keys` and `toolset` count the stored items of each list; the
    budget's identical-call counts are `base` (a run stored whole before) plus one per
    identity in `admitted` of the entries. `history` is False until the run's starting
    history has been stored (in its first entry).
    """

    turns: int = 0
    replies: int = 0
    steps: int = 0
    keys: int = 0
    toolset: int = 0
    history: bool = False
    base: list[Any] = field(default_factory=list)
    admitted: list[list[Any]] = field(default_factory=list)
    """[tool, call] of each call admitted since the last entry; a reader fingerprints it."""

    @classmethod
    def of(cls, data: RunData, record: RunRecord | None) -> RunLog:
        """The log of `data`, read from `record` (None: nothing of it stored yet)."""
        if record is None or _version(record.data) not in _LAYOUTS:
            # Stored whole (or not at all): the next entry holds everything so far.
            return cls(base=list(data.budget.get(_IDENTICAL, [])))
        return cls(
            turns=len(data.transcript),
            replies=len(data.replies),
            steps=len(data.steps),
            keys=len(data.keys),
            toolset=len(data.toolset),
            history=True,
            base=_Header.model_validate_json(record.data).base_identical,
        )

    def admit(self, tool: str, call: ToolCall) -> None:
        """Note a call the budget admitted (its identical-call count went up by one)."""
        self.admitted.append([tool, call_json(call)])

    def header(self, data: RunData) -> str:
        """The run's header as ASCII JSON text: `data` without what entries hold."""
        budget = dict(data.budget)
        budget.pop(_IDENTICAL, None)
        document = {
            "version": LAYOUT_VERSION,
            "task": data.task,
            "principal": data.principal,
            "limits": budget_json(data.limits),
            "budget": budget,
            "base_identical": self.base,
            "conversation": None
            if data.conversation is None
            else {"id": data.conversation.conversation_id, "start": data.conversation.start},
            "pending": [
                {"plan_id": p.plan_id, "call_id": p.call_id, "tool": p.tool} for p in data.pending
            ],
            "end": None if data.end is None else end_json(data.end),
        }
        return json.dumps(document, allow_nan=False, separators=(",", ":"))

    def entry(self, data: RunData) -> str:
        """The next entry: what `data` holds beyond the stored lists, as ASCII JSON text."""
        document: dict[str, Any] = {
            "turns": [turn_json(turn) for turn in data.transcript[self.turns :]],
            "replies": cassette_items(data.replies[self.replies :]),
            "steps": [step_json(step) for step in data.steps[self.steps :]],
            "keys": list(data.keys[self.keys :]),
            "toolset": [toolset_json(change) for change in data.toolset[self.toolset :]],
            "admitted": self.admitted,
        }
        if not self.history:
            document["history"] = [turn_json(turn) for turn in data.history]
        return json.dumps(document, allow_nan=False, separators=(",", ":"))

    def stored(self, data: RunData) -> None:
        """Mark `data`'s lists as stored (after its entry was written)."""
        self.turns = len(data.transcript)
        self.replies = len(data.replies)
        self.steps = len(data.steps)
        self.keys = len(data.keys)
        self.toolset = len(data.toolset)
        self.history = True
        self.admitted = []


# --- reading -------------------------------------------------------------------------------------


class _Header(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    version: pydantic.StrictInt
    task: Any
    principal: Any
    limits: Any
    budget: dict[str, Any]
    base_identical: list[Any]
    conversation: Any
    pending: Any
    end: Any


class _Entry(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    turns: list[Any]
    replies: list[Any]
    steps: list[Any]
    keys: list[Any]
    toolset: list[Any] = []
    admitted: list[tuple[pydantic.StrictStr, dict[str, Any]]]
    history: list[Any] | None = None


def _version(text: str) -> object:
    try:
        document = json.loads(text)
    except ValueError:
        return None
    return document.get("version") if isinstance(document, dict) else None


def read_run(record: RunRecord) -> RunData:
    """The loop's document of a stored run; ConfigurationError if it is not one.

    A header with entries is assembled into the whole document, then read (and
    checked) as one: the same rules hold for a run however it was stored.
    """
    if _version(record.data) not in _LAYOUTS:
        return RunData.parse(record.data)
    try:
        header = _Header.model_validate_json(record.data)
        entries = [_Entry.model_validate_json(text) for text in record.entries]
    except pydantic.ValidationError as exc:
        msg = "the run's data is not a run document"
        raise ConfigurationError(msg) from exc
    return RunData.parse(_assembled(header, entries))


def _assembled(header: _Header, entries: Sequence[_Entry]) -> str:
    identical: dict[tuple[str, str], int] = {}
    for item in header.base_identical:
        if not (isinstance(item, list) and len(item) == 3):  # noqa: PLR2004 - [tool, key, n]
            msg = "the run's data is not a run document"
            raise ConfigurationError(msg)
        identical[(item[0], item[1])] = item[2]
    history: list[Any] = []
    transcript: list[Any] = []
    replies: list[Any] = []
    steps: list[Any] = []
    keys: list[Any] = []
    toolset: list[Any] = []
    for n, entry in enumerate(entries):
        if entry.history is not None:
            if n:
                msg = "the run's data is not a run document (a history after its start)"
                raise ConfigurationError(msg)
            history = entry.history
        transcript.extend(entry.turns)
        replies.extend(entry.replies)
        steps.extend(entry.steps)
        keys.extend(entry.keys)
        toolset.extend(entry.toolset)
        for tool, call in entry.admitted:
            identity = (tool, arguments_fingerprint(call_of(call).arguments))
            identical[identity] = identical.get(identity, 0) + 1
    budget = dict(header.budget)
    budget[_IDENTICAL] = [[tool, key, count] for (tool, key), count in identical.items()]
    document = {
        "version": DOCUMENT_VERSION,
        "task": header.task,
        "principal": header.principal,
        "limits": header.limits,
        "budget": budget,
        "transcript": transcript,
        "history": history,
        "conversation": header.conversation,
        "replies": replies,
        "steps": steps,
        "pending": header.pending,
        "keys": keys,
        "toolset": toolset,
        "end": header.end,
    }
    return json.dumps(document, allow_nan=False, separators=(",", ":"))
