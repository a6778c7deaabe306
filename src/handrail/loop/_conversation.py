"""Runs over a conversation: a host's history checked, a stored conversation held and grown.

`check_history` refuses a transcript that some adapter could not send. `Conversations`
opens a stored conversation for a new run (creating it for the run's principal,
refusing another principal's exactly like a missing one, and one whose last run is
still running or suspended), reads a stored run's history (and own turns) back, and
appends a run's new turns when it stops. It never asks a model, runs a call or moves a run.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from handrail.adapters.transcript import (
    AssistantTurn,
    ToolResult,
    ToolResultsTurn,
    Turn,
    UserTurn,
)
from handrail.calls import ToolCall
from handrail.conversations import ConversationRecord
from handrail.errors import ConfigurationError, ErrorCode
from handrail.loop._agent_record import ConversationRef, RunData, dump_turn, load_turn
from handrail.loop._session import RunRefusedError, Session

if TYPE_CHECKING:
    from handrail.clock import Clock
    from handrail.principal import Principal
    from handrail.store.base import Store

__all__ = ["Conversations", "Opened", "check_history"]

T = TypeVar("T")

_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_NO_SUCH = "There is no such conversation."


@dataclass(frozen=True, kw_only=True, slots=True)
class Opened:
    """What a new run starts from: its history, and where that history is kept.

    `ref` names the stored conversation the run now holds (None without one), whose
    holder was `previous` before; without one, the run's document keeps the history.
    """

    history: tuple[Turn, ...]
    ref: ConversationRef | None = None
    previous: str | None = None

    @property
    def inline(self) -> tuple[Turn, ...]:
        """The history the run's document keeps itself: none when a conversation does."""
        return self.history if self.ref is None else ()


class Conversations:
    """The stored conversations of one AgentLoop: opened, read and appended to."""

    def __init__(self, store: Store, clock: Clock) -> None:
        self._store = store
        self._clock = clock

    async def open(
        self,
        principal: Principal,
        *,
        run_id: str,
        conversation_id: str | None,
        history: Sequence[Turn],
    ) -> Opened:
        """Check `history`, or hold the conversation `conversation_id` for `run_id`.

        A new id creates the conversation for `principal`. Another principal's is
        NOT_FOUND, like a missing one; one whose last run is running or suspended is
        CONFLICT, naming that run. The turns are read after the run holds it, so no
        other run can append to them any more.
        """
        turns = check_history(history)
        if conversation_id is None:
            return Opened(history=turns)
        if turns:
            msg = "a run in a stored conversation starts from its turns: pass no history"
            raise ConfigurationError(msg)
        if not _ID.fullmatch(conversation_id):
            msg = "a conversation id is 1-64 characters of [A-Za-z0-9_-]"
            raise ConfigurationError(msg)
        now = self._clock.now()
        record = await self._io(self._store.get_conversation, conversation_id)
        if record is None:
            fresh = ConversationRecord(
                conversation_id=conversation_id,
                tenant_id=principal.tenant_id,
                user_id=principal.user_id,
                turns=0,
                run_id=run_id,
                created_at=now,
                updated_at=now,
            )
            if await self._io(self._store.insert_conversation, fresh):
                return Opened(
                    history=(), ref=ConversationRef(conversation_id=conversation_id, start=0)
                )
            # Another request created it first: it is theirs, or it is held now.
            record = await self._io(self._store.get_conversation, conversation_id)
        if record is None or not _owned(record, principal):
            raise RunRefusedError(ErrorCode.NOT_FOUND, _NO_SUCH)
        await self._check_free(record)
        claimed = await self._io(
            self._store.claim_conversation,
            conversation_id,
            run_id=run_id,
            expect_run_id=record.run_id,
            at=now,
        )
        if not claimed:
            raise RunRefusedError(ErrorCode.CONFLICT, "Another run started in the conversation.")
        stored = await self._turns(conversation_id, stop=None)
        return Opened(
            history=stored,
            ref=ConversationRef(conversation_id=conversation_id, start=len(stored)),
            previous=record.run_id,
        )

    async def release(self, opened: Opened, run_id: str) -> None:
        """Give the conversation back to its previous run: `run_id` never started."""
        if opened.ref is not None:
            await self._io(
                self._store.claim_conversation,
                opened.ref.conversation_id,
                run_id=opened.previous,
                expect_run_id=run_id,
                at=self._clock.now(),
            )

    async def history_of(self, data: RunData) -> tuple[Turn, ...]:
        """The history a stored run started from: its own copy, or its conversation's turns."""
        ref = data.conversation
        if ref is None:
            return data.history
        turns = await self._turns(ref.conversation_id, stop=ref.start)
        if len(turns) != ref.start:
            msg = f"the run's conversation holds {len(turns)} turns, not {ref.start}"
            raise ConfigurationError(msg)
        return turns

    async def own_turns(self, data: RunData, run_id: str) -> tuple[Turn, ...]:
        """The run's own turns: its document's, or its conversation's when they go further.

        A run whose end could not be stored (the store failed after its conversation
        took its turns) has fewer turns in its document than its conversation holds.
        """
        ref = data.conversation
        if ref is None:
            return data.transcript
        record = await self._io(self._store.get_conversation, ref.conversation_id)
        if record is None or record.run_id != run_id:
            return data.transcript
        texts = await self._io(self._store.get_turns, ref.conversation_id, start=ref.start)
        held = tuple(load_turn(text) for text in texts)
        own = data.transcript
        return held if len(held) > len(own) and held[: len(own)] == own else own

    async def sync(self, s: Session) -> bool:
        """Append the run's turns its conversation lacks; False if the run no longer holds it.

        Called before a run is stored as stopped, so a run that follows it (which waits
        until this one has stopped) finds every turn.
        """
        ref = s.data.conversation
        if ref is None or s.record is None:
            return True
        record = await self._io(self._store.get_conversation, ref.conversation_id)
        if record is None or record.run_id != s.run_id:
            return False
        own = s.new_turns
        held = record.turns - ref.start
        if not 0 <= held <= len(own):
            return False
        if held == len(own):
            return True
        return await self._io(
            self._store.append_turns,
            ref.conversation_id,
            [dump_turn(turn) for turn in own[held:]],
            expect_turns=record.turns,
            at=self._clock.now(),
        )

    async def read(self, conversation_id: str, principal: Principal) -> tuple[Turn, ...]:
        """The turns of `principal`'s conversation; NOT_FOUND for none or another's."""
        record = (
            await self._io(self._store.get_conversation, conversation_id)
            if _ID.fullmatch(conversation_id)
            else None
        )
        if record is None or not _owned(record, principal):
            raise RunRefusedError(ErrorCode.NOT_FOUND, _NO_SUCH)
        return await self._turns(conversation_id, stop=record.turns)

    async def _check_free(self, record: ConversationRecord) -> None:
        if record.run_id is None:
            return
        run = await self._io(self._store.get_run, record.run_id)
        if run is not None and not run.state.ended:
            state = run.state.value.lower()
            raise RunRefusedError(
                ErrorCode.CONFLICT, f"Run {run.run_id} of this conversation is {state}."
            )

    async def _turns(self, conversation_id: str, *, stop: int | None) -> tuple[Turn, ...]:
        texts = await self._io(self._store.get_turns, conversation_id, stop=stop)
        return tuple(load_turn(text) for text in texts)

    async def _io(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:  # noqa: ANN401
        return await asyncio.to_thread(fn, *args, **kwargs)


def _owned(record: ConversationRecord, principal: Principal) -> bool:
    return record.tenant_id == principal.tenant_id and record.user_id == principal.user_id


# --- history ------------------------------------------------------------------------------------


def check_history(history: Sequence[Turn]) -> tuple[Turn, ...]:
    """The history as a tuple, if every adapter can send it; ConfigurationError if not.

    It starts with a user turn; user text is not blank; an assistant turn has text or
    calls and never follows another; each call id is used once; the calls of an
    assistant turn are answered, exactly, by the results turn right after it, and
    results answer nothing else. Every turn must be storable as a run stores turns.
    """
    if isinstance(history, (str, bytes)):
        msg = "history is a sequence of turns"
        raise ConfigurationError(msg)
    turns = tuple(history)
    seen: set[str] = set()
    open_calls: tuple[ToolCall, ...] = ()
    previous: Turn | None = None
    for index, turn in enumerate(turns):
        problem = _problem(turn, previous, open_calls, seen)
        if problem is None and index == 0 and not isinstance(turn, UserTurn):
            problem = "a history starts with a user turn"
        if problem is None:
            problem = _unstorable(turn)
        if problem is not None:
            msg = f"history turn {index}: {problem}"
            raise ConfigurationError(msg)
        open_calls = turn.calls if isinstance(turn, AssistantTurn) else ()
        previous = turn
    if open_calls:
        msg = f"history turn {len(turns) - 1}: its calls have no results"
        raise ConfigurationError(msg)
    return turns


def _problem(
    turn: object,
    previous: Turn | None,
    open_calls: tuple[ToolCall, ...],
    seen: set[str],
) -> str | None:
    """What is wrong with `turn` where it stands, or None."""
    if isinstance(turn, UserTurn):
        return _user_problem(turn, open_calls)
    if isinstance(turn, AssistantTurn):
        if open_calls:
            return "the calls of the turn before it have no results"
        if isinstance(previous, AssistantTurn):
            return "two assistant turns in a row"
        return _assistant_problem(turn, seen)
    if isinstance(turn, ToolResultsTurn):
        return _results_problem(turn, open_calls)
    return f"{type(turn).__name__} is not a UserTurn, AssistantTurn or ToolResultsTurn"


def _user_problem(turn: UserTurn, open_calls: tuple[ToolCall, ...]) -> str | None:
    if open_calls:
        return "user text cannot answer the calls before it; a results turn must"
    if not isinstance(turn.text, str) or not turn.text.strip():
        return "a user turn needs text that is not blank"
    return None


def _results_problem(turn: ToolResultsTurn, open_calls: tuple[ToolCall, ...]) -> str | None:
    if not open_calls:
        return "tool results must follow an assistant turn with calls"
    results = turn.results
    if not isinstance(results, tuple) or not all(isinstance(r, ToolResult) for r in results):
        return "a results turn holds a tuple of ToolResult"
    if Counter(c.id for c in open_calls) != Counter(r.call_id for r in results):
        return "the results must answer exactly the calls of the turn before"
    return None


def _assistant_problem(turn: AssistantTurn, seen: set[str]) -> str | None:
    if turn.text is not None and not isinstance(turn.text, str):
        return "an assistant turn's text is a string or None"
    if not isinstance(turn.calls, tuple) or not all(isinstance(c, ToolCall) for c in turn.calls):
        return "an assistant turn's calls are a tuple of ToolCall"
    if not turn.calls and (turn.text is None or not turn.text.strip()):
        return "an assistant turn with neither text nor calls"
    for call in turn.calls:
        if not isinstance(call.id, str) or not call.id:
            return "a call needs an id"
        if call.id in seen:
            return f"call id {call.id[:64]!r} is used twice"
        seen.add(call.id)
    return None


def _unstorable(turn: Turn) -> str | None:
    try:
        load_turn(dump_turn(turn))
    except (ConfigurationError, TypeError, ValueError, AttributeError):
        return "it cannot be stored as a run stores turns"
    return None
