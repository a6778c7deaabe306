"""Conversation guard: what one conversation was refused, and what it may no longer try.

Owns per-conversation memory of denials, kept behind the `GuardState` Protocol (in
this process, or in the store for every worker of a service): a target denied through
one tool is not reachable through another tool afterwards, and repeated denials trip a
breaker that refuses every further call of the conversation before anything runs. It
never grants anything: it only adds refusals to the policy's.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Protocol

from handrail.authz.policy import Decision, Outcome, denied
from handrail.errors import ConfigurationError, ErrorCode, Refusal
from handrail.principal import Principal
from handrail.sharing import MAX_GUARD_TARGETS, GuardRecord
from handrail.spec import ToolSpec
from handrail.store.base import reads_block

if TYPE_CHECKING:
    from handrail.clock import Clock
    from handrail.store.base import Store

__all__ = [
    "ConversationGuard",
    "ConversationState",
    "GuardState",
    "MemoryGuardState",
    "StoreGuardState",
]

_NO_TARGETS: Mapping[str, frozenset[str]] = MappingProxyType({})
_MAX_TARGETS = MAX_GUARD_TARGETS
_MAX_TARGET_KEY = 512
_MAX_CONVERSATION_KEY = 256
"""The store's column widths: longer keys (and unstorable ones) are kept by SHA-256 (`_key`)."""


def _key(text: str, limit: int) -> str:
    """`text`, or its SHA-256 when no store could keep it; equal texts keep equal keys.

    Not kept: longer than `limit`, a NUL, a lone surrogate (a model may put either in
    an argument a target is built from).
    """
    if len(text) <= limit and "\x00" not in text and (text.isascii() or _encodable(text)):
        return text
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _encodable(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


@dataclass(frozen=True, kw_only=True, slots=True)
class ConversationState:
    """What one conversation has been refused so far."""

    denials: int = 0
    """PERMISSION_DENIED answers given in this conversation, of any stage."""
    targets: Mapping[str, frozenset[str]] = field(default_factory=lambda: _NO_TARGETS)
    """Denied targets (`Decision.resource_key`) and the tools they were denied to."""


class GuardState(Protocol):
    """Where conversation state lives. Conversations are keyed by tenant and id.

    `add_denial` must be atomic (one increment per call, also across processes: an
    UPDATE ... SET denials = denials + 1 ... RETURNING, not read-then-write), so that
    exactly one denial sees the count reach the breaker's limit.
    """

    async def load(self, tenant_id: str, conversation: str) -> ConversationState:
        """The conversation's state; an empty state for a conversation never seen."""
        ...

    async def add_denial(
        self,
        tenant_id: str,
        conversation: str,
        *,
        tool: str,
        target: str | None,
    ) -> ConversationState:
        """Count one denial (and remember its target, if any); the state afterwards."""
        ...


class MemoryGuardState:
    """Conversation state in this process, for tests and single-process hosts.

    Holds at most `max_conversations` conversations, dropping the least recently used;
    a dropped conversation starts again with no denials. Hosts with more conversations,
    or several processes, need a store-backed GuardState.
    """

    def __init__(self, *, max_conversations: int = 100_000) -> None:
        if max_conversations < 1:
            raise ConfigurationError("max_conversations must be at least 1")
        self._max = max_conversations
        self._states: OrderedDict[tuple[str, str], ConversationState] = OrderedDict()

    def __len__(self) -> int:
        return len(self._states)

    async def load(self, tenant_id: str, conversation: str) -> ConversationState:
        """The state, marked as recently used; empty if unknown."""
        key = (tenant_id, conversation)
        state = self._states.get(key)
        if state is None:
            return ConversationState()
        self._states.move_to_end(key)
        return state

    async def add_denial(
        self,
        tenant_id: str,
        conversation: str,
        *,
        tool: str,
        target: str | None,
    ) -> ConversationState:
        """Count one denial. Atomic: no await between reading and writing the state."""
        key = (tenant_id, conversation)
        before = self._states.get(key) or ConversationState()
        targets = before.targets
        if target is not None and (target in targets or len(targets) < _MAX_TARGETS):
            merged = dict(targets)
            merged[target] = targets.get(target, frozenset()) | {tool}
            targets = MappingProxyType(merged)
        after = ConversationState(denials=before.denials + 1, targets=targets)
        self._states[key] = after
        self._states.move_to_end(key)
        while len(self._states) > self._max:
            self._states.popitem(last=False)
        return after


class StoreGuardState:
    """Conversation state in the store, so that every worker of a service shares it.

    `add_denial` is the store's atomic upsert (`Store.add_guard_denial`): of denials
    in several processes at once, exactly one sees the count reach the breaker's limit.
    A conversation id longer than the store's column is kept by its SHA-256. Reads run
    inline on a store whose reads never wait, else in a worker thread, as writes do.
    """

    __slots__ = ("_clock", "_inline", "_store")

    def __init__(self, store: Store, *, clock: Clock) -> None:
        self._store = store
        self._clock = clock
        self._inline = not reads_block(store)

    async def load(self, tenant_id: str, conversation: str) -> ConversationState:
        """The stored state; empty for a conversation never denied."""
        key = _key(conversation, _MAX_CONVERSATION_KEY)
        if self._inline:
            return _state(self._store.guard_state(tenant_id, key))
        return _state(await asyncio.to_thread(self._store.guard_state, tenant_id, key))

    async def add_denial(
        self,
        tenant_id: str,
        conversation: str,
        *,
        tool: str,
        target: str | None,
    ) -> ConversationState:
        """Count one denial in the store (atomic across processes); the state afterwards."""
        record = await asyncio.to_thread(
            self._store.add_guard_denial,
            tenant_id,
            _key(conversation, _MAX_CONVERSATION_KEY),
            tool=tool,
            target=target,
            at=self._clock.now(),
        )
        return _state(record)


def _state(record: GuardRecord) -> ConversationState:
    return ConversationState(denials=record.denials, targets=MappingProxyType(dict(record.targets)))


class ConversationGuard:
    """Refuses what one conversation should no longer try; the gate calls it per call.

    - Bypass: after a PERMISSION_DENIED about a target (a `Decision.resource_key`), a
      later call that reaches the same target through another tool is refused with
      PERMISSION_DENIED (terminal), whatever the policy would have decided for it.
    - Breaker: after `max_denials` PERMISSION_DENIED answers, every further call is
      refused with BUDGET_EXHAUSTED (terminal) before lookup: nothing is parsed,
      validated, resolved or run. BUDGET_EXHAUSTED rather than PERMISSION_DENIED,
      because it is about the conversation, not about the tool or target of the call:
      the model must stop calling tools, not look for another one.

    Only PERMISSION_DENIED counts; NOT_FOUND, invalid arguments and the like do not.
    """

    __slots__ = ("_max", "_state")

    def __init__(self, *, state: GuardState | None = None, max_denials: int = 3) -> None:
        if max_denials < 1:
            raise ConfigurationError("max_denials must be at least 1")
        self._state: GuardState = state if state is not None else MemoryGuardState()
        self._max = max_denials

    @property
    def max_denials(self) -> int:
        """How many denials trip the breaker."""
        return self._max

    async def admit(self, principal: Principal, conversation: str) -> None:
        """Refuse every call of a conversation whose breaker has tripped."""
        state = await self._state.load(principal.tenant_id, conversation)
        if state.denials >= self._max:
            raise Refusal(
                ErrorCode.BUDGET_EXHAUSTED,
                "Too many calls in this conversation were refused; no further tool calls "
                "will run. Tell the user what you could not do.",
                stage="guard",
                detail=(
                    f"breaker: {state.denials} denials in this conversation "
                    f"(limit {self._max}); the call was refused before lookup"
                ),
            )

    async def screen(
        self,
        principal: Principal,
        conversation: str,
        spec: ToolSpec,
        decision: Decision,
    ) -> None:
        """Refuse a call that reaches a target this conversation was denied via another tool."""
        target = decision.resource_key
        if target is None or decision.outcome in {Outcome.DENY, Outcome.NOT_FOUND}:
            return
        target = _key(target, _MAX_TARGET_KEY)
        state = await self._state.load(principal.tenant_id, conversation)
        # Denied to this tool alone: the policy decides again (a smaller amount may be
        # fine). Denied to any other tool, including an earlier bypass attempt through
        # this one: the target stays out of reach for the rest of the conversation.
        others = state.targets.get(target, frozenset()) - {spec.name}
        if others:
            raise denied(
                spec,
                stage="guard",
                detail=(
                    f"bypass: {target} was denied to {', '.join(sorted(others))} earlier "
                    f"in this conversation; the policy would have decided "
                    f"{decision.outcome} by rule={decision.rule}"
                ),
            )

    async def record_denial(
        self,
        principal: Principal,
        conversation: str,
        *,
        tool: str,
        target: str | None,
    ) -> bool:
        """Count a PERMISSION_DENIED; True when this one tripped the breaker."""
        state = await self._state.add_denial(
            principal.tenant_id,
            conversation,
            tool=tool,
            target=None if target is None else _key(target, _MAX_TARGET_KEY),
        )
        return state.denials == self._max
