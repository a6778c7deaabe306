"""Shared set-up of the proxy tests: an app, a pin book and a proxy over the test upstream."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio

from _mcp_upstream import build_server
from handrail import Handrail
from handrail.declare.registry import Registry
from handrail.mcp.pins import PinBook
from handrail.mcp.policy import UpstreamPolicy, parse_policy
from handrail.mcp.proxy import McpProxy
from handrail.mcp.upstream import InProcessUpstream, StdioUpstream, Upstream, UpstreamTarget
from handrail.principal import Principal
from handrail.store import MemoryStore
from handrail.writes.confirmation import Keyring

UPSTREAM_SCRIPT = Path(__file__).with_name("_mcp_upstream.py")
KEYS = Keyring.new_key_text("k1", token_bytes=lambda n: b"k" * n)

ALICE = Principal(
    user_id="alice",
    tenant_id="acme",
    permissions=frozenset({"books.read", "notes.write"}),
)

POLICY: Mapping[str, Any] = {
    "unlisted": "hide",
    "tools": {
        "lookup": {"risk": "L1", "permissions": ["books.read"], "timeout": 60.0},
        "notes_add": {"risk": "L2", "permissions": ["notes.write"], "timeout": 60.0},
        "inject": {"risk": "L1", "timeout": 60.0},
        "flood": {"risk": "L1", "timeout": 60.0},
        "crash": {"risk": "L1", "timeout": 60.0},
        "wait": {"risk": "L1", "timeout": 2.0},
    },
}


def policy(**changes: Any) -> UpstreamPolicy:
    """The test policy, with top-level keys replaced."""
    return parse_policy({**POLICY, **changes}, source="test.toml")


def stdio_target(state: Path, *, flood_bytes: int = 10_000_000) -> StdioUpstream:
    """The test upstream as a subprocess over stdio."""
    return StdioUpstream(
        command=sys.executable,
        args=(str(UPSTREAM_SCRIPT), "--state", str(state), "--flood-bytes", str(flood_bytes)),
    )


@asynccontextmanager
async def proxied(
    state: Path,
    *,
    rules: UpstreamPolicy | None = None,
    target: UpstreamTarget | None = None,
    approve_new: bool = True,
    max_message_bytes: int = 1_000_000,
    mode: str = "auto",
) -> AsyncIterator[tuple[McpProxy, Handrail]]:
    """An app over a memory store whose registry holds the upstream's imported tools."""
    await anyio.Path(state).mkdir(parents=True, exist_ok=True)
    store = MemoryStore()
    app = Handrail.open(store, registry=Registry(), keyring=Keyring.from_text(KEYS))
    upstream = Upstream(
        target or InProcessUpstream(server=build_server(state)),
        max_message_bytes=max_message_bytes,
        mode=mode,
    )
    pins = PinBook(store, audit=app.audit)
    proxy = McpProxy(
        upstream,
        rules or policy(),
        pins,
        app.registry,
        namespace="books",
        approve_new=approve_new,
    )
    try:
        await proxy.sync()
        yield proxy, app
    finally:
        await proxy.aclose()
        await app.aclose()
