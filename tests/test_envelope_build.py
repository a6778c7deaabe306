"""`result_envelope`, the Shaper's way to build an envelope, makes what `Envelope(...)` makes.

It builds a draft with the same slots and turns it into an Envelope; the result must be
indistinguishable: equal, of the same type, every field set, frozen, and checked alike.
"""

from __future__ import annotations

import dataclasses

import pytest

from handrail.envelope import Envelope, Omission, Status, Trust, result_envelope

CUT = (Omission(path="$", unit="items", kept=1, total=3),)


@pytest.mark.parametrize(
    ("status", "data", "omitted", "redacted", "ref", "source"),
    [
        (Status.OK, {"x": 7}, (), {}, None, None),
        (Status.EMPTY, [], (), {}, None, "tool:other"),
        (Status.TRUNCATED, [1], CUT, {"email": 2}, "raw-1", None),
        (Status.OK, "text", (), {"credential": 1}, "raw-2", "web"),
    ],
)
def test_a_built_envelope_equals_the_constructed_one(
    status: Status,
    data: object,
    omitted: tuple[Omission, ...],
    redacted: dict[str, int],
    ref: str | None,
    source: str | None,
) -> None:
    built = result_envelope(
        "call-1", "search", status, "summary", data, "v1", Trust.INTERNAL, source, omitted,
        redacted, ref,
    )  # fmt: skip
    made = Envelope(
        call_id="call-1",
        tool="search",
        status=status,
        summary="summary",
        data=data,
        truncated=status is Status.TRUNCATED,
        ref=ref,
        schema_version="v1",
        trust=Trust.INTERNAL,
        source=source,
        omitted=omitted,
        redacted=redacted,
    )
    assert type(built) is Envelope
    assert built == made
    for field in dataclasses.fields(Envelope):
        assert getattr(built, field.name) == getattr(made, field.name), field.name
    assert repr(built) == repr(made)
    assert built.to_json() == made.to_json()
    assert built.to_model_dict() == made.to_model_dict()


def test_a_built_envelope_is_frozen_and_keeps_no_reference_to_the_counts() -> None:
    counts = {"email": 1}
    built = result_envelope(
        "c", "t", Status.OK, "s", None, None, Trust.UNTRUSTED, None, (), counts, None
    )
    counts["email"] = 5
    assert built.redacted == {"email": 1}
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.summary = "changed"  # type: ignore[misc]
    with pytest.raises(TypeError):
        built.redacted["email"] = 2  # type: ignore[index]


def test_an_error_envelope_is_never_built_as_a_result() -> None:
    with pytest.raises(ValueError, match="error exactly when"):
        result_envelope(
            "c", "t", Status.ERROR, "s", None, None, Trust.UNTRUSTED, None, (), {}, None
        )
