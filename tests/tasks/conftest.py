"""Fixtures of the task tests: DBOS's system database on SQLite and on PostgreSQL."""

from _dbos_setup import dbos_url, postgres_dbos_url  # noqa: F401

from _edge_traces import rec  # noqa: F401 - spans in memory
