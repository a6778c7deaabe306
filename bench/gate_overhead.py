"""Per-call overhead of the Handrail gate, against a bare baseline and (optionally) peers.

Every measured path starts from the same JSON argument text a model sent and ends with
the text the model would read back, for a trivial read tool `echo(x: int) -> {"x": x}`.
The bare baseline does only json.loads → pydantic model_validate → await tool →
json.dumps; Handrail adds lookup, the four checks, a deadline, shaping and the envelope.

Method: one event loop; a warm-up and a correctness check per path; then K rounds of N
calls per path, the paths interleaved round-robin (their order rotated every round) so
that machine noise lands on all of them alike. Reported per path: the median and the
minimum over rounds of µs/call, and the median over rounds of the ratio to the baseline
(and to Handrail with audit off) measured in the same round. Nothing here asserts a time.

    .venv/bin/python bench/gate_overhead.py                  # Handrail only
    .venv/bin/python bench/gate_overhead.py --peers          # plus peer frameworks
    .venv/bin/python bench/gate_overhead.py --telemetry      # plus OpenTelemetry paths
    .venv/bin/python bench/gate_overhead.py --quick --json out.json
    .venv/bin/python bench/gate_overhead.py --profile        # cProfile of the gate path
    .venv/bin/python bench/gate_overhead.py --unique-args    # no argument text repeats
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import logging
import pstats
import sys
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pydantic
from _measure import (
    available,
    elapsed_ns,
    environment_facts,
    interleaved,
    same_round_ratio,
    summary,
    table,
    version,
)

from handrail import (
    BatchingAuditSink,
    ErrorCode,
    Gate,
    MemoryAuditSink,
    Principal,
    Registry,
    RiskLevel,
    SqliteStore,
    Status,
    ToolCall,
    tool,
)

if TYPE_CHECKING:
    from handrail.events import AuditEvent, AuditItem, CallRecord

GOOD_ARGS = '{"x": 7}'
GOOD_RESULT = {"x": 7}
BAD_ARGS = '{"x": "seven"}'
CALL_ID = "call_1"
BASELINE = "baseline"
HANDRAIL = "handrail"

Call = Callable[[str], Awaitable[str]]
"""One tool call: the model's JSON argument text in, the text the model reads out."""

Outcome = str | BaseException


# --- the tool under test ----------------------------------------------------------------------


async def echo(x: int) -> dict[str, int]:
    """Return the argument unchanged."""
    return {"x": x}


def echo_sync(x: int) -> dict[str, int]:
    """Return the argument unchanged (a sync tool)."""
    return {"x": x}


class EchoArgs(pydantic.BaseModel):
    """The baseline's argument model: what every framework derives from the signature."""

    model_config = pydantic.ConfigDict(extra="forbid")

    x: int


ECHO_FIELDS = tuple(EchoArgs.model_fields)
"""Field names, looked up once, so the baseline can call any tool generically."""


def _kwargs(fields: EchoArgs) -> dict[str, Any]:
    return {name: getattr(fields, name) for name in ECHO_FIELDS}


# --- cases ------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class Case:
    """One measured path, with what it needs to check itself and clean up."""

    key: str
    label: str
    api: str
    call: Call
    decode: Callable[[str], object] = json.loads
    refused: Callable[[Outcome], bool]
    settle: Callable[[], None] | None = None
    """Timed, once after each batch (for example: wait until the audit rows are written)."""
    reset: Callable[[], None] | None = None
    """Not timed, after each batch (for example: drop captured events)."""
    close: Callable[[], None] | None = None
    verify: Callable[[], None] | None = None
    """Once, after the correctness check's good call (for example: spans were exported)."""
    group: str = "handrail"
    samples: list[float] = field(default_factory=list)
    """µs/call, one per round."""


@dataclass(frozen=True, kw_only=True)
class Stats:
    """What is reported for one case."""

    key: str
    label: str
    group: str
    api: str
    median_us: float
    min_us: float
    vs_baseline: float
    vs_handrail: float
    rounds_us: list[float]
    ratios_vs_handrail: list[float]
    """The same-round ratios to Handrail (audit off), one per round."""


def _principal() -> Principal:
    return Principal(user_id="bench", tenant_id="t1", request_id="req-1")


def baseline_case() -> Case:
    async def call(raw: str) -> str:
        obj = json.loads(raw)
        fields = EchoArgs.model_validate(obj)
        result = await echo(**_kwargs(fields))
        return json.dumps(result)

    return Case(
        key=BASELINE,
        label="baseline: json.loads + model_validate + await + json.dumps",
        api="json.loads; EchoArgs.model_validate; await echo(**fields); json.dumps",
        call=call,
        refused=lambda outcome: isinstance(outcome, pydantic.ValidationError),
    )


def baseline_sync_case() -> Case:
    async def call(raw: str) -> str:
        obj = json.loads(raw)
        fields = EchoArgs.model_validate(obj)
        result = await asyncio.to_thread(echo_sync, **_kwargs(fields))
        return json.dumps(result)

    return Case(
        key="baseline_sync",
        label="baseline, sync tool via asyncio.to_thread",
        api="as baseline, with await asyncio.to_thread(echo_sync, **fields)",
        call=call,
        refused=lambda outcome: isinstance(outcome, pydantic.ValidationError),
    )


def _handrail_refused(outcome: Outcome) -> bool:
    if not isinstance(outcome, str):
        return False
    body = json.loads(outcome)
    return body["status"] == Status.ERROR.value and (
        body["error_type"] == ErrorCode.INVALID_ARGUMENTS.value
    )


def _handrail_data(text: str) -> object:
    body = json.loads(text)
    assert body["status"] == Status.OK.value, body
    return body["data"]


def _gate_call(gate: Gate, name: str) -> Call:
    principal = _principal()

    async def call(raw: str) -> str:
        envelope = await gate.handle(ToolCall(id=CALL_ID, name=name, arguments=raw), principal)
        return envelope.to_json()

    return call


def _registry() -> Registry:
    registry = Registry()
    registry.register(tool(risk=RiskLevel.L0_PUBLIC_READ, name="echo")(echo))
    registry.register(tool(risk=RiskLevel.L0_PUBLIC_READ, name="echo_sync")(echo_sync))
    return registry


def handrail_cases(workdir: Path) -> list[Case]:
    """Handrail's gate: audit off, memory audit, SQLite audit (WAL), and a sync tool."""
    api = "await Gate.handle(ToolCall(...), principal); Envelope.to_json()"
    off = Gate(_registry(), audit=None)

    memory = MemoryAuditSink()
    with_memory = Gate(_registry(), audit=memory)

    store = SqliteStore.open(workdir / "audit.db")
    assert store.journal_mode() == "wal"
    sink = BatchingAuditSink(store)
    with_sqlite = Gate(_registry(), audit=sink)

    def close_sqlite() -> None:
        sink.close()
        store.close()

    common: dict[str, Any] = {"decode": _handrail_data, "refused": _handrail_refused, "api": api}
    return [
        Case(
            key=HANDRAIL,
            label="handrail gate, audit off",
            call=_gate_call(off, "echo"),
            **common,
        ),
        Case(
            key="handrail_memory",
            label="handrail gate, MemoryAuditSink",
            call=_gate_call(with_memory, "echo"),
            # (`events.clear` alone would keep records not yet made into events.)
            reset=getattr(memory, "clear", memory.events.clear),
            **common,
        ),
        Case(
            key="handrail_sqlite",
            label="handrail gate, SQLite WAL audit (incl. flush)",
            call=_gate_call(with_sqlite, "echo"),
            settle=sink.flush,
            close=close_sqlite,
            **common,
        ),
        Case(
            key="handrail_sync",
            label="handrail gate, sync tool (worker thread), audit off",
            call=_gate_call(off, "echo_sync"),
            **common,
        ),
    ]


# --- telemetry --------------------------------------------------------------------------------

OTEL_NOOP = "handrail_otel_noop"


def telemetry_cases() -> list[Case]:
    """The gate (audit off) with telemetry: on the API alone, and on the SDK.

    The no-op case is what a process with the API but no SDK installed gets: its ratio
    to the gate without telemetry is the cost of "telemetry that records nothing". The
    SDK cases are for information: every span exported to memory and every measurement
    aggregated; and with the sampler off, metrics and one unsampled span per call.
    """
    from opentelemetry import trace  # noqa: PLC0415 - only with --telemetry
    from opentelemetry.sdk.metrics import MeterProvider  # noqa: PLC0415
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: PLC0415
    from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: PLC0415
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: PLC0415
        InMemorySpanExporter,
    )
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF  # noqa: PLC0415

    from handrail.telemetry import Telemetry  # noqa: PLC0415

    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider), (
        "the no-op case needs a process with no tracer provider installed globally"
    )
    api = "await Gate.handle(...) with Gate(..., telemetry=Telemetry(...)); Envelope.to_json()"
    noop = Telemetry()
    assert not noop.active

    spans = InMemorySpanExporter()
    tracers = TracerProvider()
    tracers.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    sdk = Telemetry(tracer_provider=tracers, meter_provider=MeterProvider(metric_readers=[reader]))

    def exported() -> None:
        names = {span.name for span in spans.get_finished_spans()}
        assert {"execute_tool echo", "handrail.execute", "handrail.shape"} <= names, names

    unsampled = Telemetry(
        tracer_provider=TracerProvider(sampler=ALWAYS_OFF),
        meter_provider=MeterProvider(metric_readers=[InMemoryMetricReader()]),
    )
    common: dict[str, Any] = {"decode": _handrail_data, "refused": _handrail_refused, "api": api}
    return [
        Case(
            key=OTEL_NOOP,
            label="handrail gate, telemetry on a no-op API provider",
            call=_gate_call(Gate(_registry(), audit=None, telemetry=noop), "echo"),
            **common,
        ),
        Case(
            key="handrail_otel_sdk",
            label="handrail gate, telemetry on the SDK (in-memory span exporter + reader)",
            call=_gate_call(Gate(_registry(), audit=None, telemetry=sdk), "echo"),
            reset=spans.clear,
            verify=exported,
            **common,
        ),
        Case(
            key="handrail_otel_unsampled",
            label="handrail gate, telemetry on the SDK, spans not sampled (metrics only)",
            call=_gate_call(Gate(_registry(), audit=None, telemetry=unsampled), "echo"),
            **common,
        ),
    ]


# --- peers ------------------------------------------------------------------------------------


def openai_agents_case() -> Case:
    from agents import function_tool  # noqa: PLC0415 - optional bench dependency
    from agents.tool_context import ToolContext  # noqa: PLC0415

    # The SDK logs a warning when a failing tool has no trace span to attach to; the
    # refusal check below provokes exactly that, outside any run.
    logging.getLogger("openai.agents").setLevel(logging.ERROR)
    echo_tool = function_tool(echo)

    async def call(raw: str) -> str:
        ctx = ToolContext(
            context=None,
            tool_name="echo",
            tool_call_id=CALL_ID,
            tool_arguments=raw,
        )
        result = await echo_tool.on_invoke_tool(ctx, raw)
        return json.dumps(result)

    return Case(
        key="openai_agents",
        label=f"OpenAI Agents SDK {version('openai-agents')}",
        api=(
            "agents.function_tool(echo).on_invoke_tool(agents.tool_context.ToolContext("
            "context=None, tool_name, tool_call_id, tool_arguments), json_args); json.dumps"
        ),
        call=call,
        # Failures come back as text for the model, not as an exception.
        refused=lambda outcome: isinstance(outcome, str) and "error occurred" in outcome,
        group="peer",
    )


async def pydantic_ai_case() -> Case:
    from pydantic_ai import RunContext  # noqa: PLC0415 - optional bench dependency
    from pydantic_ai.exceptions import (  # noqa: PLC0415
        ToolRetryError,
        UnexpectedModelBehavior,
    )
    from pydantic_ai.messages import ToolCallPart  # noqa: PLC0415
    from pydantic_ai.models.test import TestModel  # noqa: PLC0415
    from pydantic_ai.tool_manager import ToolManager  # noqa: PLC0415
    from pydantic_ai.toolsets import FunctionToolset  # noqa: PLC0415
    from pydantic_ai.usage import RunUsage  # noqa: PLC0415

    toolset = FunctionToolset([echo], max_retries=1)
    context = RunContext(deps=None, model=TestModel(), usage=RunUsage())
    manager = await ToolManager(toolset=toolset).for_run_step(context)

    async def call(raw: str) -> str:
        part = ToolCallPart(tool_name="echo", args=raw, tool_call_id=CALL_ID)
        result = await manager.handle_call(part)
        return json.dumps(result)

    return Case(
        key="pydantic_ai",
        label=f"Pydantic AI {version('pydantic-ai-slim')}",
        api=(
            "pydantic_ai.tool_manager.ToolManager(toolset=FunctionToolset([echo]))"
            ".for_run_step(RunContext(deps=None, model=TestModel(), usage=RunUsage()))"
            ".handle_call(ToolCallPart(tool_name, args=json_args, tool_call_id)); "
            "no root capability (no agent hooks or instrumentation); json.dumps"
        ),
        call=call,
        refused=lambda outcome: isinstance(outcome, ToolRetryError | UnexpectedModelBehavior),
        group="peer",
    )


def langchain_case() -> Case:
    from langchain_core.tools import tool as lc_tool  # noqa: PLC0415 - optional bench dependency

    echo_tool = lc_tool(echo)

    async def call(raw: str) -> str:
        # An AIMessage's tool_calls hold parsed args; the parse is counted here, as for all.
        message = await echo_tool.ainvoke(
            {"name": "echo", "args": json.loads(raw), "id": CALL_ID, "type": "tool_call"},
        )
        return str(message.content)

    return Case(
        key="langchain",
        label=f"LangChain core {version('langchain-core')}",
        api=(
            "langchain_core.tools.tool(echo).ainvoke({'name','args': json.loads(json_args),"
            "'id','type':'tool_call'}) -> ToolMessage.content"
        ),
        call=call,
        refused=lambda outcome: isinstance(outcome, pydantic.ValidationError),
        group="peer",
    )


def mcp_case() -> Case:
    from mcp.server.mcpserver import MCPServer  # noqa: PLC0415 - optional bench dependency
    from mcp.server.mcpserver.exceptions import ToolError  # noqa: PLC0415

    server = MCPServer("bench")
    server.add_tool(echo)

    async def call(raw: str) -> str:
        # In-process: no JSON-RPC framing or transport, only the tool layer.
        result = await server.call_tool("echo", json.loads(raw))
        return result.content[0].text  # type: ignore[union-attr]

    return Case(
        key="mcp",
        label=f"MCP SDK {version('mcp')} (MCPServer)",
        api=(
            "mcp.server.mcpserver.MCPServer.add_tool(echo); await server.call_tool('echo', "
            "json.loads(json_args)) -> CallToolResult.content[0].text"
        ),
        call=call,
        refused=lambda outcome: isinstance(outcome, ToolError),
        group="peer",
    )


async def peer_cases() -> tuple[list[Case], list[str]]:
    """Every peer that imports; the others are named in the notes, not measured."""
    builders: list[tuple[str, Callable[[], Case | Awaitable[Case]]]] = [
        ("OpenAI Agents SDK", openai_agents_case),
        ("Pydantic AI", pydantic_ai_case),
        ("LangChain core", langchain_case),
        ("MCP SDK", mcp_case),
    ]
    return await available(builders)


# --- measurement (the loop itself is bench/_measure.py) ---------------------------------------


async def _outcome(call: Call, raw: str) -> Outcome:
    try:
        return await call(raw)
    except Exception as exc:  # noqa: BLE001 - a refusal may be an exception; it is inspected
        return exc


async def check(case: Case) -> None:
    """Assert once that the path returns the right result and refuses a bad argument."""
    text = await case.call(GOOD_ARGS)
    assert isinstance(text, str), (case.key, text)
    assert case.decode(text) == GOOD_RESULT, (case.key, text)
    if case.verify is not None:
        case.verify()
    outcome = await _outcome(case.call, BAD_ARGS)
    assert case.refused(outcome), (case.key, outcome)


async def _batch(case: Case, inputs: list[str]) -> None:
    call = case.call
    for raw in inputs:
        await call(raw)
    if case.settle is not None:
        case.settle()


async def run_batch(case: Case, inputs: list[str]) -> int:
    """Time len(inputs) calls (plus the case's settle step); nanoseconds."""
    elapsed = await elapsed_ns(_batch, case, inputs)
    if case.reset is not None:
        case.reset()
    return elapsed


async def measure(
    cases: list[Case], *, rounds: int, calls: int, warmup: int, unique: bool = False
) -> None:
    """Check, warm up, then run `rounds` interleaved rounds of `calls` calls per case.

    With `unique`, every call of a case gets argument text no earlier call had (so no
    cache of argument summaries or results ever hits); else each round repeats them.
    """
    inputs = [f'{{"x": {i}}}' for i in range(calls)]
    used: dict[str, int] = {}

    def fresh(case: Case) -> list[str]:
        if not unique:
            return inputs
        start = used.get(case.key, calls)
        used[case.key] = start + calls
        return [f'{{"x": {i}}}' for i in range(start, start + calls)]

    async def prepare(case: Case) -> None:
        await check(case)
        await run_batch(case, inputs[:warmup])

    async def sample(case: Case) -> None:
        elapsed = await run_batch(case, fresh(case))
        case.samples.append(elapsed / calls / 1000)

    await interleaved(cases, rounds=rounds, prepare=prepare, sample=sample)


def summarize(cases: list[Case]) -> list[Stats]:
    """Medians, minima and same-round ratios to the baseline and to Handrail (audit off)."""
    by_key = {case.key: case for case in cases}
    base = by_key[BASELINE].samples
    gate = by_key[HANDRAIL].samples
    stats: list[Stats] = []
    for case in cases:
        spread = summary(case.samples)
        stats.append(
            Stats(
                key=case.key,
                label=case.label,
                group=case.group,
                api=case.api,
                median_us=spread.median,
                min_us=spread.minimum,
                vs_baseline=same_round_ratio(case.samples, base),
                vs_handrail=same_round_ratio(case.samples, gate),
                rounds_us=spread.rounds,
                ratios_vs_handrail=[
                    round(a / b, 4) for a, b in zip(case.samples, gate, strict=True)
                ],
            )
        )
    return stats


# --- reporting --------------------------------------------------------------------------------


def _table(title: str, rows: list[Stats]) -> str:
    header = ("path", "median µs/call", "min µs/call", "x baseline", "x handrail")
    body = [
        (
            s.label,
            f"{s.median_us:.2f}",
            f"{s.min_us:.2f}",
            f"{s.vs_baseline:.2f}",
            f"{s.vs_handrail:.2f}",
        )
        for s in rows
    ]
    return table(header, body, title)


def findings(stats: list[Stats]) -> list[str]:
    """The ratios the issue asks about, in words."""
    by_key = {s.key: s for s in stats}
    gate = by_key[HANDRAIL]
    target = "met" if gate.vs_baseline <= 3 else "NOT met"
    out = [f"Handrail (audit off) / baseline: {gate.vs_baseline:.2f}x (target <= 3x: {target})"]
    memory, sqlite = by_key["handrail_memory"], by_key["handrail_sqlite"]
    out.append(
        f"Audit event building (memory - off): {memory.median_us - gate.median_us:+.2f} µs/call; "
        f"SQLite persistence on top (sqlite - memory): "
        f"{sqlite.median_us - memory.median_us:+.2f} µs/call",
    )
    for name, audited, bound in (("MemoryAuditSink", memory, 1.5), ("SQLite", sqlite, 2.0)):
        verdict = "met" if audited.vs_handrail <= bound else "NOT met"
        out.append(
            f"Audit on, {name} / audit off: {audited.vs_handrail:.2f}x "
            f"(target <= {bound:g}x: {verdict})"
        )
    sync = by_key["handrail_sync"]
    out.append(f"Handrail sync tool / async tool (audit off): {sync.vs_handrail:.2f}x")
    if "baseline_sync" in by_key:
        thread = by_key["baseline_sync"]
        out.append(
            f"  of which the thread hop alone (baseline sync - baseline): "
            f"{thread.median_us - by_key[BASELINE].median_us:+.2f} µs/call",
        )
    if OTEL_NOOP in by_key:
        out.extend(_telemetry_findings(by_key))
    peers = [s for s in stats if s.group == "peer"]
    if peers:
        cheapest = min(peers, key=lambda s: s.median_us)
        verdict = "no more than" if gate.vs_handrail <= cheapest.vs_handrail else "MORE than"
        out.append(
            f"Cheapest peer: {cheapest.label} at {cheapest.median_us:.2f} µs/call; Handrail "
            f"(audit off) costs {gate.median_us / cheapest.median_us:.2f}x of it "
            f"(same-round ratio {1 / cheapest.vs_handrail:.2f}x): {verdict} the cheapest peer.",
        )
    return out


def _telemetry_findings(by_key: dict[str, Stats]) -> list[str]:
    gate, noop = by_key[HANDRAIL], by_key[OTEL_NOOP]
    ratios = sorted(noop.ratios_vs_handrail)
    target = "met" if noop.vs_handrail <= 1.02 else "NOT met"
    line = (
        f"Telemetry on a no-op API provider / no telemetry (audit off): "
        f"{noop.vs_handrail:.3f}x, same-round ratios {ratios[0]:.3f}..{ratios[-1]:.3f} "
        f"over {len(ratios)} rounds (target <= 1.02: {target}); "
        f"{noop.median_us:.2f} vs {gate.median_us:.2f} µs/call"
    )
    out = [line]
    for key in ("handrail_otel_sdk", "handrail_otel_unsampled"):
        s = by_key[key]
        out.append(
            f"{s.label}: {s.median_us:.2f} µs/call, +{s.median_us - gate.median_us:.2f} µs "
            f"({s.vs_handrail:.2f}x no telemetry)",
        )
    return out


def environment(args: argparse.Namespace) -> dict[str, object]:
    """What the numbers were measured on."""
    settings: dict[str, object] = {
        "rounds": args.rounds,
        "calls_per_round": args.calls,
        "warmup_calls": args.warmup,
    }
    distributions = (
        "handrail",
        "pydantic",
        "pydantic-core",
        "jsonschema-rs",
        "openai-agents",
        "pydantic-ai-slim",
        "langchain-core",
        "mcp",
        "opentelemetry-api",
        "opentelemetry-sdk",
    )
    return environment_facts(settings, distributions)


# --- profiling --------------------------------------------------------------------------------


def _profiled(out: io.StringIO, title: str, profiler: cProfile.Profile, limit: int) -> None:
    stats = pstats.Stats(profiler, stream=out).sort_stats("tottime")
    out.write(f"\n=== {title}: top {limit} by self time ===\n")
    stats.print_stats(limit)
    out.write(f"\n=== {title}: functions under handrail/ only, by self time ===\n")
    stats.print_stats(r"handrail[/\\]", limit)


class _KeptRecords:
    """An audit sink that keeps what the auditor hands it, as it came (for the profile)."""

    def __init__(self) -> None:
        self.items: list[AuditItem] = []

    def emit(self, events: Sequence[AuditEvent]) -> None:
        self.items.extend(events)

    def emit_call(self, record: CallRecord) -> None:
        self.items.append(record)


async def profile(calls: int, limit: int) -> str:
    """cProfile of the gate (audit off, memory audit) and of the audit writer's inserts.

    The SQLite gate path is not profiled as one: its writer thread takes the GIL
    whenever the event loop releases it (for example in os.urandom under uuid4), which
    cProfile charges to whatever the loop thread was doing. Instead the writer's work,
    `SqliteStore.append_audit_items` of the calls' records in batches of about 512
    events, is profiled on its own.
    """
    inputs = [f'{{"x": {i}}}' for i in range(calls)]
    out = io.StringIO()
    with tempfile.TemporaryDirectory(prefix="handrail-bench-") as tmp:
        cases = {case.key: case for case in handrail_cases(Path(tmp))}
        try:
            for key in (HANDRAIL, "handrail_memory"):
                case = cases[key]
                await run_batch(case, inputs[:200])
                profiler = cProfile.Profile()
                profiler.enable()
                await run_batch(case, inputs)
                profiler.disable()
                _profiled(out, f"{case.label}, {calls} calls", profiler, limit)

            kept = _KeptRecords()
            gate = Gate(_registry(), audit=kept)
            call = _gate_call(gate, "echo")
            for raw in inputs:
                await call(raw)
            store = SqliteStore.open(Path(tmp) / "writer.db")
            try:
                items = kept.items
                # What BatchingAuditSink hands the store: about 512 events a batch.
                per = max(1, 512 * len(items) // max(1, sum(len(i) for i in items)))
                profiler = cProfile.Profile()
                profiler.enable()
                for first in range(0, len(items), per):
                    store.append_audit_items(items[first : first + per])
                profiler.disable()
            finally:
                store.close()
            title = f"audit writer, append_audit_items of {len(items)} calls' records"
            _profiled(out, title, profiler, limit)
        finally:
            for case in cases.values():
                if case.close is not None:
                    case.close()
    return out.getvalue()


# --- main -------------------------------------------------------------------------------------


async def run(args: argparse.Namespace) -> tuple[list[Stats], list[str]]:
    """Build the cases, measure them interleaved, close them."""
    with tempfile.TemporaryDirectory(prefix="handrail-bench-") as tmp:
        cases = [baseline_case(), baseline_sync_case(), *handrail_cases(Path(tmp))]
        if args.telemetry:
            cases.extend(telemetry_cases())
        notes: list[str] = []
        if args.peers:
            more, notes = await peer_cases()
            cases.extend(more)
        try:
            await measure(
                cases,
                rounds=args.rounds,
                calls=args.calls,
                warmup=args.warmup,
                unique=args.unique_args,
            )
        finally:
            for case in cases:
                if case.close is not None:
                    case.close()
    return summarize(cases), notes


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options; --quick shrinks rounds and calls unless they are given."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peers", action="store_true", help="also measure peer frameworks")
    parser.add_argument(
        "--telemetry",
        action="store_true",
        help="also measure the gate with OpenTelemetry (no-op API provider, SDK)",
    )
    parser.add_argument("--quick", action="store_true", help="a short run (5 rounds of 500)")
    parser.add_argument("--rounds", type=int, help="rounds per path (default 15)")
    parser.add_argument("--calls", type=int, help="calls per round (default 2000)")
    parser.add_argument("--warmup", type=int, help="warm-up calls per path (default 500)")
    parser.add_argument(
        "--unique-args",
        action="store_true",
        help="new argument text for every call (no cache of summaries or results hits)",
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write results as JSON")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="instead of timing, print a cProfile of the gate path",
    )
    args = parser.parse_args(argv)
    quick = args.quick
    args.rounds = args.rounds or (5 if quick else 15)
    args.calls = args.calls or (500 if quick else 2000)
    args.warmup = min(args.calls, args.warmup or (100 if quick else 500))
    if args.rounds < 1 or args.calls < 1:
        parser.error("--rounds and --calls must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the tables (and write JSON when asked)."""
    args = parse_args(argv)
    if args.profile:
        print(asyncio.run(profile(args.calls * 5, 30)))
        return 0
    stats, notes = asyncio.run(run(args))
    env = environment(args)
    print(
        f"Handrail gate overhead: echo(x: int) -> {{'x': x}}; {args.rounds} rounds x "
        f"{args.calls} calls per path, interleaved; Python {env['python']}, "
        f"{env['cpus']} CPUs. Ratios are medians of same-round ratios.",
    )
    print()
    print(_table("Handrail", [s for s in stats if s.group == "handrail"]))
    if args.telemetry:
        print("Per-round ratios of telemetry paths to the gate without telemetry:")
        for s in stats:
            if s.key.startswith("handrail_otel"):
                print(f"  {s.key}: {' '.join(f'{r:.3f}' for r in s.ratios_vs_handrail)}")
    peers = [s for s in stats if s.group == "peer"]
    if peers:
        print()
        reference = [s for s in stats if s.key in {BASELINE, HANDRAIL}]
        print(_table("Peers (same run)", [*reference, *peers]))
    print()
    for line in [*findings(stats), *notes]:
        print(line)
    if peers:
        print()
        print("Peer APIs called:")
        for s in peers:
            print(f"  {s.label}: {s.api}")
    if args.json:
        payload = {
            "environment": env,
            "results": {
                s.key: {
                    "label": s.label,
                    "group": s.group,
                    "api": s.api,
                    "median_us": round(s.median_us, 3),
                    "min_us": round(s.min_us, 3),
                    "ratio_vs_baseline": round(s.vs_baseline, 3),
                    "ratio_vs_handrail": round(s.vs_handrail, 3),
                    "rounds_us": s.rounds_us,
                    "round_ratios_vs_handrail": s.ratios_vs_handrail,
                }
                for s in stats
            },
            "findings": findings(stats),
            "notes": notes,
        }
        args.json.write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
