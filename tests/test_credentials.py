"""Secret handles: providers, per-call access control, and the ledger that scrubs every sink."""

from __future__ import annotations

import base64
import copy
import io
import json
import logging
import threading
import uuid
from collections.abc import Callable, Iterator
from urllib.parse import quote, quote_plus

import pytest
from hypothesis import given
from hypothesis import strategies as st

from handrail.credentials import (
    MIN_SECRET_LENGTH,
    EnvSecretProvider,
    ScrubbingFilter,
    SecretAccessError,
    SecretAccessReason,
    SecretLedger,
    Secrets,
    StaticSecretProvider,
    validate_handle,
)
from handrail.errors import ConfigurationError

API_KEY = "sk-live-7Hq2x9Lm4Pz"
# Needs escaping in JSON and in URLs.
DB_PASSWORD = 'p@ss "w/rd" \\ ünï'  # noqa: S105 - a test value


def _ledger(**values: str) -> SecretLedger:
    ledger = SecretLedger()
    for handle, value in values.items():
        ledger.record(handle, value)
    return ledger


class _CountingProvider:
    def __init__(self, value: str | None) -> None:
        self.value = value
        self.asked: list[tuple[str, str]] = []

    def get(self, handle: str, *, tenant_id: str) -> str | None:
        self.asked.append((tenant_id, handle))
        return self.value


# --- providers ----------------------------------------------------------------------------


def test_a_tenants_own_value_beats_the_wildcard_value() -> None:
    provider = StaticSecretProvider(
        {("*", "api"): "shared-value-123", ("t1", "api"): "tenant-one-value"},
    )
    assert provider.get("api", tenant_id="t1") == "tenant-one-value"
    assert provider.get("api", tenant_id="t2") == "shared-value-123"


def test_the_static_provider_has_nothing_for_an_unknown_handle_or_another_tenant() -> None:
    provider = StaticSecretProvider({("t1", "api"): "tenant-one-value"})
    assert provider.get("api", tenant_id="t2") is None
    assert provider.get("other", tenant_id="t1") is None


@pytest.mark.parametrize(
    "values",
    [
        {("", "api"): "tenant-one-value"},
        {("t1",): "tenant-one-value"},
        {"api": "tenant-one-value"},
        {("t1", "bad handle"): "tenant-one-value"},
        {("t1", "api"): 12345678},
    ],
)
def test_the_static_provider_refuses_malformed_entries(values: object) -> None:
    with pytest.raises(ConfigurationError):
        StaticSecretProvider(values)  # type: ignore[arg-type]


def test_the_static_provider_keeps_a_snapshot_of_its_values() -> None:
    values = {("t1", "api"): "tenant-one-value"}
    provider = StaticSecretProvider(values)
    values[("t1", "api")] = "changed-afterwards"
    assert provider.get("api", tenant_id="t1") == "tenant-one-value"


def test_the_env_provider_reads_the_environment_at_each_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    variable = f"HANDRAIL_TEST_{uuid.uuid4().hex.upper()}"
    provider = EnvSecretProvider({"api": variable})
    assert provider.get("api", tenant_id="t1") is None
    monkeypatch.setenv(variable, "first-value-123")
    assert provider.get("api", tenant_id="t1") == "first-value-123"
    monkeypatch.setenv(variable, "rotated-value-456")
    assert provider.get("api", tenant_id="t2") == "rotated-value-456"


def test_the_env_provider_reads_an_injected_mapping_live() -> None:
    environ: dict[str, str] = {}
    provider = EnvSecretProvider({"api": "API_KEY"}, environ=environ)
    assert provider.get("api", tenant_id="t1") is None
    environ["API_KEY"] = "injected-value-1"
    assert provider.get("api", tenant_id="t1") == "injected-value-1"


def test_the_env_provider_prefers_a_tenants_own_variable() -> None:
    environ = {"API_KEY": "shared-value-123", "T1_API_KEY": "tenant-one-value"}
    provider = EnvSecretProvider(
        {"api": "API_KEY"},
        environ=environ,
        per_tenant={("t1", "api"): "T1_API_KEY", ("t3", "only"): "T3_ONLY"},
    )
    assert provider.get("api", tenant_id="t1") == "tenant-one-value"
    assert provider.get("api", tenant_id="t2") == "shared-value-123"
    assert provider.get("only", tenant_id="t3") is None
    assert provider.get("only", tenant_id="t1") is None
    assert provider.get("unmapped", tenant_id="t1") is None


def test_the_env_provider_treats_an_empty_variable_as_missing() -> None:
    provider = EnvSecretProvider({"api": "API_KEY"}, environ={"API_KEY": ""})
    assert provider.get("api", tenant_id="t1") is None


@pytest.mark.parametrize(
    ("names", "per_tenant"),
    [
        ({"api": ""}, None),
        ({"api": "A=B"}, None),
        ({"api": "A\x00B"}, None),
        ({"": "API_KEY"}, None),
        ({}, {("t1",): "API_KEY"}),
        ({}, {("", "api"): "API_KEY"}),
        ({}, {("t1", "api"): ""}),
    ],
)
def test_the_env_provider_refuses_malformed_names(
    names: dict[str, str],
    per_tenant: dict[tuple[str, str], str] | None,
) -> None:
    with pytest.raises(ConfigurationError):
        EnvSecretProvider(names, environ={}, per_tenant=per_tenant)


@pytest.mark.parametrize("handle", ["api", "stripe.api_key", "db/password", "a:b@c-d_e", "A" * 128])
def test_well_formed_handles_are_accepted(handle: str) -> None:
    assert validate_handle(handle) == handle


@pytest.mark.parametrize("handle", ["", "-api", "two words", "a]b", "a,b", "A" * 129, 7])
def test_malformed_handles_are_refused(handle: object) -> None:
    with pytest.raises(ConfigurationError):
        validate_handle(handle)  # type: ignore[arg-type]


# --- per-call access ----------------------------------------------------------------------


def _secrets(
    provider: object,
    *,
    tenant_id: str = "t1",
    allowed: frozenset[str] = frozenset({"api"}),
    ledger: SecretLedger | None = None,
) -> Secrets:
    return Secrets(
        provider,  # type: ignore[arg-type]
        tenant_id=tenant_id,
        allowed=allowed,
        tool="crm.lookup",
        ledger=ledger if ledger is not None else SecretLedger(),
    )


def test_a_declared_handle_returns_the_value_and_records_it_for_scrubbing() -> None:
    ledger = SecretLedger()
    secrets = _secrets(StaticSecretProvider({("t1", "api"): API_KEY}), ledger=ledger)
    assert secrets.get("api") == API_KEY
    assert len(ledger) == 1
    assert ledger.scrub(f"key={API_KEY}") == "key=[SECRET:api]"


def test_an_undeclared_handle_is_refused_without_asking_the_provider() -> None:
    provider = _CountingProvider(API_KEY)
    ledger = SecretLedger()
    secrets = _secrets(provider, allowed=frozenset({"api"}), ledger=ledger)
    with pytest.raises(SecretAccessError) as raised:
        secrets.get("db")
    assert raised.value.reason is SecretAccessReason.UNDECLARED
    assert raised.value.handle == "db"
    assert raised.value.tool == "crm.lookup"
    assert provider.asked == []
    assert len(ledger) == 0


def test_a_missing_value_is_refused() -> None:
    with pytest.raises(SecretAccessError) as raised:
        _secrets(_CountingProvider(None)).get("api")
    assert raised.value.reason is SecretAccessReason.MISSING


def test_another_tenants_value_is_never_returned() -> None:
    provider = StaticSecretProvider({("t2", "api"): "tenant-two-value"})
    with pytest.raises(SecretAccessError) as raised:
        _secrets(provider, tenant_id="t1").get("api")
    assert raised.value.reason is SecretAccessReason.MISSING
    assert _secrets(provider, tenant_id="t2").get("api") == "tenant-two-value"


def test_the_provider_is_asked_for_the_callers_tenant() -> None:
    provider = _CountingProvider(API_KEY)
    _secrets(provider, tenant_id="acme").get("api")
    assert provider.asked == [("acme", "api")]


def test_a_value_too_short_to_scrub_is_refused_and_never_shown() -> None:
    short = "x" * (MIN_SECRET_LENGTH - 1)
    ledger = SecretLedger()
    with pytest.raises(SecretAccessError) as raised:
        _secrets(_CountingProvider(short), ledger=ledger).get("api")
    assert raised.value.reason is SecretAccessReason.TOO_SHORT
    assert short not in str(raised.value)
    assert len(ledger) == 0


def test_a_value_of_exactly_the_minimum_length_is_handed_out() -> None:
    value = "y" * MIN_SECRET_LENGTH
    assert _secrets(_CountingProvider(value)).get("api") == value


def test_secret_access_errors_are_configuration_errors() -> None:
    with pytest.raises(ConfigurationError):
        _secrets(_CountingProvider(None)).get("api")


def test_secrets_need_a_tenant_and_well_formed_handles() -> None:
    with pytest.raises(ConfigurationError):
        _secrets(_CountingProvider(API_KEY), tenant_id="")
    with pytest.raises(ConfigurationError):
        _secrets(_CountingProvider(API_KEY), allowed=frozenset({"bad handle"}))


def test_reprs_name_handles_but_never_values(monkeypatch: pytest.MonkeyPatch) -> None:
    static = StaticSecretProvider({("t1", "api"): API_KEY})
    monkeypatch.setenv("HANDRAIL_TEST_REPR_KEY", API_KEY)
    env = EnvSecretProvider({"api": "HANDRAIL_TEST_REPR_KEY"}, per_tenant={("t1", "db"): "DB"})
    ledger = SecretLedger()
    secrets = _secrets(static, allowed=frozenset({"api", "db"}), ledger=ledger)
    secrets.get("api")
    log_filter = ScrubbingFilter(ledger)
    for shown in (static, env, ledger, secrets, log_filter):
        assert API_KEY not in repr(shown)
    assert "api" in repr(static)
    assert "'api', 'db'" in repr(env)
    assert repr(ledger) == "SecretLedger(handles=['api'], values=1)"
    assert repr(secrets) == ("Secrets(tool='crm.lookup', tenant_id='t1', allowed=['api', 'db'])")
    assert secrets.allowed == frozenset({"api", "db"})


# --- the ledger: text ---------------------------------------------------------------------


def test_an_empty_ledger_leaves_everything_alone() -> None:
    ledger = SecretLedger()
    payload = {"a": [API_KEY]}
    assert ledger.scrub(API_KEY) == API_KEY
    assert ledger.scrub_bytes(API_KEY.encode()) == API_KEY.encode()
    assert ledger.scrub_value(payload) is payload
    assert not ledger.contains(API_KEY)
    assert len(ledger) == 0


def test_the_ledger_refuses_short_values_and_malformed_handles() -> None:
    ledger = SecretLedger()
    with pytest.raises(SecretAccessError) as raised:
        ledger.record("api", "short")
    assert raised.value.reason is SecretAccessReason.TOO_SHORT
    assert raised.value.tool is None
    with pytest.raises(ConfigurationError):
        ledger.record("bad handle", API_KEY)
    assert len(ledger) == 0


def test_a_plain_value_is_replaced_inside_larger_text() -> None:
    ledger = _ledger(api=API_KEY)
    text = f"GET /v1?key={API_KEY}&x=1 then {API_KEY}{API_KEY}"
    assert ledger.scrub(text) == "GET /v1?key=[SECRET:api]&x=1 then [SECRET:api][SECRET:api]"
    assert ledger.contains(text)
    assert not ledger.contains("nothing to see")
    assert ledger.scrub("nothing to see") == "nothing to see"


@pytest.mark.parametrize(
    "encode",
    [
        pytest.param(lambda v: json.dumps({"password": v}), id="json-ascii"),
        pytest.param(lambda v: json.dumps({"password": v}, ensure_ascii=False), id="json-utf8"),
        pytest.param(lambda v: json.dumps(json.dumps({"password": v})), id="json-twice"),
        pytest.param(lambda v: json.dumps(v).replace("/", "\\/"), id="json-escaped-slash"),
        pytest.param(lambda v: "u=" + quote(v, safe=""), id="quote-nothing-safe"),
        pytest.param(lambda v: "u=" + quote(v), id="quote"),
        pytest.param(lambda v: "u=" + quote_plus(v), id="quote-plus"),
        pytest.param(lambda v: "u=" + quote(v, safe="").lower(), id="quote-lowercase-hex"),
        pytest.param(lambda v: base64.b64encode(v.encode()).decode(), id="base64"),
        pytest.param(lambda v: base64.urlsafe_b64encode(v.encode()).decode(), id="base64-url"),
        pytest.param(
            lambda v: base64.urlsafe_b64encode(v.encode()).decode().rstrip("="),
            id="base64-url-unpadded",
        ),
    ],
)
def test_encoded_forms_of_a_value_are_replaced(encode: Callable[[str], str]) -> None:
    ledger = _ledger(db=DB_PASSWORD)
    encoded = encode(DB_PASSWORD)
    assert DB_PASSWORD not in encoded
    text = f"before {encoded} after"
    scrubbed = ledger.scrub(text)
    assert "[SECRET:db]" in scrubbed
    assert encoded not in scrubbed
    assert not ledger.contains(scrubbed)
    assert scrubbed.startswith("before ")
    assert scrubbed.endswith(" after")


@pytest.mark.parametrize("user", ["", "u", "us", "user", "admin@example.org"])
def test_a_value_inside_a_basic_credential_is_replaced_at_every_alignment(user: str) -> None:
    ledger = _ledger(db=DB_PASSWORD)
    blob = base64.b64encode(f"{user}:{DB_PASSWORD}".encode()).decode()
    header = f"Authorization: Basic {blob}"
    scrubbed = ledger.scrub(header)
    assert "[SECRET:db]" in scrubbed
    # What is left is the share of "user:", one character on each side that mixes in
    # bits of the value, and padding: never enough to rebuild the value.
    leftover = len(scrubbed) - len("Authorization: Basic [SECRET:db]")
    assert leftover <= -(-8 * len(f"{user}:".encode()) // 6) + 3


def test_overlapping_values_become_one_placeholder_naming_both() -> None:
    ledger = _ledger(a="abcdefgh1234", b="gh12345678xy")
    assert ledger.scrub("<abcdefgh12345678xy>") == "<[SECRET:a,b]>"
    assert ledger.scrub("<gh12345678xyz abcdefgh1234>") == "<[SECRET:b]z [SECRET:a]>"


def test_a_chain_of_overlaps_is_covered_by_one_placeholder() -> None:
    ledger = _ledger(a="aaaa1111", b="1111bbbb", c="bbbb2222")
    assert ledger.scrub("[aaaa1111bbbb2222]") == "[[SECRET:a,b,c]]"


def test_the_longest_value_at_a_position_wins_over_a_value_it_contains() -> None:
    ledger = _ledger(short="abcdefgh", long="abcdefghijkl", inner="xxdefghijkyy")
    assert ledger.scrub("abcdefghijkl") == "[SECRET:long]"
    assert ledger.scrub("abcdefghij") == "[SECRET:short]ij"
    assert ledger.scrub("1xxdefghijkyy2") == "1[SECRET:inner]2"


def test_adjacent_values_get_one_placeholder_each() -> None:
    ledger = _ledger(a="abcdefgh", b="12345678")
    assert ledger.scrub("abcdefgh12345678") == "[SECRET:a][SECRET:b]"


def test_a_value_recorded_again_keeps_its_first_handle() -> None:
    ledger = _ledger(first=API_KEY)
    ledger.record("second", API_KEY)
    assert len(ledger) == 1
    assert ledger.scrub(API_KEY) == "[SECRET:first]"


def test_values_recorded_later_are_scrubbed_too() -> None:
    ledger = _ledger(a="abcdefgh")
    assert ledger.scrub("abcdefgh 12345678") == "[SECRET:a] 12345678"
    ledger.record("b", "12345678")
    assert ledger.scrub("abcdefgh 12345678") == "[SECRET:a] [SECRET:b]"


def test_a_value_that_reforms_around_its_own_placeholder_drops_the_text() -> None:
    ledger = _ledger(loop="[SECRET:loop]")
    scrubbed = ledger.scrub("x [SECRET:loop] y")
    assert scrubbed == "[SECRET:*]"
    ledger.record("star", "[SECRET:*]")
    assert ledger.scrub("x [SECRET:loop] y") == ""


def test_many_values_sharing_long_prefixes_are_all_found() -> None:
    # Deep prefix trees are cut to flat alternations; matching must not change.
    values = {f"h{n}": "k" * (8 + n) + "!" for n in range(80)}
    ledger = _ledger(**values)
    for handle, value in values.items():
        assert ledger.scrub(f"<{value}>") == f"<[SECRET:{handle}]>"
    assert ledger.scrub("k" * 200) == "k" * 200


# --- the ledger: values and bytes ---------------------------------------------------------


def test_scrub_value_walks_nested_json_including_keys_without_mutating_it() -> None:
    ledger = _ledger(api=API_KEY)
    payload: dict[object, object] = {
        "headers": {"Authorization": f"Bearer {API_KEY}", API_KEY: "as a key"},
        "items": [1, 2.5, True, None, [f"x{API_KEY}"], (API_KEY, 3)],
        "raw": API_KEY.encode(),
        7: "non-string key",
    }
    before = copy.deepcopy(payload)
    scrubbed = ledger.scrub_value(payload)
    assert payload == before
    assert scrubbed == {
        "headers": {"Authorization": "Bearer [SECRET:api]", "[SECRET:api]": "as a key"},
        "items": [1, 2.5, True, None, ["x[SECRET:api]"], ("[SECRET:api]", 3)],
        "raw": b"[SECRET:api]",
        7: "non-string key",
    }
    # A tuple never equals a list, so the comparison above also proves tuples stay tuples.


def test_scrub_value_keeps_both_keys_that_scrub_to_the_same_text() -> None:
    ledger = _ledger(api=API_KEY)
    encoded = base64.b64encode(API_KEY.encode()).decode()
    assert ledger.scrub_value({API_KEY: 1, encoded: 2}) == {
        "[SECRET:api]": 1,
        "[SECRET:api]#2": 2,
    }
    taken = {"[SECRET:api]": 0, "[SECRET:api]#2": 1, API_KEY: 2}
    assert ledger.scrub_value(taken) == {
        "[SECRET:api]": 0,
        "[SECRET:api]#2": 1,
        "[SECRET:api]#3": 2,
    }


def test_scrub_value_returns_other_objects_as_they_are() -> None:
    ledger = _ledger(api=API_KEY)
    marker = object()
    assert ledger.scrub_value(marker) is marker
    assert ledger.scrub_value(42) == 42


def test_bytes_are_scrubbed_as_utf8_without_decoding_them() -> None:
    ledger = _ledger(db=DB_PASSWORD)
    data = b"\xff\xfe invalid " + DB_PASSWORD.encode() + b" and " + quote(DB_PASSWORD).encode()
    scrubbed = ledger.scrub_bytes(data)
    assert scrubbed == b"\xff\xfe invalid [SECRET:db] and [SECRET:db]"
    assert ledger.scrub_bytes(b"clean \x00\xff") == b"clean \x00\xff"
    blob = base64.b64encode(b"user:" + DB_PASSWORD.encode())
    assert b"[SECRET:db]" in ledger.scrub_bytes(blob)


def test_values_with_lone_surrogates_are_scrubbed() -> None:
    # os.environ smuggles undecodable bytes in as lone surrogates.
    value = "abc\udcffdefgh"
    ledger = _ledger(env=value)
    assert ledger.scrub(f"<{value}>") == "<[SECRET:env]>"
    assert ledger.scrub_bytes(b"<" + value.encode("utf-8", "surrogatepass") + b">") == (
        b"<[SECRET:env]>"
    )


# --- logging ------------------------------------------------------------------------------


@pytest.fixture
def captured() -> Iterator[tuple[logging.Logger, io.StringIO, SecretLedger]]:
    ledger = _ledger(api=API_KEY)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    handler.addFilter(ScrubbingFilter(ledger))
    logger = logging.getLogger(f"handrail.test.credentials.{uuid.uuid4().hex}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    yield logger, stream, ledger
    logger.removeHandler(handler)


def test_log_messages_are_scrubbed_after_percent_formatting(
    captured: tuple[logging.Logger, io.StringIO, SecretLedger],
) -> None:
    logger, stream, _ = captured
    logger.warning("calling with %s and %r", API_KEY, {"token": API_KEY})
    logger.info("mapping %(key)s", {"key": API_KEY})
    logger.info(f"inline {API_KEY}")  # noqa: G004 - the message itself carries the secret
    output = stream.getvalue()
    assert API_KEY not in output
    assert output.splitlines() == [
        "WARNING calling with [SECRET:api] and {'token': '[SECRET:api]'}",
        "INFO mapping [SECRET:api]",
        "INFO inline [SECRET:api]",
    ]


def test_a_log_message_with_broken_arguments_is_still_scrubbed(
    captured: tuple[logging.Logger, io.StringIO, SecretLedger],
) -> None:
    logger, stream, _ = captured
    logger.info("count %d", f"not a number {API_KEY}")
    output = stream.getvalue()
    assert API_KEY not in output
    assert "count %d ('not a number [SECRET:api]',)" in output


def test_exceptions_in_log_records_are_scrubbed(
    captured: tuple[logging.Logger, io.StringIO, SecretLedger],
) -> None:
    logger, stream, _ = captured

    def fail() -> None:
        raise ValueError(f"bad credential {API_KEY}")

    try:
        fail()
    except ValueError:
        logger.exception("call failed for %s", API_KEY)
    output = stream.getvalue()
    assert API_KEY not in output
    assert "ERROR call failed for [SECRET:api]" in output
    assert "Traceback (most recent call last)" in output
    assert "ValueError: bad credential [SECRET:api]" in output


def test_stack_info_and_extra_fields_are_scrubbed(
    captured: tuple[logging.Logger, io.StringIO, SecretLedger],
) -> None:
    logger, stream, _ = captured
    handler = logger.handlers[0]
    handler.setFormatter(logging.Formatter("%(message)s auth=%(auth)s"))
    logger.info("request", extra={"auth": f"Bearer {API_KEY}"}, stack_info=True)
    output = stream.getvalue()
    assert API_KEY not in output
    assert "request auth=Bearer [SECRET:api]" in output
    assert "Stack (most recent call last)" in output


def test_exc_info_outside_an_exception_is_left_alone(
    captured: tuple[logging.Logger, io.StringIO, SecretLedger],
) -> None:
    logger, stream, _ = captured
    logger.error("no exception here", exc_info=True)  # noqa: LOG014 - the case under test
    assert stream.getvalue().startswith("ERROR no exception here")


def test_the_filter_scrubs_text_a_formatter_already_rendered_and_lets_records_through() -> None:
    ledger = _ledger(api=API_KEY)
    exc_info = (ValueError, ValueError(API_KEY), None)
    record = logging.LogRecord("x", logging.ERROR, __file__, 1, "msg", None, exc_info)
    record.exc_text = f"ValueError: {API_KEY}"
    record.stack_info = f"frame {API_KEY}"
    assert ScrubbingFilter(ledger).filter(record) is True
    assert record.exc_text == "ValueError: [SECRET:api]"
    assert record.stack_info == "frame [SECRET:api]"
    assert record.args is None
    assert record.exc_info is None


# --- concurrency --------------------------------------------------------------------------


def test_threads_recording_and_scrubbing_at_once_never_leak_their_own_values() -> None:
    ledger = SecretLedger()
    workers = 8
    rounds = 25
    start = threading.Barrier(workers, timeout=30)
    leaks: list[str] = []
    errors: list[BaseException] = []

    def work(worker: int) -> None:
        try:
            start.wait()
            mine: list[str] = []
            for n in range(rounds):
                value = f"worker-{worker}-secret-{n:04d}"
                ledger.record(f"w{worker}.s{n}", value)
                mine.append(value)
                text = " | ".join(mine)
                scrubbed = ledger.scrub(text)
                leaks.extend(value for value in mine if value in scrubbed)
        except BaseException as exc:  # noqa: BLE001 - reported to the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    assert errors == []
    assert leaks == []
    assert len(ledger) == workers * rounds


# --- properties ---------------------------------------------------------------------------

_ENCODERS: list[Callable[[str], str]] = [
    lambda v: v,
    lambda v: json.dumps(v)[1:-1],
    lambda v: json.dumps(v, ensure_ascii=False)[1:-1],
    lambda v: quote(v, safe=""),
    quote_plus,
    lambda v: base64.b64encode(v.encode("utf-8", "surrogatepass")).decode(),
    lambda v: base64.urlsafe_b64encode(v.encode("utf-8", "surrogatepass")).decode(),
]

_values = st.lists(st.text(min_size=MIN_SECRET_LENGTH, max_size=24), min_size=1, max_size=4)


@st.composite
def _overlapping_values(draw: st.DrawFn) -> list[str]:
    base = draw(st.text(min_size=2 * MIN_SECRET_LENGTH, max_size=40))
    spans = draw(
        st.lists(
            st.tuples(st.integers(0, len(base)), st.integers(MIN_SECRET_LENGTH, len(base))),
            min_size=1,
            max_size=4,
        ),
    )
    values = [base[start : start + size] for start, size in spans]
    return [value for value in values if len(value) >= MIN_SECRET_LENGTH] or [base]


@given(
    values=_values | _overlapping_values(),
    pieces=st.lists(
        st.tuples(st.text(max_size=12), st.integers(0, 3), st.sampled_from(_ENCODERS)),
        max_size=8,
    ),
)
def test_scrubbed_text_never_contains_a_recorded_value(
    values: list[str],
    pieces: list[tuple[str, int, Callable[[str], str]]],
) -> None:
    ledger = SecretLedger()
    for n, value in enumerate(values):
        ledger.record(f"h{n}", value)
    embedded = [encode(values[pick % len(values)]) for _, pick, encode in pieces]
    text = "".join(filler + form for (filler, _, _), form in zip(pieces, embedded, strict=True))
    scrubbed = ledger.scrub(text)
    for value in values:
        assert value not in scrubbed
    for form in embedded:
        assert form not in scrubbed
    assert not ledger.contains(scrubbed)
    data = ledger.scrub_bytes(text.encode("utf-8", "surrogatepass"))
    for value in values:
        assert value.encode("utf-8", "surrogatepass") not in data


@given(values=_values, filler=st.text(max_size=30))
def test_scrubbed_json_strings_never_contain_a_recorded_value(
    values: list[str],
    filler: str,
) -> None:
    ledger = SecretLedger()
    for n, value in enumerate(values):
        ledger.record(f"h{n}", value)
    payload = {filler + value: [value + filler, {"k": filler.join(values)}] for value in values}
    scrubbed = ledger.scrub_value(payload)
    strings = [*scrubbed, *(text for item in scrubbed.values() for text in _strings(item))]
    for text in strings:
        for value in values:
            assert value not in text


def _strings(value: object) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
