"""The SQL tools' configuration: query templates, patch targets, limits and the engine.

Owns `QueryTemplate`, `PatchTarget`, `SqlConfig` and `sql_engine`, and the checks of
config values every tool relies on (supported engines, names, identifiers, Principal
attributes). It only validates what it is given; it never connects to the database.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import sqlalchemy as sa

from handrail.errors import ConfigurationError

__all__ = [
    "CONTROL",
    "PatchTarget",
    "QueryTemplate",
    "SqlConfig",
    "check_attribute",
    "check_identifier",
    "check_name",
    "sql_engine",
]

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,47}")
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_MAX_IDENTIFIER_BYTES = 63  # PostgreSQL cuts longer names silently (NAMEDATALEN - 1)
_MAX_ROW_LIMIT = 10_000
_MAX_TIMEOUT = 600.0
_MIN_VALUE_CHARS = 16
_SCALAR_ATTRIBUTES = frozenset({"user_id", "tenant_id", "request_id", "trace_id"})


@dataclass(frozen=True, kw_only=True, slots=True)
class QueryTemplate:
    """One named read-only query: SQL text with `:name` binds and their declared types.

    `params` maps each bind the model supplies to a pydantic type; constraints go in
    `Annotated[..., Field(...)]` and `Field(default=...)` makes one optional. A list
    type binds an `IN :name` list. `principal_params` maps binds filled from the
    Principal (`tenant_id`, `user_id`, `data_scope.<key>`, ...), never seen by the model.
    Every bind in `sql` is declared exactly once.
    """

    sql: str
    description: str
    params: Mapping[str, object] = field(default_factory=dict)
    principal_params: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True, slots=True)
class PatchTarget:
    """A table whose rows the model may patch: key, version and the columns it may set.

    `columns` maps each patchable column to a pydantic type with its constraints (make
    it `X | None` if NULL is allowed). `key_type` is the key column's type (an integer
    or string type). The version column holds an integer counter that every write
    increments. `scope` maps columns to Principal attributes every read and write is
    filtered by (for example `{"tenant": "tenant_id"}`), so other tenants' rows do not
    exist for this principal.
    """

    table: str
    key_column: str
    version_column: str
    columns: Mapping[str, object]
    description: str
    key_type: object = int
    schema: str | None = None
    scope: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True, slots=True)
class SqlConfig:
    """The database and everything the SQL tools may do with it.

    `templates` and `targets` are keyed by the names the model sees. `row_limit` caps
    the rows a query returns; `statement_timeout` (seconds) caps every statement, and
    the call's own deadline caps it further. Values longer than `max_value_chars` are
    clipped in results. `monotonic` times SQLite statements (PostgreSQL times its own).
    """

    engine: sa.Engine
    templates: Mapping[str, QueryTemplate] = field(default_factory=dict)
    targets: Mapping[str, PatchTarget] = field(default_factory=dict)
    row_limit: int = 100
    statement_timeout: float = 5.0
    max_value_chars: int = 2_000
    read_permissions: frozenset[str] = frozenset()
    write_permissions: frozenset[str] = frozenset()
    monotonic: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        _check_engine(self.engine)
        if not 1 <= self.row_limit <= _MAX_ROW_LIMIT:
            raise ConfigurationError(f"row_limit must be between 1 and {_MAX_ROW_LIMIT}")
        if not 0 < self.statement_timeout <= _MAX_TIMEOUT:
            raise ConfigurationError(f"statement_timeout must be in (0, {_MAX_TIMEOUT:.0f}] s")
        if self.max_value_chars < _MIN_VALUE_CHARS:
            raise ConfigurationError(f"max_value_chars must be at least {_MIN_VALUE_CHARS}")
        object.__setattr__(self, "templates", MappingProxyType(dict(self.templates)))
        object.__setattr__(self, "targets", MappingProxyType(dict(self.targets)))
        object.__setattr__(self, "read_permissions", frozenset(self.read_permissions))
        object.__setattr__(self, "write_permissions", frozenset(self.write_permissions))


def sql_engine(url: str, **options: Any) -> sa.Engine:  # noqa: ANN401 - create_engine's options
    """An engine for a SQLite or PostgreSQL URL; `postgresql://` uses psycopg 3.

    The caller owns the engine and disposes of it.
    """
    if url.startswith(("postgresql://", "postgres://")):
        url = "postgresql+psycopg://" + url.split("://", 1)[1]
    return sa.create_engine(url, **options)


def _check_engine(engine: object) -> None:
    if not isinstance(engine, sa.Engine):
        raise ConfigurationError("SqlConfig.engine must be a synchronous SQLAlchemy Engine")
    dialect = engine.dialect
    if dialect.is_async:
        raise ConfigurationError("SqlConfig.engine must be synchronous, not an async driver")
    if dialect.name == "postgresql" and dialect.driver in {"psycopg", "psycopg2"}:
        return
    if dialect.name == "sqlite" and dialect.driver == "pysqlite":
        database = engine.url.database or ""
        query = engine.url.query
        if database in {"", ":memory:"} or "memory" in database or query.get("mode") == "memory":
            # Each pooled connection would see its own, empty database.
            raise ConfigurationError("an in-memory SQLite database cannot be shared by the tools")
        return
    raise ConfigurationError(
        f"the SQL tools support SQLite (pysqlite) and PostgreSQL (psycopg), not "
        f"{dialect.name}+{dialect.driver}: read-only sessions and time limits need them",
    )


def check_name(name: object, what: str) -> str:
    """`name` if it is a name the model may be shown; ConfigurationError if not."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigurationError(
            f"{what} name {name!r} must be a letter then letters, digits or '_' (at most 48)",
        )
    return name


def check_identifier(name: object, what: str) -> str:
    """`name` if it is a usable SQL identifier; ConfigurationError if not."""
    if (
        not isinstance(name, str)
        or not name.strip()
        or CONTROL.search(name)
        or len(name.encode("utf-8")) > _MAX_IDENTIFIER_BYTES
    ):
        raise ConfigurationError(
            f"{what} {name!r} must be a non-empty identifier of at most 63 bytes without "
            f"control characters",
        )
    return name


def check_attribute(attribute: object, where: str) -> None:
    """ConfigurationError unless `attribute` names a scalar Principal attribute."""
    if isinstance(attribute, str) and (
        attribute in _SCALAR_ATTRIBUTES
        or (attribute.startswith("data_scope.") and len(attribute) > len("data_scope."))
    ):
        return
    raise ConfigurationError(
        f"{where}: {attribute!r} is not a scalar Principal attribute (use user_id, "
        f"tenant_id, request_id, trace_id or data_scope.<key>)",
    )
