"""The Redactor's contract: what MASK, HASH, DROP and KEEP do to text and to JSON, what is
counted, and the properties that must hold for any input."""

from __future__ import annotations

import copy
import hashlib
import hmac
import math
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from handrail.errors import ConfigurationError
from handrail.shaping.redact import (
    Finding,
    IpMode,
    Kind,
    Redacted,
    RedactedText,
    RedactionAction,
    RedactionPolicy,
    Redactor,
)

KEY = b"0123456789abcdef0123456789abcdef"
MASK = RedactionAction.MASK
HASH = RedactionAction.HASH
DROP = RedactionAction.DROP
KEEP = RedactionAction.KEEP

SAMPLES: dict[Kind, list[str]] = {
    Kind.EMAIL: ["alice@example.com", "li.wei+x@mail.example.cn"],
    Kind.PHONE: ["+44 20 7946 0958", "13800138000", "+86 139 1234 5678"],
    Kind.PRC_ID: ["11010519491231002X"],
    Kind.PAYMENT_CARD: ["4111 1111 1111 1111", "378282246310005"],
    Kind.IBAN: ["DE89 3704 0044 0532 0130 00", "GB82WEST12345698765432"],
    Kind.IP_ADDRESS: ["10.1.2.3", "fe80::1ff:fe23:4567:890a"],
    Kind.CREDENTIAL: [
        "AKIAIOSFODNN7EXAMPLE",
        "ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJlLWJ5dGVzLWhlcmU",
    ],
    Kind.HIGH_ENTROPY: ["tWcbXsokYJswrOU7RBGt0nJt2Vtk2ndraJWvvO2b"],
}
PLANTED = [(kind, value) for kind, values in SAMPLES.items() for value in values]
WORDS = ["order", "shipped", "to", "user", "in", "42 ms", "status=ok", "id", "v1.2", "the"]


@pytest.fixture(scope="module")
def redactor() -> Redactor:
    return Redactor(hash_key=KEY)


def policy(default: RedactionAction = MASK, **actions: RedactionAction) -> RedactionPolicy:
    return RedactionPolicy(default=default, actions={Kind(k): a for k, a in actions.items()})


# --- construction -------------------------------------------------------------------------------


def test_a_hash_key_shorter_than_16_bytes_is_refused() -> None:
    with pytest.raises(ConfigurationError):
        Redactor(hash_key=b"k" * 15)
    Redactor(hash_key=b"k" * 16)


# --- text: the actions --------------------------------------------------------------------------


def test_mask_replaces_each_finding_by_its_kind(redactor: Redactor) -> None:
    out = redactor.text("write to alice@example.com or 13800138000.")
    assert out.text == "write to [REDACTED:email] or [REDACTED:phone]."
    assert out.counts == {Kind.EMAIL: 1, Kind.PHONE: 1}


def test_hash_is_a_keyed_hmac_of_the_normalized_value(redactor: Redactor) -> None:
    out = redactor.text("Bob@Example.com", policy(HASH)).text
    digest = hmac.new(KEY, b"email\x00bob@example.com", hashlib.sha256).hexdigest()
    assert out == f"[email:{digest[:12]}]"


def test_equal_values_hash_alike_however_they_are_written(redactor: Redactor) -> None:
    hashed = policy(HASH)
    texts = ["+86 138 0013 8000", "13800138000", "008613800138000", "138-0013-8000"]
    assert len({redactor.text(t, hashed).text for t in texts}) == 1
    cards = ["4111 1111 1111 1111", "4111-1111-1111-1111", "4111111111111111"]
    assert len({redactor.text(t, hashed).text for t in cards}) == 1
    assert redactor.text("a@b.com", hashed).text != redactor.text("c@b.com", hashed).text


def test_a_hash_depends_on_the_key() -> None:
    other = Redactor(hash_key=b"another key, 16+ bytes")
    text = "alice@example.com"
    assert (
        Redactor(hash_key=KEY).text(text, policy(HASH)).text != other.text(text, policy(HASH)).text
    )


def test_drop_replaces_the_whole_line_and_keeps_the_others(redactor: Redactor) -> None:
    text = "first line\nsecond alice@example.com here\r\nthird line"
    out = redactor.text(text, policy(email=DROP))
    assert out.text == "first line\n[line dropped: email]\r\nthird line"
    assert out.counts == {Kind.EMAIL: 1}


def test_a_dropped_line_names_every_kind_dropped_from_it_and_counts_all(
    redactor: Redactor,
) -> None:
    text = "a 13800138000 b alice@example.com c 10.0.0.1\nnext"
    out = redactor.text(text, policy(email=DROP, phone=DROP))
    assert out.text == "[line dropped: phone, email]\nnext"
    assert out.counts == {Kind.EMAIL: 1, Kind.PHONE: 1, Kind.IP_ADDRESS: 1}


def test_a_multi_line_finding_dropped_becomes_one_line(redactor: Redactor) -> None:
    body = "\n".join("MIIEow" + "Ab3dE6gH9jK2mN5pQ8sT" * 3 for _ in range(4))
    text = f"before\nkey: -----BEGIN PRIVATE KEY-----\n{body}\n-----END PRIVATE KEY----- x\nafter"
    out = redactor.text(text, policy(credential=DROP))
    assert out.text == "before\n[line dropped: credential]\nafter"


def test_drops_on_neighbouring_lines_stay_separate_lines(redactor: Redactor) -> None:
    out = redactor.text("a@b.com\nc@d.com\nkeep", policy(DROP))
    assert out.text == "[line dropped: email]\n[line dropped: email]\nkeep"


def test_keep_leaves_a_finding_and_does_not_count_it(redactor: Redactor) -> None:
    out = redactor.text("peer 10.0.0.1 mail a@b.com", policy(ip_address=KEEP))
    assert out.text == "peer 10.0.0.1 mail [REDACTED:email]"
    assert out.counts == {Kind.EMAIL: 1}


def test_a_policy_that_keeps_everything_returns_the_text_untouched(redactor: Redactor) -> None:
    text = "a@b.com 13800138000"
    assert redactor.text(text, policy(KEEP)) == RedactedText(text=text)


def test_a_policy_per_call_overrides_the_default_one() -> None:
    redactor = Redactor(hash_key=KEY, policy=policy(email=KEEP))
    assert redactor.text("a@b.com").text == "a@b.com"
    assert redactor.text("a@b.com", policy()).text == "[REDACTED:email]"


def test_find_uses_the_ip_mode_of_the_policy(redactor: Redactor) -> None:
    text = "from 8.8.8.8 via 10.0.0.1"
    private = [Finding(kind=Kind.IP_ADDRESS, start=17, end=25)]
    assert redactor.find(text) == private
    assert len(redactor.find(text, RedactionPolicy(ip_addresses=IpMode.ALL))) == 2
    assert redactor.find(text, RedactionPolicy(ip_addresses=IpMode.OFF)) == []


def test_counts_cannot_be_changed(redactor: Redactor) -> None:
    counts = redactor.text("a@b.com").counts
    with pytest.raises(TypeError):
        counts[Kind.EMAIL] = 0  # type: ignore[index]


def test_a_text_without_findings_comes_back_as_it_was(redactor: Redactor) -> None:
    text = "INFO processed 12 orders in 3.5 ms (commit 3f786850e387550fdab836ed7e6dc881de23001b)"
    assert redactor.text(text) == RedactedText(text=text)


# --- value: JSON --------------------------------------------------------------------------------


@pytest.mark.invariant(8)
def test_a_json_value_is_redacted_in_strings_and_keys(redactor: Redactor) -> None:
    value = {
        "user": {"email": "alice@example.com", "alice@example.com": "owner"},
        "notes": ["call 13800138000", "ok"],
        "count": 4111111111111111,
    }
    out = redactor.value(value)
    assert out.value == {
        "user": {"email": "[REDACTED:email]", "[REDACTED:email]": "owner"},
        "notes": ["call [REDACTED:phone]", "ok"],
        "count": 4111111111111111,
    }
    assert out.counts == {Kind.EMAIL: 2, Kind.PHONE: 1}


def test_keys_that_redact_alike_are_kept_apart(redactor: Redactor) -> None:
    out = redactor.value({"a@b.com": 1, "c@d.com": 2, "[REDACTED:email] (2)": 3, "e@f.com": 4})
    assert out.value == {
        "[REDACTED:email]": 1,
        "[REDACTED:email] (2)": 2,
        "[REDACTED:email] (2) (2)": 3,
        "[REDACTED:email] (3)": 4,
    }


def test_a_hashed_key_stays_stable(redactor: Redactor) -> None:
    hashed = policy(HASH)
    first = redactor.value({"a@b.com": 1}, hashed).value
    second = redactor.value({"A@B.com": 2}, hashed).value
    assert first.keys() == second.keys() == {redactor.text("a@b.com", hashed).text}


def test_drop_removes_the_member_or_item_holding_a_finding(redactor: Redactor) -> None:
    value = {
        "contact": "alice@example.com",
        "alice@example.com": "key holds it",
        "list": ["a", "mail a@b.com", "b", {"deep": "c@d.com", "kept": 1}],
        "name": "Alice",
    }
    out = redactor.value(value, policy(email=DROP))
    assert out.value == {"list": ["a", "b", {"kept": 1}], "name": "Alice"}
    assert out.counts == {Kind.EMAIL: 4}


def test_a_string_value_on_its_own_drops_lines_as_text_does(redactor: Redactor) -> None:
    text = "ok\nmail a@b.com\nok"
    assert redactor.value(text, policy(DROP)).value == redactor.text(text, policy(DROP)).text


def test_a_member_named_for_a_secret_holds_a_credential(redactor: Redactor) -> None:
    value = {"password": "hunter2", "dbPassword": "x9!y8", "token": "EOF", "passes": "3x"}
    out = redactor.value(value)
    assert out.value == {
        "password": "[REDACTED:credential]",
        "dbPassword": "[REDACTED:credential]",
        "token": "EOF",
        "passes": "3x",
    }


def test_non_string_scalars_and_keys_are_kept_and_tuples_become_lists(
    redactor: Redactor,
) -> None:
    value = {1: 4111111111111111, "f": 0.4111111111111111, "b": True, "n": None, "t": (1, "x")}
    assert redactor.value(value).value == {
        1: 4111111111111111,
        "f": 0.4111111111111111,
        "b": True,
        "n": None,
        "t": [1, "x"],
    }


def test_a_scalar_value_comes_back_as_it_is(redactor: Redactor) -> None:
    assert redactor.value(13800138000).value == 13800138000
    assert redactor.value(None) == Redacted(value=None)


def test_a_private_key_split_over_several_strings_is_masked_in_each(redactor: Redactor) -> None:
    body = "MIIEow" + "Ab3dE6gH9jK2mN5pQ8sT" * 4
    parts = ["-----BEGIN PRIVATE KEY-----", "", body, "-----END PRIVATE KEY-----", "after"]
    out = redactor.value(parts)
    assert out.value == [
        "[REDACTED:credential]",
        "",
        "[REDACTED:credential]",
        "[REDACTED:credential]",
        "after",
    ]


def test_a_deeply_nested_value_is_walked_without_recursion(redactor: Redactor) -> None:
    value: Any = "a@b.com"
    for _ in range(20_000):
        value = [value]
    out = redactor.value(value).value
    for _ in range(20_000):
        out = out[0]
    assert out == "[REDACTED:email]"


def test_a_value_that_contains_itself_is_refused(redactor: Redactor) -> None:
    loop: list[Any] = ["x"]
    loop.append(loop)
    with pytest.raises(ValueError, match="itself"):
        redactor.value(loop)


def test_a_value_shared_in_two_places_is_redacted_in_both(redactor: Redactor) -> None:
    shared = {"mail": "a@b.com"}
    assert redactor.value([shared, shared]).value == [{"mail": "[REDACTED:email]"}] * 2


def test_a_finding_is_never_joined_across_two_strings(redactor: Redactor) -> None:
    out = redactor.value(["4111 1111", "1111 1111", "password=", "hunter2"])
    assert out.value == ["4111 1111", "1111 1111", "password=", "hunter2"]


def test_keep_everything_still_copies_the_value(redactor: Redactor) -> None:
    value = {"a": ["a@b.com"]}
    out = redactor.value(value, policy(KEEP))
    assert out.value == value
    assert out.value["a"] is not value["a"]


# --- properties ---------------------------------------------------------------------------------

SEPARATORS = st.sampled_from([" ", " | ", "\n", ", ", "\t"])
PIECES = st.one_of(st.sampled_from([v for _, v in PLANTED]), st.sampled_from(WORDS))
POLICIES = st.sampled_from(
    [
        policy(),
        policy(HASH),
        policy(DROP),
        policy(email=DROP, credential=HASH, phone=KEEP),
        RedactionPolicy(ip_addresses=IpMode.ALL),
    ]
)


@st.composite
def texts(draw: st.DrawFn) -> str:
    pieces = draw(st.lists(PIECES, max_size=12))
    out = ""
    for piece in pieces:
        out += piece + draw(SEPARATORS)
    return out


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.one_of(texts(), st.text(max_size=80)), redaction=POLICIES)
def test_redacting_twice_is_redacting_once(text: str, redaction: RedactionPolicy) -> None:
    redactor = Redactor(hash_key=KEY)
    once = redactor.text(text, redaction).text
    assert redactor.text(once, redaction).text == once


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(text=texts(), redaction=st.sampled_from([policy(), policy(HASH), policy(DROP)]))
def test_no_planted_value_survives(text: str, redaction: RedactionPolicy) -> None:
    out = Redactor(hash_key=KEY).text(text, redaction).text
    for _, value in PLANTED:
        assert value not in out


@settings(max_examples=100)
@given(text=texts())
def test_every_planted_value_is_counted_under_its_kind(text: str) -> None:
    counts = Redactor(hash_key=KEY).text(text).counts
    for kind in Kind:
        planted = sum(text.count(value) for k, value in PLANTED if k is kind)
        assert counts.get(kind, 0) == planted


JSON = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False),
        texts(),
        st.text(max_size=20),
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.one_of(texts(), st.text(max_size=10)), children, max_size=4),
    ),
    max_leaves=20,
)


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(value=JSON, redaction=POLICIES)
def test_value_never_mutates_its_input(value: Any, redaction: RedactionPolicy) -> None:
    before = copy.deepcopy(value)
    Redactor(hash_key=KEY).value(value, redaction)
    assert value == before


def _scalars(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [s for item in value.values() for s in _scalars(item)]
    if isinstance(value, list):
        return [s for item in value for s in _scalars(item)]
    return [] if isinstance(value, str) else [value]


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(value=JSON, redaction=st.sampled_from([policy(), policy(HASH)]))
def test_non_string_scalars_are_untouched(value: Any, redaction: RedactionPolicy) -> None:
    out = Redactor(hash_key=KEY).value(value, redaction).value
    before, after = _scalars(value), _scalars(out)
    assert len(before) == len(after)
    for a, b in zip(before, after, strict=True):
        assert type(a) is type(b)
        assert a == b or (isinstance(a, float) and math.isclose(a, b))


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(value=JSON, redaction=POLICIES)
def test_redacting_a_value_twice_is_redacting_it_once(
    value: Any,
    redaction: RedactionPolicy,
) -> None:
    redactor = Redactor(hash_key=KEY)
    once = redactor.value(value, redaction).value
    assert redactor.value(once, redaction).value == once


@settings(max_examples=100)
@given(strings=st.lists(texts(), min_size=1, max_size=5))
def test_a_list_of_strings_is_redacted_as_each_string_alone(strings: list[str]) -> None:
    redactor = Redactor(hash_key=KEY)
    assert redactor.value(strings).value == [redactor.text(s).text for s in strings]


def test_placeholders_are_never_findings_themselves(redactor: Redactor) -> None:
    placeholders = "[REDACTED:email] [email:0123456789ab] [line dropped: phone, email]"
    assert redactor.find(placeholders) == []
    assert re.fullmatch(r"\[email:[0-9a-f]{12}\]", redactor.text("a@b.com", policy(HASH)).text)


# --- the quick walk of values with nothing to redact ---------------------------------------

SECRET_KEYS = ["password", "api_key", "client_secret", "token"]
QUICK_JSON = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        texts(),
        st.text(max_size=20),
        st.sampled_from(["hunter2", "Xk9-plq2-ZZr8w"]),
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=3).map(tuple),
        st.dictionaries(
            st.one_of(texts(), st.text(max_size=10), st.integers(), st.sampled_from(SECRET_KEYS)),
            children,
            max_size=4,
        ),
    ),
    max_leaves=20,
)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(value=QUICK_JSON)
def test_the_quick_walk_gathers_the_strings_of_the_full_walk_in_its_order(value: Any) -> None:
    from handrail.shaping import redact  # noqa: PLC0415

    assume(isinstance(value, dict | list | tuple))
    redactor = Redactor(hash_key=KEY)
    texts: list[str] = []
    status = redact._gather(value, texts, redactor._detectors, 0)
    collected = redact._collect(value, redactor._detectors)
    if status == redact._FULL:
        assert collected.secrets
    else:
        assert texts == collected.texts
        assert not collected.secrets


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(value=QUICK_JSON, redaction=POLICIES)
def test_apply_with_share_equals_value_and_shares_only_when_nothing_changes(
    value: Any, redaction: RedactionPolicy
) -> None:
    redactor = Redactor(hash_key=KEY)
    expected = redactor.value(value, redaction)
    shown, counts = redactor.apply(value, redaction, share=True)
    assert shown == expected.value
    assert dict(counts) == dict(expected.counts)
    if shown is value:
        assert not counts
        assert shown == value


def test_a_deeply_nested_value_takes_the_full_walk_alike(redactor: Redactor) -> None:
    deep: Any = "mail a@b.com"
    for _ in range(200):
        deep = {"k": [deep]}
    out = redactor.value(deep)
    inner = out.value
    for _ in range(200):
        inner = inner["k"][0]
    assert inner == "mail [REDACTED:email]"
