"""Run budgets: every budget trips, both breakers trip, a trip latches, state survives JSON."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from handrail.calls import ToolCall
from handrail.envelope import Envelope, ErrorDetail, Status
from handrail.errors import ConfigurationError, ErrorCode
from handrail.loop.budgets import (
    BudgetExhausted,
    BudgetReason,
    BudgetTracker,
    BudgetTrip,
    ModelPrice,
    PriceTable,
    RunBudget,
    arguments_fingerprint,
)
from handrail.testing import FixedClock

PRICES = PriceTable(
    prices={
        "small": ModelPrice(input_per_million=Decimal("0.15"), output_per_million=Decimal("0.60")),
        "big": ModelPrice(input_per_million=Decimal(3), output_per_million=Decimal(15)),
    },
)


def _budget(**changes: Any) -> RunBudget:
    options: dict[str, Any] = {
        "max_steps": 10,
        "deadline_seconds": 60.0,
        "max_identical_calls": None,
        "max_same_error": None,
    }
    options.update(changes)
    return RunBudget(**options)


def _tracker(clock: FixedClock | None = None, **changes: Any) -> BudgetTracker:
    tracker = BudgetTracker(_budget(**changes), clock or FixedClock())
    tracker.start()
    return tracker


def _call(name: str = "search", arguments: Any = '{"q": "x"}', call_id: str = "c1") -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=arguments)


def _ok(call: ToolCall) -> Envelope:
    return Envelope(call_id=call.id, tool=call.name, status=Status.OK, summary="ok")


def _error(call: ToolCall, code: ErrorCode) -> Envelope:
    return Envelope(
        call_id=call.id,
        tool=call.name,
        status=Status.ERROR,
        summary="no",
        error=ErrorDetail(code=code),
    )


def _trip_of(action: Any) -> BudgetTrip:
    with pytest.raises(BudgetExhausted) as caught:
        action()
    assert caught.value.code is ErrorCode.BUDGET_EXHAUSTED
    assert caught.value.reason is caught.value.trip.reason
    return caught.value.trip


# --- every budget trips ----------------------------------------------------------------------


def test_the_step_after_the_last_allowed_one_trips_steps() -> None:
    tracker = _tracker(max_steps=3)
    for _ in range(3):
        tracker.before_step()
    trip = _trip_of(tracker.before_step)
    assert trip == BudgetTrip(reason=BudgetReason.STEPS, limit=3, observed=4)
    assert tracker.steps == 3


def test_the_deadline_trips_once_the_run_was_active_for_its_seconds() -> None:
    clock = FixedClock()
    tracker = _tracker(clock, deadline_seconds=30.0)
    tracker.before_step()
    clock.advance(29.5)
    assert tracker.remaining_seconds() == pytest.approx(0.5)
    tracker.before_step()
    clock.advance(0.5)
    assert tracker.remaining_seconds() == 0.0
    trip = _trip_of(tracker.before_step)
    assert trip.reason is BudgetReason.DEADLINE
    assert trip.limit == 30.0
    assert trip.observed == pytest.approx(30.0)


def test_a_call_is_not_admitted_after_the_deadline() -> None:
    clock = FixedClock()
    tracker = _tracker(clock, deadline_seconds=5.0)
    clock.advance(6)
    assert _trip_of(lambda: tracker.admit_call(_call())).reason is BudgetReason.DEADLINE


def test_input_tokens_over_the_limit_trip_when_recorded() -> None:
    tracker = _tracker(max_input_tokens=1000)
    tracker.before_step()
    tracker.record_usage("small", input_tokens=600, output_tokens=10)
    tracker.before_step()
    trip = _trip_of(lambda: tracker.record_usage("small", input_tokens=401, output_tokens=10))
    assert trip == BudgetTrip(reason=BudgetReason.INPUT_TOKENS, limit=1000, observed=1001)


def test_tokens_that_reach_the_limit_exactly_admit_no_further_step() -> None:
    tracker = _tracker(max_output_tokens=50)
    tracker.before_step()
    tracker.record_usage("small", input_tokens=0, output_tokens=50)
    trip = _trip_of(tracker.before_step)
    assert trip == BudgetTrip(reason=BudgetReason.OUTPUT_TOKENS, limit=50, observed=50)


def test_output_tokens_over_the_limit_trip() -> None:
    tracker = _tracker(max_output_tokens=100)
    trip = _trip_of(lambda: tracker.record_usage("big", input_tokens=1, output_tokens=101))
    assert trip.reason is BudgetReason.OUTPUT_TOKENS
    assert trip.observed == 101


def test_cost_is_exact_decimal_money_from_the_price_table() -> None:
    tracker = _tracker(max_cost=Decimal("1.00"), prices=PRICES)
    tracker.record_usage("small", input_tokens=1_000_000, output_tokens=1_000_000)
    assert tracker.cost == Decimal("0.75")
    tracker.record_usage("small", input_tokens=1, output_tokens=0)
    assert tracker.cost == Decimal("0.75000015")


def test_cost_over_the_limit_trips_with_the_observed_amount() -> None:
    tracker = _tracker(max_cost=Decimal("0.10"), prices=PRICES)
    tracker.record_usage("big", input_tokens=10_000, output_tokens=1_000)  # 0.03 + 0.015
    trip = _trip_of(lambda: tracker.record_usage("big", input_tokens=20_000, output_tokens=0))
    assert trip == BudgetTrip(
        reason=BudgetReason.COST, limit=Decimal("0.10"), observed=Decimal("0.105")
    )


def test_a_model_without_a_price_trips_cost_when_cost_is_limited() -> None:
    tracker = _tracker(max_cost=Decimal(5), prices=PRICES)
    trip = _trip_of(lambda: tracker.record_usage("unlisted", input_tokens=1, output_tokens=1))
    assert trip == BudgetTrip(
        reason=BudgetReason.COST, limit=Decimal(5), observed=None, model="unlisted"
    )


def test_a_model_without_a_price_is_fine_when_cost_is_not_limited() -> None:
    tracker = _tracker(prices=PRICES)
    tracker.record_usage("unlisted", input_tokens=10, output_tokens=10)
    assert tracker.cost == 0
    tracker.before_step()


def test_a_tool_beyond_its_call_limit_trips_before_the_call_runs() -> None:
    tracker = _tracker(tool_call_limits={"send": 2})
    tracker.admit_call(_call("send", '{"to": "a"}'))
    tracker.admit_call(_call("send", '{"to": "b"}'))
    tracker.admit_call(_call("search"))
    trip = _trip_of(lambda: tracker.admit_call(_call("send", '{"to": "c"}')))
    assert trip == BudgetTrip(reason=BudgetReason.TOOL_CALLS, limit=2, observed=3, tool="send")


def test_a_limit_of_zero_forbids_the_tool() -> None:
    tracker = _tracker(tool_call_limits={"delete": 0})
    assert _trip_of(lambda: tracker.admit_call(_call("delete"))).observed == 1


def test_the_registry_name_counts_when_given() -> None:
    tracker = _tracker(tool_call_limits={"shop.send": 1})
    tracker.admit_call(_call("shop__send"), "shop.send")
    trip = _trip_of(lambda: tracker.admit_call(_call("shop__send", "{}"), "shop.send"))
    assert trip.tool == "shop.send"


def test_all_calls_together_trip_the_total_limit() -> None:
    tracker = _tracker(max_tool_calls=2)
    tracker.admit_call(_call("a"))
    tracker.admit_call(_call("b"))
    trip = _trip_of(lambda: tracker.admit_call(_call("c")))
    assert trip == BudgetTrip(reason=BudgetReason.TOOL_CALLS, limit=2, observed=3)


# --- breakers ----------------------------------------------------------------------------------


def test_identical_calls_trip_the_breaker_whatever_the_key_order_and_spacing() -> None:
    tracker = _tracker(max_identical_calls=2)
    tracker.admit_call(_call(arguments='{"q": "x", "n": 1}'))
    tracker.admit_call(_call(arguments={"n": 1, "q": "x"}))
    trip = _trip_of(lambda: tracker.admit_call(_call(arguments=b'{"n":1.0,"q":"x"}')))
    assert trip == BudgetTrip(
        reason=BudgetReason.IDENTICAL_CALLS, limit=2, observed=3, tool="search"
    )


def test_different_arguments_or_tools_are_not_identical_calls() -> None:
    tracker = _tracker(max_identical_calls=1)
    tracker.admit_call(_call(arguments='{"q": "x"}'))
    tracker.admit_call(_call(arguments='{"q": "y"}'))
    tracker.admit_call(_call("lookup", arguments='{"q": "x"}'))
    assert tracker.tripped is None


def test_identical_calls_count_over_the_run_not_only_in_a_row() -> None:
    tracker = _tracker(max_identical_calls=2)
    for _ in range(2):
        tracker.admit_call(_call(arguments='{"q": "a"}'))
        tracker.admit_call(_call(arguments='{"q": "b"}'))
    assert _trip_of(lambda: tracker.admit_call(_call(arguments='{"q": "a"}'))).observed == 3


def test_the_same_error_in_a_row_trips_the_same_error_breaker() -> None:
    tracker = _tracker(max_same_error=3)
    call = _call("create")
    tracker.record_result(call, _error(call, ErrorCode.INVALID_ARGUMENTS))
    tracker.record_result(call, _error(call, ErrorCode.INVALID_ARGUMENTS))
    trip = _trip_of(
        lambda: tracker.record_result(call, _error(call, ErrorCode.INVALID_ARGUMENTS)),
    )
    assert trip == BudgetTrip(
        reason=BudgetReason.SAME_ERROR,
        limit=3,
        observed=3,
        tool="create",
        error_code="INVALID_ARGUMENTS",
    )


def test_a_success_or_another_code_of_the_tool_resets_its_error_count() -> None:
    tracker = _tracker(max_same_error=2)
    call = _call("create")
    tracker.record_result(call, _error(call, ErrorCode.NOT_FOUND))
    tracker.record_result(call, _ok(call))
    tracker.record_result(call, _error(call, ErrorCode.NOT_FOUND))
    tracker.record_result(call, _error(call, ErrorCode.CONFLICT))
    tracker.record_result(call, _error(call, ErrorCode.NOT_FOUND))
    assert tracker.tripped is None


@pytest.mark.parametrize("code", [ErrorCode.NEEDS_CONFIRMATION, ErrorCode.NEEDS_APPROVAL])
def test_plans_awaiting_a_person_are_not_errors_to_the_same_error_breaker(
    code: ErrorCode,
) -> None:
    # Three writes in one turn become three plans; the run must suspend on them, not trip.
    tracker = _tracker(max_same_error=2)
    calls = [_call("update_email", call_id=f"c{n}") for n in range(4)]
    for call in calls:
        tracker.record_result(call, _error(call, code))
    assert tracker.tripped is None
    tracker.record_result(calls[0], _error(calls[0], ErrorCode.CONFLICT))
    assert tracker.tripped is None


def test_other_tools_in_between_do_not_reset_a_tools_error_count() -> None:
    tracker = _tracker(max_same_error=2)
    create, search = _call("create"), _call("search", call_id="c2")
    tracker.record_result(create, _error(create, ErrorCode.TRANSIENT))
    tracker.record_result(search, _ok(search))
    tracker.record_result(search, _error(search, ErrorCode.NOT_FOUND))
    trip = _trip_of(lambda: tracker.record_result(create, _error(create, ErrorCode.TRANSIENT)))
    assert trip.tool == "create"


def test_a_result_for_another_call_is_a_bug_not_a_count() -> None:
    tracker = _tracker()
    with pytest.raises(ValueError, match="another call"):
        tracker.record_result(_call(call_id="a"), _ok(_call(call_id="b")))


# --- fail-closed ------------------------------------------------------------------------------


@pytest.mark.invariant(11)
def test_after_a_trip_everything_is_refused_with_the_first_reason() -> None:
    clock = FixedClock()
    tracker = _tracker(clock, max_steps=1, max_input_tokens=5)
    tracker.before_step()
    first = _trip_of(tracker.before_step)
    assert first.reason is BudgetReason.STEPS
    call = _call()
    for action in (
        tracker.before_step,
        lambda: tracker.admit_call(call),
        lambda: tracker.record_result(call, _ok(call)),
        lambda: tracker.record_usage("small", input_tokens=100, output_tokens=0),
    ):
        assert _trip_of(action) == first
    assert tracker.remaining_seconds() == 0.0
    # Usage after the trip is still counted: the account stays true.
    assert tracker.snapshot()["input_tokens"] == 100


def test_a_refused_call_is_not_counted() -> None:
    tracker = _tracker(tool_call_limits={"send": 1}, max_identical_calls=5)
    tracker.admit_call(_call("send"))
    _trip_of(lambda: tracker.admit_call(_call("send")))
    assert tracker.snapshot()["calls_by_tool"] == {"send": 1}
    assert tracker.snapshot()["tool_calls"] == 1


def test_a_tracker_must_be_started_once() -> None:
    tracker = BudgetTracker(_budget(), FixedClock())
    with pytest.raises(ConfigurationError):
        tracker.before_step()
    tracker.start()
    with pytest.raises(ConfigurationError):
        tracker.start()


# --- snapshot and restore ----------------------------------------------------------------------


def test_snapshot_and_restore_round_trip_through_json() -> None:
    clock = FixedClock()
    tracker = _tracker(
        clock,
        max_cost=Decimal(1),
        prices=PRICES,
        max_identical_calls=2,
        max_same_error=2,
        tool_call_limits={"send": 3},
    )
    tracker.before_step()
    tracker.record_usage("big", input_tokens=1000, output_tokens=100)
    call = _call("send")
    tracker.admit_call(call)
    tracker.record_result(call, _error(call, ErrorCode.CONFLICT))
    clock.advance(12)
    saved = json.loads(json.dumps(tracker.snapshot()))

    later = FixedClock()
    later.advance(5000)  # another process: its monotonic scale means nothing here
    restored = BudgetTracker.restore(saved, tracker.budget, later)
    restored.start()
    assert restored.snapshot() == saved
    assert restored.remaining_seconds() == pytest.approx(48.0)
    assert restored.cost == Decimal("0.0045")
    # The counters carry on: the second identical call is the last allowed, the error
    # streak stands at one.
    restored.admit_call(call)
    trip = _trip_of(lambda: restored.admit_call(call))
    assert trip.reason is BudgetReason.IDENTICAL_CALLS


def test_a_restored_error_streak_goes_on() -> None:
    tracker = _tracker(max_same_error=2)
    call = _call("create")
    tracker.record_result(call, _error(call, ErrorCode.CONFLICT))
    restored = BudgetTracker.restore(tracker.snapshot(), tracker.budget, FixedClock())
    restored.start()
    trip = _trip_of(lambda: restored.record_result(call, _error(call, ErrorCode.CONFLICT)))
    assert trip.reason is BudgetReason.SAME_ERROR


@pytest.mark.parametrize(
    ("changes", "action"),
    [
        ({"max_steps": 1}, "step"),
        ({"deadline_seconds": 1.0}, "late"),
        ({"max_cost": Decimal("0.001"), "prices": PRICES}, "spend"),
        ({"max_cost": Decimal(1), "prices": PRICES}, "unpriced"),
        ({"max_input_tokens": 1}, "spend"),
    ],
)
def test_a_restored_trip_stays_latched_even_under_a_raised_budget(
    changes: dict[str, Any], action: str
) -> None:
    clock = FixedClock()
    tracker = _tracker(clock, **changes)

    def trip() -> None:
        if action == "step":
            tracker.before_step()
            tracker.before_step()
        elif action == "late":
            clock.advance(2)
            tracker.before_step()
        elif action == "spend":
            tracker.record_usage("big", input_tokens=1000, output_tokens=0)
        else:
            tracker.record_usage("unpriced", input_tokens=1, output_tokens=0)

    first = _trip_of(trip)
    saved = json.loads(json.dumps(tracker.snapshot()))
    generous = _budget(max_steps=1000, deadline_seconds=10_000.0)
    restored = BudgetTracker.restore(saved, generous, FixedClock())
    restored.start()
    assert _trip_of(restored.before_step) == first


@pytest.mark.parametrize(
    "mutate",
    [
        lambda s: s.update(version=2),
        lambda s: s.update(steps=-1),
        lambda s: s.update(steps="3"),
        lambda s: s.update(cost="lots"),
        lambda s: s.update(cost="NaN"),
        lambda s: s.update(cost="-1"),
        lambda s: s.update(elapsed_seconds=float("inf")),
        lambda s: s.update(extra=1),
        lambda s: s.pop("identical"),
        lambda s: s.update(identical=[["t", "k"]]),
        lambda s: s.update(calls_by_tool={"t": object()}),
        lambda s: s.update(
            tripped={
                "reason": "steps",
                "limit": "3",
                "observed": 4,
                "tool": None,
                "model": None,
                "error_code": None,
            },
        ),
        lambda s: s.update(
            tripped={
                "reason": "cost",
                "limit": 3,
                "observed": None,
                "tool": None,
                "model": None,
                "error_code": None,
            },
        ),
        lambda s: s.update(
            tripped={
                "reason": "deadline",
                "limit": "x",
                "observed": None,
                "tool": None,
                "model": None,
                "error_code": None,
            },
        ),
        lambda s: s.update(tripped={"reason": "sleepiness"}),
    ],
)
def test_a_corrupt_snapshot_is_refused(mutate: Any) -> None:
    snapshot = _tracker().snapshot()
    mutate(snapshot)
    with pytest.raises(ConfigurationError):
        BudgetTracker.restore(snapshot, _budget(), FixedClock())


def test_an_unstarted_tracker_snapshots_what_it_restored() -> None:
    tracker = _tracker()
    tracker.before_step()
    restored = BudgetTracker.restore(tracker.snapshot(), _budget(), FixedClock())
    assert restored.snapshot() == tracker.snapshot()


def test_a_trip_to_dict_writes_money_as_a_decimal_string() -> None:
    trip = BudgetTrip(reason=BudgetReason.COST, limit=Decimal("0.5"), observed=Decimal("0.75"))
    assert trip.to_dict() == {
        "reason": "cost",
        "limit": "0.5",
        "observed": "0.75",
        "tool": None,
        "model": None,
        "error_code": None,
    }


# --- configuration -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "changes",
    [
        {"max_steps": 0},
        {"max_steps": True},
        {"max_steps": 2.0},
        {"deadline_seconds": 0},
        {"deadline_seconds": float("nan")},
        {"deadline_seconds": float("inf")},
        {"deadline_seconds": "60"},
        {"deadline_seconds": True},
        {"max_input_tokens": -1},
        {"max_tool_calls": 1.5},
        {"max_identical_calls": 0},
        {"max_same_error": 0},
        {"max_cost": Decimal(1)},  # no price table
        {"max_cost": 0.5, "prices": PRICES},  # float money
        {"max_cost": Decimal("NaN"), "prices": PRICES},
        {"max_cost": Decimal(-1), "prices": PRICES},
        {"tool_call_limits": {"send": -1}},
    ],
)
def test_a_bad_budget_is_a_configuration_error(changes: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        _budget(**changes)


def test_prices_refuse_float_money_and_accept_integers() -> None:
    with pytest.raises(ConfigurationError):
        ModelPrice(input_per_million=0.1, output_per_million=Decimal(1))  # type: ignore[arg-type]
    price = ModelPrice(input_per_million=2, output_per_million=Decimal(1))  # type: ignore[arg-type]
    assert price.input_per_million == Decimal(2)
    assert isinstance(price.input_per_million, Decimal)


@pytest.mark.parametrize("tokens", [-1, True, 1.0])
def test_bad_usage_counts_are_refused(tokens: Any) -> None:
    tracker = _tracker()
    with pytest.raises(ValueError, match="input_tokens"):
        tracker.record_usage("small", input_tokens=tokens, output_tokens=0)


def test_the_default_breakers_allow_three() -> None:
    budget = RunBudget(max_steps=5, deadline_seconds=1.0)
    assert (budget.max_identical_calls, budget.max_same_error) == (3, 3)


# --- argument fingerprints ---------------------------------------------------------------------


def test_no_arguments_equal_an_empty_object() -> None:
    empty = arguments_fingerprint({})
    assert arguments_fingerprint(None) == empty
    assert arguments_fingerprint("") == empty
    assert arguments_fingerprint(b"") == empty
    assert arguments_fingerprint("{ }") == empty


@pytest.mark.parametrize(
    "hostile",
    [
        "{not json",
        "[" * 100_000,
        '{"x": NaN}',
        '{"big": 123456789012345678901234567890}',
        b"\xff\xfe\x00",
        "\ud800",
        "x" * ((1 << 20) + 1),
    ],
)
def test_hostile_arguments_still_get_a_stable_fingerprint(hostile: str | bytes) -> None:
    first = arguments_fingerprint(hostile)
    assert first.startswith("raw:")
    assert arguments_fingerprint(hostile) == first


def test_a_mapping_that_is_not_json_is_hashed_as_it_is() -> None:
    odd = {"when": object()}
    assert arguments_fingerprint(odd).startswith("raw:")


def test_raw_text_and_its_parsed_form_differ_only_when_not_json() -> None:
    assert arguments_fingerprint('{"a": [1, 2]}') == arguments_fingerprint({"a": (1, 2)})
    assert arguments_fingerprint('{"a": 1}') != arguments_fingerprint('{"a": 2}')


# --- properties --------------------------------------------------------------------------------

_OPS = st.lists(
    st.one_of(
        st.just(("step",)),
        st.tuples(
            st.just("call"),
            st.sampled_from(["a", "b", "c"]),
            st.sampled_from(['{"x": 1}', '{"x": 2}', "{}"]),
        ),
        st.tuples(st.just("advance"), st.floats(min_value=0, max_value=5)),
        st.tuples(st.just("usage"), st.integers(0, 400), st.integers(0, 400)),
    ),
    max_size=60,
)


@given(
    ops=_OPS,
    max_steps=st.integers(1, 8),
    limit_a=st.integers(0, 4),
    total=st.none() | st.integers(0, 10),
    identical=st.none() | st.integers(1, 4),
)
@pytest.mark.invariant(11)
def test_a_tracker_never_admits_more_than_configured(
    ops: list[tuple[Any, ...]],
    max_steps: int,
    limit_a: int,
    total: int | None,
    identical: int | None,
) -> None:
    clock = FixedClock()
    tracker = _tracker(
        clock,
        max_steps=max_steps,
        deadline_seconds=20.0,
        max_input_tokens=2000,
        max_tool_calls=total,
        tool_call_limits={"a": limit_a},
        max_identical_calls=identical,
    )
    steps = 0
    calls: dict[str, int] = {}
    same: dict[tuple[str, str], int] = {}
    first_trip: BudgetTrip | None = None
    trips: list[BudgetTrip] = []
    for op in ops:
        try:
            if op[0] == "step":
                tracker.before_step()
                steps += 1
            elif op[0] == "call":
                tracker.admit_call(_call(op[1], op[2]))
                calls[op[1]] = calls.get(op[1], 0) + 1
                same[op[1], op[2]] = same.get((op[1], op[2]), 0) + 1
            elif op[0] == "advance":
                clock.advance(op[1])
            else:
                tracker.record_usage("small", input_tokens=op[1], output_tokens=op[2])
        except BudgetExhausted as exc:
            trips.append(exc.trip)
            first_trip = first_trip or exc.trip
        else:
            assert first_trip is None or op[0] == "advance"
    assert all(trip == first_trip for trip in trips)
    assert steps <= max_steps
    assert calls.get("a", 0) <= limit_a
    if total is not None:
        assert sum(calls.values()) <= total
    if identical is not None:
        assert all(n <= identical for n in same.values())
    assert tracker.steps == steps


def test_a_snapshot_without_identical_counts_leaves_out_only_them() -> None:
    tracker = _tracker(max_identical_calls=5)
    for n in range(3):
        call = _call(arguments=json.dumps({"q": n}), call_id=f"c{n}")
        tracker.admit_call(call)
        tracker.record_result(call, _ok(call))
    whole = tracker.snapshot()
    light = tracker.snapshot(identical=False)
    assert len(whole["identical"]) == 3
    assert "identical" not in light
    assert {**light, "identical": whole["identical"]} == whole
    # Alone it is no snapshot to resume from: the counts must be added back first.
    with pytest.raises(ConfigurationError):
        BudgetTracker.restore(light, _budget(), FixedClock())
    restored = BudgetTracker.restore(
        {**light, "identical": whole["identical"]}, _budget(), FixedClock()
    )
    assert restored.snapshot() == whole
