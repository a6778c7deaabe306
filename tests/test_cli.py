import asyncio
import json
import os
import re
import secrets
import signal
import sys
import textwrap
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from examples.recovery import build_app as build_recovery
from examples.recovery import demo as recovery_demo
from typer.testing import CliRunner

from _stores import empty_postgres_store
from handrail import Keyring, Principal, SigningKey, ToolCall, cli, open_store
from handrail.adapters import DefinitionFormat
from handrail.events import AuditEvent
from handrail.testing import FixedClock
from handrail.writes.reconcile import PassReport, Reconciler

REPO = Path(__file__).resolve().parents[1]
FORBIDDEN = "bookstore.delete_all_orders"
PROVIDER_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    # The CLI imports apps from the current directory; keep its sys.path edit local.
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delenv("HANDRAIL_DB", raising=False)
    monkeypatch.delenv("HANDRAIL_STORE", raising=False)
    monkeypatch.delenv("HANDRAIL_APP", raising=False)
    monkeypatch.delenv("COLUMNS", raising=False)
    return CliRunner()


def test_tools_list_shows_the_exposed_tools_and_never_the_forbidden_one(runner: CliRunner) -> None:
    result = runner.invoke(cli.app, ["tools", "list"])
    assert result.exit_code == 0, result.output
    for name in ("bookstore.search_books", "bookstore.check_inventory", "bookstore.order_status"):
        assert name in result.stdout
    assert "L1_INTERNAL_READ" in result.stdout
    assert "delete_all_orders" not in result.stdout


def test_tools_list_for_a_narrower_principal_leaves_out_what_it_may_not_use(
    runner: CliRunner,
) -> None:
    result = runner.invoke(cli.app, ["tools", "list", "--permission", "inventory.read"])
    assert result.exit_code == 0, result.output
    assert "bookstore.check_inventory" in result.stdout
    assert "bookstore.order_status" not in result.stdout


def test_tools_list_with_no_permissions_shows_only_public_tools(runner: CliRunner) -> None:
    result = runner.invoke(cli.app, ["tools", "list", "--permission", "", "--tenant", "globex"])
    assert result.exit_code == 0, result.output
    assert "bookstore.search_books" in result.stdout
    assert "bookstore.check_inventory" not in result.stdout


def test_tools_show_prints_the_full_spec_with_its_schema_as_json(runner: CliRunner) -> None:
    result = runner.invoke(cli.app, ["tools", "show", "bookstore.order_status"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["name"] == "bookstore.order_status"
    assert document["wire_name"] == "bookstore__order_status"
    assert document["permissions"] == ["orders.read"]
    assert document["trusted_parameters"] == {"tenant_id": "tenant_id"}
    assert document["business_values"] == {}
    assert list(document["input_schema"]["properties"]) == ["order_id"]


def test_tools_show_accepts_the_provider_wire_name(runner: CliRunner) -> None:
    result = runner.invoke(cli.app, ["tools", "show", "bookstore__search_books"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["name"] == "bookstore.search_books"


@pytest.mark.invariant(9)
@pytest.mark.parametrize("name", [FORBIDDEN, "bookstore__delete_all_orders", "no.such_tool"])
def test_tools_show_of_a_tool_not_exposed_exits_2(runner: CliRunner, name: str) -> None:
    result = runner.invoke(cli.app, ["tools", "show", name])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.invariant(9)
@pytest.mark.parametrize("fmt", [f.value for f in DefinitionFormat])
def test_tools_export_prints_json_without_the_forbidden_tool(runner: CliRunner, fmt: str) -> None:
    result = runner.invoke(cli.app, ["tools", "export", "--format", fmt])
    assert result.exit_code == 0, result.output
    definitions = json.loads(result.stdout)
    if fmt == "gemini":  # one Tool that holds every function declaration
        [tool] = definitions
        definitions = tool["functionDeclarations"]
    assert len(definitions) == 3
    assert "delete_all_orders" not in result.stdout
    assert "orders.admin" not in result.stdout


@pytest.mark.parametrize("fmt", ["openai-chat", "openai-responses", "anthropic"])
def test_tools_export_for_providers_uses_provider_safe_names(runner: CliRunner, fmt: str) -> None:
    result = runner.invoke(cli.app, ["tools", "export", "-f", fmt])
    definitions = json.loads(result.stdout)
    names = [d.get("name") or d["function"]["name"] for d in definitions]
    assert names == [
        "bookstore__check_inventory",
        "bookstore__order_status",
        "bookstore__search_books",
    ]
    assert all(PROVIDER_NAME.fullmatch(n) for n in names)


def test_an_unknown_export_format_is_a_usage_error(runner: CliRunner) -> None:
    result = runner.invoke(cli.app, ["tools", "export", "--format", "gemini-ish"])
    assert result.exit_code == 2


@pytest.mark.parametrize(
    "target",
    [
        "no_such_module_for_handrail:build",
        "examples.bookstore:no_such_attribute",
        "examples.bookstore",
        "examples.bookstore:TENANTS",
        "examples.bookstore:BookstoreApp",
    ],
)
def test_a_bad_app_exits_2_with_one_line_and_no_traceback(runner: CliRunner, target: str) -> None:
    result = runner.invoke(cli.app, ["tools", "list", "--app", target])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stderr.startswith("error: ")


def test_an_app_registry_is_loaded_from_the_current_directory(
    runner: CliRunner,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    module = "handrail_cli_test_tiny_app"
    (tmp_path / f"{module}.py").write_text(
        textwrap.dedent(
            '''
            from handrail import Registry, RiskLevel, tool

            @tool(risk=RiskLevel.L0_PUBLIC_READ, namespace="tiny", enabled_tenants={"globex"})
            def ping(text: str) -> str:
                """Answer with the same text."""
                return text

            registry = Registry()
            registry.register(ping)
            ''',
        ),
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, module, raising=False)
    try:
        acme = runner.invoke(
            cli.app, ["tools", "export", "-f", "jsonschema", "--app", f"{module}:registry"]
        )
        globex = runner.invoke(
            cli.app,
            [
                "tools",
                "export",
                "-f",
                "jsonschema",
                "--app",
                f"{module}:registry",
                "--tenant",
                "globex",
            ],
        )
    finally:
        sys.modules.pop(module, None)
    assert acme.exit_code == 0, acme.output
    assert json.loads(acme.stdout) == []
    assert [d["name"] for d in json.loads(globex.stdout)] == ["tiny.ping"]


def test_an_app_factory_that_raises_exits_2(
    runner: CliRunner,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    module = "handrail_cli_test_broken_app"
    (tmp_path / f"{module}.py").write_text("def build():\n    raise RuntimeError('no config')\n")
    monkeypatch.chdir(tmp_path)
    try:
        result = runner.invoke(cli.app, ["tools", "list", "--app", f"{module}:build"])
    finally:
        sys.modules.pop(module, None)
    assert result.exit_code == 2
    assert "Traceback" not in result.output


def test_the_app_can_be_chosen_by_environment_variable(
    runner: CliRunner,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HANDRAIL_APP", "examples.bookstore:nothing_here")
    result = runner.invoke(cli.app, ["tools", "list"])
    assert result.exit_code == 2


def test_the_demo_runs_end_to_end_and_prints_every_outcome(
    runner: CliRunner,
    tmp_path: Path,
) -> None:
    db = tmp_path / "audit.db"
    result = runner.invoke(cli.app, ["demo", "--db", str(db)])
    assert result.exit_code == 0, result.output
    assert "ScriptedModel" in result.stdout
    assert "not a real LLM" in result.stdout
    for code in ("INVALID_ARGUMENTS", "PERMISSION_DENIED", "NOT_FOUND", "UNKNOWN_TOOL"):
        assert code in result.stdout
    assert "gate → ok" in result.stdout
    assert db.is_file()
    assert (tmp_path / "bookstore-demo.db").is_file()


@pytest.fixture
def demo_db(runner: CliRunner, tmp_path: Path) -> Path:
    db = tmp_path / "audit.db"
    assert runner.invoke(cli.app, ["demo", "--db", str(db)]).exit_code == 0
    return db


def test_audit_tail_shows_the_newest_events(runner: CliRunner, demo_db: Path) -> None:
    result = runner.invoke(cli.app, ["audit", "tail", "--store", str(demo_db), "-n", "3"])
    assert result.exit_code == 0, result.output
    assert "call_8" in result.stdout
    assert "UNKNOWN_TOOL" in result.stdout
    assert "call_1" not in result.stdout


def test_audit_tail_filters_by_call_id(runner: CliRunner, demo_db: Path) -> None:
    result = runner.invoke(cli.app, ["audit", "tail", "--store", str(demo_db), "--call", "call_6"])
    assert result.exit_code == 0, result.output
    assert "NOT_FOUND" in result.stdout
    assert set(re.findall(r"call_\d+", result.stdout)) == {"call_6"}


def test_audit_tail_filters_by_tenant(runner: CliRunner, demo_db: Path) -> None:
    acme = runner.invoke(cli.app, ["audit", "tail", "--store", str(demo_db), "--tenant", "acme"])
    globex = runner.invoke(
        cli.app, ["audit", "tail", "--store", str(demo_db), "--tenant", "globex"]
    )
    assert "call_" in acme.stdout
    assert globex.exit_code == 0
    assert "call_" not in globex.stdout


def test_audit_tail_reads_the_store_named_by_handrail_store(
    runner: CliRunner,
    demo_db: Path,
) -> None:
    result = runner.invoke(
        cli.app, ["audit", "tail"], env={"HANDRAIL_STORE": f"sqlite:///{demo_db}"}
    )
    assert result.exit_code == 0, result.output
    assert "call_8" in result.stdout


@pytest.mark.parametrize("how", ["option", "environment"])
def test_audit_tail_still_takes_the_deprecated_db_and_says_so(
    runner: CliRunner, demo_db: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    monkeypatch.delenv("HANDRAIL_STORE", raising=False)
    if how == "option":
        result = runner.invoke(cli.app, ["audit", "tail", "--db", str(demo_db)])
    else:
        result = runner.invoke(cli.app, ["audit", "tail"], env={"HANDRAIL_DB": str(demo_db)})
    assert result.exit_code == 0, result.output
    assert "call_8" in result.stdout
    assert result.stderr == "warning: --db (HANDRAIL_DB) is deprecated; use --store\n"
    help_text = runner.invoke(cli.app, ["audit", "tail", "--help"]).stdout
    assert "--db" not in help_text


def test_audit_tail_shows_the_window_in_time_order_even_when_written_out_of_order(
    runner: CliRunner, store_url: str
) -> None:
    base = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    written = [("late", 30), ("early", 10), ("middle", 20), ("oldest", 0)]
    store = open_store(store_url, migrate=False)
    try:
        store.append_audit(
            [
                AuditEvent(
                    event_id=f"e{n}",
                    at=base + timedelta(seconds=seconds),
                    kind="gate",
                    stage=stage,
                    decision="ok",
                )
                for n, (stage, seconds) in enumerate(written)
            ],
        )
    finally:
        store.close()
    # The window is the three written last (not "late"), shown in time order.
    result = runner.invoke(cli.app, ["audit", "tail", "--store", store_url, "-n", "3"])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "late" not in out
    assert out.index("oldest") < out.index("early") < out.index("middle")
    assert out.index("12:00:00") < out.index("12:00:10") < out.index("12:00:20")


def test_audit_tail_without_a_database_exits_2(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(cli.app, ["audit", "tail", "--store", str(tmp_path / "none.db")])
    assert result.exit_code == 2
    assert not (tmp_path / "none.db").exists()


def test_audit_tail_of_a_file_that_is_not_an_audit_store_exits_2(
    runner: CliRunner,
    tmp_path: Path,
) -> None:
    other = tmp_path / "other.db"
    other.write_bytes(b"not a database at all, just bytes" * 10)
    result = runner.invoke(cli.app, ["audit", "tail", "--store", str(other)])
    assert result.exit_code == 2
    assert "Traceback" not in result.output


def test_main_runs_the_command_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["handrail", "--help"])
    with pytest.raises(SystemExit) as exited:
        cli.main()
    assert exited.value.code == 0


def test_the_demo_outside_the_repository_exits_2(
    runner: CliRunner,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    for name in [m for m in sys.modules if m == "examples" or m.startswith("examples.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in {"", str(REPO)}])
    result = runner.invoke(cli.app, ["demo", "--db", str(tmp_path / "audit.db")])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert not (tmp_path / "audit.db").exists()


def test_the_demo_runs_the_recovery_scenario_after_the_bookstore(
    runner: CliRunner,
    tmp_path: Path,
) -> None:
    result = runner.invoke(cli.app, ["demo", "--db", str(tmp_path / "audit.db")])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert out.index("the bookstore example") < out.index("recovering a write whose response")
    for code in (
        "NEEDS_CONFIRMATION",
        "OUTCOME_UNKNOWN",
        "SUCCEEDED TK-0001",
        "CONFIRMATION_INVALID",
        "CONFIRMATION_REPLAYED",
        "PLAN_EXPIRED",
        "PLAN_CHANGED",
    ):
        assert code in out
    assert "UNEXPECTED" not in out
    assert "1 ticket(s) in the service after 1 create call(s)" in out
    assert (tmp_path / "recovery.db").is_file()
    assert (tmp_path / "recovery-tickets.db").is_file()


RECOVERY_APP = "examples.recovery.app:build_app"


def _lose_a_response(
    store_url: str, service_db: Path, *, ago: timedelta = timedelta(hours=1)
) -> dict[str, str]:
    """A confirmed ticket whose response was lost: UNKNOWN in the store, a ticket downstream."""
    # An hour ago by default, so that the record is due for the command's real clock.
    clock = FixedClock(datetime.now(UTC) - ago)
    app = build_recovery(service_db=service_db, clock=clock)
    app.service.reset()
    store = open_store(store_url)
    writes = app.writes(store, Keyring(SigningKey("test", secrets.token_bytes(32))))
    nurse = Principal(
        user_id="u-1001",
        tenant_id="hospital-a",
        permissions=frozenset({"assets.read", "tickets.create"}),
    )
    arguments = {"asset_id": "asset-lis-result", "reason": "timed out", "priority": "HIGH"}

    async def lose_a_response() -> str:
        call = ToolCall(
            id="c1", name="recovery.create_recovery_ticket", arguments=json.dumps(arguments)
        )
        envelope = await app.gate(writes).handle(call, nurse)
        plan_id = str(envelope.data["plan_id"])
        token = await writes.issue_token(plan_id, nurse)
        await writes.confirm(plan_id, token.value, nurse)
        app.link.arm()
        outcome = await writes.execute_plan(plan_id, nurse)
        assert outcome.record is not None
        assert outcome.record.status.value == "UNKNOWN"
        return outcome.record.idempotency_key

    try:
        key = asyncio.run(lose_a_response())
        ticket = app.service.find(key)
        assert ticket is not None
    finally:
        store.close()
        app.service.close()
    return {
        "store": store_url,
        "service_db": str(service_db),
        "key": key,
        "ticket_no": ticket.ticket_no,
    }


@pytest.fixture
def unknown_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.delenv("HANDRAIL_STORE", raising=False)
    return _lose_a_response(str(tmp_path / "store.db"), tmp_path / "tickets.db")


def _execution_status(store_url: str, key: str) -> tuple[str, str | None]:
    store = open_store(store_url, migrate=False)
    try:
        record = store.get_execution(key)
    finally:
        store.close()
    assert record is not None
    return record.status.value, record.business_id


def test_reconcile_settles_an_unknown_write_that_the_service_committed(
    runner: CliRunner,
    unknown_write: dict[str, str],
) -> None:
    result = runner.invoke(
        cli.app,
        ["reconcile", "--app", RECOVERY_APP, "--store", unknown_write["store"]],
        env={"RECOVERY_SERVICE_DB": unknown_write["service_db"]},
    )
    assert result.exit_code == 0, result.output
    assert _execution_status(unknown_write["store"], unknown_write["key"]) == (
        "SUCCEEDED",
        unknown_write["ticket_no"],
    )
    assert re.search(r"succeeded\s*│\s*1\s", result.stdout)
    assert f"SUCCEEDED recovery.create_recovery_ticket {unknown_write['ticket_no']}" in (
        result.stdout
    )
    assert unknown_write["key"] in result.stdout


def test_reconcile_a_second_time_finds_nothing_left_to_settle(
    runner: CliRunner,
    unknown_write: dict[str, str],
) -> None:
    env = {"RECOVERY_SERVICE_DB": unknown_write["service_db"], "HANDRAIL_STORE": ""}
    arguments = ["reconcile", "--app", RECOVERY_APP, "--store", unknown_write["store"]]
    assert runner.invoke(cli.app, arguments, env=env).exit_code == 0
    again = runner.invoke(cli.app, arguments, env=env)
    assert again.exit_code == 0, again.output
    assert re.search(r"succeeded\s*│\s*0\s", again.stdout)
    assert "SUCCEEDED recovery" not in again.stdout


def test_reconcile_before_a_record_is_due_says_when_its_next_check_is(
    runner: CliRunner,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("HANDRAIL_STORE", raising=False)
    # Written "an hour from now": its first check is later than the command's real clock.
    written = _lose_a_response(
        str(tmp_path / "store.db"), tmp_path / "t.db", ago=-timedelta(hours=1)
    )
    result = runner.invoke(
        cli.app,
        ["reconcile", "--app", RECOVERY_APP, "--store", written["store"]],
        env={"RECOVERY_SERVICE_DB": written["service_db"]},
    )
    assert result.exit_code == 0, result.output
    assert re.search(r"not yet due\s*│\s*1\s", result.stdout)
    assert re.search(r"still unknown\s*│\s*0\s", result.stdout)
    assert f"{written['key']} (next check 20" in result.stdout.replace("\n", "")
    assert re.search(
        r"1 UNKNOWN record\(s\) not yet due; the next check is at \d{4}-\d\d-\d\d [\d:]{8} UTC",
        result.stdout,
    )
    assert _execution_status(written["store"], written["key"])[0] == "UNKNOWN"


def test_reconcile_of_due_records_reports_none_waiting(
    runner: CliRunner,
    unknown_write: dict[str, str],
) -> None:
    result = runner.invoke(
        cli.app,
        ["reconcile", "--app", RECOVERY_APP, "--store", unknown_write["store"]],
        env={"RECOVERY_SERVICE_DB": unknown_write["service_db"]},
    )
    assert result.exit_code == 0, result.output
    assert re.search(r"not yet due\s*│\s*0\s", result.stdout)
    assert "not yet due;" not in result.stdout


def test_reconcile_reads_the_store_named_by_handrail_store(
    runner: CliRunner,
    unknown_write: dict[str, str],
) -> None:
    result = runner.invoke(
        cli.app,
        ["reconcile", "--app", RECOVERY_APP],
        env={
            "RECOVERY_SERVICE_DB": unknown_write["service_db"],
            "HANDRAIL_STORE": f"sqlite:///{unknown_write['store']}",
        },
    )
    assert result.exit_code == 0, result.output
    assert _execution_status(unknown_write["store"], unknown_write["key"])[0] == "SUCCEEDED"


def test_reconcile_watch_runs_passes_until_its_limit(
    runner: CliRunner,
    unknown_write: dict[str, str],
) -> None:
    result = runner.invoke(
        cli.app,
        [
            "reconcile",
            "--app",
            RECOVERY_APP,
            "--store",
            unknown_write["store"],
            "--watch",
            "--max-passes",
            "2",
            "--interval",
            "0.1",
        ],
        env={"RECOVERY_SERVICE_DB": unknown_write["service_db"]},
    )
    assert result.exit_code == 0, result.output
    assert re.search(r"pass 1: 0 expired leases, 1 succeeded", result.stdout)
    assert re.search(r"pass 2: 0 expired leases, 0 succeeded", result.stdout)
    assert "stopped after 2 pass(es)" in result.stdout
    assert _execution_status(unknown_write["store"], unknown_write["key"])[0] == "SUCCEEDED"


def test_reconcile_of_a_missing_store_exits_2_and_creates_no_file(
    runner: CliRunner,
    tmp_path: Path,
) -> None:
    missing = tmp_path / "none.db"
    result = runner.invoke(cli.app, ["reconcile", "--app", RECOVERY_APP, "--store", str(missing)])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: no store at")
    assert "Traceback" not in result.output
    assert not missing.exists()


@pytest.mark.parametrize(
    "arguments",
    [
        ["reconcile", "--app", RECOVERY_APP],
        ["reconcile", "--store", "x.db"],
        ["reconcile", "--app", RECOVERY_APP, "--store", "x.db", "--max-passes", "2"],
        ["reconcile", "--app", RECOVERY_APP, "--store", "mysql://db/handrail"],
    ],
    ids=["no-store", "no-app", "max-passes-without-watch", "unsupported-url"],
)
def test_reconcile_without_what_it_needs_exits_2(
    runner: CliRunner,
    monkeypatch: pytest.MonkeyPatch,
    arguments: list[str],
) -> None:
    monkeypatch.delenv("HANDRAIL_STORE", raising=False)
    result = runner.invoke(cli.app, arguments)
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert not (REPO / "x.db").exists()


def test_reconcile_watch_ends_after_the_pass_in_progress_on_ctrl_c(
    runner: CliRunner,
    unknown_write: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert threading.current_thread() is threading.main_thread()
    original = Reconciler.run_once

    async def interrupted_during_the_pass(self: Reconciler) -> PassReport:
        os.kill(os.getpid(), signal.SIGINT)
        return await original(self)

    monkeypatch.setattr(Reconciler, "run_once", interrupted_during_the_pass)
    result = runner.invoke(
        cli.app,
        [
            "reconcile",
            "--app",
            RECOVERY_APP,
            "--store",
            unknown_write["store"],
            "--watch",
            "--interval",
            "10",
            "--max-passes",
            "3",
        ],
        env={"RECOVERY_SERVICE_DB": unknown_write["service_db"]},
    )
    assert result.exit_code == 0, result.output
    assert "stopped after 1 pass(es)" in result.stdout
    assert _execution_status(unknown_write["store"], unknown_write["key"])[0] == "SUCCEEDED"


@pytest.mark.postgres
def test_reconcile_settles_an_unknown_write_in_postgresql_and_hides_the_password(
    runner: CliRunner,
    tmp_path: Path,
    postgres_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("HANDRAIL_STORE", raising=False)
    empty_postgres_store(postgres_url).close()  # a pass reads every tenant's records
    # The test server trusts local connections, so any password is accepted.
    url = postgres_url.replace("postgresql://postgres@", "postgresql://postgres:not-shown@")
    written = _lose_a_response(url, tmp_path / "tickets.db")
    result = runner.invoke(
        cli.app,
        ["reconcile", "--app", RECOVERY_APP, "--store", url],
        env={"RECOVERY_SERVICE_DB": written["service_db"]},
    )
    assert result.exit_code == 0, result.output
    assert _execution_status(url, written["key"]) == ("SUCCEEDED", written["ticket_no"])
    assert "not-shown" not in result.output
    assert "postgres:***@" in result.stdout


def test_reconcile_with_an_empty_store_option_exits_2(runner: CliRunner) -> None:
    result = runner.invoke(cli.app, ["reconcile", "--app", RECOVERY_APP, "--store", ""])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: --store must not be empty")


def test_the_demo_exits_2_when_the_recovery_scenario_leaves_its_script(
    runner: CliRunner,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Reconciling before the record is due leaves it UNKNOWN, where the script says SUCCEEDED.
    monkeypatch.setattr(recovery_demo, "PAST_GRACE", 1.0)
    result = runner.invoke(cli.app, ["demo", "--db", str(tmp_path / "audit.db")])
    assert result.exit_code == 2
    assert "UNEXPECTED: after reconciliation gave UNKNOWN None" in result.stdout
    assert result.stderr == "error: 1 demo outcome(s) differed from the script\n"


def test_executions_list_shows_the_unknown_write_and_resolve_settles_it_by_hand(
    runner: CliRunner,
    unknown_write: dict[str, str],
) -> None:
    store = unknown_write["store"]
    listed = runner.invoke(cli.app, ["executions", "list", "--store", store])
    assert listed.exit_code == 0, listed.output
    assert unknown_write["key"] in listed.stdout
    assert "UNKNOWN" in listed.stdout
    none_succeeded = runner.invoke(
        cli.app,
        ["executions", "list", "--store", store, "--status", "succeeded"],
    )
    assert unknown_write["key"] not in none_succeeded.stdout
    resolved = runner.invoke(
        cli.app,
        [
            "executions",
            "resolve",
            unknown_write["key"],
            "--store",
            store,
            "--succeeded",
            "--business-id",
            unknown_write["ticket_no"],
            "--operator",
            "ops-anna",
            "--note",
            "ticket found in the service console",
        ],
    )
    assert resolved.exit_code == 0, resolved.output
    assert "SUCCEEDED" in resolved.stdout
    assert _execution_status(store, unknown_write["key"]) == (
        "SUCCEEDED",
        unknown_write["ticket_no"],
    )
    audit = runner.invoke(cli.app, ["audit", "tail", "--store", store, "-n", "5"])
    assert "resolve" in audit.stdout
    again = runner.invoke(
        cli.app,
        [
            "executions",
            "resolve",
            unknown_write["key"],
            "--store",
            store,
            "--failed",
            "--operator",
            "ops-anna",
            "--note",
            "second thoughts",
        ],
    )
    assert again.exit_code == 2
    assert "only an UNKNOWN record" in again.stderr


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--operator", "a", "--note", "n"], "--succeeded or --failed"),
        (["--failed", "--business-id", "x", "--operator", "a", "--note", "n"], "goes with"),
        (["--failed", "--operator", " ", "--note", "n"], "operator and a note"),
    ],
)
def test_executions_resolve_refuses_an_incomplete_decision(
    runner: CliRunner,
    unknown_write: dict[str, str],
    arguments: list[str],
    message: str,
) -> None:
    result = runner.invoke(
        cli.app,
        [
            "executions",
            "resolve",
            unknown_write["key"],
            "--store",
            unknown_write["store"],
            *arguments,
        ],
    )
    assert result.exit_code == 2
    assert message in result.stderr
    assert _execution_status(unknown_write["store"], unknown_write["key"])[0] == "UNKNOWN"


def test_executions_list_refuses_an_unknown_status(
    runner: CliRunner,
    unknown_write: dict[str, str],
) -> None:
    result = runner.invoke(
        cli.app,
        ["executions", "list", "--store", unknown_write["store"], "--status", "maybe"],
    )
    assert result.exit_code == 2
    assert "unknown status" in result.stderr


def test_executions_list_shows_a_purged_record_as_a_tombstone_with_its_business_id(
    runner: CliRunner,
    unknown_write: dict[str, str],
) -> None:
    store_url = unknown_write["store"]
    resolved = runner.invoke(
        cli.app,
        [
            "executions",
            "resolve",
            unknown_write["key"],
            "--store",
            store_url,
            "--succeeded",
            "--business-id",
            unknown_write["ticket_no"],
            "--operator",
            "ops-anna",
            "--note",
            "ticket found in the service console",
        ],
    )
    assert resolved.exit_code == 0, resolved.output
    store = open_store(store_url, migrate=False)
    try:
        assert store.purge_executions(now=datetime.now(UTC) + timedelta(days=30)) == 1
    finally:
        store.close()
    listed = runner.invoke(cli.app, ["executions", "list", "--store", store_url, "--status", "all"])
    assert listed.exit_code == 0, listed.output
    assert "(purged)" in listed.stdout
    assert unknown_write["ticket_no"] in listed.stdout
    assert _execution_status(store_url, unknown_write["key"]) == (
        "SUCCEEDED",
        unknown_write["ticket_no"],
    )
