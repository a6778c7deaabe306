"""Hard budgets of one agent run, kept as program state (DESIGN invariant 11).

Steps, a total deadline, input and output tokens, cost from a price table, per-tool
call counts, a breaker for identical repeated calls and one for the same error repeated.
A trip raises BudgetExhausted with a structured reason and latches: the run is over, and
every later step or call is refused with the same reason. Nothing here reads or writes
prompt text; the model never learns a limit it could argue with.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import pydantic

from handrail.errors import ConfigurationError, ErrorCode, HandrailError
from handrail.loop._fingerprint import arguments_fingerprint

if TYPE_CHECKING:
    from handrail.calls import ToolCall
    from handrail.clock import Clock
    from handrail.envelope import Envelope

__all__ = [
    "SNAPSHOT_VERSION",
    "BudgetExhausted",
    "BudgetReason",
    "BudgetTracker",
    "BudgetTrip",
    "ModelPrice",
    "PriceTable",
    "RunBudget",
    "arguments_fingerprint",
]

SNAPSHOT_VERSION = 1
"""Version of the JSON written by `BudgetTracker.snapshot`."""

_MILLION = Decimal(1_000_000)
_AWAITING_A_PERSON = frozenset({ErrorCode.NEEDS_CONFIRMATION, ErrorCode.NEEDS_APPROVAL})


class BudgetReason(StrEnum):
    """Which budget ended a run."""

    STEPS = "steps"
    DEADLINE = "deadline"
    INPUT_TOKENS = "input_tokens"
    OUTPUT_TOKENS = "output_tokens"
    COST = "cost"
    TOOL_CALLS = "tool_calls"
    IDENTICAL_CALLS = "identical_calls"
    SAME_ERROR = "same_error"


Amount = int | float | Decimal
"""A limit or an observed value: a count (int), seconds (float) or money (Decimal)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class BudgetTrip:
    """Why a run ended: the budget, its limit and what was observed.

    `observed` is the value that crossed the limit (the step or call that would have
    been one too many, tokens or cost after the usage, seconds elapsed), or None when
    it cannot be known (usage of a model the price table does not list). `tool` is set
    for per-tool counts and both breakers, `model` for an unpriced model, `error_code`
    for the same-error breaker. `limit` of TOOL_CALLS with no tool is the total limit.
    """

    reason: BudgetReason
    limit: Amount
    observed: Amount | None
    tool: str | None = None
    model: str | None = None
    error_code: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able form: money as a decimal string, counts and seconds as numbers."""
        return {
            "reason": self.reason.value,
            "limit": _encode_amount(self.limit),
            "observed": None if self.observed is None else _encode_amount(self.observed),
            "tool": self.tool,
            "model": self.model,
            "error_code": self.error_code,
        }


class BudgetExhausted(HandrailError):  # noqa: N818 - a run's end, named as DESIGN names it
    """A budget of the run tripped; the run ends fail-closed with `trip` as its reason."""

    code = ErrorCode.BUDGET_EXHAUSTED

    def __init__(self, trip: BudgetTrip) -> None:
        super().__init__(f"{trip.reason.value} budget exhausted")
        self.trip = trip

    @property
    def reason(self) -> BudgetReason:
        """The budget that tripped."""
        return self.trip.reason


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelPrice:
    """What one model costs, per million tokens, in one currency (never a float)."""

    input_per_million: Decimal
    output_per_million: Decimal

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "input_per_million", _money(self.input_per_million, "input_per_million")
        )
        object.__setattr__(
            self, "output_per_million", _money(self.output_per_million, "output_per_million")
        )

    def cost(self, *, input_tokens: int, output_tokens: int) -> Decimal:
        """The exact cost of a usage."""
        total = input_tokens * self.input_per_million + output_tokens * self.output_per_million
        return total / _MILLION


@dataclass(frozen=True, kw_only=True, slots=True)
class PriceTable:
    """Prices by model name, as the model client reports the name in its usage."""

    prices: Mapping[str, ModelPrice]

    def __post_init__(self) -> None:
        object.__setattr__(self, "prices", MappingProxyType(dict(self.prices)))

    def price(self, model: str) -> ModelPrice | None:
        """The price of `model`, or None when the table does not list it."""
        return self.prices.get(model)


_NO_LIMITS: Mapping[str, int] = MappingProxyType({})


@dataclass(frozen=True, kw_only=True, slots=True)
class RunBudget:
    """The limits of one run. Steps and the deadline have no default: a run is bounded.

    `max_steps` counts model turns; `deadline_seconds` counts time the run is active
    (a run suspended for a confirmation does not spend it). Token limits count usage
    summed over all turns, as billed. `max_cost` needs `prices`. `tool_call_limits`
    caps calls per tool name, `max_tool_calls` all calls together. `max_identical_calls`
    is how often one tool may be called with the same canonical arguments in a run;
    `max_same_error` how many consecutive results of one tool may carry the same error
    code (another result of that tool, or a plan awaiting a person, resets it); None: no limit.
    """

    max_steps: int
    deadline_seconds: float
    max_input_tokens: int | None = None
    max_output_tokens: int | None = None
    max_cost: Decimal | None = None
    prices: PriceTable | None = None
    max_tool_calls: int | None = None
    tool_call_limits: Mapping[str, int] = field(default_factory=lambda: _NO_LIMITS)
    max_identical_calls: int | None = 3
    max_same_error: int | None = 3

    def __post_init__(self) -> None:
        _count(self.max_steps, "max_steps", minimum=1)
        seconds = self.deadline_seconds
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            msg = "deadline_seconds must be a number of seconds"
            raise ConfigurationError(msg)
        if not math.isfinite(seconds) or seconds <= 0:
            msg = "deadline_seconds must be finite and positive"
            raise ConfigurationError(msg)
        for name in ("max_input_tokens", "max_output_tokens", "max_tool_calls"):
            _optional_count(getattr(self, name), name, minimum=0)
        for name in ("max_identical_calls", "max_same_error"):
            _optional_count(getattr(self, name), name, minimum=1)
        if self.max_cost is not None:
            object.__setattr__(self, "max_cost", _money(self.max_cost, "max_cost"))
            if self.prices is None:
                msg = "max_cost needs a price table"
                raise ConfigurationError(msg)
        limits = dict(self.tool_call_limits)
        for tool, limit in limits.items():
            _count(limit, f"tool_call_limits[{tool!r}]", minimum=0)
        object.__setattr__(self, "tool_call_limits", MappingProxyType(limits))


class _SnapshotTrip(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    reason: BudgetReason
    limit: pydantic.StrictInt | pydantic.StrictFloat | pydantic.StrictStr
    observed: pydantic.StrictInt | pydantic.StrictFloat | pydantic.StrictStr | None
    tool: pydantic.StrictStr | None
    model: pydantic.StrictStr | None
    error_code: pydantic.StrictStr | None


_Count = pydantic.NonNegativeInt


class _Snapshot(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True, strict=True)

    version: int
    steps: _Count
    elapsed_seconds: pydantic.NonNegativeFloat
    input_tokens: _Count
    output_tokens: _Count
    cost: str
    tool_calls: _Count
    calls_by_tool: dict[str, _Count]
    identical: list[tuple[str, str, _Count]]
    error_streaks: list[tuple[str, str, _Count]]
    tripped: _SnapshotTrip | None


class BudgetTracker:
    """The budget state of one run: counters, the clock origin and the latched trip.

    Methods that admit work (`before_step`, `admit_call`) check every relevant limit
    first and count only what they admit, so a refused step or call is never counted.
    Methods that record what already happened (`record_usage`, `record_result`) count
    it, then raise when a limit is crossed. After a trip, every method that admits or
    records raises BudgetExhausted with the first trip.
    """

    def __init__(self, budget: RunBudget, clock: Clock) -> None:
        self._budget = budget
        self._clock = clock
        self._origin: float | None = None
        self._elapsed_before = 0.0
        self._steps = 0
        self._input_tokens = 0
        self._output_tokens = 0
        self._cost = Decimal(0)
        self._tool_calls = 0
        self._calls_by_tool: dict[str, int] = {}
        self._identical: dict[tuple[str, str], int] = {}
        self._error_streaks: dict[str, tuple[str, int]] = {}
        self._tripped: BudgetTrip | None = None

    @property
    def budget(self) -> RunBudget:
        """The limits this tracker enforces."""
        return self._budget

    @property
    def tripped(self) -> BudgetTrip | None:
        """The trip that ended the run, or None while it may go on."""
        return self._tripped

    @property
    def steps(self) -> int:
        """Steps admitted so far."""
        return self._steps

    @property
    def cost(self) -> Decimal:
        """Money spent so far, by the price table."""
        return self._cost

    def start(self) -> None:
        """Start the deadline clock, or resume it after `restore`; only once per tracker."""
        if self._origin is not None:
            msg = "the budget tracker was started already"
            raise ConfigurationError(msg)
        self._origin = self._clock.monotonic()

    def elapsed_seconds(self) -> float:
        """Active seconds spent by the run, including those before a restore."""
        if self._origin is None:
            msg = "the budget tracker was not started"
            raise ConfigurationError(msg)
        return self._elapsed_before + max(0.0, self._clock.monotonic() - self._origin)

    def remaining_seconds(self) -> float:
        """Seconds left before the deadline, never negative; 0 once tripped."""
        if self._tripped is not None:
            return 0.0
        return max(0.0, self._budget.deadline_seconds - self.elapsed_seconds())

    def check_deadline(self) -> None:
        """Raise BudgetExhausted if the deadline has passed (say, while a hook ran)."""
        self._raise_if_tripped()
        self._check_deadline()

    def before_step(self) -> None:
        """Admit one more model turn, or raise: steps, deadline, tokens or cost spent."""
        self._raise_if_tripped()
        budget = self._budget
        self._check_deadline()
        if self._steps >= budget.max_steps:
            self._trip(
                BudgetTrip(
                    reason=BudgetReason.STEPS, limit=budget.max_steps, observed=self._steps + 1
                )
            )
        # Usage is only known after a turn; a budget with no room left admits no turn.
        self._check_usage(strict=False)
        self._steps += 1

    def record_usage(self, model: str, *, input_tokens: int, output_tokens: int) -> None:
        """Count one turn's usage and its cost; raise when a token or cost limit is crossed.

        The usage is counted even after a trip, so the state stays a true account.
        """
        _count(input_tokens, "input_tokens", minimum=0, error=ValueError)
        _count(output_tokens, "output_tokens", minimum=0, error=ValueError)
        self._input_tokens += input_tokens
        self._output_tokens += output_tokens
        price = None if self._budget.prices is None else self._budget.prices.price(model)
        if price is not None:
            self._cost += price.cost(input_tokens=input_tokens, output_tokens=output_tokens)
        self._raise_if_tripped()
        if price is None and self._budget.max_cost is not None:
            # Cost cannot be bounded for a model without a price: fail closed.
            self._trip(
                BudgetTrip(
                    reason=BudgetReason.COST,
                    limit=self._budget.max_cost,
                    observed=None,
                    model=model,
                )
            )
        self._check_usage(strict=True)

    def admit_call(self, call: ToolCall, tool_name: str | None = None) -> None:
        """Admit one tool call before it runs, or raise; an admitted call is counted.

        `tool_name` is the registry's name when it differs from the wire name.
        """
        self._raise_if_tripped()
        self._check_deadline()
        budget = self._budget
        tool = call.name if tool_name is None else tool_name
        if budget.max_tool_calls is not None and self._tool_calls >= budget.max_tool_calls:
            self._trip(
                BudgetTrip(
                    reason=BudgetReason.TOOL_CALLS,
                    limit=budget.max_tool_calls,
                    observed=self._tool_calls + 1,
                )
            )
        made = self._calls_by_tool.get(tool, 0)
        limit = budget.tool_call_limits.get(tool)
        if limit is not None and made >= limit:
            self._trip(
                BudgetTrip(
                    reason=BudgetReason.TOOL_CALLS, limit=limit, observed=made + 1, tool=tool
                )
            )
        identity = (tool, arguments_fingerprint(call.arguments))
        same = self._identical.get(identity, 0)
        if budget.max_identical_calls is not None and same >= budget.max_identical_calls:
            self._trip(
                BudgetTrip(
                    reason=BudgetReason.IDENTICAL_CALLS,
                    limit=budget.max_identical_calls,
                    observed=same + 1,
                    tool=tool,
                )
            )
        self._tool_calls += 1
        self._calls_by_tool[tool] = made + 1
        self._identical[identity] = same + 1

    def record_result(
        self, call: ToolCall, envelope: Envelope, tool_name: str | None = None
    ) -> None:
        """Count a call's result for the same-error breaker; raise when it trips."""
        if envelope.call_id != call.id:
            msg = "the envelope answers another call"
            raise ValueError(msg)
        self._raise_if_tripped()
        tool = call.name if tool_name is None else tool_name
        code = envelope.error_type
        if code is None or code in _AWAITING_A_PERSON:  # a plan is no failure to repeat
            self._error_streaks.pop(tool, None)
            return
        last, streak = self._error_streaks.get(tool, ("", 0))
        streak = streak + 1 if last == code.value else 1
        self._error_streaks[tool] = (code.value, streak)
        limit = self._budget.max_same_error
        if limit is not None and streak >= limit:
            self._trip(
                BudgetTrip(
                    reason=BudgetReason.SAME_ERROR,
                    limit=limit,
                    observed=streak,
                    tool=tool,
                    error_code=code.value,
                )
            )

    def snapshot(self, *, identical: bool = True) -> dict[str, Any]:
        """The state as JSON-able data, for suspending the run; see `restore`.

        `identical=False` leaves out the identical-call counts, the one part that grows
        with the run: for a store that keeps each admitted call and counts them again
        when it reads the run (`loop._run_log`). Such a snapshot alone does not restore.
        """
        elapsed = self._elapsed_before if self._origin is None else self.elapsed_seconds()
        snapshot: dict[str, Any] = {
            "version": SNAPSHOT_VERSION,
            "steps": self._steps,
            "elapsed_seconds": elapsed,
            "input_tokens": self._input_tokens,
            "output_tokens": self._output_tokens,
            "cost": str(self._cost),
            "tool_calls": self._tool_calls,
            "calls_by_tool": dict(self._calls_by_tool),
        }
        if identical:
            snapshot["identical"] = [[tool, key, n] for (tool, key), n in self._identical.items()]
        snapshot["error_streaks"] = [
            [tool, code, n] for tool, (code, n) in self._error_streaks.items()
        ]
        snapshot["tripped"] = None if self._tripped is None else self._tripped.to_dict()
        return snapshot

    @classmethod
    def restore(cls, snapshot: Mapping[str, Any], budget: RunBudget, clock: Clock) -> BudgetTracker:
        """A tracker with the state of `snapshot`, not started: `start()` resumes its clock.

        The budget may differ from the one the snapshot was taken under (limits raised
        by an operator), but a latched trip stays latched. A snapshot that is not one
        is a ConfigurationError.
        """
        try:
            data = _Snapshot.model_validate_json(_as_json(snapshot))
        except pydantic.ValidationError as exc:
            msg = "not a budget snapshot"
            raise ConfigurationError(msg) from exc
        if data.version != SNAPSHOT_VERSION:
            msg = f"budget snapshot version {data.version} is not {SNAPSHOT_VERSION}"
            raise ConfigurationError(msg)
        cost = _decimal_or_none(data.cost)
        if cost is None or cost < 0 or not math.isfinite(data.elapsed_seconds):
            msg = "not a budget snapshot"
            raise ConfigurationError(msg)
        tracker = cls(budget, clock)
        tracker._steps = data.steps
        tracker._elapsed_before = data.elapsed_seconds
        tracker._input_tokens = data.input_tokens
        tracker._output_tokens = data.output_tokens
        tracker._cost = cost
        tracker._tool_calls = data.tool_calls
        tracker._calls_by_tool = dict(data.calls_by_tool)
        tracker._identical = {(tool, key): n for tool, key, n in data.identical}
        tracker._error_streaks = {tool: (code, n) for tool, code, n in data.error_streaks}
        tracker._tripped = None if data.tripped is None else _decode_trip(data.tripped)
        return tracker

    # --- internals -------------------------------------------------------------------------

    def _raise_if_tripped(self) -> None:
        if self._tripped is not None:
            raise BudgetExhausted(self._tripped)

    def _trip(self, trip: BudgetTrip) -> None:
        self._tripped = trip
        raise BudgetExhausted(trip)

    def _check_deadline(self) -> None:
        elapsed = self.elapsed_seconds()
        if elapsed >= self._budget.deadline_seconds:
            self._trip(
                BudgetTrip(
                    reason=BudgetReason.DEADLINE,
                    limit=self._budget.deadline_seconds,
                    observed=elapsed,
                )
            )

    def _check_usage(self, *, strict: bool) -> None:
        """Trip when usage is over a limit (`strict`) or has reached it (no room left)."""
        budget = self._budget
        checks: tuple[tuple[BudgetReason, Amount | None, Amount], ...] = (
            (BudgetReason.INPUT_TOKENS, budget.max_input_tokens, self._input_tokens),
            (BudgetReason.OUTPUT_TOKENS, budget.max_output_tokens, self._output_tokens),
            (BudgetReason.COST, budget.max_cost, self._cost),
        )
        for reason, limit, used in checks:
            if limit is not None and (used > limit if strict else used >= limit):
                self._trip(BudgetTrip(reason=reason, limit=limit, observed=used))


def _count(
    value: object,
    name: str,
    *,
    minimum: int,
    error: type[Exception] = ConfigurationError,
) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        msg = f"{name} must be an integer >= {minimum}"
        raise error(msg)


def _optional_count(value: object, name: str, *, minimum: int) -> None:
    if value is not None:
        _count(value, name, minimum=minimum)


def _money(value: object, name: str) -> Decimal:
    """Money as a finite, non-negative Decimal; floats are refused, ints converted."""
    if isinstance(value, bool) or not isinstance(value, int | Decimal):
        msg = f"{name} must be a Decimal or an int, never a float"
        raise ConfigurationError(msg)
    amount = Decimal(value)
    if not amount.is_finite() or amount < 0:
        msg = f"{name} must be finite and not negative"
        raise ConfigurationError(msg)
    return amount


def _encode_amount(value: Amount) -> int | float | str:
    return str(value) if isinstance(value, Decimal) else value


def _decimal_or_none(text: str) -> Decimal | None:
    try:
        amount = Decimal(text)
    except ArithmeticError:
        return None
    return amount if amount.is_finite() else None


def _decode_amount(reason: BudgetReason, value: float | str) -> Amount:
    amount: Amount | None
    if reason is BudgetReason.COST:
        amount = _decimal_or_none(value) if isinstance(value, str) else None
    elif reason is BudgetReason.DEADLINE:
        amount = float(value) if isinstance(value, int | float) else None
    else:
        amount = value if isinstance(value, int) else None
    if amount is None:
        msg = "not a budget snapshot"
        raise ConfigurationError(msg)
    return amount


def _decode_trip(data: _SnapshotTrip) -> BudgetTrip:
    return BudgetTrip(
        reason=data.reason,
        limit=_decode_amount(data.reason, data.limit),
        observed=None if data.observed is None else _decode_amount(data.reason, data.observed),
        tool=data.tool,
        model=data.model,
        error_code=data.error_code,
    )


def _as_json(snapshot: Mapping[str, Any]) -> str:
    """The snapshot as JSON text, as a store keeps it; NaN and infinities are refused."""
    try:
        return json.dumps(dict(snapshot), allow_nan=False)
    except (TypeError, ValueError) as exc:
        msg = "not a budget snapshot"
        raise ConfigurationError(msg) from exc
