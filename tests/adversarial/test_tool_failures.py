"""Tools that fail or return garbage: the model reads only Handrail's words.

Whatever a tool raises or returns, the envelope is structured, says nothing of the
exception (text, type, path, secret), and the full story is in the audit `detail`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from handrail import (
    Envelope,
    ErrorCode,
    Gate,
    Principal,
    Registry,
    RiskLevel,
    Status,
    Tool,
    ToolCall,
    ToolContext,
    tool,
)
from handrail.testing import MemoryAuditSink

WireCheck = Callable[[Envelope, ToolCall], dict[str, Any]]

SECRET = "/srv/app/secrets.py password=hunter2"  # noqa: S105 - bait that must not leak
LEAKS = ("hunter2", "password", "/srv/app", "secrets.py", "Traceback", "Error", "line ")


class _UnprintableError(Exception):
    def __str__(self) -> str:
        raise RuntimeError(SECRET)


class _LeakyReprError(Exception):
    def __repr__(self) -> str:
        return SECRET


def _raiser(exc: BaseException, *, sync: bool) -> Tool:
    if sync:

        @tool(risk=RiskLevel.L0_PUBLIC_READ, namespace="broken")
        def explode() -> str:
            """Fail (sync)."""
            raise exc

        return explode

    @tool(risk=RiskLevel.L0_PUBLIC_READ, namespace="broken")
    async def explode_async() -> str:
        """Fail (async)."""
        raise exc

    return explode_async


def _returner(value: Callable[[], object]) -> Tool:
    @tool(risk=RiskLevel.L0_PUBLIC_READ, namespace="broken")
    async def garbage() -> object:
        """Return something that is not JSON."""
        return value()

    return garbage


def _chained() -> ValueError:
    outer = ValueError("while reading /srv/app/config.toml")
    outer.__cause__ = KeyError(SECRET)
    return outer


FAILURES: list[tuple[str, Callable[[], BaseException], ErrorCode]] = [
    ("value-error", lambda: ValueError(SECRET), ErrorCode.FAILED_FINAL),
    ("key-error", lambda: KeyError(SECRET), ErrorCode.FAILED_FINAL),
    ("runtime-error", lambda: RuntimeError(SECRET), ErrorCode.FAILED_FINAL),
    ("unprintable", _UnprintableError, ErrorCode.FAILED_FINAL),
    ("leaky-repr", _LeakyReprError, ErrorCode.FAILED_FINAL),
    ("chained", _chained, ErrorCode.FAILED_FINAL),
    ("group", lambda: ExceptionGroup("g", [ValueError(SECRET)]), ErrorCode.FAILED_FINAL),
    ("own-timeout-error", lambda: TimeoutError(SECRET), ErrorCode.FAILED_FINAL),
    ("huge-message", lambda: ValueError(SECRET + "x" * 1_000_000), ErrorCode.FAILED_FINAL),
    ("connection-error", lambda: ConnectionError(SECRET), ErrorCode.TRANSIENT),
    ("connection-reset", lambda: ConnectionResetError(SECRET), ErrorCode.TRANSIENT),
]


@pytest.mark.anyio
@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
@pytest.mark.parametrize(
    ("make", "code"),
    [(make, code) for _, make, code in FAILURES],
    ids=[name for name, _, _ in FAILURES],
)
async def test_an_undeclared_exception_becomes_a_generic_envelope_and_an_audited_detail(
    principal: Principal,
    wire: WireCheck,
    make: Callable[[], BaseException],
    code: ErrorCode,
    sync: bool,
) -> None:
    broken = _raiser(make(), sync=sync)
    registry = Registry()
    registry.register(broken)
    audit = MemoryAuditSink()
    gate = Gate(registry, audit=audit)
    call = ToolCall(id="call_1", name=broken.name, arguments={})

    envelope = await gate.handle(call, principal)

    assert envelope.error_type is code
    assert envelope.retryable is (code is ErrorCode.TRANSIENT)
    shown = wire(envelope, call)
    text = envelope.to_json()
    for leak in LEAKS:
        assert leak not in text
    assert shown["data"] is None
    assert "field_errors" not in shown
    [refusal] = [event for event in audit.for_call("call_1") if event.decision == "refused"]
    assert refusal.stage == "execute"
    assert refusal.code == code
    assert refusal.detail is not None
    assert len(refusal.detail) <= 8_000
    assert type(make()).__name__ in refusal.detail


@pytest.mark.anyio
async def test_the_audit_detail_keeps_the_exception_text_the_model_never_sees_redacted(
    gate: Gate,
    registry: Registry,
    audit: MemoryAuditSink,
    principal: Principal,
) -> None:
    registry.register(_raiser(ValueError(SECRET), sync=True))
    envelope = await gate.handle(ToolCall(id="c", name="broken.explode", arguments=None), principal)
    assert "hunter2" not in envelope.to_json()
    [refusal] = [event for event in audit.for_call("c") if event.decision == "refused"]
    assert refusal.detail is not None
    # Operators get the exception text; credentials in it are redacted even there.
    assert "ValueError: /srv/app/secrets.py password=[REDACTED:credential]" in refusal.detail
    assert "hunter2" not in refusal.detail


@pytest.mark.anyio
async def test_an_exception_in_a_business_validator_is_generic_for_the_model(
    gate: Gate,
    registry: Registry,
    audit: MemoryAuditSink,
    principal: Principal,
    wire: WireCheck,
) -> None:
    ran: list[object] = []

    def leaky_validator(_arguments: object, _ctx: ToolContext) -> None:
        raise LookupError(SECRET)

    @tool(risk=RiskLevel.L0_PUBLIC_READ, namespace="broken", validators=[leaky_validator])
    async def guarded() -> str:
        """Never reached."""
        ran.append(True)
        return "ran"

    registry.register(guarded)
    call = ToolCall(id="c", name=guarded.name, arguments=None)
    envelope = await gate.handle(call, principal)

    assert envelope.error_type is ErrorCode.FAILED_FINAL
    assert ran == []
    text = envelope.to_json()
    for leak in LEAKS:
        assert leak not in text
    wire(envelope, call)
    [error] = [event for event in audit.for_call("c") if event.decision == "error"]
    assert error.detail is not None
    assert "LookupError: /srv/app/secrets.py password=[REDACTED:credential]" in error.detail
    assert "hunter2" not in error.detail


# --- results that are not JSON ------------------------------------------------------------------


class _Opaque:
    def __repr__(self) -> str:
        return SECRET


def _cycle() -> dict[str, object]:
    loop: dict[str, object] = {}
    loop["again"] = loop
    return loop


def _deep() -> list[object]:
    root: list[object] = []
    node = root
    for _ in range(100_000):
        child: list[object] = []
        node.append(child)
        node = child
    return root


GARBAGE: list[tuple[str, Callable[[], object]]] = [
    ("object", _Opaque),
    ("set-of-objects", lambda: {"hits": {_Opaque(), _Opaque()}}),
    ("nan", lambda: float("nan")),
    ("infinity", lambda: {"price": float("inf")}),
    ("negative-infinity-in-list", lambda: [1.0, float("-inf")]),
    ("cycle", _cycle),
    ("deep", _deep),
    ("invalid-utf8-bytes", lambda: b"\xff\xfe"),
    ("lone-surrogate", lambda: {"text": "\ud800"}),
    ("generator-of-objects", lambda: (_Opaque() for _ in range(2))),
]


@pytest.mark.anyio
@pytest.mark.parametrize("value", [value for _, value in GARBAGE], ids=[n for n, _ in GARBAGE])
async def test_a_result_that_is_not_json_becomes_a_generic_failure(
    principal: Principal,
    wire: WireCheck,
    value: Callable[[], object],
) -> None:
    broken = _returner(value)
    registry = Registry()
    registry.register(broken)
    audit = MemoryAuditSink()
    gate = Gate(registry, audit=audit)
    call = ToolCall(id="call_1", name=broken.name, arguments=None)

    envelope = await gate.handle(call, principal)

    assert envelope.status is Status.ERROR
    assert envelope.error_type is ErrorCode.FAILED_FINAL
    assert not envelope.retryable
    shown = wire(envelope, call)
    assert shown["data"] is None
    for leak in LEAKS:
        assert leak not in envelope.to_json()
    [refusal] = [event for event in audit.for_call("call_1") if event.decision == "refused"]
    assert refusal.stage == "result"
    assert refusal.detail is not None


@pytest.mark.anyio
async def test_nan_as_a_string_is_an_ordinary_result(
    principal: Principal,
    wire: WireCheck,
) -> None:
    fine = _returner(lambda: {"label": "NaN", "note": "Infinity and beyond", "n": 1.5})
    registry = Registry()
    registry.register(fine)
    call = ToolCall(id="c", name=fine.name, arguments=None)
    envelope = await Gate(registry).handle(call, principal)
    assert envelope.status is Status.OK
    assert wire(envelope, call)["data"] == {"label": "NaN", "note": "Infinity and beyond", "n": 1.5}


# --- exceptions that are not the gate's to catch ------------------------------------------------


class _Abort(BaseException):
    """A BaseException of a host's own (like trio's Cancelled or gevent's GreenletExit)."""


ESCAPES: list[tuple[str, Callable[[], BaseException]]] = [
    ("system-exit", lambda: SystemExit(3)),
    ("keyboard-interrupt", KeyboardInterrupt),
    ("own-base-exception", lambda: _Abort(SECRET)),
]


@pytest.mark.parametrize("make", [m for _, m in ESCAPES], ids=[n for n, _ in ESCAPES])
def test_a_base_exception_from_an_async_tool_propagates_and_its_trail_is_still_audited(
    principal: Principal,
    make: Callable[[], BaseException],
) -> None:
    # Only Exception is the gate's boundary (and CancelledError, which it records and
    # re-raises). SystemExit, KeyboardInterrupt and other BaseExceptions raised on the
    # event loop are the host's to handle; the gate does not turn them into envelopes,
    # but the stages the call passed stay on record.
    raised = make()
    broken = _raiser(raised, sync=False)
    registry = Registry()
    registry.register(broken)
    audit = MemoryAuditSink()
    gate = Gate(registry, audit=audit)

    with pytest.raises(type(raised)):
        gate.handle_sync(ToolCall(id="c", name=broken.name, arguments=None), principal)

    stages = [(event.stage, event.decision) for event in audit.for_call("c")]
    assert stages == [
        ("lookup", "pass"),
        ("syntax", "pass"),
        ("schema", "pass"),
        ("permission", "pass"),
        ("business", "pass"),
        ("authorization", "pass"),
        ("gate", "aborted"),
    ]
    detail = audit.for_call("c")[-1].detail
    assert detail is not None
    assert type(raised).__name__ in detail


@pytest.mark.parametrize("make", [m for _, m in ESCAPES], ids=[n for n, _ in ESCAPES])
def test_a_base_exception_from_a_sync_tool_in_its_thread_is_a_failure_not_a_shutdown(
    principal: Principal,
    make: Callable[[], BaseException],
) -> None:
    # In a worker thread, SystemExit would end only that thread; re-raised on the event
    # loop it would stop the service. It is the tool's failure, with nothing leaked.
    raised = make()
    broken = _raiser(raised, sync=True)
    registry = Registry()
    registry.register(broken)
    audit = MemoryAuditSink()
    gate = Gate(registry, audit=audit)

    call = ToolCall(id="c", name=broken.name, arguments=None)
    envelope = gate.handle_sync(call, principal)

    assert envelope.error_type is ErrorCode.FAILED_FINAL
    assert SECRET not in envelope.to_json()
    last = audit.for_call("c")[-1]
    assert (last.stage, last.code) == ("execute", ErrorCode.FAILED_FINAL)
    assert last.detail is not None
    assert type(raised).__name__ in last.detail
