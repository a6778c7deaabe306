"""SQL tools: named read-only query templates, and version-checked patches of one row.

Owns `sql_tools`, which builds `query_database` (runs a configured template on a
read-only transaction with row and time limits) and `patch_database` (changes declared
columns of one row in one transaction, only at the expected version, after the user
confirmed the plan), and the public names of the pack. Tables, columns and SQL text
come only from config; identifiers are quoted by SQLAlchemy and the model's values are
always bound parameters. It never runs SQL the model wrote. SQLite and PostgreSQL only.

The parts live in private modules: `_sql_config` (configuration), `_sql_arguments`
(argument models and schemas), `_sql_database` (sessions and values), `_sql_query` and
`_sql_patch` (the two tools).
"""

from __future__ import annotations

from handrail.declare.definition import Tool
from handrail.errors import ConfigurationError
from handrail.tools._sql_config import PatchTarget, QueryTemplate, SqlConfig, sql_engine
from handrail.tools._sql_database import Database
from handrail.tools._sql_patch import normal as _normal  # noqa: F401 - tests import it from here
from handrail.tools._sql_patch import patch_tool
from handrail.tools._sql_query import query_tool

__all__ = ["PatchTarget", "QueryTemplate", "SqlConfig", "sql_engine", "sql_tools"]


def sql_tools(config: SqlConfig, *, namespace: str | None = "db") -> list[Tool]:
    """`query_database` if templates are configured, `patch_database` if targets are.

    Raises ConfigurationError for a template or target that cannot be made safe: binds
    that do not match the declared parameters, unusable identifiers or types, identity
    asked of the model, or neither templates nor targets.
    """
    db = Database(config)
    tools: list[Tool] = []
    if config.templates:
        tools.append(query_tool(config, db, namespace))
    if config.targets:
        tools.append(patch_tool(config, db, namespace))
    if not tools:
        raise ConfigurationError("SqlConfig declares neither query templates nor patch targets")
    return tools
