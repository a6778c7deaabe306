"""Cursors: opaque, signed, bound to tenant, user, record and tool, and expiring."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from handrail.clock import FixedClock
from handrail.errors import ErrorCode, Refusal
from handrail.principal import Principal
from handrail.shaping.pages import Cursors
from handrail.signing import SigningKey

ALICE = Principal(user_id="alice", tenant_id="t1")
BOB = Principal(user_id="bob", tenant_id="t1")
ALICE_ELSEWHERE = Principal(user_id="alice", tenant_id="t2")
OLD = SigningKey("k1", b"o" * 32)
NEW = SigningKey("k2", b"n" * 32)


def _cursors(clock: FixedClock, key: SigningKey = OLD, *verifying: SigningKey) -> Cursors:
    return Cursors(key, clock=clock, verifying=verifying, ttl_seconds=600)


def _refused(cursors: Cursors, cursor: object, who: Principal = ALICE) -> Refusal:
    with pytest.raises(Refusal) as caught:
        cursors.open(cursor, who)
    assert caught.value.code is ErrorCode.INVALID_ARGUMENTS
    return caught.value


def test_a_cursor_opens_for_its_owner_with_what_it_was_issued_for() -> None:
    clock = FixedClock()
    cursors = _cursors(clock)
    cursor = cursors.issue(ref="raw_x", offset=40, principal=ALICE, tool="search")
    claims = cursors.open(cursor, ALICE)
    assert (claims.ref, claims.offset, claims.tool) == ("raw_x", 40, "search")
    assert (claims.tenant_id, claims.user_id) == ("t1", "alice")


def test_another_user_or_tenant_cannot_use_a_cursor() -> None:
    cursors = _cursors(FixedClock())
    cursor = cursors.issue(ref="raw_x", offset=1, principal=ALICE, tool="search")
    _refused(cursors, cursor, BOB)
    _refused(cursors, cursor, ALICE_ELSEWHERE)


def test_an_altered_cursor_is_refused_even_with_a_consistent_payload() -> None:
    cursors = _cursors(FixedClock())
    cursor = cursors.issue(ref="raw_x", offset=1, principal=ALICE, tool="search")
    prefix, kid, payload, mac = cursor.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["offset"] = 0
    claims["tenant"] = "t2"
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    refusal = _refused(cursors, f"{prefix}.{kid}.{forged}.{mac}", ALICE_ELSEWHERE)
    assert "cursor" in refusal.summary


def test_an_expired_cursor_is_refused() -> None:
    clock = FixedClock()
    cursors = _cursors(clock)
    cursor = cursors.issue(ref="raw_x", offset=1, principal=ALICE, tool="search")
    clock.advance(601)
    _refused(cursors, cursor)


def test_keys_rotate_old_cursors_still_open_and_unknown_keys_do_not() -> None:
    clock = FixedClock()
    old = _cursors(clock).issue(ref="raw_x", offset=1, principal=ALICE, tool="search")
    rotated = _cursors(clock, NEW, OLD)
    assert rotated.open(old, ALICE).ref == "raw_x"
    _refused(_cursors(clock, NEW), old)


@pytest.mark.parametrize(
    "cursor",
    [
        None,
        7,
        "",
        "hrp1",
        "hrp1.k1.a.b.c",
        "hrp2.k1.e30.x",
        "hrp1.k!.e30.x",
        "hrp1.k1.e30.+/",
        "x" * 5000,
    ],
)
def test_malformed_cursors_are_refused_alike(cursor: object) -> None:
    _refused(_cursors(FixedClock()), cursor)


@given(st.text(max_size=200))
def test_no_text_is_accepted_as_a_cursor_unless_issued(text: str) -> None:
    _refused(_cursors(FixedClock()), text)
