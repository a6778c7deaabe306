"""The ApiKeys service (handrail.mcp.keys) over the key format of handrail.api_keys.

Creating returns the plaintext and the store never holds it; verifying gives back the
principal the key was made for, and None for a malformed, unknown, tampered, revoked
or expired key; revoking and listing stay inside one tenant; create and revoke are
audited without the secret.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from datetime import timedelta

import pytest

from handrail.api_keys import KEY_PREFIX, hash_secret
from handrail.clock import FixedClock
from handrail.mcp.keys import ApiKeys
from handrail.principal import Principal
from handrail.record.audit import MemoryAuditSink
from handrail.store import MemoryStore

ALICE = Principal(
    user_id="alice",
    tenant_id="t1",
    permissions=frozenset({"orders:read"}),
    roles=frozenset({"clerk"}),
    data_scope={"region": "eu"},
)
MALLORY = Principal(user_id="mallory", tenant_id="t2", permissions=frozenset({"orders:read"}))


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock()


@pytest.fixture
def sink() -> MemoryAuditSink:
    return MemoryAuditSink()


@pytest.fixture
def keys(clock: FixedClock, sink: MemoryAuditSink) -> ApiKeys:
    return ApiKeys(MemoryStore(), clock=clock, audit=sink)


def test_a_created_key_verifies_to_its_principal(keys: ApiKeys) -> None:
    created = keys.create(ALICE, label="ci")
    assert created.key.startswith(KEY_PREFIX)
    assert created.record.key_id in created.key
    assert keys.verify(created.key) == ALICE
    assert created.key not in repr(created)


def test_the_store_keeps_only_a_hash_of_the_secret() -> None:
    store = MemoryStore()
    created = ApiKeys(store, audit=None).create(ALICE)
    stored = store.get_api_key(created.record.key_id)
    assert stored is not None
    body = created.key.removeprefix(KEY_PREFIX)
    key_id, _, secret = body.partition("_")
    assert all(secret not in str(getattr(stored, f.name)) for f in dataclasses.fields(stored))
    assert stored.secret_hash == hash_secret(key_id, secret)
    assert stored.secret_hash not in repr(stored)


def test_keys_are_random_and_distinct(keys: ApiKeys) -> None:
    made = {keys.create(ALICE).key for _ in range(20)}
    assert len(made) == 20
    assert len({k.split("_")[1] for k in made}) == 20


@pytest.mark.parametrize(
    "tamper",
    [
        lambda k: k[:-1] + ("A" if k[-1] != "A" else "B"),  # another secret
        lambda k: k.replace(KEY_PREFIX, "hrx_"),  # another prefix
        lambda k: k + "A",  # too long
        lambda k: k[:-1],  # too short
        lambda k: k.upper(),  # key id not lowercase hex
        lambda k: "",
        lambda k: "Bearer " + k,
        lambda k: k + "\x00",
        lambda k: "hrk_" + "0" * 16 + "_" + k.split("_", 2)[2],  # an unknown key id
    ],
)
def test_a_tampered_key_is_refused(keys: ApiKeys, tamper: Callable[[str], str]) -> None:
    key = keys.create(ALICE).key
    assert keys.verify(tamper(key)) is None
    assert keys.verify(key) == ALICE


def test_a_secret_from_another_key_does_not_verify(keys: ApiKeys) -> None:
    first, second = keys.create(ALICE).key, keys.create(ALICE).key
    spliced = "_".join([*first.split("_", 2)[:2], second.split("_", 2)[2]])
    assert keys.verify(spliced) is None


def test_a_revoked_key_stops_verifying(keys: ApiKeys) -> None:
    created = keys.create(ALICE)
    assert keys.revoke(created.record.key_id, tenant_id="t1")
    assert keys.verify(created.key) is None
    assert not keys.revoke(created.record.key_id, tenant_id="t1")


def test_another_tenant_cannot_revoke_or_list_a_key(keys: ApiKeys) -> None:
    created = keys.create(ALICE)
    keys.create(MALLORY)
    assert not keys.revoke(created.record.key_id, tenant_id="t2")
    assert keys.verify(created.key) == ALICE
    assert [k.user_id for k in keys.list("t2")] == ["mallory"]
    assert [k.user_id for k in keys.list("t1")] == ["alice"]
    assert not keys.revoke("not-an-id", tenant_id="t1")


def test_a_key_expires_at_its_expiry(keys: ApiKeys, clock: FixedClock) -> None:
    created = keys.create(ALICE, expires_at=clock.now() + timedelta(hours=1))
    clock.advance(3599)
    assert keys.verify(created.key) == ALICE
    clock.advance(1)
    assert keys.verify(created.key) is None


def test_an_expiry_in_the_past_or_naive_is_refused(keys: ApiKeys, clock: FixedClock) -> None:
    with pytest.raises(ValueError, match="future"):
        keys.create(ALICE, expires_at=clock.now())
    with pytest.raises(ValueError, match="future"):
        keys.create(ALICE, expires_at=clock.now().replace(tzinfo=None) + timedelta(days=1))


def test_create_and_revoke_are_audited_without_the_secret(
    keys: ApiKeys, sink: MemoryAuditSink
) -> None:
    created = keys.create(ALICE, label="ci", actor="admin")
    keys.revoke(created.record.key_id, tenant_id="t1", actor="admin")
    events = sink.events
    assert [(e.kind, e.stage, e.decision) for e in events] == [
        ("api_key", "create", "created"),
        ("api_key", "revoke", "revoked"),
    ]
    assert all(e.tenant_id == "t1" and e.user_id == "admin" for e in events)
    assert all(created.record.key_id in (e.detail or "") for e in events)
    secret = created.key.split("_", 2)[2]
    assert not any(secret in (e.detail or "") for e in events)
    assert not any(created.record.secret_hash in (e.detail or "") for e in events)


def test_by_default_key_events_go_to_the_store() -> None:
    store = MemoryStore()
    ApiKeys(store).create(ALICE)
    assert [e.decision for e in store.read_audit(tenant_id="t1")] == ["created"]


def test_a_random_source_that_repeats_ids_is_caught() -> None:
    store = MemoryStore()
    constant = itertools.repeat(b"\x01" * 32)
    keys = ApiKeys(store, audit=None, random_bytes=lambda n: next(constant)[:n])
    keys.create(ALICE)
    with pytest.raises(RuntimeError, match="unused"):
        keys.create(ALICE)
    short = ApiKeys(store, audit=None, random_bytes=lambda n: b"\x02" * min(n, 8))
    with pytest.raises(RuntimeError, match="wrong number"):
        short.create(ALICE)
