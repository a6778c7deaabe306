"""The SQL tools on real SQLite and PostgreSQL: templates, limits, read-only, confirmed patches.

Every database test runs on a SQLite file in tmp_path and on PostgreSQL (a fresh table
per test), through a Gate and, for patches, the plan → confirm → execute path of Writes.
"""

from __future__ import annotations

import asyncio
import base64
import json
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any
from uuid import UUID

import pytest
import sqlalchemy as sa
from pydantic import Field

from _write_tools import keyring
from handrail import (
    ConfirmationMode,
    Envelope,
    ErrorCode,
    Gate,
    IdempotencyMode,
    PlanState,
    Principal,
    Registry,
    RiskLevel,
    SideEffect,
    Status,
    Tool,
    ToolCall,
    ToolContext,
    Writes,
)
from handrail.adapters import AnthropicAdapter, GeminiAdapter, OpenAIChatAdapter
from handrail.declare.hooks import Found, NoProof, NotExecuted
from handrail.envelope import Trust
from handrail.errors import ConfigurationError, NotFound, ToolFailed, ToolSignal, VersionConflict
from handrail.testing import FixedClock, MemoryStore, sequential_ids
from handrail.tools.sql import (
    PatchTarget,
    QueryTemplate,
    SqlConfig,
    _normal,
    sql_engine,
    sql_tools,
)

pytestmark = pytest.mark.anyio

ALICE = Principal(user_id="alice", tenant_id="t1", permissions=frozenset({"db.read", "db.write"}))
MALLORY = Principal(user_id="mallory", tenant_id="t2", permissions=frozenset({"db.read"}))
READER = Principal(user_id="rita", tenant_id="t1", permissions=frozenset({"db.read"}))

ROWS: list[dict[str, Any]] = [
    {
        "id": 1,
        "name": "anvil",
        "qty": 3,
        "price": "9.50",
        "added": date(2024, 1, 2),
        "blob": b"\x00\xff",
    },
    {"id": 2, "name": "bolt", "qty": 10, "price": "0.25", "added": date(2024, 2, 3), "blob": None},
    {"id": 3, "name": "cog", "qty": 0, "price": "12.00", "added": None, "blob": None},
    {"id": 4, "name": "drill", "qty": 1, "price": "99.99", "added": date(2024, 3, 4), "blob": None},
]
OTHER_TENANT = {
    "id": 5,
    "name": "elsewhere",
    "qty": 7,
    "price": "1.00",
    "added": None,
    "blob": None,
}

DDL = {
    "sqlite": (
        "CREATE TABLE {t} (id INTEGER PRIMARY KEY, name TEXT NOT NULL, qty INTEGER, "
        "price NUMERIC, added TEXT, tenant TEXT NOT NULL, version INTEGER NOT NULL, blob BLOB)"
    ),
    "postgres": (
        "CREATE TABLE {t} (id INTEGER PRIMARY KEY, name TEXT NOT NULL, qty INTEGER, "
        "price NUMERIC(10, 2), added DATE, tenant TEXT NOT NULL, version INTEGER NOT NULL, "
        "blob BYTEA)"
    ),
}


@dataclass
class Db:
    """A database with a fresh `items` table of its own, and a way to look at it."""

    kind: str
    url: str
    table: str
    engine: sa.Engine

    def checksum(self) -> str:
        """Every row of the table, in order, as text: equal means unchanged."""
        with self.engine.connect() as conn:
            rows = conn.execute(sa.text(f"SELECT * FROM {self.table} ORDER BY id")).all()  # noqa: S608
        return json.dumps([[str(v) for v in row] for row in rows])

    def row(self, key: int) -> dict[str, Any]:
        with self.engine.connect() as conn:
            found = conn.execute(
                sa.text(f"SELECT name, qty, added, version FROM {self.table} WHERE id = :id"),  # noqa: S608
                {"id": key},
            ).one()
        return dict(found._mapping)

    def execute(self, sql: str, **binds: object) -> None:
        with self.engine.begin() as conn:
            conn.execute(sa.text(sql.format(t=self.table)), binds)


def _seed(kind: str, engine: sa.Engine, table: str) -> None:
    with engine.begin() as conn:
        conn.exec_driver_sql(DDL[kind].format(t=table))
        insert = sa.text(
            f"INSERT INTO {table} (id, name, qty, price, added, tenant, version, blob) "  # noqa: S608
            "VALUES (:id, :name, :qty, :price, :added, :tenant, 1, :blob)",
        )
        for row, tenant in [*((r, "t1") for r in ROWS), (OTHER_TENANT, "t2")]:
            added = row["added"]
            if kind == "sqlite" and added is not None:
                added = added.isoformat()
            price = row["price"] if kind == "sqlite" else Decimal(row["price"])
            conn.execute(insert, {**row, "added": added, "tenant": tenant, "price": price})


def _open(kind: str, request: pytest.FixtureRequest, tmp_path: Path, **options: Any) -> Db:
    url = (
        f"sqlite:///{tmp_path / 'shop.db'}"
        if kind == "sqlite"
        else request.getfixturevalue("postgres_url")
    )
    engine = sql_engine(url, **options)
    table = f"items_{uuid.uuid4().hex[:10]}"
    _seed(kind, engine, table)
    return Db(kind=kind, url=url, table=table, engine=engine)


KINDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(params=KINDS)
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Db]:
    """A SQLite file or a PostgreSQL database, with a fresh table; one pooled connection.

    One connection in the pool makes every test reuse it, so a session that left it
    read-only or slowed would show in the next statement.
    """
    made = _open(request.param, request, tmp_path, pool_size=1, max_overflow=0)
    yield made
    with made.engine.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {made.table}")
    made.engine.dispose()


def templates(table: str) -> dict[str, QueryTemplate]:
    return {
        "items_in_stock": QueryTemplate(
            sql=(
                f"SELECT id, name, qty, price, added FROM {table} "  # noqa: S608
                "WHERE tenant = :tenant AND qty >= :min_qty ORDER BY id LIMIT :limit"
            ),
            description="Items with at least `min_qty` in stock.",
            params={
                "min_qty": Annotated[int, Field(ge=0, le=1_000_000)],
                "limit": Annotated[int, Field(ge=1, le=50, default=50)],
            },
            principal_params={"tenant": "tenant_id"},
        ),
        "item_by_name": QueryTemplate(
            sql=f"SELECT id, name, version FROM {table} WHERE tenant = :tenant AND name = :name",  # noqa: S608
            description="One item by its exact name.",
            params={"name": Annotated[str, Field(min_length=1, max_length=200)]},
            principal_params={"tenant": "tenant_id"},
        ),
        "items_by_ids": QueryTemplate(
            sql=f"SELECT id FROM {table} WHERE tenant = :tenant AND id IN :ids ORDER BY id",  # noqa: S608
            description="Items by id.",
            params={"ids": Annotated[list[int], Field(min_length=1, max_length=10)]},
            principal_params={"tenant": "tenant_id"},
        ),
        "all_items": QueryTemplate(
            sql=f"SELECT id, name, blob FROM {table} ORDER BY id",  # noqa: S608
            description="Every item of every tenant.",
        ),
    }


def targets(table: str) -> dict[str, PatchTarget]:
    return {
        "items": PatchTarget(
            table=table,
            key_column="id",
            version_column="version",
            columns={
                "name": Annotated[str, Field(min_length=1, max_length=100)],
                "qty": Annotated[int, Field(ge=0, le=1_000_000)],
                "added": date | None,
            },
            scope={"tenant": "tenant_id"},
            description="The shop's items.",
        ),
        "by_tenant": PatchTarget(
            table=table,
            key_column="tenant",
            key_type=Annotated[str, Field(max_length=8)],
            version_column="version",
            columns={"name": Annotated[str, Field(max_length=100)]},
            description="A misconfigured target: its key is not unique.",
        ),
    }


def config(db: Db, **options: Any) -> SqlConfig:
    settings: dict[str, Any] = {
        "engine": db.engine,
        "templates": templates(db.table),
        "targets": targets(db.table),
        "read_permissions": {"db.read"},
        "write_permissions": {"db.write"},
        **options,
    }
    return SqlConfig(**settings)


@dataclass
class World:
    db: Db
    tools: dict[str, Tool]
    gate: Gate
    writes: Writes
    calls: list[str] = field(default_factory=list)

    async def call(self, name: str, arguments: object, principal: Principal = ALICE) -> Envelope:
        call_id = f"call-{len(self.calls) + 1}"
        self.calls.append(call_id)
        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
        return await self.gate.handle(ToolCall(id=call_id, name=name, arguments=text), principal)

    async def query(self, query: str, principal: Principal = ALICE, **params: object) -> Envelope:
        return await self.call("db.query_database", {"query": query, "params": params}, principal)

    async def propose(self, principal: Principal = ALICE, **arguments: object) -> Envelope:
        return await self.call("db.patch_database", {"target": "items", **arguments}, principal)

    async def confirm_and_execute(self, plan_id: str, principal: Principal = ALICE) -> Envelope:
        token = await self.writes.issue_token(plan_id, principal)
        await self.writes.confirm(plan_id, token.value, principal)
        return (await self.writes.execute_plan(plan_id, principal)).envelope


def build(db: Db, **options: Any) -> World:
    made = sql_tools(config(db, **options))
    registry = Registry()
    for one in made:
        registry.register(one)
    clock = FixedClock()
    writes = Writes(registry, MemoryStore(), keyring(), clock=clock, new_id=sequential_ids("p"))
    gate = Gate(registry, writes=writes, clock=clock)
    return World(db=db, tools={t.name: t for t in made}, gate=gate, writes=writes)


@pytest.fixture
def world(db: Db) -> World:
    return build(db)


def context(
    principal: Principal = ALICE, *, expected_version: str | None = None, remaining: float = 10.0
) -> ToolContext:
    clock = FixedClock()
    return ToolContext(
        principal=principal,
        call_id="direct",
        tool="db.patch_database",
        deadline=clock.monotonic() + remaining,
        clock=clock,
        expected_version=expected_version,
        idempotency_key="key-1",
    )


async def invoke(tool: Tool, arguments: dict[str, Any], ctx: ToolContext) -> Any:
    """The tool body alone, as the executor runs it after every check."""
    return await tool.invoke(tool.bind(arguments), ctx)


# --- the tools as the model sees them ---------------------------------------------------------


async def test_the_tools_declare_their_risk_policies_and_untrusted_results(world: World) -> None:
    query = world.tools["db.query_database"].spec
    patch = world.tools["db.patch_database"].spec
    assert (query.risk, query.side_effect) == (RiskLevel.L1_INTERNAL_READ, SideEffect.NONE)
    assert query.results.trust is Trust.UNTRUSTED
    assert query.permissions == {"db.read"}
    assert (patch.risk, patch.side_effect) == (
        RiskLevel.L2_REVERSIBLE_WRITE,
        SideEffect.EXTERNAL_WRITE,
    )
    assert patch.confirmation.mode is ConfirmationMode.CONFIRM
    assert patch.idempotency.mode is IdempotencyMode.PLAN
    assert patch.results.trust is Trust.UNTRUSTED
    tool = world.tools["db.patch_database"]
    assert tool.reconcile is not None
    assert tool.resolve_version is not None
    assert tool.impact is not None


async def test_the_model_sees_template_names_and_columns_never_sql(world: World) -> None:
    query = world.tools["db.query_database"].spec
    schema = query.input_schema
    assert schema["properties"]["query"]["enum"] == sorted(templates(world.db.table))
    text = json.dumps(dict(schema)) + query.description
    assert "SELECT" not in text
    assert world.db.table not in text
    assert "tenant" not in json.dumps(dict(schema))
    assert "items_in_stock(min_qty: integer, limit?: integer)" in query.description
    patch = world.tools["db.patch_database"].spec
    fields = patch.input_schema["$defs"]["fields_items"]
    assert set(fields["properties"]) == {"name", "qty", "added"}
    assert fields["additionalProperties"] is False
    listed = "items (key: integer; fields: name?: string, qty?: integer, added?: date or null)"
    assert listed in patch.description


async def test_the_schemas_can_be_sent_to_every_provider(world: World) -> None:
    specs = [t.spec for t in world.tools.values()]
    assert len(OpenAIChatAdapter(strict=True).tool_definitions(specs).payload) == 2
    assert len(AnthropicAdapter(strict=True).tool_definitions(specs).payload) == 2
    assert GeminiAdapter().tool_definitions(specs).payload


# --- query_database ----------------------------------------------------------------------------


async def test_a_query_returns_columns_rows_and_json_safe_values(world: World) -> None:
    envelope = await world.query("items_in_stock", min_qty=1)
    assert envelope.status is Status.OK, envelope.summary
    assert envelope.trust is Trust.UNTRUSTED
    data = envelope.data
    assert data["columns"] == ["id", "name", "qty", "price", "added"]
    assert [row[0] for row in data["rows"]] == [1, 2, 4]
    assert data["row_count"] == 3
    assert data["truncated"] is False
    anvil = data["rows"][0]
    assert anvil[1] == "anvil"
    assert anvil[4] == "2024-01-02"
    # Exact decimals stay exact: PostgreSQL's numeric becomes text, never a rounded float.
    assert anvil[3] == ("9.50" if world.db.kind == "postgres" else 9.5)


async def test_defaults_apply_and_params_may_be_left_out_when_optional(world: World) -> None:
    envelope = await world.query("items_in_stock", min_qty=0, limit=2)
    assert [row[0] for row in envelope.data["rows"]] == [1, 2]
    envelope = await world.call("db.query_database", {"query": "all_items"})
    assert envelope.data["row_count"] == 5


async def test_a_list_param_binds_an_in_list(world: World) -> None:
    envelope = await world.query("items_by_ids", ids=[4, 2, 99, 5])
    assert envelope.status is Status.OK, envelope.summary
    # Item 5 belongs to another tenant: the principal's scope is bound, not the model's.
    assert envelope.data["rows"] == [[2], [4]]


async def test_principal_params_come_from_the_principal_not_the_model(world: World) -> None:
    envelope = await world.query("items_in_stock", MALLORY, min_qty=0)
    assert [row[1] for row in envelope.data["rows"]] == ["elsewhere"]
    smuggled = await world.call(
        "db.query_database",
        {"query": "items_in_stock", "params": {"min_qty": 0, "tenant": "t1"}},
        MALLORY,
    )
    assert smuggled.error_type is ErrorCode.INVALID_ARGUMENTS


@pytest.mark.parametrize(
    ("params", "stage_two"),
    [
        ({"min_qty": "1"}, True),
        ({"min_qty": 1.5}, True),
        ({"min_qty": -1}, True),
        ({"min_qty": True}, True),
        ({"min_qty": [1]}, True),
        ({"min_qty": 1, "limit": 51}, True),
        ({"min_qty": 1, "extra": 1}, True),
        ({}, False),
        ({"name": "anvil"}, False),
    ],
)
async def test_params_are_checked_against_the_template_before_the_database(
    world: World, params: dict[str, object], *, stage_two: bool
) -> None:
    envelope = await world.call("db.query_database", {"query": "items_in_stock", "params": params})
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS
    assert envelope.retryable
    # The schema catches what it can by field; the template's own model catches the rest.
    assert bool(envelope.field_errors) is stage_two
    if not stage_two:
        assert "params." in envelope.summary


async def test_a_template_outside_the_list_is_refused(world: World) -> None:
    for arguments in (
        {"query": "drop_everything"},
        {"query": "ALL_ITEMS"},
        {"query": "all_items", "sql": "DELETE FROM items"},
    ):
        envelope = await world.call("db.query_database", arguments)
        assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS


@pytest.mark.parametrize(("limit", "truncated"), [(2, True), (4, True), (5, False), (6, False)])
async def test_rows_beyond_the_limit_are_cut_and_marked_truncated(
    db: Db, limit: int, *, truncated: bool
) -> None:
    world = build(db, row_limit=limit)
    envelope = await world.call("db.query_database", {"query": "all_items"})
    data = envelope.data
    assert data["row_count"] == min(limit, 5)
    assert data["truncated"] is truncated
    assert data["row_limit"] == limit
    assert [row[0] for row in data["rows"]] == [1, 2, 3, 4, 5][:limit]


async def test_long_values_are_clipped_and_bytes_come_as_base64(db: Db) -> None:
    db.execute("UPDATE {t} SET name = :name WHERE id = 2", name="x" * 100)
    db.execute("UPDATE {t} SET blob = :blob WHERE id = 3", blob=b"\x01" * 20)
    world = build(db, max_value_chars=16)
    envelope = await world.call("db.query_database", {"query": "all_items"})
    rows = envelope.data["rows"]
    assert rows[0][2] == {"base64": "AP8=", "bytes": 2}
    assert rows[1][1] == "x" * 16 + "…"
    # 16 characters of base64 hold 12 bytes.
    assert rows[2][2] == {"base64": base64.b64encode(b"\x01" * 12).decode(), "bytes": 20}
    assert envelope.data["clipped_values"] == 2


TYPED = QueryTemplate(
    sql="SELECT :when AS t, :day AS d, :clock AS c, :amount AS amount, :ref AS ref",
    description="Echoes typed values.",
    params={"when": datetime, "day": date, "clock": time, "amount": Decimal, "ref": UUID},
)


async def test_typed_params_are_bound_as_their_types(db: Db) -> None:
    world = build(db, templates={"typed": TYPED})
    params = {
        "when": "2024-05-06T07:08:09Z",
        "day": "2024-05-06",
        "clock": "07:08:09Z",
        "amount": "12.50",
        "ref": "12345678-1234-5678-1234-567812345678",
    }
    envelope = await world.call("db.query_database", {"query": "typed", "params": params})
    assert envelope.status is Status.OK, envelope.summary
    when, day, clock, amount, ref = envelope.data["rows"][0]
    assert when.replace(" ", "T").startswith("2024-05-06T07:08:09")
    assert clock.startswith("07:08:09")
    assert (day, ref) == ("2024-05-06", params["ref"])
    assert Decimal(str(amount)) == Decimal("12.5")
    wrong = await world.call(
        "db.query_database", {"query": "typed", "params": {**params, "day": "May 6th"}}
    )
    assert wrong.error_type is ErrorCode.INVALID_ARGUMENTS


UNUSUAL = {
    "sqlite": "SELECT 9007199254740993 AS big, -9007199254740993 AS small, 0.5 AS half",
    "postgres": (
        "SELECT 9007199254740993 AS big, -9007199254740993 AS small, 0.5::float8 AS half, "
        "'NaN'::float8 AS nan, 'Infinity'::float8 AS inf, true AS yes, "
        '\'{"a": [1, {"b": null}]}\'::jsonb AS doc, ARRAY[1, 2] AS list, '
        "'1 day'::interval AS span, '12345678-1234-5678-1234-567812345678'::uuid AS ref"
    ),
}


async def test_unusual_database_values_become_exact_json(db: Db) -> None:
    unusual = {"unusual": QueryTemplate(sql=UNUSUAL[db.kind], description="Odd values.")}
    world = build(db, templates=unusual)
    envelope = await world.call("db.query_database", {"query": "unusual"})
    assert envelope.status is Status.OK, envelope.summary
    row = dict(zip(envelope.data["columns"], envelope.data["rows"][0], strict=True))
    # Integers beyond what a JSON number holds exactly come as text, never rounded.
    assert (row["big"], row["small"], row["half"]) == (
        "9007199254740993",
        "-9007199254740993",
        0.5,
    )
    if db.kind == "postgres":
        assert (row["nan"], row["inf"], row["yes"]) == ("nan", "inf", True)
        assert row["doc"] == {"a": [1, {"b": None}]}
        assert row["list"] == [1, 2]
        assert row["span"] == "1 day, 0:00:00"
        assert row["ref"] == "12345678-1234-5678-1234-567812345678"
    json.loads(envelope.to_json())


def _slow(kind: str, table: str) -> str:
    if kind == "postgres":
        return f"SELECT pg_sleep(30), id FROM {table}"  # noqa: S608
    # Runs until something stops it: counts up without end.
    return "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT max(i) FROM n"


async def test_a_slow_query_is_stopped_at_its_time_limit_and_may_be_retried(db: Db) -> None:
    slow = {"slow": QueryTemplate(sql=_slow(db.kind, db.table), description="Never ends.")}
    world = build(db, templates={**templates(db.table), **slow}, statement_timeout=0.2)
    envelope = await world.call("db.query_database", {"query": "slow"})
    assert envelope.error_type is ErrorCode.TIMEOUT
    assert envelope.retryable
    assert "time limit" in envelope.summary
    # The one pooled connection is usable again, with no limit left behind.
    after = await world.query("items_in_stock", min_qty=0)
    assert after.data["row_count"] == 4


WRITES = {
    "sqlite": [
        "DELETE FROM {t}",
        "UPDATE {t} SET name = 'pwned'",
        "INSERT INTO {t} (id, name, tenant, version) VALUES (9, 'x', 't1', 1)",
        "DROP TABLE {t}",
        "CREATE TABLE pwned (x)",
        "PRAGMA query_only = OFF",
        "ATTACH DATABASE 'other.db' AS other",
        "REPLACE INTO {t} (id, name, tenant, version) VALUES (1, 'x', 't1', 1)",
    ],
    "postgres": [
        "DELETE FROM {t}",
        "UPDATE {t} SET name = 'pwned'",
        "WITH gone AS (DELETE FROM {t} RETURNING id) SELECT id FROM gone",
        "SELECT nextval('pwned_seq')",
        "DROP TABLE {t}",
        "CREATE TABLE pwned (x int)",
        "SET TRANSACTION READ WRITE",
        "COMMIT",
    ],
}


async def test_a_template_that_writes_fails_and_changes_nothing(db: Db) -> None:
    if db.kind == "postgres":
        db.execute("CREATE SEQUENCE pwned_seq")
    writes = {
        f"w{i}": QueryTemplate(sql=sql.format(t=db.table), description="A misconfiguration.")
        for i, sql in enumerate(WRITES[db.kind])
    }
    world = build(db, templates={**templates(db.table), **writes})
    before = db.checksum()
    for name in writes:
        envelope = await world.call("db.query_database", {"query": name})
        assert envelope.error_type is ErrorCode.FAILED_FINAL, name
        assert not envelope.retryable
        assert db.checksum() == before
    # The connection the refused writes used still writes when it should.
    proposed = await world.propose(key=3, expected_version=1, fields={"qty": 4})
    done = await world.confirm_and_execute(proposed.data["plan_id"])
    assert done.status is Status.OK, done.summary
    assert db.row(3)["qty"] == 4


async def test_a_template_without_a_result_set_fails_cleanly(db: Db) -> None:
    empty = {"comment": QueryTemplate(sql="/* nothing */", description="No statement.")}
    world = build(db, templates=empty)
    envelope = await world.call("db.query_database", {"query": "comment"})
    assert envelope.error_type is ErrorCode.FAILED_FINAL


async def test_a_query_without_the_read_permission_is_refused(world: World) -> None:
    envelope = await world.query("all_items", Principal(user_id="x", tenant_id="t1"))
    assert envelope.error_type is ErrorCode.PERMISSION_DENIED


# --- patch_database ---------------------------------------------------------------------------


async def test_a_patch_is_planned_confirmed_and_executed_once(world: World) -> None:
    before = world.db.checksum()
    envelope = await world.propose(key=1, expected_version=1, fields={"name": "Anvil", "qty": 5})
    assert envelope.error_type is ErrorCode.NEEDS_CONFIRMATION
    impact = envelope.data["impact"]
    assert impact["target"] == "items row 1"
    assert impact["counts"] == {"rows": 1}
    assert impact["notes"] == ['name: "anvil" -> "Anvil"', "qty: 3 -> 5"]
    assert world.db.checksum() == before  # a plan writes nothing

    plan_id = envelope.data["plan_id"]
    plan = await world.writes.get_plan(plan_id, ALICE)
    assert json.loads(str(plan.plan.expected_version))[3] == 1
    done = await world.confirm_and_execute(plan_id)
    assert done.status is Status.OK, done.summary
    data = done.data
    assert data["written"] is True
    assert (data["version"], data["previous_version"]) == (2, 1)
    assert data["changed"] == ["name", "qty"]
    assert data["row"]["name"] == "Anvil"
    assert world.db.row(1) | {"added": None} == {
        "name": "Anvil",
        "qty": 5,
        "added": None,
        "version": 2,
    }
    again = await world.writes.execute_plan(plan_id, ALICE)
    assert again.replayed
    assert again.envelope.data == data
    assert world.db.row(1)["version"] == 2


async def test_asking_again_after_the_row_moved_on_never_writes_twice(world: World) -> None:
    envelope = await world.propose(key=2, expected_version=1, fields={"qty": 6})
    plan_id = envelope.data["plan_id"]
    assert (await world.confirm_and_execute(plan_id)).status is Status.OK
    world.db.execute("UPDATE {t} SET qty = 7, version = 3 WHERE id = 2")
    after = world.db.checksum()
    # Writes compares the version before it looks for the stored outcome, so this repeat
    # is refused where a replay would be better (see the report); either way, no write.
    again = await world.writes.execute_plan(plan_id, ALICE)
    answer = again.code if again.record is None else again.replayed
    assert answer in {True, ErrorCode.PLAN_CLOSED, ErrorCode.VERSION_CONFLICT}
    assert world.db.checksum() == after


async def test_a_patch_sets_null_and_dates_where_the_column_allows(world: World) -> None:
    envelope = await world.propose(key=1, expected_version=1, fields={"added": None})
    done = await world.confirm_and_execute(envelope.data["plan_id"])
    assert done.data["row"]["added"] is None
    envelope = await world.propose(key=1, expected_version="2", fields={"added": "2025-12-31"})
    done = await world.confirm_and_execute(envelope.data["plan_id"])
    assert done.status is Status.OK, done.summary
    assert str(world.db.row(1)["added"]) == "2025-12-31"
    refused = await world.propose(key=1, expected_version=3, fields={"name": None})
    assert refused.error_type is ErrorCode.INVALID_ARGUMENTS


async def test_a_dry_run_previews_the_change_and_writes_nothing(world: World) -> None:
    before = world.db.checksum()
    envelope = await world.propose(key=2, expected_version=1, fields={"qty": 0}, dry_run=True)
    assert envelope.error_type is ErrorCode.NEEDS_CONFIRMATION
    assert envelope.data["impact"]["counts"] == {"rows": 0}
    assert envelope.data["impact"]["notes"] == ["qty: 10 -> 0"]
    assert "dry run" in envelope.data["impact"]["action"]
    done = await world.confirm_and_execute(envelope.data["plan_id"])
    assert done.status is Status.OK, done.summary
    assert done.data["written"] is False
    assert done.data["dry_run"] is True
    assert done.data["changes"] == {"qty": {"current": 10, "new": 0}}
    assert done.data["version"] == 1
    assert world.db.checksum() == before


async def test_a_stale_version_is_a_conflict_before_any_plan(world: World) -> None:
    world.db.execute("UPDATE {t} SET version = 4 WHERE id = 1")
    before = world.db.checksum()
    envelope = await world.propose(key=1, expected_version=3, fields={"qty": 1})
    assert envelope.error_type is ErrorCode.VERSION_CONFLICT
    assert "version 4, not 3" in envelope.summary
    assert world.db.checksum() == before


async def test_a_missing_row_and_another_tenants_row_are_not_found(world: World) -> None:
    for key in (99, 5):
        envelope = await world.propose(key=key, expected_version=1, fields={"qty": 1})
        assert envelope.error_type is ErrorCode.NOT_FOUND


async def test_a_row_changed_after_confirmation_is_never_overwritten(world: World) -> None:
    envelope = await world.propose(key=4, expected_version=1, fields={"name": "mine"})
    plan_id = envelope.data["plan_id"]
    token = await world.writes.issue_token(plan_id, ALICE)
    await world.writes.confirm(plan_id, token.value, ALICE)
    world.db.execute("UPDATE {t} SET name = 'theirs', version = 2 WHERE id = 4")
    refused = await world.writes.execute_plan(plan_id, ALICE)
    assert refused.code is ErrorCode.VERSION_CONFLICT
    assert world.db.row(4)["name"] == "theirs"
    assert (await world.writes.get_plan(plan_id, ALICE)).state is PlanState.REJECTED


async def test_a_change_without_a_version_bump_also_voids_the_plan(world: World) -> None:
    # The plan binds the row's content as well as its version number.
    envelope = await world.propose(key=4, expected_version=1, fields={"qty": 2})
    plan_id = envelope.data["plan_id"]
    token = await world.writes.issue_token(plan_id, ALICE)
    await world.writes.confirm(plan_id, token.value, ALICE)
    world.db.execute("UPDATE {t} SET name = 'renamed' WHERE id = 4")
    refused = await world.writes.execute_plan(plan_id, ALICE)
    assert refused.code is ErrorCode.VERSION_CONFLICT


@pytest.mark.parametrize(
    "fields",
    [{}, {"version": 9}, {"id": 9}, {"tenant": "t2"}, {"qty": -1}, {"name": ""}, {"price": 1}],
)
async def test_fields_outside_the_declared_columns_are_refused(
    world: World, fields: dict[str, object]
) -> None:
    before = world.db.checksum()
    envelope = await world.propose(key=1, expected_version=1, fields=fields)
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS
    assert world.db.checksum() == before


async def test_a_patch_without_the_write_permission_is_refused(world: World) -> None:
    envelope = await world.propose(READER, key=1, expected_version=1, fields={"qty": 1})
    assert envelope.error_type is ErrorCode.PERMISSION_DENIED


async def test_a_key_that_matches_several_rows_is_refused_and_rolled_back(world: World) -> None:
    before = world.db.checksum()
    envelope = await world.call(
        "db.patch_database",
        {"target": "by_tenant", "key": "t1", "expected_version": 1, "fields": {"name": "x"}},
    )
    assert envelope.error_type is ErrorCode.FAILED_FINAL
    assert "not unique" in envelope.summary
    tool = world.tools["db.patch_database"]
    arguments = {"target": "by_tenant", "key": "t1", "expected_version": 1, "fields": {"name": "x"}}
    with pytest.raises(ToolFailed, match="matched 4 rows"):
        await invoke(tool, arguments, context())
    assert world.db.checksum() == before


async def test_the_body_tells_a_conflict_from_a_missing_row_in_its_transaction(
    world: World,
) -> None:
    tool = world.tools["db.patch_database"]
    arguments = {"target": "items", "key": 3, "expected_version": 1, "fields": {"qty": 9}}
    world.db.execute("UPDATE {t} SET version = 2 WHERE id = 3")
    with pytest.raises(VersionConflict):
        await invoke(tool, arguments, context())
    world.db.execute("DELETE FROM {t} WHERE id = 3")
    with pytest.raises(NotFound):
        await invoke(tool, arguments, context())
    with pytest.raises(NotFound):
        await invoke(tool, {**arguments, "dry_run": True}, context())
    with pytest.raises(ToolSignal) as empty:
        await invoke(tool, {**arguments, "key": 1, "fields": {}}, context())
    assert empty.value.code is ErrorCode.INVALID_ARGUMENTS


async def test_a_row_whose_version_is_not_a_counter_is_never_patched(world: World) -> None:
    world.db.execute("UPDATE {t} SET version = -1 WHERE id = 2")
    before = world.db.checksum()
    envelope = await world.propose(key=2, expected_version=1, fields={"qty": 1})
    assert envelope.error_type is ErrorCode.VERSION_CONFLICT
    assert "version None" in envelope.summary
    assert world.db.checksum() == before


async def test_a_call_past_its_deadline_never_reaches_the_database(world: World) -> None:
    tool = world.tools["db.patch_database"]
    arguments = {"target": "items", "key": 3, "expected_version": 1, "fields": {"qty": 9}}
    with pytest.raises(ToolSignal) as stopped:
        await invoke(tool, arguments, context(remaining=0.0))
    assert stopped.value.code is ErrorCode.TIMEOUT
    assert stopped.value.retryable
    assert world.db.row(3)["qty"] == 0


# --- reconciliation ----------------------------------------------------------------------------


async def test_reconcile_proves_from_the_row_whether_the_patch_landed(world: World) -> None:
    tool = world.tools["db.patch_database"]
    assert tool.reconcile is not None
    assert tool.resolve_version is not None
    arguments = {"target": "items", "key": 2, "expected_version": 1, "fields": {"qty": 11}}
    token = tool.resolve_version(arguments, context())
    assert isinstance(token, str)
    assert len(token) <= 256  # the store keeps versions in 256 characters

    assert tool.reconcile("key-1", context(expected_version=token)) == NotExecuted()
    await invoke(tool, arguments, context(expected_version=token))
    found = tool.reconcile("key-1", context(expected_version=token))
    assert isinstance(found, Found)
    assert isinstance(found.result, dict)
    assert found.result["version"] == 2
    assert found.result["reconciled"] is True
    assert tool.business_id_of(found.result) == "items/2"
    assert tool.business_id_of("not a row") is None

    # Another writer moved the row on: neither proof holds any more.
    world.db.execute("UPDATE {t} SET qty = 12, version = 3 WHERE id = 2")
    assert isinstance(tool.reconcile("key-1", context(expected_version=token)), NoProof)
    # Another tenant cannot see the row, so learns nothing from it.
    assert isinstance(tool.reconcile("key-1", context(MALLORY, expected_version=token)), NoProof)


async def test_reconcile_does_not_mistake_another_write_for_this_one(world: World) -> None:
    tool = world.tools["db.patch_database"]
    assert tool.reconcile is not None
    assert tool.resolve_version is not None
    arguments = {"target": "items", "key": 2, "expected_version": 1, "fields": {"qty": 11}}
    token = tool.resolve_version(arguments, context())
    assert isinstance(token, str)
    world.db.execute("UPDATE {t} SET qty = 99, version = 2 WHERE id = 2")
    assert isinstance(tool.reconcile("key-1", context(expected_version=token)), NoProof)


@pytest.mark.parametrize(
    "version",
    [None, "", "3", "not json", '["sqlpatch/1"]', '["sqlpatch/1","nope",1,1,"d",false]'],
)
async def test_reconcile_without_a_usable_row_reference_has_no_proof(
    world: World, version: str | None
) -> None:
    tool = world.tools["db.patch_database"]
    assert tool.reconcile is not None
    assert isinstance(tool.reconcile("key-1", context(expected_version=version)), NoProof)


async def test_reconcile_of_a_dry_run_or_a_deleted_row(world: World) -> None:
    tool = world.tools["db.patch_database"]
    assert tool.reconcile is not None
    assert tool.resolve_version is not None
    arguments = {"target": "items", "key": 2, "expected_version": 1, "fields": {"qty": 11}}
    dry = tool.resolve_version({**arguments, "dry_run": True}, context())
    assert tool.reconcile("key-1", context(expected_version=str(dry))) == NotExecuted()
    token = tool.resolve_version(arguments, context())
    world.db.execute("DELETE FROM {t} WHERE id = 2")
    assert isinstance(tool.reconcile("key-1", context(expected_version=str(token))), NoProof)
    gone = tool.resolve_version(arguments, context())
    assert isinstance(tool.reconcile("key-1", context(expected_version=str(gone))), NoProof)


# --- an unavailable database -------------------------------------------------------------------


async def test_an_exhausted_pool_is_a_transient_failure(tmp_path: Path) -> None:
    engine = sql_engine(
        f"sqlite:///{tmp_path / 'p.db'}", pool_size=1, max_overflow=0, pool_timeout=0.05
    )
    _seed("sqlite", engine, "items")
    db = Db(kind="sqlite", url="", table="items", engine=engine)
    world = build(db)
    try:
        with engine.connect():
            envelope = await world.query("items_in_stock", min_qty=0)
        assert envelope.error_type is ErrorCode.TRANSIENT
        assert envelope.retryable
    finally:
        engine.dispose()


async def test_a_locked_sqlite_database_is_a_transient_failure(tmp_path: Path) -> None:
    path = tmp_path / "locked.db"
    engine = sql_engine(f"sqlite:///{path}", connect_args={"timeout": 0.05})
    _seed("sqlite", engine, "items")
    world = build(Db(kind="sqlite", url="", table="items", engine=engine))
    tool = world.tools["db.patch_database"]
    arguments = {"target": "items", "key": 1, "expected_version": 1, "fields": {"qty": 9}}
    holder = sa.create_engine(f"sqlite:///{path}")
    try:
        with holder.connect() as conn:
            conn.exec_driver_sql("BEGIN IMMEDIATE")
            with pytest.raises(ToolSignal) as busy:
                await invoke(tool, arguments, context())
            conn.exec_driver_sql("ROLLBACK")
        assert busy.value.code is ErrorCode.TRANSIENT
    finally:
        holder.dispose()
        engine.dispose()


async def test_a_database_that_does_not_answer_is_a_transient_failure() -> None:
    engine = sql_engine("postgresql://nobody@127.0.0.1:1/none", connect_args={"connect_timeout": 2})
    tools = sql_tools(SqlConfig(engine=engine, templates=templates("items")))
    registry = Registry()
    registry.register(tools[0])
    envelope = await Gate(registry).handle(
        ToolCall(id="c1", name="db.query_database", arguments='{"query": "all_items"}'), ALICE
    )
    assert envelope.error_type is ErrorCode.TRANSIENT
    engine.dispose()


@pytest.mark.postgres
async def test_a_locked_row_is_stopped_at_the_time_limit(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    db = _open("postgres", request, tmp_path)
    world = build(db, statement_timeout=0.2)
    tool = world.tools["db.patch_database"]
    arguments = {"target": "items", "key": 1, "expected_version": 1, "fields": {"qty": 9}}
    try:
        with db.engine.connect() as holder:
            holder.execute(sa.text(f"SELECT id FROM {db.table} WHERE id = 1 FOR UPDATE"))  # noqa: S608
            with pytest.raises(ToolSignal) as stopped:
                await asyncio.wait_for(invoke(tool, arguments, context()), timeout=30)
            holder.rollback()
        assert stopped.value.code is ErrorCode.TIMEOUT
        assert db.row(1)["version"] == 1
    finally:
        with db.engine.begin() as conn:
            conn.exec_driver_sql(f"DROP TABLE {db.table}")
        db.engine.dispose()


# --- configuration ----------------------------------------------------------------------------


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[sa.Engine]:
    made = sql_engine(f"sqlite:///{tmp_path / 'c.db'}")
    yield made
    made.dispose()


def _template(sql: str = "SELECT :a", **options: Any) -> QueryTemplate:
    settings: dict[str, Any] = {"sql": sql, "description": "d", "params": {"a": int}, **options}
    return QueryTemplate(**settings)


def _target(**options: Any) -> PatchTarget:
    settings: dict[str, Any] = {
        "table": "t",
        "key_column": "id",
        "version_column": "version",
        "columns": {"name": str},
        "description": "d",
        **options,
    }
    return PatchTarget(**settings)


@pytest.mark.parametrize(
    "template",
    [
        _template("SELECT :a, :b"),
        _template("SELECT 1"),
        _template("SELECT :a", principal_params={"a": "tenant_id"}),
        _template("SELECT :a, :t", principal_params={"t": "roles"}),
        _template("SELECT :a, :t", principal_params={"t": "data_scope."}),
        _template("SELECT :tenant_id", params={"tenant_id": str}),
        _template(description=" "),
        _template(""),
        _template(params={"a": object()}),
        _template(params={"a": Callable[[], int]}),
    ],
)
def test_a_template_that_cannot_be_made_safe_is_a_configuration_error(
    engine: sa.Engine, template: QueryTemplate
) -> None:
    with pytest.raises(ConfigurationError):
        sql_tools(SqlConfig(engine=engine, templates={"q": template}))


@pytest.mark.parametrize(
    "target",
    [
        _target(columns={}),
        _target(columns={"version": int}),
        _target(columns={"id": int}),
        _target(version_column="id"),
        _target(scope={"name": "tenant_id"}),
        _target(scope={"tenant": "permissions"}),
        _target(table=""),
        _target(table="t\x00"),
        _target(table="x" * 64),
        _target(schema="bad\nschema"),
        _target(key_type=float),
        _target(key_type=list[int]),
        _target(key_type=object()),
        _target(columns={"user_id": str}),
        _target(columns={"hook": Callable[[], int]}),
        _target(description=""),
    ],
)
def test_a_target_that_cannot_be_made_safe_is_a_configuration_error(
    engine: sa.Engine, target: PatchTarget
) -> None:
    with pytest.raises(ConfigurationError):
        sql_tools(SqlConfig(engine=engine, targets={"t": target}))


@pytest.mark.parametrize("name", ["", "1st", "drop table", "x" * 49, "naïve", "a-b"])
def test_names_the_model_sees_are_plain_words(engine: sa.Engine, name: str) -> None:
    with pytest.raises(ConfigurationError):
        sql_tools(SqlConfig(engine=engine, templates={name: _template()}))
    with pytest.raises(ConfigurationError):
        sql_tools(SqlConfig(engine=engine, targets={name: _target()}))


@pytest.mark.parametrize(
    "options",
    [
        {"row_limit": 0},
        {"row_limit": 10_001},
        {"statement_timeout": 0},
        {"statement_timeout": 601},
        {"max_value_chars": 15},
    ],
)
def test_limits_out_of_range_are_configuration_errors(
    engine: sa.Engine, options: dict[str, Any]
) -> None:
    with pytest.raises(ConfigurationError):
        SqlConfig(engine=engine, **options)


def test_a_config_with_nothing_to_do_is_refused(engine: sa.Engine) -> None:
    with pytest.raises(ConfigurationError):
        sql_tools(SqlConfig(engine=engine))


@pytest.mark.parametrize(
    "url",
    [
        "sqlite://",
        "sqlite:///:memory:",
        "sqlite:///file::memory:?uri=true",
        "sqlite:///file:x?mode=memory&uri=true",
        "postgresql+psycopg_async://u@127.0.0.1/d",
        "mysql+pymysql://u@127.0.0.1/d",
    ],
)
def test_engines_the_tools_cannot_make_safe_are_refused(url: str) -> None:
    # MySQL's driver is not installed: a stand-in module, as the engine is never connected.
    stand_in = {"module": sqlite3} if url.startswith("mysql") else {}
    made = sa.create_engine(url, poolclass=sa.pool.NullPool, **stand_in)
    try:
        with pytest.raises(ConfigurationError):
            SqlConfig(engine=made, templates={"q": _template()})
    finally:
        made.dispose()


def test_only_an_engine_is_accepted() -> None:
    with pytest.raises(ConfigurationError):
        SqlConfig(engine="sqlite:///x.db", templates={"q": _template()})  # type: ignore[arg-type]


def test_sql_engine_speaks_psycopg_for_postgresql_urls() -> None:
    for url in ("postgresql://u@h/d", "postgres://u@h/d"):
        made = sql_engine(url)
        assert made.dialect.driver == "psycopg"
        made.dispose()


def test_the_namespace_prefixes_the_tool_names(engine: sa.Engine) -> None:
    made = sql_tools(
        SqlConfig(engine=engine, templates={"q": _template()}, targets={"t": _target()}),
        namespace="shop",
    )
    assert [t.name for t in made] == ["shop.query_database", "shop.patch_database"]
    bare = sql_tools(SqlConfig(engine=engine, templates={"q": _template()}), namespace=None)
    assert [t.name for t in bare] == ["query_database"]


@pytest.mark.parametrize(
    ("written", "read_back"),
    [
        (True, 1),
        (Decimal("2.50"), 2.5),
        (3, Decimal("3.000")),
        (date(2024, 1, 2), "2024-01-02"),
        (datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC), "2024-01-02 03:04:05+00:00"),
        (time(3, 4), "03:04:00"),
        (b"\x00\xff", memoryview(b"\x00\xff")),
        (float("nan"), Decimal("NaN")),
        (None, None),
    ],
)
def test_a_value_and_its_form_read_back_normalise_alike(written: object, read_back: object) -> None:
    # Reconciliation compares a row read back with what the patch wrote.
    assert _normal(written) == _normal(read_back)


def test_different_values_normalise_apart() -> None:
    assert _normal(1) != _normal(2)
    assert _normal("a") != _normal(None)
    assert _normal(Decimal("1.5")) != _normal(Decimal("1.05"))
