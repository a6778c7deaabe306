"""The tree shows the path of a call, and its dependencies only point one way.

An AST walk over `src/handrail` builds the import graph as Python runs it: importing
`handrail.a.b` runs `handrail/a/__init__.py` first, so a module depends on every
package above what it imports, and imports under `TYPE_CHECKING` count too (a type is
a dependency). On that graph: no circle, and DESIGN §6's must-nevers hold for
everything a module reaches, not only what it names. The public names and deep
imports that existed before the tree was grouped by stage are pinned here.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

import handrail

SRC = Path(handrail.__file__).parent
ROOT = "handrail"

FACES = ("handrail.cli", "handrail.mcp", "handrail.server", "handrail.tasks", "handrail.eval")
"""The faces at the edge (the ones later work adds are named already): nothing imports them."""


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in SRC.rglob("*.py")}


def _absolute(module: str, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    is_package = _modules()[module].name == "__init__.py"
    base = module.split(".")
    keep = len(base) - node.level + (1 if is_package else 0)
    return ".".join([*base[:keep], *([node.module] if node.module else [])])


def _with_packages(name: str) -> Iterator[str]:
    parts = name.split(".")
    for end in range(2, len(parts) + 1):
        yield ".".join(parts[:end])


@cache
def _graph() -> dict[str, frozenset[str]]:
    modules = _modules()
    graph: dict[str, frozenset[str]] = {}
    for module, path in modules.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                base = _absolute(module, node)
                targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            for target in targets:
                found.update(name for name in _with_packages(target) if name in modules)
        found.discard(module)
        # A package's own __init__ is run before its modules; that is not a dependency.
        found.difference_update(p for p in _with_packages(module) if p != module)
        graph[module] = frozenset(found)
    return graph


def _reach(start: str) -> set[str]:
    graph, seen, todo = _graph(), set(), [start]
    while todo:
        for target in graph[todo.pop()]:
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def _within(module: str, *packages: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def _circle() -> list[str] | None:
    graph = _graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        stack.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                return [*stack[stack.index(target) :], target]
            if target not in state and (found := visit(target)):
                return found
        stack.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state and (found := visit(module)):
            return found
    return None


def test_the_walk_sees_every_module_and_the_imports_python_runs() -> None:
    graph = _graph()
    assert len(graph) > 100
    assert "handrail.gate" in graph["handrail"]
    assert "handrail.writes.executor" in graph["handrail.writes.service"]
    # `from handrail.store.base import Store` runs handrail/store/__init__.py as well.
    assert {"handrail.store", "handrail.store.base"} <= graph["handrail.record.batching"]


def test_no_module_takes_part_in_an_import_circle() -> None:
    assert _circle() is None


@pytest.mark.parametrize("module", sorted(m for m in _modules() if _within(m, "handrail.store")))
def test_the_store_reaches_no_execution_logic(module: str) -> None:
    logic = (
        "handrail.gate",
        "handrail.scheduler",
        "handrail.checks",
        "handrail.authz",
        "handrail.writes",
        "handrail.record",
        "handrail.declare",
        "handrail.adapters",
        "handrail.loop",
        "handrail.tools",
    )
    assert sorted(m for m in _reach(module) if _within(m, *logic)) == []


@pytest.mark.parametrize("module", sorted(m for m in _modules() if _within(m, "handrail.adapters")))
def test_adapters_reach_no_authorization_writes_or_store(module: str) -> None:
    barred = ("handrail.authz", "handrail.writes", "handrail.store", "handrail.gate")
    assert sorted(m for m in _reach(module) if _within(m, *barred)) == []


@pytest.mark.parametrize("module", sorted(m for m in _modules() if _within(m, "handrail.tools")))
def test_tools_reach_no_authorization_writes_gate_or_store(module: str) -> None:
    barred = (
        "handrail.authz",
        "handrail.writes",
        "handrail.gate",
        "handrail.scheduler",
        "handrail.store",
    )
    assert sorted(m for m in _reach(module) if _within(m, *barred)) == []


@pytest.mark.parametrize(
    "module", sorted(m for m in _modules() if m != ROOT and not _within(m, *FACES))
)
def test_the_core_imports_no_face(module: str) -> None:
    assert sorted(m for m in _reach(module) if _within(m, *FACES)) == []


def test_the_vocabulary_at_the_top_imports_no_stage() -> None:
    stages = (
        "handrail.declare",
        "handrail.checks",
        "handrail.authz",
        "handrail.writes",
        "handrail.record",
        "handrail.store",
        "handrail.gate",
        "handrail.scheduler",
    )
    vocabulary = [
        m
        for m, path in _modules().items()
        if m.count(".") == 1
        and path.name != "__init__.py"
        and m not in {"handrail.app", "handrail.gate", "handrail.scheduler", "handrail.testing"}
    ]
    assert len(vocabulary) > 10
    reached = {m: sorted(t for t in _reach(m) if _within(t, *stages)) for m in vocabulary}
    assert {m: found for m, found in reached.items() if found} == {}


# --- what users may already import -------------------------------------------------------------

PUBLIC_BEFORE = frozenset(
    (
        "AccessRefusedError",
        "AllowAll",
        "Amount",
        "ArgumentLimits",
        "AuditEvent",
        "AuditSink",
        "AuditSinkError",
        "AuditSinkHealth",
        "AuditSubject",
        "AuditWriterState",
        "BatchingAuditSink",
        "Budget",
        "BusinessValue",
        "Clock",
        "ConfirmationMode",
        "ConfirmationPolicy",
        "ConfirmationToken",
        "Conflict",
        "ConversationGuard",
        "Cursors",
        "DataMarker",
        "Decision",
        "EnvSecretProvider",
        "Envelope",
        "ErrorCode",
        "ErrorDetail",
        "ExecutionRecord",
        "ExecutionStatus",
        "Exposure",
        "ExposureRequest",
        "Found",
        "FromPrincipal",
        "Gate",
        "HandrailError",
        "HeuristicTokens",
        "IdempotencyMode",
        "IdempotencyPolicy",
        "IdempotencyScope",
        "Impact",
        "Intent",
        "IpMode",
        "Keyring",
        "Kind",
        "Limiter",
        "MODEL_INSTRUCTIONS",
        "MemoryAuditSink",
        "MemoryGuardState",
        "ModelCapabilities",
        "NeedsClarification",
        "NoProof",
        "NotExecuted",
        "NotFound",
        "Omission",
        "Outcome",
        "Overflow",
        "Plan",
        "PlanRecord",
        "PlanState",
        "Policy",
        "PolicyEngine",
        "PostgresStore",
        "Principal",
        "Projection",
        "Quota",
        "QuotaPolicy",
        "Rate",
        "RateLimited",
        "RateLimiter",
        "RawKeeping",
        "RawRecord",
        "RawResults",
        "ReconcilePolicy",
        "Reconciler",
        "RedactionAction",
        "RedactionPolicy",
        "Redactor",
        "RegistrationError",
        "Registry",
        "Resolved",
        "ResultPolicy",
        "RetryPolicy",
        "RiskLevel",
        "Route",
        "Router",
        "Rule",
        "SchemaStore",
        "ScrubbingFilter",
        "SecretAccessError",
        "SecretLedger",
        "SecretProvider",
        "Secrets",
        "Shaper",
        "SideEffect",
        "SigningKey",
        "SqliteStore",
        "StaticSecretProvider",
        "Status",
        "Store",
        "StoreError",
        "StreamKind",
        "SystemClock",
        "TenantQuota",
        "TextStream",
        "TokenEstimator",
        "Tool",
        "ToolCall",
        "ToolContext",
        "ToolFailed",
        "ToolHints",
        "ToolRetryable",
        "ToolSignal",
        "ToolSpec",
        "Trust",
        "VersionConflict",
        "WriteOutcome",
        "WriteRefusedError",
        "Writes",
        "continuation_tool",
        "open_store",
        "tool",
    )
)
"""`handrail.__all__` before the core was grouped into stage packages."""

DEEP_BEFORE = {
    "handrail.gate": ("Gate",),
    "handrail.store": (
        "MemoryStore",
        "PostgresStore",
        "SqlStore",
        "SqliteStore",
        "Store",
        "open_store",
    ),
}


def test_every_name_public_before_the_regrouping_still_is() -> None:
    assert sorted(PUBLIC_BEFORE - set(handrail.__all__)) == []
    for name in PUBLIC_BEFORE:
        assert getattr(handrail, name) is not None


@pytest.mark.parametrize(
    "module", ["handrail.gate", "handrail.adapters", "handrail.tools", "handrail.store"]
)
def test_deep_imports_users_may_have_written_keep_working(module: str) -> None:
    imported = importlib.import_module(module)
    names = DEEP_BEFORE.get(module, ())
    assert all(getattr(imported, name) is not None for name in names)
    assert all(getattr(imported, name) is not None for name in getattr(imported, "__all__", ()))
