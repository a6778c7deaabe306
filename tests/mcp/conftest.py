"""Fixtures of the MCP tests: an empty database of each SQL backend to migrate."""

from _migrations import empty_database  # noqa: F401
