"""SQL injection through every parameter of the SQL tools, on real SQLite and PostgreSQL.

Whatever the model sends, the database is unchanged (a checksum of every table before
and after) unless a confirmed patch wrote exactly the bound value it named, and every
refusal is a structured envelope that names no table, SQL or driver.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import pytest
import sqlalchemy as sa
from pydantic import Field

from _write_tools import keyring
from handrail import Envelope, ErrorCode, Gate, Principal, Registry, Status, ToolCall, Writes
from handrail.testing import FixedClock, MemoryStore, sequential_ids
from handrail.tools.sql import PatchTarget, QueryTemplate, SqlConfig, sql_engine, sql_tools

pytestmark = pytest.mark.anyio

ALICE = Principal(user_id="alice", tenant_id="t1", permissions=frozenset({"db.read", "db.write"}))

PAYLOADS = [
    "' OR 1=1 --",
    "' OR '1'='1",
    "1; DROP TABLE {t}; --",
    "'; DELETE FROM {t}; --",
    "x'); UPDATE {t} SET balance = 0; --",
    '" OR ""="',
    "') OR ('a'='a",
    "\u2019 OR 1=1 --",  # right single quotation mark
    "\u02bc OR 1=1 --",  # modifier letter apostrophe
    "\uff07 OR 1=1 --",  # full-width apostrophe
    "\\' OR 1=1 --",
    "1 UNION SELECT secret FROM {s} --",
    "%' OR note LIKE '%",
    ":tenant",
    "$1",
    "?",
    "%s",
    "*/ DROP TABLE {t} /*",
    "\u2028\u2029\u202e",
    "😀' OR 1=1 --",
]


@dataclass
class Db:
    kind: str
    engine: sa.Engine
    table: str
    secrets: str

    def checksum(self) -> str:
        """Every row of both tables, and the list of tables: equal means untouched."""
        with self.engine.connect() as conn:
            listing = (
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1"
                if self.kind == "postgres"
                else "SELECT name FROM sqlite_master ORDER BY 1"
            )
            names = [row[0] for row in conn.execute(sa.text(listing))]
            rows = [
                [name, *(str(v) for v in row)]
                for name in (self.table, self.secrets)
                for row in conn.execute(sa.text(f"SELECT * FROM {name} ORDER BY 1"))  # noqa: S608
            ]
        return json.dumps([names, rows])

    def note(self, key: int) -> str:
        with self.engine.connect() as conn:
            found = conn.execute(
                sa.text(f"SELECT note FROM {self.table} WHERE id = :id"),  # noqa: S608
                {"id": key},
            ).scalar_one()
        return str(found)

    def format(self, payload: str) -> str:
        return payload.format(t=self.table, s=self.secrets)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Db]:
    url = (
        f"sqlite:///{tmp_path / 'bank.db'}"
        if request.param == "sqlite"
        else request.getfixturevalue("postgres_url")
    )
    engine = sql_engine(url, pool_size=1, max_overflow=0)
    suffix = uuid.uuid4().hex[:10]
    made = Db(request.param, engine, f"accounts_{suffix}", f"secrets_{suffix}")
    with engine.begin() as conn:
        conn.exec_driver_sql(
            f"CREATE TABLE {made.table} (id INTEGER PRIMARY KEY, owner TEXT NOT NULL, "
            "note TEXT, balance INTEGER NOT NULL, tenant TEXT NOT NULL, version INTEGER NOT NULL)",
        )
        conn.exec_driver_sql(f"CREATE TABLE {made.secrets} (id INTEGER PRIMARY KEY, secret TEXT)")
        conn.execute(
            sa.text(
                f"INSERT INTO {made.table} (id, owner, note, balance, tenant, version) "  # noqa: S608
                "VALUES (:id, :owner, :note, :balance, :tenant, 1)",
            ),
            [
                {"id": 1, "owner": "ann", "note": "rent", "balance": 100, "tenant": "t1"},
                {"id": 2, "owner": "bob", "note": "' OR 1=1 --", "balance": 5, "tenant": "t1"},
                {"id": 3, "owner": "eve", "note": "rent", "balance": 999, "tenant": "t2"},
            ],
        )
        conn.execute(
            sa.text(f"INSERT INTO {made.secrets} (id, secret) VALUES (1, 'hunter2')"),  # noqa: S608
        )
    yield made
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {made.table}")
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {made.secrets}")
    engine.dispose()


def _tools(db: Db) -> SqlConfig:
    table = db.table
    where = f"FROM {table} WHERE tenant = :tenant"
    accounts: dict[str, Any] = {
        "table": table,
        "key_column": "id",
        "version_column": "version",
        "columns": {"note": Annotated[str, Field(max_length=10_000)], "balance": int},
        "scope": {"tenant": "tenant_id"},
        "description": "Accounts.",
    }
    return SqlConfig(
        engine=db.engine,
        templates={
            "by_note": QueryTemplate(
                sql=f"SELECT id, note {where} AND note = :note ORDER BY id",
                description="Accounts by their exact note.",
                params={"note": str},
                principal_params={"tenant": "tenant_id"},
            ),
            "by_id": QueryTemplate(
                sql=f"SELECT id, note {where} AND id = :id",
                description="One account.",
                params={"id": int},
                principal_params={"tenant": "tenant_id"},
            ),
            "by_notes": QueryTemplate(
                sql=f"SELECT id {where} AND note IN :notes ORDER BY id",
                description="Accounts by notes.",
                params={"notes": Annotated[list[str], Field(max_length=20)]},
                principal_params={"tenant": "tenant_id"},
            ),
        },
        targets={
            "accounts": PatchTarget(**accounts),
            "accounts_again": PatchTarget(**accounts),
            "by_owner": PatchTarget(
                table=table,
                key_column="owner",
                key_type=Annotated[str, Field(max_length=32)],
                version_column="version",
                columns={"note": str},
                scope={"tenant": "tenant_id"},
                description="Accounts by owner.",
            ),
        },
    )


@dataclass
class Attacker:
    db: Db
    gate: Gate
    writes: Writes

    async def send(self, name: str, arguments: object) -> Envelope:
        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
        call = ToolCall(id="call_attack", name=f"db.{name}", arguments=text)
        return await self.gate.handle(call, ALICE)

    async def refused(self, name: str, arguments: object, code: ErrorCode) -> Envelope:
        """The attack is refused with `code`, structured, and the database is untouched."""
        before = self.db.checksum()
        envelope = await self.send(name, arguments)
        assert envelope.status is Status.ERROR
        assert envelope.error_type is code, envelope.summary
        shown = envelope.to_json()
        json.loads(shown)
        assert len(shown) < 4_000
        sent = json.dumps(arguments)
        for leak in (self.db.table, self.db.secrets, "SELECT", "sqlite3", "psycopg", "Traceback"):
            # A field error may quote what the model sent; nothing else may appear.
            assert leak not in shown or leak in sent
        assert "hunter2" not in shown
        assert self.db.checksum() == before
        return envelope

    async def execute(self, arguments: dict[str, object]) -> Envelope:
        proposed = await self.send("patch_database", arguments)
        assert proposed.error_type is ErrorCode.NEEDS_CONFIRMATION, proposed.summary
        plan_id = proposed.data["plan_id"]
        token = await self.writes.issue_token(plan_id, ALICE)
        await self.writes.confirm(plan_id, token.value, ALICE)
        return (await self.writes.execute_plan(plan_id, ALICE)).envelope


@pytest.fixture
def attacker(db: Db) -> Attacker:
    registry = Registry()
    for made in sql_tools(_tools(db)):
        registry.register(made)
    clock = FixedClock()
    writes = Writes(registry, MemoryStore(), keyring(), clock=clock, new_id=sequential_ids("p"))
    return Attacker(db, Gate(registry, writes=writes, clock=clock), writes)


# --- query parameters -----------------------------------------------------------------------


@pytest.mark.parametrize("payload", PAYLOADS)
async def test_a_string_param_is_only_ever_compared_as_a_value(
    attacker: Attacker, payload: str
) -> None:
    before = attacker.db.checksum()
    text = attacker.db.format(payload)
    envelope = await attacker.send("query_database", {"query": "by_note", "params": {"note": text}})
    assert envelope.status is Status.OK, envelope.summary
    # Only a row whose note is exactly this text matches; the seeded one proves it.
    expected = [[2, text]] if text == "' OR 1=1 --" else []
    assert envelope.data["rows"] == expected
    assert "hunter2" not in envelope.to_json()
    assert attacker.db.checksum() == before


async def test_a_list_param_binds_each_item_as_a_value(attacker: Attacker) -> None:
    notes = [attacker.db.format(p) for p in PAYLOADS[:19]]
    envelope = await attacker.send(
        "query_database", {"query": "by_notes", "params": {"notes": notes}}
    )
    assert envelope.status is Status.OK, envelope.summary
    assert envelope.data["rows"] == [[2]]


@pytest.mark.parametrize(
    "value",
    ["1 OR 1=1", "1; DROP TABLE accounts", 1.5, True, None, [1], {"$gt": 0}, {"id": 1}],
)
async def test_a_non_integer_for_an_integer_param_is_refused(
    attacker: Attacker, value: object
) -> None:
    envelope = await attacker.refused(
        "query_database", {"query": "by_id", "params": {"id": value}}, ErrorCode.INVALID_ARGUMENTS
    )
    assert envelope.retryable


@pytest.mark.parametrize(
    "params",
    [
        {"note": "a\x00b"},
        {"note": "\x00' OR 1=1 --"},
        {"notes": ["rent", "x\x00"]},
        {"no\x00te": "rent"},
        {"note": ["rent"]},
        {"note": {"$ne": ""}},
        {"note": {"a": {"b": {"c": "d"}}}},
        {"note": "rent", "tenant": "t2"},
        {"note": "rent", "id": 3},
    ],
)
async def test_nul_bytes_structures_and_smuggled_binds_are_refused(
    attacker: Attacker, params: dict[str, object]
) -> None:
    query = "by_notes" if "notes" in params else "by_note"
    await attacker.refused(
        "query_database", {"query": query, "params": params}, ErrorCode.INVALID_ARGUMENTS
    )


async def test_a_huge_string_is_bound_whole_or_refused_whole(attacker: Attacker) -> None:
    before = attacker.db.checksum()
    big = "' OR 1=1 --" + "x" * 500_000
    envelope = await attacker.send("query_database", {"query": "by_note", "params": {"note": big}})
    assert envelope.status is Status.OK, envelope.summary
    assert envelope.data["rows"] == []
    assert attacker.db.checksum() == before
    await attacker.refused(
        "query_database",
        {"query": "by_note", "params": {"note": "x" * (2 << 20)}},
        ErrorCode.INVALID_ARGUMENTS,
    )


@pytest.mark.parametrize(
    "arguments",
    [
        {"query": "by_note; DROP TABLE accounts", "params": {"note": "x"}},
        {"query": "BY_NOTE", "params": {"note": "x"}},
        {"query": "by_note ", "params": {"note": "x"}},
        {"query": "by_note\u200b", "params": {"note": "x"}},
        {"query": "../by_note", "params": {"note": "x"}},
        {"query": "", "params": {}},
        {"query": ["by_note"], "params": {"note": "x"}},
        {"query": {"name": "by_note"}, "params": {"note": "x"}},
        {"query": "by_note", "params": {"note": "x"}, "sql": "DELETE FROM accounts"},
        {"query": "by_note", "params": "note = 'x' OR 1=1"},
        {"params": {"note": "x"}},
    ],
)
async def test_a_template_outside_the_list_is_refused(
    attacker: Attacker, arguments: dict[str, object]
) -> None:
    await attacker.refused("query_database", arguments, ErrorCode.INVALID_ARGUMENTS)


# --- patch parameters -----------------------------------------------------------------------


def _patch(**overrides: object) -> dict[str, object]:
    return {"target": "accounts", "key": 1, "expected_version": 1, "fields": {"note": "ok"}} | (
        overrides
    )


@pytest.mark.parametrize(
    "fields",
    [
        {"version": 99},
        {"id": 7},
        {"tenant": "t2"},
        {"owner": "mallory"},
        {"x; DROP TABLE accounts": 1},
        {"note\" = 'x', balance = 0, \"note": "x"},
        {"note; DROP TABLE accounts; --": "x"},
        {"Note": "x"},
        {"note\u0000": "x"},
        {"balance = 0, note": "x"},
        {"note": "x", "balance": "0; DROP TABLE accounts"},
        {"balance": 1.5},
        {"balance": {"$set": 0}},
        {"note": ["x"]},
        {"note": "a\x00b"},
        {"note": None},
        {},
    ],
)
async def test_fields_outside_the_declared_columns_and_types_are_refused(
    attacker: Attacker, fields: dict[str, object]
) -> None:
    await attacker.refused("patch_database", _patch(fields=fields), ErrorCode.INVALID_ARGUMENTS)


@pytest.mark.parametrize(
    ("overrides", "code"),
    [
        ({"key": "1 OR 1=1"}, ErrorCode.INVALID_ARGUMENTS),
        ({"key": "1"}, ErrorCode.INVALID_ARGUMENTS),
        ({"key": [1]}, ErrorCode.INVALID_ARGUMENTS),
        ({"key": {"$gt": 0}}, ErrorCode.INVALID_ARGUMENTS),
        ({"key": 1.0000001}, ErrorCode.INVALID_ARGUMENTS),
        ({"key": 3}, ErrorCode.NOT_FOUND),
        ({"key": 2**53}, ErrorCode.INVALID_ARGUMENTS),
        ({"target": "by_owner", "key": "' OR 1=1 --"}, ErrorCode.NOT_FOUND),
        ({"target": "by_owner", "key": "ann'; --"}, ErrorCode.NOT_FOUND),
        ({"target": "by_owner", "key": "ann\x01"}, ErrorCode.INVALID_ARGUMENTS),
        ({"target": "by_owner", "key": "ann\x00"}, ErrorCode.INVALID_ARGUMENTS),
        ({"target": "by_owner", "key": "a" * 33}, ErrorCode.INVALID_ARGUMENTS),
        ({"target": "by_owner", "key": 1}, ErrorCode.INVALID_ARGUMENTS),
        ({"expected_version": "1 OR 1=1"}, ErrorCode.INVALID_ARGUMENTS),
        ({"expected_version": "1; DROP TABLE accounts"}, ErrorCode.INVALID_ARGUMENTS),
        ({"expected_version": "-1"}, ErrorCode.INVALID_ARGUMENTS),
        ({"expected_version": -1}, ErrorCode.INVALID_ARGUMENTS),
        ({"expected_version": "\uff11"}, ErrorCode.INVALID_ARGUMENTS),
        ({"expected_version": "9999999999999999"}, ErrorCode.INVALID_ARGUMENTS),
        ({"expected_version": 1.5}, ErrorCode.INVALID_ARGUMENTS),
        ({"expected_version": [1]}, ErrorCode.INVALID_ARGUMENTS),
        ({"expected_version": 0}, ErrorCode.VERSION_CONFLICT),
        ({"target": "accounts; DROP TABLE accounts"}, ErrorCode.INVALID_ARGUMENTS),
        ({"target": "Accounts"}, ErrorCode.INVALID_ARGUMENTS),
        ({"target": ["accounts"]}, ErrorCode.INVALID_ARGUMENTS),
        ({"target": "secrets"}, ErrorCode.INVALID_ARGUMENTS),
        ({"dry_run": "false"}, ErrorCode.INVALID_ARGUMENTS),
        ({"where": "1=1"}, ErrorCode.INVALID_ARGUMENTS),
        ({"table": "secrets"}, ErrorCode.INVALID_ARGUMENTS),
        ({"tenant": "t2"}, ErrorCode.INVALID_ARGUMENTS),
    ],
)
async def test_keys_versions_and_targets_are_values_or_refusals(
    attacker: Attacker, overrides: dict[str, object], code: ErrorCode
) -> None:
    await attacker.refused("patch_database", _patch(**overrides), code)


async def test_the_table_name_itself_is_no_target(attacker: Attacker) -> None:
    arguments = _patch(target=attacker.db.table)
    await attacker.refused("patch_database", arguments, ErrorCode.INVALID_ARGUMENTS)


async def test_a_confirmed_patch_writes_each_payload_as_the_literal_value(
    attacker: Attacker,
) -> None:
    db = attacker.db
    before_others = _without_row(db.checksum(), "1")
    version = 1
    for payload in [*PAYLOADS, "x" * 10_000]:
        text = db.format(payload)
        done = await attacker.execute(_patch(expected_version=version, fields={"note": text}))
        assert done.status is Status.OK, done.summary
        version += 1
        assert db.note(1) == text
    # Nothing but that one row's note and version changed, and both tables still exist.
    assert _without_row(db.checksum(), "1") == before_others


async def test_a_string_key_is_bound_as_a_value_in_a_confirmed_patch(attacker: Attacker) -> None:
    db = attacker.db
    before = db.checksum()
    done = await attacker.execute(
        {"target": "by_owner", "key": "bob", "expected_version": 1, "fields": {"note": "' --"}},
    )
    assert done.status is Status.OK, done.summary
    assert db.note(2) == "' --"
    assert _without_row(db.checksum(), "2") == _without_row(before, "2")


def _without_row(checksum: str, key: str) -> str:
    """The checksum without one account row (the one a confirmed patch may change)."""
    names, rows = json.loads(checksum)
    kept = [row for row in rows if not (row[0].startswith("accounts_") and row[1] == key)]
    return json.dumps([names, kept])
