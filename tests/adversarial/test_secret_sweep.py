"""Planted secrets never reach a sink: envelopes, wire messages, audit, raw, records, logs.

Tools get credentials by handle. Here they misbehave in every way a tool can: echo the
secret in a result (plain, in a key, base64- and URL-encoded), raise with it, log it,
stream it, return it from a write, and the model even repeats it as an argument. After
the run every sink is searched: the SQLite file itself (audit rows, raw records,
execution records), the log output, every envelope and the wire messages of every
adapter. The secrets are shaped so that no pattern detector would recognise them: only
the ledger of handed-out values can catch them.
"""

from __future__ import annotations

import base64
import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from handrail.adapters.anthropic import AnthropicAdapter
from handrail.adapters.gemini import GeminiAdapter
from handrail.adapters.openai_chat import OpenAIChatAdapter
from handrail.adapters.openai_responses import OpenAIResponsesAdapter
from handrail.calls import ToolCall
from handrail.clock import FixedClock
from handrail.context import ToolContext
from handrail.credentials import ScrubbingFilter, StaticSecretProvider
from handrail.declare.definition import tool
from handrail.declare.registry import Registry
from handrail.envelope import Envelope
from handrail.errors import ErrorCode
from handrail.gate import Gate
from handrail.principal import Principal
from handrail.record.batching import BatchingAuditSink
from handrail.record.raw_results import RawResults
from handrail.shaping.pages import Cursors
from handrail.shaping.policy import RawKeeping, ResultPolicy
from handrail.shaping.redact import Redactor
from handrail.shaping.shaper import Shaper
from handrail.shaping.stream import StreamKind, TextStream
from handrail.signing import SigningKey
from handrail.spec import (
    ConfirmationMode,
    ConfirmationPolicy,
    IdempotencyMode,
    IdempotencyPolicy,
    RiskLevel,
    SideEffect,
)
from handrail.store import SqliteStore
from handrail.writes.confirmation import Keyring
from handrail.writes.service import Writes

pytestmark = pytest.mark.anyio

DEPLOY_KEY = "correct-horse-battery-staple-7731"
DB_PASSWORD = "plain words make a passphrase"  # noqa: S105 - planted bait
ALICE = Principal(user_id="alice", tenant_id="t1", permissions=frozenset({"ops"}))
LOG = logging.getLogger("handrail.tests.sweep")


def _forms(value: str) -> list[str]:
    raw = value.encode()
    return [
        value,
        base64.b64encode(raw).decode().rstrip("="),
        base64.urlsafe_b64encode(raw).decode().rstrip("="),
        quote(value, safe=""),
        json.dumps(value)[1:-1],
    ]


@tool(risk=RiskLevel.L1_INTERNAL_READ, name="echo_key", secrets={"deploy"})
async def echo_key(ctx: ToolContext) -> dict[str, Any]:
    """Echo the key every which way."""
    key = ctx.secret("deploy")
    return {
        "plain": f"using {key} now",
        key: "as a key",
        "b64": base64.b64encode(key.encode()).decode(),
        "url": "https://x.test/?k=" + quote(key, safe=""),
        "nested": [{"deep": [key]}],
    }


@tool(risk=RiskLevel.L1_INTERNAL_READ, name="raise_key", secrets={"deploy"})
async def raise_key(ctx: ToolContext) -> str:
    """Fail with the key in the message."""
    msg = f"connect failed with {ctx.secret('deploy')}"
    raise RuntimeError(msg)


@tool(risk=RiskLevel.L1_INTERNAL_READ, name="log_key", secrets={"db"})
async def log_key(ctx: ToolContext) -> str:
    """Log the password, then fail with it as the exception's cause."""
    password = ctx.secret("db")
    LOG.warning("connecting with password %s", password)
    try:
        _login(password)
    except ValueError:
        LOG.exception("login failed")
    return "logged"


def _login(password: str) -> None:
    raise ValueError(password)


def _lines(secret: str) -> Iterator[str]:
    for i in range(5000):
        yield f"step {i}\n"
        if i % 1000 == 0:
            yield f"env DB_PASSWORD={secret}\n"


@tool(
    risk=RiskLevel.L1_INTERNAL_READ,
    name="stream_key",
    secrets={"db"},
    results=ResultPolicy(keep_raw=RawKeeping.ALWAYS),
)
async def stream_key(ctx: ToolContext) -> TextStream:
    """A long log with the password in it."""
    return TextStream(_lines(ctx.secret("db")), kind=StreamKind.LOG)


@tool(
    risk=RiskLevel.L2_REVERSIBLE_WRITE,
    name="rotate",
    side_effect=SideEffect.EXTERNAL_WRITE,
    secrets={"deploy"},
    confirmation=ConfirmationPolicy(mode=ConfirmationMode.NONE),
    idempotency=IdempotencyPolicy(mode=IdempotencyMode.COMMAND_ID),
)
async def rotate(ctx: ToolContext, target: str) -> dict[str, str]:
    """Write something downstream and return the credential by mistake."""
    return {"target": target, "used": ctx.secret("deploy")}


@pytest.fixture
def log_output() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    LOG.addHandler(handler)
    LOG.propagate = False
    yield stream
    LOG.removeHandler(handler)
    LOG.propagate = True


@pytest.mark.invariant(8)
async def test_planted_secrets_reach_no_sink(tmp_path: Path, log_output: io.StringIO) -> None:
    clock = FixedClock()
    path = tmp_path / "handrail.db"
    store = SqliteStore.open(path)
    audit = BatchingAuditSink(store)
    registry = Registry(clock=clock)
    for item in (echo_key, raise_key, log_key, stream_key, rotate):
        registry.register(item)
    provider = StaticSecretProvider({("t1", "deploy"): DEPLOY_KEY, ("t1", "db"): DB_PASSWORD})
    writes = Writes(
        registry,
        store,
        Keyring(SigningKey("k1", b"k" * 32)),
        clock=clock,
        audit=audit,
        secrets=provider,
    )
    shaper = Shaper(
        redactor=Redactor(hash_key=b"h" * 32),
        raw=RawResults(store, clock),
        cursors=Cursors(SigningKey("c1", b"c" * 32), clock=clock),
        max_chars=4000,
    )
    gate = Gate(registry, audit=audit, clock=clock, shaper=shaper, writes=writes, secrets=provider)
    # A host attaches the ledger's filter to its log handlers.
    for handler in LOG.handlers:
        handler.addFilter(ScrubbingFilter(gate.ledger))

    calls = [
        ToolCall(id="a", name="echo_key", arguments={}),
        ToolCall(id="b", name="raise_key", arguments={}),
        ToolCall(id="c", name="log_key", arguments={}),
        ToolCall(id="d", name="stream_key", arguments={}),
    ]
    envelopes: list[Envelope] = list(await gate.handle_batch(calls, ALICE))
    write_call = ToolCall(id="e", name="rotate", arguments={"target": "prod"})
    envelopes.append(await gate.handle(write_call, ALICE, command_id="cmd-1"))
    # The model repeats a secret as an argument: refused before anything is stored, and
    # the audit summary does not keep it.
    echo_call = ToolCall(id="f", name="rotate", arguments={"target": DEPLOY_KEY})
    envelopes.append(await gate.handle(echo_call, ALICE, command_id="cmd-2"))
    audit.close()

    assert [e.call_id for e in envelopes] == ["a", "b", "c", "d", "e", "f"]
    assert envelopes[0].ok
    assert envelopes[3].ref is not None
    assert envelopes[4].ok
    assert envelopes[5].error_type is ErrorCode.INVALID_ARGUMENTS
    assert len(gate.ledger) == 2

    texts = [e.to_json() for e in envelopes]
    all_calls = [*calls, write_call, echo_call]
    adapters = (
        OpenAIChatAdapter(strict=True),
        OpenAIResponsesAdapter(strict=True),
        AnthropicAdapter(strict=True),
        GeminiAdapter(),
    )
    texts.extend(
        json.dumps(adapter.render_results(all_calls, envelopes), ensure_ascii=False)
        for adapter in adapters
    )
    texts.append(log_output.getvalue())
    texts.extend(
        f"{event.detail} {event.subject.args_summary}" for event in store.read_audit(limit=10_000)
    )
    texts.append(shaper_raw_text(store, envelopes[3].ref))
    assert "connecting with password" in log_output.getvalue()  # the log line is there

    blobs = _database_files(tmp_path)
    for secret in (DEPLOY_KEY, DB_PASSWORD):
        for form in _forms(secret):
            for text in texts:
                assert form not in text, f"{form!r} leaked"
            for blob in blobs:
                assert form.encode() not in blob, f"{form!r} leaked into the database file"


def _database_files(folder: Path) -> list[bytes]:
    """The SQLite file and its WAL, byte for byte."""
    return [p.read_bytes() for p in folder.iterdir() if p.name.startswith("handrail.db")]


def shaper_raw_text(store: SqliteStore, ref: str | None) -> str:
    """The stored raw record of the streamed result, as people would read it."""
    assert ref is not None
    record = store.get_raw(ref)
    assert record is not None
    body = record.body.decode()
    assert "env DB_PASSWORD=[SECRET:db]" in body
    return body
