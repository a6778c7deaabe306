"""`handrail raw`: operators read raw results of their tenant safely, list them, purge them.

Bodies are untrusted: nothing in them (or in a call id) reaches the terminal as a
control character, an escape sequence, a bidirectional override or Rich markup.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner, Result

from _migrations import migrate
from handrail import cli
from handrail.clock import SystemClock
from handrail.events import AuditEvent
from handrail.principal import Principal
from handrail.record.raw_results import RAW_READ_PERMISSION, RawResults
from handrail.store import SqliteStore
from handrail.testing import FixedClock

ALICE = Principal(user_id="alice", tenant_id="t1")
EVE = Principal(user_id="eve", tenant_id="t2")
HOSTILE = (
    "\x1b[31mred\x1b[0m \x1b]8;;http://evil.example/\x07click\x1b]8;;\x07 "
    "\x9b2J \r\x08\x07 \u202egnp.exe\u202c \u2028 \x00end"
)
NOT_FOUND = "error: There is no such raw record.\n"


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.delenv("HANDRAIL_STORE", raising=False)
    monkeypatch.delenv("COLUMNS", raising=False)
    return CliRunner()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "h.db"


@pytest.fixture
def store(db: Path) -> Iterator[SqliteStore]:
    opened = SqliteStore.open(db)
    yield opened
    opened.close()


@pytest.fixture
def raw(store: SqliteStore) -> RawResults:
    return RawResults(store, SystemClock(), max_bytes=64)


def _keep(raw: RawResults, body: bytes, **kw: object) -> str:
    options: dict[str, object] = {
        "principal": ALICE,
        "tool": "shop.search",
        "call_id": "call_1",
        "media_type": "application/json",
        **kw,
    }
    return raw.keep(body=body, **options)  # type: ignore[arg-type]


def _show(runner: CliRunner, db: Path, ref: str, *more: str, tenant: str = "t1") -> Result:
    return runner.invoke(
        cli.app,
        ["raw", "show", ref, "--store", str(db), "--tenant", tenant, "--operator", "ops", *more],
    )


def _unsafe(text: str) -> set[str]:
    """Characters a terminal would act on rather than show."""
    return {
        ch
        for ch in text
        if (unicodedata.category(ch) in {"Cc", "Zl", "Zp", "Cs"} and ch not in "\n\t")
        or ch in "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
    }


def _raw_events(db: Path, tenant: str) -> list[AuditEvent]:
    store = SqliteStore.open(db, migrate=False)
    try:
        return [e for e in store.read_audit(tenant_id=tenant, limit=100) if e.kind == "raw"]
    finally:
        store.close()


# --- show ----------------------------------------------------------------------------------


def test_show_prints_the_metadata_and_pretty_json_and_audits_the_read(
    runner: CliRunner,
    db: Path,
    raw: RawResults,
) -> None:
    ref = _keep(raw, b'{"rows":[1,2],"name":"Gr\\u00fc\\u00dfe"}')
    result = _show(runner, db, ref)
    assert result.exit_code == 0, result.output
    head, body = result.stdout.split("\n\n", 1)
    lines = dict(line.split(None, 1) if " " in line else (line, "") for line in head.splitlines())
    assert head.splitlines()[0] == f"ref         {ref}"
    assert "tool        shop.search" in head
    assert "call id     call_1" in head
    assert "user        alice" in head
    assert "tenant      t1" in head
    assert "media type  application/json" in head
    assert "size        39 bytes" in head
    assert "complete    yes" in head
    assert lines["created"].endswith(" UTC")
    assert body == '{\n  "rows": [\n    1,\n    2\n  ],\n  "name": "Grüße"\n}\n'
    (event,) = _raw_events(db, "t1")
    assert (event.decision, event.code, event.user_id) == ("pass", None, "ops")
    assert (event.tool, event.tool_call_id) == ("shop.search", "call_1")
    assert json.loads(event.detail or "{}")["by"] == RAW_READ_PERMISSION


def test_show_escapes_terminal_sequences_in_a_text_body_and_in_its_metadata(
    runner: CliRunner,
    db: Path,
    store: SqliteStore,
) -> None:
    raw = RawResults(store, SystemClock())
    ref = _keep(
        raw,
        HOSTILE.encode(),
        media_type="text/plain",
        call_id="call\x1b[2J\u202e[bold]x[/bold]",
        tool="shop\x1b]0;owned\x07",
    )
    result = _show(runner, db, ref)
    assert result.exit_code == 0, result.output
    assert _unsafe(result.stdout) == set()
    assert "\\x1b[31mred\\x1b[0m" in result.stdout
    assert "\\x1b]8;;http://evil.example/\\x07click" in result.stdout
    assert "\\x9b2J \\x0d\\x08\\x07 \\u202egnp.exe\\u202c \\u2028 \\x00end" in result.stdout
    assert "call id     call\\x1b[2J\\u202e[bold]x[/bold]" in result.stdout
    assert "tool        shop\\x1b]0;owned\\x07" in result.stdout


def test_show_escapes_controls_that_json_strings_decode_to(
    runner: CliRunner,
    db: Path,
    store: SqliteStore,
) -> None:
    raw = RawResults(store, SystemClock())
    payload = {"note": HOSTILE, "lone": "\ud800", "tab": "a\tb"}
    ref = _keep(raw, json.dumps(payload).encode())
    result = _show(runner, db, ref)
    assert result.exit_code == 0, result.output
    assert _unsafe(result.stdout) == set()
    assert '"note": "\\u001b[31mred' in result.stdout
    assert "\\x9b2J" in result.stdout
    assert "\\u202egnp.exe" in result.stdout
    assert '"lone": "\\ud800"' in result.stdout
    assert '"tab": "a\\tb"' in result.stdout


def test_a_capped_json_body_is_shown_as_text_and_says_what_is_missing(
    runner: CliRunner,
    db: Path,
    raw: RawResults,
) -> None:
    body = json.dumps({"rows": list(range(40))}).encode()
    ref = _keep(raw, body)
    result = _show(runner, db, ref)
    assert result.exit_code == 0, result.output
    assert f"complete    no: 64 of {len(body)} bytes stored" in result.stdout
    assert result.stdout.endswith("\n\n" + body[:64].decode() + "\n")


def test_a_json_body_too_deep_to_parse_is_shown_as_text(
    runner: CliRunner,
    db: Path,
    store: SqliteStore,
) -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    ref = _keep(RawResults(store, SystemClock()), deep)
    result = _show(runner, db, ref)
    assert result.exit_code == 0, result.output
    assert result.stdout.endswith("\n\n" + deep.decode() + "\n")


def test_invalid_utf8_in_a_text_body_is_shown_as_byte_escapes(
    runner: CliRunner,
    db: Path,
    raw: RawResults,
) -> None:
    ref = _keep(raw, b"ok \xff\xfe end", media_type="text/plain; charset=utf-8")
    result = _show(runner, db, ref)
    assert result.exit_code == 0, result.output
    assert result.stdout.endswith("\n\nok \\xff\\xfe end\n")


def test_a_binary_body_is_not_printed_but_can_be_saved_exactly_once(
    runner: CliRunner,
    db: Path,
    raw: RawResults,
    tmp_path: Path,
) -> None:
    body = b"\x89PNG\r\n\x1a\n\x00\xff\x1b[2J"
    ref = _keep(raw, body, media_type="image/png")
    shown = _show(runner, db, ref)
    assert shown.exit_code == 0, shown.output
    assert "body        14 bytes, not text: use --output FILE" in shown.stdout
    assert _unsafe(shown.stdout) == set()
    out = tmp_path / "saved.png"
    saved = _show(runner, db, ref, "--output", str(out))
    assert saved.exit_code == 0, saved.output
    assert out.read_bytes() == body
    assert f"body        written to {out}" in saved.stdout
    again = _show(runner, db, ref, "--output", str(out))
    assert again.exit_code == 2
    assert again.stderr.startswith("error: ")
    assert out.read_bytes() == body


def test_a_utf8_body_of_a_binary_media_type_is_still_shown(
    runner: CliRunner,
    db: Path,
    raw: RawResults,
) -> None:
    ref = _keep(raw, b"plain words", media_type="application/octet-stream")
    result = _show(runner, db, ref)
    assert result.exit_code == 0, result.output
    assert result.stdout.endswith("\n\nplain words\n")


def test_unknown_foreign_expired_and_malformed_refs_fail_alike_and_are_audited(
    runner: CliRunner,
    db: Path,
    store: SqliteStore,
    raw: RawResults,
) -> None:
    foreign = raw.keep(
        principal=EVE, tool="shop.search", call_id="c", body=b"{}", media_type="application/json"
    )
    past = FixedClock(datetime.now(UTC) - timedelta(days=30))
    expired = _keep(RawResults(store, past, retention_seconds=60), b"{}")
    outputs = set()
    for ref in ("raw_" + "Z" * 24, foreign, expired, "../etc/passwd", "\x1b[2J"):
        result = _show(runner, db, ref)
        assert result.exit_code == 2
        assert "Traceback" not in result.output
        outputs.add((result.stdout, result.stderr))
    assert outputs == {("", NOT_FOUND)}
    events = _raw_events(db, "t1")
    assert [(e.decision, e.code, e.tool) for e in events] == [("refused", "NOT_FOUND", None)] * 5


def test_show_without_a_store_or_with_empty_names_exits_2_and_creates_nothing(
    runner: CliRunner,
    tmp_path: Path,
) -> None:
    missing = tmp_path / "none.db"
    result = _show(runner, missing, "raw_a")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: no store at")
    assert not missing.exists()
    for tenant, operator in (("", "ops"), ("t1", " ")):
        empty = runner.invoke(
            cli.app,
            ["raw", "show", "raw_a", "--store", "x.db", "--tenant", tenant, "--operator", operator],
        )
        assert empty.exit_code == 2
        assert empty.stderr.startswith("error: --")


def test_a_store_of_revision_0002_is_a_clean_error_and_is_not_migrated(
    runner: CliRunner,
    tmp_path: Path,
) -> None:
    old = tmp_path / "old.db"
    engine = sa.create_engine(f"sqlite+pysqlite:///{old}")
    try:
        migrate(engine, "0002")
    finally:
        engine.dispose()
    for arguments in (
        ["raw", "show", "raw_a", "--store", str(old), "--tenant", "t1", "--operator", "ops"],
        ["raw", "list", "--store", str(old), "--tenant", "t1"],
        ["raw", "purge", "--store", str(old)],
    ):
        result = runner.invoke(cli.app, arguments)
        assert result.exit_code == 2, result.output
        assert result.stderr.startswith("error: ")
        assert "Traceback" not in result.output
    check = sa.create_engine(f"sqlite+pysqlite:///{old}")
    try:
        assert "raw_results" not in sa.inspect(check).get_table_names()
    finally:
        check.dispose()


# --- list and purge ------------------------------------------------------------------------


def test_list_shows_the_tenants_live_records_newest_first_with_markup_shown_literally(
    runner: CliRunner,
    db: Path,
    store: SqliteStore,
) -> None:
    start = datetime.now(UTC) - timedelta(minutes=5)
    clock = FixedClock(start)
    raw = RawResults(store, clock, retention_seconds=3600)
    first = _keep(raw, b"{}", call_id="call_first")
    clock.advance(1)
    second = _keep(raw, b"[]", call_id="[link=http://evil.example]x[/link]\x1b[2J")
    raw.keep(principal=EVE, tool="t", call_id="theirs", body=b"{}", media_type="text/plain")
    gone = _keep(RawResults(store, FixedClock(start - timedelta(days=9))), b"{}", call_id="gone")
    result = runner.invoke(cli.app, ["raw", "list", "--store", str(db), "--tenant", "t1"])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert _unsafe(out) == set()
    assert "[link=http://evil.example]x[/link]\\x1b[2J" in out
    assert out.index(second) < out.index(first)
    assert "theirs" not in out
    assert gone not in out
    assert "2 raw record(s) of t1" in out
    limited = runner.invoke(
        cli.app, ["raw", "list", "--store", str(db), "--tenant", "t1", "-n", "1"]
    )
    assert limited.exit_code == 0, limited.output
    assert second in limited.stdout
    assert first not in limited.stdout


def test_list_of_a_tenant_without_records_says_so(
    runner: CliRunner, db: Path, store: object
) -> None:
    result = runner.invoke(cli.app, ["raw", "list", "--store", str(db), "--tenant", "[b]t9"])
    assert result.exit_code == 0, result.output
    assert "0 raw record(s) of [b]t9" in result.stdout


def test_purge_deletes_only_expired_records(
    runner: CliRunner,
    db: Path,
    store: SqliteStore,
    raw: RawResults,
) -> None:
    live = _keep(raw, b"{}")
    past = RawResults(
        store, FixedClock(datetime.now(UTC) - timedelta(days=2)), retention_seconds=60
    )
    expired = [_keep(past, b"{}") for _ in range(3)]
    result = runner.invoke(cli.app, ["raw", "purge", "--store", str(db)])
    assert result.exit_code == 0, result.output
    assert result.stdout == "purged 3 expired raw record(s)\n"
    assert all(store.get_raw(ref) is None for ref in expired)
    assert store.get_raw(live) is not None
    again = runner.invoke(cli.app, ["raw", "purge", "--store", str(db)])
    assert again.stdout == "purged 0 expired raw record(s)\n"


def test_the_raw_commands_are_listed_in_the_help(runner: CliRunner) -> None:
    result = runner.invoke(cli.app, ["raw", "--help"])
    assert result.exit_code == 0, result.output
    for name in ("show", "list", "purge"):
        assert name in result.stdout
