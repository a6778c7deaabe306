"""Handrail.open's telemetry: from the environment by default, handed to every part,
shut down on close when it built it, and not even imported when nothing asks for it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from _otel_capture import Captured, capture
from opentelemetry.sdk.trace import TracerProvider

from _write_tools import Downstream, ticket_tool
from handrail import Handrail, Principal, RiskLevel, ToolCall, tool
from handrail.app import MEMORY
from handrail.errors import ConfigurationError, StoreError
from handrail.loop.models import ScriptedModelClient
from handrail.telemetry import Telemetry

pytestmark = pytest.mark.anyio

WHO = Principal(user_id="u1", tenant_id="t1")


@tool(risk=RiskLevel.L0_PUBLIC_READ)
async def echo(x: int) -> dict[str, int]:
    """Return the argument."""
    return {"x": x}


@pytest.fixture
def owned() -> Iterator[Captured]:
    """In-memory providers handed over to the Telemetry, which owns them."""
    found = capture()
    yield found
    found.shutdown()


def _from_environment(monkeypatch: pytest.MonkeyPatch, made: Telemetry | None) -> list[object]:
    """Make `Telemetry.from_environment` answer `made`; the list records its calls."""
    asked: list[object] = []

    def answer(cls: type[Telemetry], environ: object = None) -> Telemetry | None:
        asked.append(environ)
        return made

    monkeypatch.setattr(Telemetry, "from_environment", classmethod(answer))
    return asked


async def test_the_environment_s_telemetry_reaches_gate_writes_and_loops_and_is_shut_down(
    monkeypatch: pytest.MonkeyPatch, owned: Captured
) -> None:
    made = Telemetry(
        tracer_provider=owned.tracers, meter_provider=owned.meters, owns_providers=True
    )
    asked = _from_environment(monkeypatch, made)
    async with Handrail.open(MEMORY, registry=[echo, ticket_tool(Downstream())]) as app:
        assert asked == [None]
        assert app.telemetry is made
        assert app.gate._telemetry is made
        assert app.writes._telemetry is made
        assert app.agent(ScriptedModelClient([]))._telemetry._telemetry is made
        other = capture()
        try:
            loop = app.agent(ScriptedModelClient([]), telemetry=other.telemetry)
            assert loop._telemetry._telemetry is other.telemetry
        finally:
            other.shutdown()
        await app.handle(ToolCall(id="c", name="echo", arguments='{"x": 1}'), WHO)
        assert [s.name for s in owned.spans()][-1] == "execute_tool echo"
    # Closed: the providers it built are shut down, so nothing more is exported.
    with made.tracer.start_as_current_span("after close"):
        pass
    assert "after close" not in {s.name for s in owned.spans()}


async def test_a_telemetry_of_yours_is_used_and_stays_yours(
    monkeypatch: pytest.MonkeyPatch, captured: Captured
) -> None:
    asked = _from_environment(monkeypatch, None)
    with Handrail.open(MEMORY, registry=[echo], telemetry=captured.telemetry) as app:
        assert app.telemetry is captured.telemetry
        await app.handle(ToolCall(id="c", name="echo", arguments='{"x": 1}'), WHO)
    assert asked == []
    with captured.telemetry.tracer.start_as_current_span("after close"):
        pass
    assert "after close" in {s.name for s in captured.spans()}


def test_telemetry_false_records_nothing_whatever_the_environment_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    with Handrail.open(MEMORY, registry=[echo], telemetry=False) as app:
        assert app.telemetry is None
        assert app.gate._telemetry is None


def test_the_otel_variables_of_the_process_configure_it_by_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "handrail-console")
    with Handrail.open(MEMORY, registry=[echo]) as app:
        telemetry = app.telemetry
        assert telemetry is not None
        assert (telemetry.tracing, telemetry.metering) == (True, False)
        tracers = telemetry._providers[0]
        assert isinstance(tracers, TracerProvider)
        assert tracers.resource.attributes["service.name"] == "handrail-console"
    assert telemetry._owned == ()  # shut down on close


def test_a_bad_otel_variable_fails_open_before_any_store_is_opened(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    with pytest.raises(ConfigurationError, match="http/protobuf"):
        Handrail.open(tmp_path / "h.db", registry=[echo])
    assert not (tmp_path / "h.db").exists()


@pytest.mark.parametrize("failure", ["store", "keyring"])
def test_an_open_that_fails_shuts_the_telemetry_it_built_down(
    monkeypatch: pytest.MonkeyPatch, owned: Captured, tmp_path: Path, failure: str
) -> None:
    made = Telemetry(
        tracer_provider=owned.tracers, meter_provider=owned.meters, owns_providers=True
    )
    _from_environment(monkeypatch, made)
    if failure == "store":  # a folder is no SQLite file
        with pytest.raises(StoreError):
            Handrail.open(tmp_path, registry=[echo])
    else:  # a write tool over a lasting store needs a keyring
        with pytest.raises(ConfigurationError, match="keyring"):
            Handrail.open(tmp_path / "h.db", registry=[ticket_tool(Downstream())])
    with made.tracer.start_as_current_span("after failure"):
        pass
    assert owned.spans() == []


CHILD = """
import json, sys
from handrail import Handrail, RiskLevel, tool

@tool(risk=RiskLevel.L0_PUBLIC_READ)
async def echo(x: int) -> int:
    '''Return x.'''
    return x

with Handrail.open("memory://", registry=[echo]) as app:
    assert app.telemetry is None
print(json.dumps(sorted(m for m in sys.modules if m.startswith("opentelemetry"))))
"""


def test_without_otel_variables_open_does_not_even_import_opentelemetry() -> None:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(  # noqa: S603 - our own interpreter and a fixed script
        [sys.executable, "-c", CHILD],
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == []
