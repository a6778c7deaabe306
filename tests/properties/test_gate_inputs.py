"""No argument input ever raises out of the gate or reaches its generic failure.

Bytes, text, mangled JSON and decoded objects of any shape sent to `shop.search`
always come back as an Envelope for the same call id: ok, empty, or INVALID_ARGUMENTS.
A FAILED_FINAL here would mean some input crashed a stage, since `shop.search` itself
cannot fail on arguments that pass validation.
"""

from __future__ import annotations

import itertools
import json
from decimal import Decimal

from _json_strategies import json_scalars, json_values
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from handrail import Envelope, ErrorCode, Gate, Principal, ToolCall
from handrail.testing import MemoryAuditSink

# The gate, registry and audit sink are function-scoped fixtures of tests/conftest.py;
# they keep no state between examples that matters here (each call has its own id and
# the audit sink only accumulates), so sharing them across examples is sound.
SHARED_FIXTURES = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
EXPECTED = {None, ErrorCode.INVALID_ARGUMENTS}

JSON_SCALARS = json_scalars()
JSON_VALUES = json_values(JSON_SCALARS)
SEARCH_LIKE = st.fixed_dictionaries(
    {},
    optional={
        "query": st.text(max_size=110) | JSON_VALUES,
        "limit": st.integers(-2, 25) | JSON_VALUES,
        "filters": st.fixed_dictionaries(
            {},
            optional={
                "in_stock": st.booleans() | JSON_VALUES,
                "genres": st.lists(st.sampled_from(["fiction", "history", "x"]), max_size=5),
            },
        )
        | JSON_VALUES,
        "tenant": st.sampled_from(["t1", "t2"]),
    },
)


class _Opaque:
    pass


ODD_PYTHON = st.sampled_from(
    [
        float("nan"),
        float("inf"),
        -float("inf"),
        2**53,
        -(2**70),
        b"bytes",
        bytearray(b"x"),
        {"a"},
        frozenset(),
        (1, "two"),
        Decimal("1.5"),
        1j,
        _Opaque(),
        "\ud800",
        {1: "int key"},
        {None: "none key"},
        {("t",): "tuple key"},
    ],
)
DECODED = st.recursive(
    JSON_SCALARS | ODD_PYTHON,
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.text(max_size=8), children, max_size=3)
        | st.tuples(children, children)
    ),
    max_leaves=10,
)


@st.composite
def _mangled_json(draw: st.DrawFn) -> str | bytes:
    """JSON text of a search-like object, then cut, spliced or re-encoded."""
    text = json.dumps(draw(SEARCH_LIKE), ensure_ascii=draw(st.booleans()))
    cut = draw(st.integers(0, len(text)))
    how = draw(st.sampled_from(["whole", "cut", "insert", "replace", "utf-16", "latin-1"]))
    if how == "cut":
        text = text[:cut]
    elif how == "insert":
        text = text[:cut] + draw(st.text(max_size=4)) + text[cut:]
    elif how == "replace":
        text = text[:cut] + draw(st.text(max_size=4)) + text[cut + 1 :]
    elif how == "utf-16":
        return text.encode("utf-16")
    elif how == "latin-1":
        return text.encode("latin-1", "replace")
    return text


def _check(gate: Gate, principal: Principal, arguments: object, call_id: str) -> Envelope:
    call = ToolCall(id=call_id, name="shop.search", arguments=arguments)  # type: ignore[arg-type]
    envelope = gate.handle_sync(call, principal, timeout=10.0)
    assert isinstance(envelope, Envelope)
    assert envelope.call_id == call_id
    assert envelope.error_type in EXPECTED
    json.loads(envelope.to_json())
    return envelope


_ids = itertools.count()


@SHARED_FIXTURES
@given(arguments=st.binary(max_size=200) | st.binary(max_size=8).map(lambda b: b"{" + b))
def test_any_bytes_as_arguments_come_back_as_an_envelope(
    gate: Gate,
    principal: Principal,
    arguments: bytes,
) -> None:
    _check(gate, principal, arguments, f"bytes-{next(_ids)}")


@SHARED_FIXTURES
@given(arguments=st.text(max_size=200) | st.text(alphabet='{}[]":,0123456789e.-tn ul\\'))
def test_any_text_as_arguments_comes_back_as_an_envelope(
    gate: Gate,
    principal: Principal,
    arguments: str,
) -> None:
    _check(gate, principal, arguments, f"text-{next(_ids)}")


@SHARED_FIXTURES
@given(arguments=_mangled_json())
def test_mangled_json_as_arguments_comes_back_as_an_envelope(
    gate: Gate,
    principal: Principal,
    arguments: str | bytes,
) -> None:
    _check(gate, principal, arguments, f"mangled-{next(_ids)}")


@SHARED_FIXTURES
@given(arguments=SEARCH_LIKE | st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=5))
def test_any_json_object_as_decoded_arguments_comes_back_as_an_envelope(
    gate: Gate,
    principal: Principal,
    audit: MemoryAuditSink,
    arguments: dict[str, object],
) -> None:
    call_id = f"decoded-{next(_ids)}"
    _check(gate, principal, arguments, call_id)
    assert all(len(event.args_summary or "") <= 512 for event in audit.for_call(call_id))


@SHARED_FIXTURES
@given(arguments=st.dictionaries(st.text(max_size=8), DECODED, max_size=4) | DECODED)
def test_any_python_value_as_decoded_arguments_comes_back_as_an_envelope(
    gate: Gate,
    principal: Principal,
    arguments: object,
) -> None:
    _check(gate, principal, arguments, f"python-{next(_ids)}")


def test_a_summary_that_redaction_lengthens_is_bounded_again(
    gate: Gate, principal: Principal, audit: MemoryAuditSink
) -> None:
    # Phone-like numbers become longer placeholders once the summary is redacted.
    arguments = {f"k{n}": [-15663910636 - i for i in range(8)] for n in range(8)}
    _check(gate, principal, arguments, "redaction-grows")
    summaries = [event.args_summary or "" for event in audit.for_call("redaction-grows")]
    assert summaries
    assert any("REDACTED" in summary for summary in summaries)
    assert all(len(summary) <= 512 for summary in summaries)
