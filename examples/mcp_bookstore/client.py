"""An MCP client of the bookstore: starts `handrail mcp serve` over stdio and calls its tools.

    .venv/bin/python -m examples.mcp_bookstore.client [--tenant acme] [--dir .handrail]

Built on the official SDK's client; the server is the bookstore behind Handrail's gate.
It lists the tools this principal is offered, searches, checks the stock of what it
found, then tries what a hostile model would: another tenant in the arguments and
another tenant's order number. Each answer is Handrail's envelope; a refusal carries
its stable code. `--dir` holds the bookstore's database, the store (audit trail,
plans) and the confirmation keys; missing ones are created.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import mcp_types as types

from examples.mcp_bookstore.server import DATABASE_ENV
from handrail import Keyring
from mcp import Client, StdioServerParameters

__all__ = ["Step", "main", "run", "server_parameters"]

ROOT = Path(__file__).resolve().parents[2]
APP = "examples.mcp_bookstore.server:build_app"
PERMISSIONS = ("inventory.read", "orders.read")
OTHER_TENANTS_ORDER = {"acme": "ORD-2001", "globex": "ORD-1001"}
"""An order number of the other sample tenant, which this one must not see."""
WAIT = 60.0
"""Bound on each request (the server's start-up included)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Step:
    """One call and what came back: the envelope's status, code and data."""

    tool: str
    arguments: dict[str, Any]
    status: str
    error_type: str | None
    data: Any


def server_parameters(work: Path, *, tenant: str, user: str) -> StdioServerParameters:
    """How to start the bookstore's MCP server for one principal, state kept in `work`."""
    work.mkdir(parents=True, exist_ok=True)
    keys = work / "keys.txt"
    if not keys.exists():
        keys.write_text(Keyring.new_key_text("k1") + "\n", encoding="utf-8")
        keys.chmod(0o600)
    handrail = Path(sys.executable).parent / "handrail"
    args = ["mcp", "serve", "--app", APP, "--store", str(work / "mcp-bookstore.db")]
    args += ["--keyring", str(keys), "--tenant", tenant, "--user", user]
    args += [arg for permission in PERMISSIONS for arg in ("--permission", permission)]
    env = {"PYTHONPATH": str(ROOT), DATABASE_ENV: str(work / "bookstore.db")}
    return StdioServerParameters(command=str(handrail), args=args, env=env, cwd=ROOT)


async def _call(client: Client, tool: str, arguments: dict[str, Any]) -> Step:
    result = await client.call_tool(tool, arguments)
    envelope = result.structured_content or {}
    return Step(
        tool=tool,
        arguments=arguments,
        status=str(envelope.get("status")),
        error_type=envelope.get("error_type"),
        data=envelope.get("data"),
    )


async def run(work: Path, *, tenant: str, user: str) -> tuple[list[str], list[Step]]:
    """List the tools, then search, check stock and try two hostile calls."""
    params = server_parameters(work, tenant=tenant, user=user)
    async with Client(params, read_timeout_seconds=WAIT) as client:
        listed: types.ListToolsResult = await client.list_tools()
        names = sorted(t.name for t in listed.tools)
        steps = [await _call(client, "bookstore.search_books", {"query": "Darwin"})]
        found = steps[0].data if isinstance(steps[0].data, list) else []
        if found:
            isbn = found[0]["isbn"]
            steps.append(await _call(client, "bookstore.check_inventory", {"isbn": isbn}))
        forged = {"query": "Darwin", "tenant_id": "globex" if tenant == "acme" else "acme"}
        steps.append(await _call(client, "bookstore.search_books", forged))
        theirs = {"order_id": OTHER_TENANTS_ORDER[tenant]}
        steps.append(await _call(client, "bookstore.order_status", theirs))
    return names, steps


def main(argv: list[str] | None = None) -> int:
    """Run the walk and print it (or write it as JSON with --json)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tenant", default="acme", choices=sorted(OTHER_TENANTS_ORDER))
    parser.add_argument("--user", default="alice", help="the user the server acts for")
    parser.add_argument("--dir", type=Path, default=Path(".handrail"), help="state directory")
    parser.add_argument("--json", action="store_true", help="print the walk as JSON")
    args = parser.parse_args(argv)
    names, steps = asyncio.run(run(args.dir.resolve(), tenant=args.tenant, user=args.user))
    if args.json:
        print(json.dumps({"tools": names, "steps": [asdict(s) for s in steps]}, indent=2))
        return 0
    print("tools offered:", ", ".join(names))
    for step in steps:
        outcome = step.status if step.error_type is None else step.error_type
        print(f"{step.tool} {json.dumps(step.arguments)} -> {outcome}: {json.dumps(step.data)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
