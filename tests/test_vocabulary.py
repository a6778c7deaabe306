"""Principal, envelope, spec policies, canonical JSON and the public namespace."""

from __future__ import annotations

import inspect
import json
import math
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

import handrail
from handrail import (
    ConfirmationMode,
    ConfirmationPolicy,
    Envelope,
    ErrorCode,
    ErrorDetail,
    Principal,
    Status,
)
from handrail.canonical import canonical_json, content_version
from handrail.context import ToolContext
from handrail.errors import RegistrationError
from handrail.spec import RetryPolicy
from handrail.testing import FixedClock, ModelTurn, ScriptedModel, ScriptExhaustedError


def test_a_principal_is_immutable_and_needs_user_and_tenant() -> None:
    principal = Principal(user_id="u", tenant_id="t", data_scope={"region": "eu"})
    with pytest.raises(AttributeError):
        principal.user_id = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        principal.data_scope["region"] = "us"  # type: ignore[index]
    with pytest.raises(ValueError, match="non-empty"):
        Principal(user_id="", tenant_id="t")


def test_principal_attributes_are_read_by_name_only_from_the_trusted_set() -> None:
    principal = Principal(user_id="u", tenant_id="t", roles=frozenset({"b", "a"}))
    assert principal.attribute("roles") == ["a", "b"]
    assert principal.attribute("tenant_id") == "t"
    with pytest.raises(KeyError):
        principal.attribute("__class__")
    with pytest.raises(KeyError):
        principal.attribute("data_scope.missing")


def test_an_envelope_has_an_error_exactly_when_it_is_an_error() -> None:
    with pytest.raises(ValueError, match="error"):
        Envelope(call_id="1", tool="t", status=Status.ERROR, summary="x")
    with pytest.raises(ValueError, match="error"):
        Envelope(
            call_id="1",
            tool="t",
            status=Status.OK,
            summary="x",
            error=ErrorDetail(code=ErrorCode.TIMEOUT),
        )


def test_the_model_sees_stable_keys_and_optional_ones_only_when_set() -> None:
    plain = Envelope(call_id="1", tool="t", status=Status.OK, summary="s", data=[1])
    assert list(plain.to_model_dict()) == [
        "status",
        "summary",
        "data",
        "truncated",
        "error_type",
        "retryable",
        "schema_version",
        "envelope_version",
    ]
    full = Envelope(
        call_id="1",
        tool="t",
        status=Status.ERROR,
        summary="s",
        cursor="c",
        ref="r",
        error=ErrorDetail(
            code=ErrorCode.RATE_LIMITED,
            retry_after=3.0,
            field_errors={"$.a": "bad"},
            candidates=("x",),
        ),
    )
    extra = set(full.to_model_dict()) - set(plain.to_model_dict())
    assert extra == {"retry_after", "cursor", "ref", "field_errors", "candidates"}
    assert json.loads(full.to_json())["error_type"] == "RATE_LIMITED"
    assert not full.ok
    assert plain.ok
    assert (full.error_type, full.retryable, full.retry_after) == (ErrorCode.RATE_LIMITED, False, 3)
    assert (plain.error_type, plain.retryable, plain.retry_after) == (None, False, None)
    assert (dict(full.field_errors), full.candidates) == ({"$.a": "bad"}, ("x",))
    assert (dict(plain.field_errors), plain.candidates) == ({}, ())


def test_error_codes_are_the_stable_strings_of_the_design() -> None:
    assert {code.value for code in ErrorCode} == {
        "UNKNOWN_TOOL",
        "INVALID_ARGUMENTS",
        "NEEDS_CLARIFICATION",
        "NOT_FOUND",
        "PERMISSION_DENIED",
        "CONFLICT",
        "VERSION_CONFLICT",
        "NEEDS_CONFIRMATION",
        "NEEDS_APPROVAL",
        "RISK_BLOCKED",
        "RATE_LIMITED",
        "TRANSIENT",
        "TIMEOUT",
        "OUTCOME_UNKNOWN",
        "IN_PROGRESS",
        "IDEMPOTENCY_MISMATCH",
        "FAILED_FINAL",
        "BUDGET_EXHAUSTED",
        "CANCELLED",
        # Extensions for the confirmation of plans (the design's list only grows).
        "CONFIRMATION_INVALID",
        "CONFIRMATION_REPLAYED",
        "PLAN_EXPIRED",
        "PLAN_CHANGED",
        "PLAN_CLOSED",
        # A write whose record was purged to a tombstone: it ran, and never runs again.
        "ALREADY_EXECUTED",
        # Extensions for the audit sink (operators only, never in an envelope).
        "AUDIT_SINK_CLOSED",
        "AUDIT_WRITER_DEAD",
        "AUDIT_WRITER_BEHIND",
        "AUDIT_EVENTS_LOST",
    }


@pytest.mark.parametrize(
    "make",
    [
        lambda: RetryPolicy(max_attempts=0),
        lambda: RetryPolicy(initial_backoff=2, max_backoff=1),
        lambda: ConfirmationPolicy(mode=ConfirmationMode.APPROVE),
        lambda: ConfirmationPolicy(ttl_seconds=0),
    ],
)
def test_nonsense_policies_are_refused(make: object) -> None:
    with pytest.raises(RegistrationError):
        make()  # type: ignore[operator]


def test_the_tool_context_reports_the_time_left_on_the_injected_clock() -> None:
    clock = FixedClock(datetime(2026, 5, 1, tzinfo=UTC))
    ctx = ToolContext(
        principal=Principal(user_id="u", tenant_id="t"),
        call_id="c",
        tool="x",
        deadline=clock.monotonic() + 5,
        clock=clock,
    )
    clock.advance(3)
    assert ctx.remaining() == 2
    clock.advance(10)
    assert ctx.remaining() == 0


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53) + 1, 2**53 - 1)
    # JCS writes an integral float in [2**53, 1e21) as an integer literal, which Python
    # decodes as an int outside the safe range; see the test below.
    | st.floats(allow_nan=False, allow_infinity=False).filter(
        lambda f: not (f.is_integer() and 2**53 <= abs(f) < 1e21),
    )
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4)
    ),
    max_leaves=20,
)


@given(_json)
def test_canonical_json_is_stable_under_key_order_and_round_trips(value: object) -> None:
    encoded = canonical_json(value)
    decoded = json.loads(encoded)
    assert canonical_json(decoded) == encoded
    if isinstance(value, dict):
        reordered = dict(reversed(list(value.items())))
        assert canonical_json(reordered) == encoded


def test_canonical_json_normalises_numbers_and_refuses_what_json_cannot_hold() -> None:
    assert canonical_json({"b": 1.0, "a": 1e21}) == b'{"a":1e+21,"b":1}'
    assert content_version({"x": 1}) == content_version({"x": 1.0})
    with pytest.raises(ValueError, match=r"."):
        canonical_json(math.nan)


def test_a_large_integral_float_canonicalises_to_an_integer_beyond_the_safe_range() -> None:
    encoded = canonical_json(2.0**53)
    assert encoded == b"9007199254740992"
    with pytest.raises(ValueError, match=r"."):
        canonical_json(json.loads(encoded))


def test_the_scripted_model_replays_fixed_and_reactive_steps_then_stops() -> None:
    model = ScriptedModel(
        [ModelTurn(text="first"), lambda previous: ModelTurn(text=f"saw {len(previous)}")],
    )
    assert model.next_turn().text == "first"
    assert model.next_turn([]).text == "saw 0"
    assert model.finished
    with pytest.raises(ScriptExhaustedError):
        model.next_turn()


def test_the_public_namespace_exports_exactly_its_all() -> None:
    public = {
        name
        for name in dir(handrail)
        if not name.startswith("_") and not inspect.ismodule(getattr(handrail, name))
    }
    assert sorted(public) == sorted(handrail.__all__)
    for name in handrail.__all__:
        assert getattr(handrail, name) is not None


@pytest.mark.parametrize(
    ("user_id", "tenant_id"),
    [("u\ud800", "t"), ("u", "t\udfff"), ("u\x00", "t"), ("u", "\x00")],
    ids=["user-surrogate", "tenant-surrogate", "user-nul", "tenant-nul"],
)
def test_a_principal_whose_user_or_tenant_no_store_can_hold_is_refused(
    user_id: str,
    tenant_id: str,
) -> None:
    with pytest.raises(ValueError, match="lone surrogate"):
        Principal(user_id=user_id, tenant_id=tenant_id)
