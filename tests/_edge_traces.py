"""Shared parts of the trace-context tests: spans kept in memory, a remote parent, an app.

`recording()` is a Telemetry over the SDK with an in-memory exporter (never a global
provider); the fixture `rec` gives one per test and `traced` a `traced_app` over it
(imported by the conftests of the tests that use them). `REMOTE` is a caller in
another process: its `traceparent`, trace id and span id. `traced_app(telemetry)` is a
Handrail application whose gate has the telemetry and whose tool `edge.echo` opens a
span of its own while it runs, so a test can follow the chain from inside the tool up
to whatever crossed the boundary, whichever spans the gate makes in between;
`services_for(app, telemetry)` serves it (`create_app`).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from handrail import Gate, Handrail, Registry, RiskLevel, tool
from handrail.clock import SystemClock
from handrail.mcp.auth import ApiKeyAuthenticator
from handrail.mcp.keys import ApiKeys
from handrail.server.config import HandrailConfig, ServerConfig
from handrail.server.operations import Operations
from handrail.server.services import Services
from handrail.store import MemoryStore
from handrail.telemetry import Telemetry

_ids = itertools.count(1)

INSIDE = "edge.inside"
"""The span the tool `edge.echo` opens while it runs."""


@dataclass(frozen=True)
class Remote:
    """A caller's span in another process, as its `traceparent` names it."""

    trace_id: int
    span_id: int

    @property
    def traceparent(self) -> str:
        return f"00-{self.trace_id:032x}-{self.span_id:016x}-01"


REMOTE = Remote(trace_id=0x0AF7651916CD43DD8448EB211C80319C, span_id=0xB7AD6B7169203331)
OTHER = Remote(trace_id=0x4BF92F3577B34DA6A3CE929D0E0E4736, span_id=0x00F067AA0BA902B7)


@dataclass(frozen=True)
class Recording:
    """A Telemetry whose spans end up in `exporter`."""

    telemetry: Telemetry
    exporter: InMemorySpanExporter
    provider: TracerProvider

    def spans(self) -> tuple[ReadableSpan, ...]:
        return tuple(self.exporter.get_finished_spans())

    def named(self, name: str) -> ReadableSpan:
        found = [s for s in self.spans() if s.name == name]
        assert len(found) == 1, [s.name for s in self.spans()]
        return found[0]

    def close(self) -> None:
        self.provider.shutdown()


def recording() -> Recording:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Recording(
        telemetry=Telemetry(tracer_provider=provider), exporter=exporter, provider=provider
    )


def parent_id(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


def chain(span: ReadableSpan, spans: Sequence[ReadableSpan]) -> list[ReadableSpan]:
    """`span` and its recorded ancestors, nearest first (stops at a remote or missing parent)."""
    by_id = {s.context.span_id: s for s in spans}
    found = [span]
    while (above := parent_id(found[-1])) is not None and above in by_id:
        found.append(by_id[above])
    return found


def root_parent(span: ReadableSpan, spans: Sequence[ReadableSpan]) -> int | None:
    """The span id above the highest recorded ancestor of `span` (a remote parent), if any."""
    return parent_id(chain(span, spans)[-1])


def traced_app(telemetry: Telemetry) -> Handrail:
    """An application whose gate has `telemetry`; `edge.echo` opens INSIDE while it runs."""
    tracer = telemetry.tracer

    @tool(risk=RiskLevel.L0_PUBLIC_READ, namespace="edge")
    async def echo(text: str) -> str:
        """Say the text back."""
        with tracer.start_as_current_span(INSIDE):
            return text

    registry = Registry()
    registry.register(echo)
    clock = SystemClock()
    return Handrail(
        registry=registry,
        store=MemoryStore(),
        gate=Gate(registry, clock=clock, telemetry=telemetry),
        writes=None,
        audit=None,
        clock=clock,
    )


def services_for(app: Handrail, telemetry: Telemetry | None) -> Services:
    """The service's parts over `app`, API keys in its store, with `telemetry`."""
    clock = SystemClock()
    return Services(
        config=ServerConfig(handrail=HandrailConfig(registry="examples.payments")),
        handrail=app,
        bearer=ApiKeyAuthenticator(ApiKeys(app.store, clock=clock)),
        operations=Operations(app, clock=clock),
        people=None,
        clock=clock,
        worker_id="test-worker",
        new_id=lambda: f"id{next(_ids)}",
        telemetry=telemetry,
    )


@pytest.fixture
def rec() -> Iterator[Recording]:
    """Spans kept in memory for one test; the provider is shut down after it."""
    made = recording()
    yield made
    made.close()


@pytest.fixture
def traced(rec: Recording) -> Iterator[Handrail]:
    """`traced_app` over the test's recording."""
    made = traced_app(rec.telemetry)
    yield made
    made.close()
