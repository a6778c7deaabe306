"""A schema can never make the host send a request: external `$ref`s are refused."""

from __future__ import annotations

import selectors
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from handrail import RiskLevel, Tool
from handrail.errors import SchemaError
from handrail.schema import compile_validator, compile_validator_map


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A TCP port on 127.0.0.1 that would see any request made to it."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.0)  # non-blocking
    yield server
    server.close()


def _connections(server: socket.socket) -> int:
    selector = selectors.DefaultSelector()
    selector.register(server, selectors.EVENT_READ)
    count = 0
    while selector.select(timeout=0.2):
        connection, _ = server.accept()
        connection.close()
        count += 1
    selector.close()
    return count


def _schema(port: int) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"x": {"$ref": f"http://127.0.0.1:{port}/evil.json"}},
    }


def test_a_raw_tool_schema_with_an_external_ref_is_refused_without_a_request(
    listener: socket.socket,
) -> None:
    port = listener.getsockname()[1]
    with pytest.raises(SchemaError):
        Tool.from_json_schema(
            name="mcp.fetchy",
            description="A tool from an MCP server.",
            input_schema=_schema(port),
            fn=lambda arguments, ctx: None,
            risk=RiskLevel.L0_PUBLIC_READ,
        )
    with pytest.raises(SchemaError):
        compile_validator(_schema(port))
    with pytest.raises(SchemaError):
        compile_validator_map(_schema(port))
    assert _connections(listener) == 0
