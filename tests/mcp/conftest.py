"""Fixtures of the MCP tests: an empty database of each SQL backend to migrate."""

from _edge_traces import rec, traced  # noqa: F401 - spans in memory, a traced app
from _migrations import empty_database  # noqa: F401
