"""Load on the service: POST /v1/calls (a read through the whole gate, audited to the store)
against a bare ASGI endpoint doing json.loads + validate + dumps, on the same server stack.

The servers are what `handrail serve` runs (`service_server`: uvicorn, h11 with the
request-head deadline), each in its own process, started side by side in the same run:

- `handrail` (the target): `create_app(services)` on a SQLite store serving the
  bench's own read tool, `bench.get_order` (`_memory_orders`: the bare endpoint's
  argument validation, the order looked up in a dict, no I/O), an API key checked
  against the store on every request, the body limit and the Idempotency-Key
  middleware in place, and POST /v1/calls/anthropic with one call: lookup, the four
  checks, the risk decision, the tool, shaping, the marked envelope, every stage's
  audit event written to the store (BatchingAuditSink), the result rendered as an
  Anthropic tool_result message. What it measures is Handrail's own cost;
- `payments` (a realistic case): the same over the payments example's
  `payments__get_order`, whose policy resolver and tool each query the example's
  SQLite database in a worker thread;
- `bare`: a plain ASGI function that reads the same body, `json.loads` it, validates it
  with a pydantic model of the message (the tool_use block and its `order_id`
  pattern) and answers `json.dumps` of a small result.

One client process (httpx, keep-alive, one connection per client) drives C concurrent
clients for N requests per server per round, at C = 1, 16 and 64, servers in rotating
order per round. Reported: p50 and p99 latency (ms), throughput (requests/s), and each
case's ratios to bare. Targets (for `handrail`): throughput ≥ 0.5x bare, p99 ≤ 3x
bare. Nothing here asserts a time.

    .venv/bin/python bench/service_load.py [--requests 1000] [--rounds 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from _measure import environment_facts, table

ROOT = Path(__file__).resolve().parents[1]
CLIENTS = (1, 16, 64)
SERVERS = ("handrail", "payments", "bare")
"""The servers in the order they start; each case is compared with `bare`."""
CASES = ("handrail", "payments")


def _body(tool: str) -> bytes:
    call = {"type": "tool_use", "id": "toolu_1", "name": tool, "input": {"order_id": "ORD-1001"}}
    return json.dumps({"role": "assistant", "content": [call]}).encode()


BODIES = {
    "handrail": _body("bench__get_order"),
    "payments": _body("payments__get_order"),
    "bare": _body("bench__get_order"),
}


# --- the servers (each in a process of its own) ------------------------------------------------


def _serve(kind: str, folder: str, ready: Any) -> None:
    sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "server"), str(ROOT / "bench")]
    asyncio.run(_serve_async(kind, Path(folder), ready))


async def _serve_async(kind: str, folder: Path, ready: Any) -> None:
    from handrail.cli._mcp_http import bound_socket  # noqa: PLC0415
    from handrail.server.config import HandrailConfig, ServerConfig  # noqa: PLC0415
    from handrail.server.serving import service_server  # noqa: PLC0415

    config = ServerConfig(handrail=HandrailConfig(registry="examples.payments:build_app"))
    sock = bound_socket("127.0.0.1", 0)
    token = ""
    if kind in CASES:
        from _memory_orders import memory_registry  # noqa: PLC0415
        from _service import build_services, key_for  # noqa: PLC0415

        from handrail.server import create_app  # noqa: PLC0415
        from handrail.store import open_store  # noqa: PLC0415

        store = open_store(folder / f"{kind}.db")
        registry = memory_registry() if kind == "handrail" else None
        services = build_services(store, folder, config=config, registry=registry)
        token = key_for(services, permissions=frozenset({"order.read"}))
        app: Any = create_app(services)
    else:
        app = _bare_app()
    server = service_server(app, config.server)
    # The socket listens already: a client that connects now waits for the server.
    ready.put((sock.getsockname()[1], token))
    await server.serve(sockets=[sock])


def _bare_app() -> Any:
    from typing import Annotated, Literal  # noqa: PLC0415

    from pydantic import BaseModel, Field  # noqa: PLC0415

    class Arguments(BaseModel):
        order_id: Annotated[str, Field(pattern=r"^ORD-[0-9]{4,8}$")]

    class ToolUse(BaseModel):
        type: Literal["tool_use"]
        id: str
        name: str
        input: Arguments

    class Message(BaseModel):
        role: Literal["assistant"]
        content: list[ToolUse]

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        parsed = Message.model_validate(json.loads(b"".join(chunks)))
        body = json.dumps(
            {
                "results": [
                    {"tool_use_id": c.id, "order_id": c.input.order_id} for c in parsed.content
                ]
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    return app


# --- the load --------------------------------------------------------------------------------


async def _load(
    url: str, token: str, body: bytes, clients: int, requests: int
) -> tuple[list[float], float]:
    """Latencies (s) of `requests` POSTs of `body` by `clients` concurrent clients; wall time."""
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    latencies: list[float] = []
    left = requests
    async with httpx.AsyncClient(
        base_url=url, headers=headers, limits=limits, timeout=60
    ) as client:

        async def one_client() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                start = time.perf_counter()
                answer = await client.post("/v1/calls/anthropic", content=body)
                latencies.append(time.perf_counter() - start)
                if answer.status_code != 200:  # pragma: no cover - a broken setup
                    raise SystemExit(f"{url}: {answer.status_code} {answer.text[:200]}")

        start = time.perf_counter()
        await asyncio.gather(*(one_client() for _ in range(clients)))
        wall = time.perf_counter() - start
    return latencies, wall


def _quantile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


async def _measure(
    servers: dict[str, tuple[str, str]], requests: int, rounds: int
) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for clients in CLIENTS:
        count = max(requests // 4, 100) if clients == 1 else requests
        for name, (url, token) in servers.items():  # warm-up
            await _load(url, token, BODIES[name], clients, min(count, 200))
        latencies: dict[str, list[float]] = {name: [] for name in servers}
        walls: dict[str, float] = dict.fromkeys(servers, 0.0)
        names = list(servers)
        for index in range(rounds):
            shift = index % len(names)
            for name in names[shift:] + names[:shift]:
                url, token = servers[name]
                lat, wall = await _load(url, token, BODIES[name], clients, count)
                latencies[name].extend(lat)
                walls[name] += wall
        results[str(clients)] = {
            name: {
                "p50_ms": _quantile(latencies[name], 0.50) * 1000,
                "p99_ms": _quantile(latencies[name], 0.99) * 1000,
                "throughput_rps": len(latencies[name]) / walls[name],
                "requests": len(latencies[name]),
            }
            for name in servers
        }
    return results


def main() -> None:
    """Start both servers, load them, print the table (and JSON when asked)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    context = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as folder:
        processes = []
        servers: dict[str, tuple[str, str]] = {}
        try:
            for kind in SERVERS:
                ready = context.Queue()
                process = context.Process(target=_serve, args=(kind, folder, ready), daemon=True)
                process.start()
                processes.append(process)
                port, token = ready.get(timeout=120)
                servers[kind] = (f"http://127.0.0.1:{port}", token)
            results = asyncio.run(_measure(servers, args.requests, args.rounds))
        finally:
            for process in processes:
                process.terminate()
                process.join(timeout=30)
    rows = []
    for clients, by_server in results.items():
        bare = by_server["bare"]
        for case in CASES:
            ours = by_server[case]
            rows.append(
                (
                    clients,
                    case,
                    f"{ours['p50_ms']:.2f}",
                    f"{ours['p99_ms']:.2f}",
                    f"{ours['throughput_rps']:.0f}",
                    f"{bare['p50_ms']:.2f}",
                    f"{bare['p99_ms']:.2f}",
                    f"{bare['throughput_rps']:.0f}",
                    f"{ours['throughput_rps'] / bare['throughput_rps']:.2f}x",
                    f"{ours['p99_ms'] / bare['p99_ms']:.2f}x",
                )
            )
    header = (
        "clients",
        "case",
        "p50 ms",
        "p99 ms",
        "req/s",
        "bare p50",
        "p99 ms",
        "req/s",
        "throughput ratio",
        "p99 ratio",
    )
    print(table(header, rows, "POST /v1/calls/anthropic (a read, gated, audited) vs bare"))
    print("handrail: bench.get_order (in memory); payments: payments__get_order (SQLite example)")
    print("targets (handrail): throughput ratio >= 0.5x, p99 ratio <= 3x")
    if args.json is not None:
        facts = environment_facts(
            {"requests": args.requests, "rounds": args.rounds},
            ("uvicorn", "fastapi", "httpx", "pydantic"),
        )
        args.json.write_text(json.dumps({"environment": facts, "results": results}, indent=1))


if __name__ == "__main__":
    main()
