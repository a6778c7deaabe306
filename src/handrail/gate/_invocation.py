"""Running one tool: its context, the deadline of each awaited stage, its retries, its result.

Owns the ToolContext a tool sees, the TIMEOUT refusal of a passed deadline, retries of
reads under the tool's RetryPolicy, and the mapping of what a tool raised (or returned
unshaped) to a refusal. Never decides whether a call may run; the gate does, before.
"""

from __future__ import annotations

import random
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from handrail.calls import ToolCall
from handrail.clock import Clock
from handrail.context import ToolContext
from handrail.credentials import SecretLedger, SecretProvider, Secrets
from handrail.deadline import DeadlineExceededError, within
from handrail.declare.definition import BoundArguments, Tool
from handrail.declare.exposure import Exposure
from handrail.envelope import Envelope
from handrail.errors import ErrorCode, Refusal, ToolSignal
from handrail.principal import Principal
from handrail.record.trail import describe_exception
from handrail.retry import Sleep, retrying
from handrail.shaping.budget import Budget
from handrail.shaping.shaper import Shaper

if TYPE_CHECKING:
    from handrail.telemetry._calls import CallSpans

__all__ = ["GENERIC_FAILURE", "Invoker"]

T = TypeVar("T")

GENERIC_FAILURE = "The tool failed with an internal error. It was recorded for the operators."


class Invoker:
    """Runs tools for one gate: on its clock, with its secrets, sleep and jitter."""

    __slots__ = ("_clock", "_ledger", "_rng", "_secrets", "_shaper", "_sleep")

    def __init__(
        self,
        *,
        clock: Clock,
        shaper: Shaper,
        ledger: SecretLedger,
        secrets: SecretProvider | None,
        sleep: Sleep,
        rng: random.Random,
    ) -> None:
        self._clock = clock
        self._shaper = shaper
        self._ledger = ledger
        self._secrets = secrets
        # Retry backoff of reads: injected so tests neither wait nor guess.
        self._sleep = sleep
        self._rng = rng

    def context(
        self,
        tool: Tool,
        principal: Principal,
        call: ToolCall,
        deadline: float,
        exposure: Exposure | None = None,
    ) -> ToolContext:
        """What the tool (and its validators and hooks) may see of this call.

        `exposure` is what the request showed the model; the tool sees its request.
        """
        spec = tool.spec
        secrets = (
            Secrets(
                self._secrets,
                tenant_id=principal.tenant_id,
                allowed=spec.secrets,
                tool=spec.name,
                ledger=self._ledger,
            )
            if self._secrets is not None and spec.secrets
            else None
        )
        return ToolContext(
            principal=principal,
            call_id=call.id,
            tool=spec.name,
            deadline=deadline,
            clock=self._clock,
            secrets=secrets,
            exposure=None if exposure is None else exposure.request,
        )

    async def within(self, deadline: float, stage: str, work: Coroutine[Any, Any, T]) -> T:
        """Await `work` until the deadline (on the gate's clock); a TIMEOUT refusal after."""
        remaining = deadline - self._clock.monotonic()
        try:
            return await within(work, remaining)
        except DeadlineExceededError:
            raise _timeout(stage, remaining) from None

    async def read(  # noqa: PLR0917 - positional, since it runs once per read
        self,
        call: ToolCall,
        tool: Tool,
        principal: Principal,
        bound: BoundArguments,
        ctx: ToolContext | None,
        deadline: float,
        share: Budget | None,
        spans: CallSpans | None = None,
    ) -> Envelope:
        """Run a read under the deadline and its retry policy, then shape its result.

        What the tool raised becomes a refusal, and so does a result that is not JSON.
        One coroutine for both: this runs once per call of every read. `spans` (with
        telemetry) makes the execute and then the shape stage the current span.
        """
        policy = tool.spec.retry
        if spans is not None:
            spans.running()
        try:
            if policy.max_attempts == 1:
                # The common case pays for no retry machinery (and no extra frame).
                remaining = deadline - self._clock.monotonic()
                try:
                    result = await within(tool.invoke(bound, ctx), remaining)
                except DeadlineExceededError:
                    raise _timeout("execute", remaining) from None
            else:
                result = await self._retried(tool, bound, ctx, deadline)
        except Refusal:
            raise
        except ToolSignal as signal:
            raise Refusal(
                signal.code,
                signal.message,
                stage="execute",
                retryable=signal.retryable,
                retry_after=getattr(signal, "retry_after", None),
                candidates=getattr(signal, "candidates", ()),
                from_tool=True,
            ) from None
        except Exception as exc:  # noqa: BLE001 - the tool boundary: anything undeclared maps here
            transient = isinstance(exc, tool.spec.retry.transient)
            raise Refusal(
                ErrorCode.TRANSIENT if transient else ErrorCode.FAILED_FINAL,
                (
                    "The tool failed with a temporary error. You may retry the same call."
                    if transient
                    else GENERIC_FAILURE
                ),
                stage="execute",
                retryable=transient,
                detail=describe_exception(exc),
            ) from None
        if spans is not None:
            spans.shaping()
        try:
            return await self._shaper.shape(
                call_id=call.id,
                spec=tool.spec,
                principal=principal,
                result=result,
                share=share,
                ledger=self._ledger,
            )
        except ValueError as exc:
            raise Refusal(
                ErrorCode.FAILED_FINAL,
                GENERIC_FAILURE,
                stage="result",
                detail=f"result is not JSON-serialisable: {describe_exception(exc)}",
            ) from None

    async def _retried(
        self,
        tool: Tool,
        bound: BoundArguments,
        ctx: ToolContext | None,
        deadline: float,
    ) -> object:
        """A read under its RetryPolicy: TRANSIENT and RATE_LIMITED failures run again."""
        policy = tool.spec.retry
        transient_types = policy.transient

        def retryable(exc: BaseException) -> bool:
            # Only TRANSIENT and RATE_LIMITED failures; a TIMEOUT refusal never is.
            if isinstance(exc, ToolSignal):
                return exc.retryable
            return not isinstance(exc, Refusal) and isinstance(exc, transient_types)

        return await retrying(
            lambda _attempt: self.within(deadline, "execute", tool.invoke(bound, ctx)),
            policy=policy,
            retryable=retryable,
            deadline=deadline,
            clock=self._clock,
            sleep=self._sleep,
            rng=self._rng,
        )


def _timeout(stage: str, remaining: float) -> Refusal:
    """The TIMEOUT refusal of a deadline that passed in `stage`."""
    return Refusal(
        ErrorCode.TIMEOUT,
        "The call ran out of time before it finished. You may retry it once.",
        stage=stage,
        retryable=True,
        detail=f"deadline of {remaining:.3f}s passed in stage {stage}",
    )
