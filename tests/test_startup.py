"""Start-up stays light: `import handrail` and `handrail --help` load no driver or SDK.

Structural checks in fresh interpreters (what is in `sys.modules`), never timings:
the numbers are `bench/startup.py`'s. The lazily imported public names still resolve,
are the objects their modules define, and match what mypy sees in the
`TYPE_CHECKING` block.
"""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import handrail

HEAVY = (
    "psycopg",
    "psycopg_binary",
    "redis",
    "coredis",
    "httpx",
    "openai",
    "anthropic",
    "google",
    "sqlalchemy",
    "alembic",
    "limits",
    "detect_secrets",
    "phonenumbers",
    "stdnum",
)
"""Database drivers, Redis, HTTP clients, model SDKs and redaction plugins."""


def _loaded_after(statement: str) -> set[str]:
    script = f"import json, sys\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(  # noqa: S603 - our own interpreter and a fixed script
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


def _top_level(modules: set[str]) -> set[str]:
    return {name.partition(".")[0] for name in modules}


def test_import_handrail_loads_no_driver_sdk_or_redaction_plugin() -> None:
    loaded = _loaded_after("import handrail")
    assert sorted(_top_level(loaded) & set(HEAVY)) == []
    assert sorted(m for m in loaded if m.startswith("handrail.")) == []


def test_the_gate_and_the_app_load_no_driver_sdk_or_redis_client() -> None:
    loaded = _loaded_after("from handrail import Gate, Handrail, RateLimiter, Shaper, tool")
    assert sorted(_top_level(loaded) & set(HEAVY)) == []


def test_the_command_s_help_loads_no_store_gate_pydantic_or_sdk() -> None:
    loaded = _loaded_after(
        "from handrail.cli import app\n"
        "from typer.testing import CliRunner\n"
        "assert CliRunner().invoke(app, ['--help']).exit_code == 0"
    )
    assert sorted(_top_level(loaded) & {*HEAVY, "pydantic", "jsonschema_rs"}) == []
    core = ("handrail.gate", "handrail.store", "handrail.writes", "handrail.loop")
    assert sorted(m for m in loaded if m.startswith(core)) == []


def test_a_sql_store_loads_its_driver_when_first_named() -> None:
    loaded = _loaded_after("import handrail.store\nhandrail.store.SqliteStore")
    assert "sqlalchemy" in _top_level(loaded)


def test_every_public_name_resolves_to_its_module_s_object_and_is_listed() -> None:
    listed = set(dir(handrail))
    for name in handrail.__all__:
        assert name in listed
        value = getattr(handrail, name)
        assert value is getattr(importlib.import_module(handrail._LAZY[name]), name)
    assert sorted(handrail._LAZY) == sorted(handrail.__all__)


def test_what_mypy_sees_is_what_runs() -> None:
    tree = ast.parse(Path(handrail.__file__).read_text(encoding="utf-8"))
    guarded = next(node for node in tree.body if isinstance(node, ast.If))
    seen = {
        alias.asname or alias.name: node.module
        for node in guarded.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert seen == handrail._LAZY


@pytest.mark.parametrize("package", ["handrail", "handrail.store", "handrail.adapters"])
def test_an_unknown_name_is_still_an_attribute_error(package: str) -> None:
    module = importlib.import_module(package)
    with pytest.raises(AttributeError):
        _ = module.NoSuchName
    assert not hasattr(module, "_no_such_private")


def test_submodules_stay_reachable_as_attributes() -> None:
    loaded = _loaded_after("import handrail\nassert handrail.gate.Gate is handrail.Gate")
    assert "handrail.gate" in loaded
