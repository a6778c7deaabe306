import json
import re
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from handrail import cli
from handrail.adapters import DefinitionFormat

REPO = Path(__file__).resolve().parents[1]
FORBIDDEN = "bookstore.delete_all_orders"
PROVIDER_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    # The CLI imports apps from the current directory; keep its sys.path edit local.
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delenv("HANDRAIL_DB", raising=False)
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
    result = runner.invoke(cli.app, ["audit", "tail", "--db", str(demo_db), "-n", "3"])
    assert result.exit_code == 0, result.output
    assert "call_8" in result.stdout
    assert "UNKNOWN_TOOL" in result.stdout
    assert "call_1" not in result.stdout


def test_audit_tail_filters_by_call_id(runner: CliRunner, demo_db: Path) -> None:
    result = runner.invoke(cli.app, ["audit", "tail", "--db", str(demo_db), "--call", "call_6"])
    assert result.exit_code == 0, result.output
    assert "NOT_FOUND" in result.stdout
    assert set(re.findall(r"call_\d+", result.stdout)) == {"call_6"}


def test_audit_tail_filters_by_tenant(runner: CliRunner, demo_db: Path) -> None:
    acme = runner.invoke(cli.app, ["audit", "tail", "--db", str(demo_db), "--tenant", "acme"])
    globex = runner.invoke(cli.app, ["audit", "tail", "--db", str(demo_db), "--tenant", "globex"])
    assert "call_" in acme.stdout
    assert globex.exit_code == 0
    assert "call_" not in globex.stdout


def test_audit_tail_reads_the_database_named_by_handrail_db(
    runner: CliRunner,
    demo_db: Path,
) -> None:
    result = runner.invoke(cli.app, ["audit", "tail"], env={"HANDRAIL_DB": str(demo_db)})
    assert result.exit_code == 0, result.output
    assert "call_8" in result.stdout


def test_audit_tail_without_a_database_exits_2(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(cli.app, ["audit", "tail", "--db", str(tmp_path / "none.db")])
    assert result.exit_code == 2
    assert not (tmp_path / "none.db").exists()


def test_audit_tail_of_a_file_that_is_not_an_audit_store_exits_2(
    runner: CliRunner,
    tmp_path: Path,
) -> None:
    other = tmp_path / "other.db"
    other.write_bytes(b"not a database at all, just bytes" * 10)
    result = runner.invoke(cli.app, ["audit", "tail", "--db", str(other)])
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
