"""What tracing costs the service: POST /v1/calls with no telemetry, a no-op one, the SDK.

The service's ASGI app (`create_app`) is called in process, with no server and no
client library in the way: each request is one ASGI call carrying an API key and an
Anthropic assistant message with one call of a trivial read tool (`edge.echo`), through
authentication, the body limit, the idempotency middleware, the gate and the adapter.
Cases, measured in the same rounds (interleaved, order rotated):

- `none`: no telemetry (the default without `OTEL_*` variables): no tracing middleware
  is added, so its per-request cost is none by construction; the others are read
  against it;
- `no-op`: a Telemetry on the API's no-op providers (`TraceRequests` runs, the spans
  are non-recording);
- `sdk`: the SDK with a simple processor and an in-memory exporter (every span made,
  ended and exported), for information.

The same three again around an ASGI app that only answers 200 (`bare ...`) show the
middleware's own cost, without the noise of the whole request. Reported: the median
and minimum over rounds of µs per request, and the median of the same-round ratio to
the group's `none`. Nothing here asserts a time.

    .venv/bin/python bench/edge_overhead.py [--rounds 15] [--requests 400] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _measure import elapsed_ns, environment_facts, interleaved, same_round_ratio, summary, table
from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NoOpTracerProvider

from handrail import Gate, Handrail, Principal, Registry, RiskLevel, tool
from handrail.clock import SystemClock
from handrail.mcp.auth import ApiKeyAuthenticator
from handrail.mcp.keys import ApiKeys
from handrail.server import create_app
from handrail.server.config import HandrailConfig, ServerConfig
from handrail.server.operations import Operations
from handrail.server.services import Services
from handrail.store import MemoryStore
from handrail.telemetry import Telemetry
from handrail.telemetry.propagation import TraceRequests

BODY = json.dumps(
    {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "toolu_1", "name": "edge__echo", "input": {"x": 1}}],
    }
).encode()
TRACEPARENT = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@dataclass
class Case:
    name: str
    app: Any
    token: str
    clear: Callable[[], None] = lambda: None
    samples: list[float] = field(default_factory=list)
    reference: Case | None = None
    """The group's `none` case, which ratios are read against (None: this is it)."""


def _app(telemetry: Telemetry | None) -> tuple[Any, str]:
    @tool(risk=RiskLevel.L0_PUBLIC_READ, namespace="edge")
    async def echo(x: int) -> dict[str, int]:
        """Say x back."""
        return {"x": x}

    registry = Registry()
    registry.register(echo)
    clock = SystemClock()
    store = MemoryStore()
    app = Handrail(
        registry=registry,
        store=store,
        gate=Gate(registry, clock=clock, telemetry=telemetry),
        writes=None,
        audit=None,
        clock=clock,
    )
    keys = ApiKeys(store, clock=clock)
    services = Services(
        config=ServerConfig(handrail=HandrailConfig(registry="bench:none")),
        handrail=app,
        bearer=ApiKeyAuthenticator(keys),
        operations=Operations(app, clock=clock),
        people=None,
        clock=clock,
        worker_id="bench",
        new_id=lambda: "id",
        telemetry=telemetry,
    )
    token = keys.create(Principal(user_id="u", tenant_id="t")).key
    return create_app(services), token


async def _request(app: Any, token: str) -> int:
    status = 0
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            await asyncio.Event().wait()  # the client never leaves mid-request here
        sent = True
        return {"type": "http.request", "body": BODY, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/calls/anthropic",
        "raw_path": b"/v1/calls/anthropic",
        "query_string": b"",
        "root_path": "",
        "server": ("127.0.0.1", 8000),
        "client": ("127.0.0.1", 50000),
        "headers": [
            (b"host", b"127.0.0.1:8000"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(BODY)).encode()),
            (b"authorization", f"Bearer {token}".encode()),
            (b"traceparent", TRACEPARENT),
        ],
    }
    await app(scope, receive, send)
    return status


async def _bare(_scope: Any, _receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b""})


def _cases() -> list[Case]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetries = {
        "none": None,
        "no-op": Telemetry(
            tracer_provider=NoOpTracerProvider(), meter_provider=NoOpMeterProvider()
        ),
        "sdk": Telemetry(tracer_provider=provider),
    }
    service: list[Case] = []
    bare: list[Case] = []
    for name, telemetry in telemetries.items():
        app, token = _app(telemetry)
        service.append(Case(name=name, app=app, token=token, clear=exporter.clear))
        traced = _bare if telemetry is None else TraceRequests(_bare, telemetry=telemetry)
        bare.append(Case(name=f"bare {name}", app=traced, token=token, clear=exporter.clear))
    for group in (service, bare):
        for case in group[1:]:
            case.reference = group[0]
    return [*service, *bare]


async def measure(rounds: int, requests: int) -> list[Case]:
    cases = _cases()

    async def prepare(case: Case) -> None:
        for _ in range(50):
            assert await _request(case.app, case.token) == 200
        case.clear()

    async def run(case: Case) -> None:
        for _ in range(requests):
            await _request(case.app, case.token)

    async def sample(case: Case) -> None:
        took = await elapsed_ns(run, case)
        case.samples.append(took / requests / 1000)
        case.clear()

    await interleaved(cases, rounds=rounds, prepare=prepare, sample=sample)
    return cases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    cases = asyncio.run(measure(args.rounds, args.requests))
    found = {
        case.name: {
            **dataclasses.asdict(summary(case.samples)),
            "ratio_to_none": same_round_ratio(case.samples, (case.reference or case).samples),
        }
        for case in cases
    }
    body: list[tuple[str, ...]] = [
        (
            name,
            f"{data['median']:.1f}",
            f"{data['minimum']:.1f}",
            f"{data['ratio_to_none']:.3f}",
        )
        for name, data in found.items()
    ]
    header = ("POST /v1/calls: telemetry", "median µs", "min µs", "x its none")
    print(table(header, body, title=f"{args.rounds} rounds x {args.requests} requests"))
    if args.json is not None:
        facts = environment_facts(
            {"rounds": args.rounds, "requests": args.requests},
            ["handrail", "fastapi", "opentelemetry-api", "opentelemetry-sdk"],
        )
        args.json.write_text(json.dumps({"environment": facts, "cases": found}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
