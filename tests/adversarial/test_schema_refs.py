"""A schema can never make the host send a request: external `$ref`s are refused."""

from __future__ import annotations

import selectors
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from handrail import RiskLevel, SchemaStore, Tool
from handrail.declare.schema import compile_validator, compile_validator_map
from handrail.errors import SchemaError


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


# --- with a local schema store (issue 13, item 4) -------------------------------------------------


def _raw(schema: dict[str, Any], store: SchemaStore | None) -> Tool:
    return Tool.from_json_schema(
        name="mcp.fetchy",
        description="A tool from an MCP server.",
        input_schema=schema,
        fn=lambda arguments, ctx: None,
        risk=RiskLevel.L0_PUBLIC_READ,
        schemas=store,
    )


def test_a_remote_ref_is_still_refused_without_a_request_when_a_store_is_given(
    listener: socket.socket,
) -> None:
    port = listener.getsockname()[1]
    store = SchemaStore()
    store.add("https://schemas.example.com/address.json", {"type": "string"})
    with pytest.raises(SchemaError):
        _raw(_schema(port), store)
    with pytest.raises(SchemaError):
        compile_validator(_schema(port), schemas=store)
    assert _connections(listener) == 0


def test_a_stored_document_cannot_reach_the_network_through_its_own_refs(
    listener: socket.socket,
) -> None:
    port = listener.getsockname()[1]
    store = SchemaStore()
    store.add(
        "https://schemas.example.com/inner.json",
        {"type": "object", "properties": {"x": {"$ref": f"http://127.0.0.1:{port}/evil.json"}}},
    )
    schema = {
        "type": "object",
        "properties": {"inner": {"$ref": "https://schemas.example.com/inner.json"}},
    }
    with pytest.raises(SchemaError):
        _raw(schema, store)
    assert _connections(listener) == 0


def test_an_id_that_points_at_a_server_does_not_make_relative_refs_remote(
    listener: socket.socket,
) -> None:
    port = listener.getsockname()[1]
    schema = {
        "$id": f"http://127.0.0.1:{port}/tools/root.json",
        "type": "object",
        "properties": {"x": {"$ref": "evil.json"}, "y": {"$ref": "../evil.json#/a"}},
    }
    with pytest.raises(SchemaError):
        _raw(schema, SchemaStore())
    assert _connections(listener) == 0


def test_a_document_stored_under_a_servers_uri_is_read_from_the_store_only(
    listener: socket.socket,
) -> None:
    port = listener.getsockname()[1]
    uri = f"http://127.0.0.1:{port}/evil.json"
    store = SchemaStore()
    store.add(uri, {"type": "string", "maxLength": 3})
    tool = _raw(_schema(port), store)
    assert tool.schema_errors({"x": "abcd"}) != {}
    assert tool.schema_errors({"x": "abc"}) == {}
    assert _connections(listener) == 0
