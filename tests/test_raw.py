"""RawResults keeps full results for people and hands them out only inside their tenant.

A ref of another tenant is exactly as unknown as a ref that never existed; inside the
tenant, only the owner or a holder of the raw-read permission reads it; a record lives
for its retention and no longer. Every read and refusal leaves an audit event.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from handrail.errors import AccessRefusedError, ConfigurationError, ErrorCode
from handrail.events import AuditEvent
from handrail.principal import Principal
from handrail.raw import RawRecord
from handrail.record.audit import Auditor, MemoryAuditSink
from handrail.record.raw_results import RAW_READ_PERMISSION, RawResults, new_raw_ref
from handrail.store import MemoryStore, SqlStore, Store
from handrail.store._tables import raw_results
from handrail.testing import FixedClock, sequential_ids

pytestmark = pytest.mark.anyio

START = datetime(2026, 1, 1, tzinfo=UTC)
DAY = 86_400.0
ALICE = Principal(user_id="alice", tenant_id="t1", request_id="req-7")
BOB = Principal(user_id="bob", tenant_id="t1")
AUDITOR_BOB = Principal(user_id="bob", tenant_id="t1", permissions=frozenset({RAW_READ_PERMISSION}))
MALLORY = Principal(
    user_id="alice",
    tenant_id="t2",
    permissions=frozenset({RAW_READ_PERMISSION}),
)
_DEFAULT_REF = re.compile(r"raw_[A-Za-z0-9_-]{24}")


class CountingStore(MemoryStore):
    """A MemoryStore that counts lookups, to prove malformed refs never reach it."""

    def __init__(self) -> None:
        super().__init__()
        self.lookups = 0

    def get_raw(self, ref: str) -> RawRecord | None:
        self.lookups += 1
        return super().get_raw(ref)


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock(START)


@pytest.fixture
def sink() -> MemoryAuditSink:
    return MemoryAuditSink()


@pytest.fixture
def memory() -> CountingStore:
    return CountingStore()


@pytest.fixture
def raw(memory: CountingStore, clock: FixedClock, sink: MemoryAuditSink) -> RawResults:
    return RawResults(
        memory,
        clock,
        retention_seconds=DAY,
        max_bytes=64,
        auditor=Auditor(sink, clock, new_id=sequential_ids("ev")),
    )


def _keep(raw: RawResults, body: bytes = b'{"rows": [1, 2, 3]}', **kw: object) -> str:
    options: dict[str, object] = {
        "principal": ALICE,
        "tool": "shop.search",
        "call_id": "call_1",
        "media_type": "application/json",
        **kw,
    }
    return raw.keep(body=body, **options)  # type: ignore[arg-type]


def _refusal(raw: RawResults, ref: str, principal: Principal, **kw: str) -> AccessRefusedError:
    with pytest.raises(AccessRefusedError) as caught:
        raw.read(ref, principal, **kw)
    return caught.value


def _detail(event: AuditEvent) -> dict[str, object]:
    assert event.detail is not None
    loaded = json.loads(event.detail)
    assert isinstance(loaded, dict)
    return loaded


# --- keeping -------------------------------------------------------------------------------


def test_a_kept_result_reads_back_whole_for_its_owner(raw: RawResults) -> None:
    ref = _keep(raw)
    record = raw.read(ref, ALICE)
    assert record == RawRecord(
        ref=ref,
        tenant_id="t1",
        user_id="alice",
        tool="shop.search",
        call_id="call_1",
        created_at=START,
        expires_at=START + timedelta(days=1),
        media_type="application/json",
        size=19,
        complete=True,
        body=b'{"rows": [1, 2, 3]}',
    )


def test_default_refs_are_random_url_safe_and_never_repeat(
    memory: CountingStore,
    clock: FixedClock,
) -> None:
    raw = RawResults(memory, clock)
    refs = {_keep(raw) for _ in range(200)}
    assert len(refs) == 200
    assert all(_DEFAULT_REF.fullmatch(ref) for ref in refs)
    assert _DEFAULT_REF.fullmatch(new_raw_ref())
    assert raw.max_bytes == 16 * 1024 * 1024
    assert raw.retention_seconds == 7 * DAY


def test_a_body_over_the_cap_is_cut_and_kept_incomplete_with_its_whole_size(
    raw: RawResults,
) -> None:
    body = bytes(range(100))
    record = raw.read(_keep(raw, body, media_type="application/octet-stream"), ALICE)
    assert record.body == body[:64]
    assert record.size == 100
    assert record.complete is False


def test_a_body_of_exactly_the_cap_is_complete(raw: RawResults) -> None:
    record = raw.read(_keep(raw, b"x" * 64), ALICE)
    assert (len(record.body), record.size, record.complete) == (64, 64, True)


def test_a_body_shorter_than_its_stated_size_is_never_complete(raw: RawResults) -> None:
    record = raw.read(_keep(raw, b"head", size=4000), ALICE)
    assert (record.body, record.size, record.complete) == (b"head", 4000, False)
    cut = raw.read(_keep(raw, b"head", size=4000, complete=False), ALICE)
    assert cut.complete is False


def test_a_caller_that_says_incomplete_is_believed(raw: RawResults) -> None:
    record = raw.read(_keep(raw, b"all of it?", complete=False), ALICE)
    assert record.complete is False
    assert record.size == 10


def test_a_stated_size_below_the_body_length_is_refused(raw: RawResults) -> None:
    with pytest.raises(ValueError, match="size"):
        _keep(raw, b"twelve bytes", size=11)


@pytest.mark.parametrize("media_type", ["", "   ", "text/plain\x1b[2J", "m" * 129, "a\nb"])
def test_a_bad_media_type_is_refused(raw: RawResults, media_type: str) -> None:
    with pytest.raises(ValueError, match="media_type"):
        _keep(raw, media_type=media_type)


def test_a_media_type_keeps_its_parameters_without_surrounding_space(raw: RawResults) -> None:
    record = raw.read(_keep(raw, b"hi", media_type="  text/plain; charset=utf-8 "), ALICE)
    assert record.media_type == "text/plain; charset=utf-8"


def test_overlong_tool_names_and_call_ids_are_clipped_to_what_the_store_keeps(
    raw: RawResults,
) -> None:
    record = raw.read(_keep(raw, tool="t" * 300, call_id="c" * 1000), ALICE)
    assert record.tool == "t" * 128
    assert record.call_id == "c" * 256


@given(body=st.binary(max_size=300), cap=st.integers(min_value=1, max_value=200))
def test_the_stored_body_is_always_the_prefix_within_the_cap(body: bytes, cap: int) -> None:
    raw = RawResults(MemoryStore(), FixedClock(START), max_bytes=cap)
    record = raw.read(_keep(raw, body, media_type="application/octet-stream"), ALICE)
    assert record.body == body[:cap]
    assert record.size == len(body)
    assert record.complete is (len(body) <= cap)


@pytest.mark.parametrize(
    "options",
    [{"retention_seconds": 0}, {"retention_seconds": -1.0}, {"max_bytes": 0}],
    ids=["no_retention", "negative_retention", "no_bytes"],
)
def test_nonsense_settings_are_a_configuration_error(options: dict[str, float]) -> None:
    with pytest.raises(ConfigurationError):
        RawResults(MemoryStore(), FixedClock(START), **options)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["", "raw/1", "r" * 65, "raw 1", "raw_1\n"])
def test_a_ref_source_that_makes_malformed_refs_is_a_configuration_error(bad: str) -> None:
    raw = RawResults(MemoryStore(), FixedClock(START), new_ref=lambda: bad)
    with pytest.raises(ConfigurationError):
        _keep(raw)


def test_times_are_kept_in_utc_whatever_zone_the_clock_reads(memory: CountingStore) -> None:
    plus_eight = timezone(timedelta(hours=8))
    raw = RawResults(memory, FixedClock(datetime(2026, 5, 1, 8, tzinfo=plus_eight)))
    record = raw.read(_keep(raw), ALICE)
    assert record.created_at == datetime(2026, 5, 1, 0, tzinfo=UTC)
    assert record.created_at.utcoffset() == timedelta(0)
    assert record.expires_at == datetime(2026, 5, 8, 0, tzinfo=UTC)


def test_refs_from_an_injected_source_are_used_verbatim(
    memory: CountingStore,
    clock: FixedClock,
) -> None:
    raw = RawResults(memory, clock, new_ref=sequential_ids("raw"))
    assert [_keep(raw), _keep(raw)] == ["raw-1", "raw-2"]
    assert raw.read("raw-2", ALICE).ref == "raw-2"


# --- who may read --------------------------------------------------------------------------


@pytest.mark.invariant(8)
def test_another_tenants_ref_is_refused_exactly_like_an_unknown_or_expired_one(
    raw: RawResults,
    clock: FixedClock,
) -> None:
    ref = _keep(raw)
    expiring = _keep(raw)
    foreign = _refusal(raw, ref, MALLORY)
    unknown = _refusal(raw, "raw_" + "A" * 24, ALICE)
    malformed = _refusal(raw, "raw_../../etc/passwd", ALICE)
    clock.advance(DAY)
    expired = _refusal(raw, expiring, ALICE)
    answers = {(e.code, e.message, str(e)) for e in (foreign, unknown, malformed, expired)}
    assert answers == {
        (ErrorCode.NOT_FOUND, "There is no such raw record.", str(unknown)),
    }


def test_a_reader_of_the_same_tenant_who_is_not_the_owner_is_denied(raw: RawResults) -> None:
    ref = _keep(raw)
    assert _refusal(raw, ref, BOB).code is ErrorCode.PERMISSION_DENIED
    namesake = Principal(user_id="Alice", tenant_id="t1")
    assert _refusal(raw, ref, namesake).code is ErrorCode.PERMISSION_DENIED


def test_the_raw_read_permission_opens_every_record_of_the_tenant_and_no_other(
    raw: RawResults,
) -> None:
    ref = _keep(raw)
    assert raw.read(ref, AUDITOR_BOB).user_id == "alice"
    elsewhere = Principal(user_id="bob", tenant_id="t2", permissions=AUDITOR_BOB.permissions)
    assert _refusal(raw, ref, elsewhere).code is ErrorCode.NOT_FOUND


def test_the_permission_that_opens_a_record_can_be_chosen_per_read(raw: RawResults) -> None:
    ref = _keep(raw)
    support = Principal(user_id="sam", tenant_id="t1", permissions=frozenset({"support.raw"}))
    assert raw.read(ref, support, permission="support.raw").ref == ref
    assert _refusal(raw, ref, support).code is ErrorCode.PERMISSION_DENIED
    assert _refusal(raw, ref, AUDITOR_BOB, permission="support.raw").code is (
        ErrorCode.PERMISSION_DENIED
    )


@pytest.mark.parametrize(
    "ref",
    [
        "",
        "r" * 65,
        "raw_a\x00",
        "raw_a;DROP TABLE raw_results",
        "raw_%",
        "raw_\u202eevil",
        "raw_\ud800",
        "raw_ä",
        " raw_a",
    ],
)
def test_a_malformed_ref_is_not_found_without_asking_the_store(
    raw: RawResults,
    memory: CountingStore,
    ref: str,
) -> None:
    assert _refusal(raw, ref, ALICE).code is ErrorCode.NOT_FOUND
    assert memory.lookups == 0


@pytest.mark.parametrize("ref", [None, b"raw_a", 17, ["raw_a"]])
def test_a_ref_that_is_not_even_text_is_not_found(raw: RawResults, ref: object) -> None:
    _keep(raw)
    assert _refusal(raw, ref, ALICE).code is ErrorCode.NOT_FOUND  # type: ignore[arg-type]


@given(ref=st.text(max_size=80).filter(lambda r: re.fullmatch(r"[A-Za-z0-9_-]{1,64}", r) is None))
def test_any_text_outside_the_ref_alphabet_is_not_found(ref: str) -> None:
    store = CountingStore()
    raw = RawResults(store, FixedClock(START))
    with pytest.raises(AccessRefusedError) as caught:
        raw.read(ref, ALICE)
    assert caught.value.code is ErrorCode.NOT_FOUND
    assert store.lookups == 0


# --- retention -----------------------------------------------------------------------------


def test_a_record_is_readable_until_the_instant_its_retention_ends(
    raw: RawResults,
    clock: FixedClock,
) -> None:
    ref = _keep(raw)
    clock.advance(DAY - 0.000_001)
    assert raw.read(ref, ALICE).ref == ref
    clock.advance(0.000_001)
    assert _refusal(raw, ref, ALICE).code is ErrorCode.NOT_FOUND
    assert _refusal(raw, ref, AUDITOR_BOB).code is ErrorCode.NOT_FOUND


def test_purge_deletes_only_expired_records(
    raw: RawResults,
    memory: CountingStore,
    clock: FixedClock,
) -> None:
    old = _keep(raw)
    clock.advance(DAY / 2)
    young = _keep(raw)
    assert raw.purge() == 0
    clock.advance(DAY / 2)
    assert raw.purge() == 1
    assert memory.get_raw(old) is None
    assert raw.read(young, ALICE).ref == young
    clock.advance(DAY)
    assert raw.purge() == 1
    assert raw.purge() == 0


# --- audit ---------------------------------------------------------------------------------


def test_a_read_is_audited_with_reader_owner_and_the_call(
    raw: RawResults,
    sink: MemoryAuditSink,
) -> None:
    ref = _keep(raw)
    assert sink.events == []  # keeping is not a read
    raw.read(ref, AUDITOR_BOB)
    raw.read(ref, ALICE)
    by_permission, by_owner = sink.events
    assert (by_permission.kind, by_permission.stage, by_permission.decision) == (
        "raw",
        "read",
        "pass",
    )
    assert by_permission.code is None
    assert (by_permission.user_id, by_permission.tenant_id) == ("bob", "t1")
    assert (by_permission.tool, by_permission.tool_call_id) == ("shop.search", "call_1")
    assert _detail(by_permission) == {"ref": ref, "owner": "alice", "by": RAW_READ_PERMISSION}
    assert _detail(by_owner) == {"ref": ref, "owner": "alice", "by": "owner"}
    assert by_owner.request_id == "req-7"
    assert by_owner.at == START


def test_a_denied_read_is_audited_as_refused(raw: RawResults, sink: MemoryAuditSink) -> None:
    ref = _keep(raw)
    _refusal(raw, ref, BOB)
    (event,) = sink.events
    assert (event.decision, event.code) == ("refused", "PERMISSION_DENIED")
    assert (event.user_id, event.tenant_id, event.tool) == ("bob", "t1", "shop.search")
    assert _detail(event) == {"ref": ref}


def test_a_foreign_ref_is_audited_like_an_unknown_one_in_the_readers_tenant(
    raw: RawResults,
    sink: MemoryAuditSink,
) -> None:
    ref = _keep(raw, call_id="secret_call")
    _refusal(raw, ref, MALLORY)
    _refusal(raw, "raw_unknown", MALLORY)
    foreign, unknown = sink.events
    for event in (foreign, unknown):
        assert (event.decision, event.code) == ("refused", "NOT_FOUND")
        assert (event.user_id, event.tenant_id) == ("alice", "t2")
        # Nothing of the other tenant's record reaches this tenant's trail.
        assert (event.tool, event.tool_call_id) == (None, None)
        assert "secret_call" not in (event.detail or "")
    assert _detail(foreign) == {"ref": ref}
    assert _detail(unknown) == {"ref": "raw_unknown"}


def test_a_malformed_ref_is_audited_clipped(raw: RawResults, sink: MemoryAuditSink) -> None:
    _refusal(raw, "x" * 10_000, ALICE)
    (event,) = sink.events
    assert event.code == "NOT_FOUND"
    assert _detail(event) == {"ref": "x" * 64}


def test_without_an_auditor_or_with_a_silent_one_reads_still_work(
    memory: CountingStore,
    clock: FixedClock,
) -> None:
    for auditor in (None, Auditor(None, clock)):
        raw = RawResults(memory, clock, auditor=auditor)
        ref = _keep(raw)
        assert raw.read(ref, ALICE).ref == ref
        assert _refusal(raw, ref, BOB).code is ErrorCode.PERMISSION_DENIED


# --- async and every store -----------------------------------------------------------------


async def test_async_keep_and_read_run_off_the_event_loop(raw: RawResults) -> None:
    ref = await raw.akeep(
        principal=ALICE,
        tool="shop.search",
        call_id="call_9",
        body=b"x" * 100,
        media_type="text/plain",
        size=500,
    )
    record = await raw.aread(ref, ALICE)
    assert (record.call_id, record.body, record.size, record.complete) == (
        "call_9",
        b"x" * 64,
        500,
        False,
    )
    with pytest.raises(AccessRefusedError) as caught:
        await raw.aread(ref, BOB, permission="nobody.has.this")
    assert caught.value.code is ErrorCode.PERMISSION_DENIED


@pytest.mark.invariant(8)
def test_every_store_keeps_reads_expires_and_purges_alike(store: Store, clock: FixedClock) -> None:
    if isinstance(store, SqlStore):
        with store.engine.begin() as connection:
            connection.execute(raw_results.delete())
    sink = MemoryAuditSink()
    raw = RawResults(store, clock, retention_seconds=60, auditor=Auditor(sink, clock))
    body = "Grüße\x00\xff".encode() + bytes(range(256))
    ref = _keep(raw, body, media_type="application/octet-stream")
    assert raw.read(ref, ALICE).body == body
    assert _refusal(raw, ref, MALLORY).code is ErrorCode.NOT_FOUND
    assert _refusal(raw, ref, BOB).code is ErrorCode.PERMISSION_DENIED
    clock.advance(60)
    assert _refusal(raw, ref, ALICE).code is ErrorCode.NOT_FOUND
    assert raw.purge() == 1
    assert store.get_raw(ref) is None
    assert [e.code for e in sink.events] == [None, "NOT_FOUND", "PERMISSION_DENIED", "NOT_FOUND"]
