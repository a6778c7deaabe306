"""One ignore policy, the workspace's, for every workspace tool.

find_files, read_file, search_text and the edit tools are built over one `Workspace`;
a name it ignores (at any depth, case-insensitively) is neither listed, read, searched
nor written by any of them.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from handrail import ErrorCode, Gate, Principal, Registry, Status, ToolCall
from handrail.errors import ConfigurationError
from handrail.testing import MemoryAuditSink, sequential_ids
from handrail.tools.workspace.edits import EditsConfig, edit_tools
from handrail.tools.workspace.files import WorkspaceConfig, read_tools
from handrail.tools.workspace.paths import Workspace, WorkspaceFile
from handrail.tools.workspace.search import SearchConfig, search_tools

pytestmark = pytest.mark.anyio

RG = shutil.which("rg")
USER = Principal(user_id="u", tenant_id="t", permissions=frozenset({"workspace.write"}))
IGNORE = (".git", "node_modules", "*.secret")
FILES = {
    "a.txt": "hit\n",
    "src/b.txt": "hit\n",
    ".git/config": "hit\n",
    "src/.git/HEAD": "hit\n",
    "node_modules/x.js": "hit\n",
    "src/NODE_MODULES/y.js": "hit\n",
    "keys.secret": "hit\n",
    "src/more.SECRET": "hit\n",
}
IGNORED = [name for name in FILES if name not in {"a.txt", "src/b.txt"}]


@pytest.fixture
def gate(tmp_path: Path) -> Gate:
    """Every workspace tool over one workspace that ignores IGNORE."""
    if RG is None:
        pytest.skip("ripgrep (rg) is not installed")
    root = tmp_path / "ws"
    for name, text in FILES.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    workspace = Workspace(root, ignore=IGNORE)
    registry = Registry()
    tools = [
        *read_tools(workspace, WorkspaceConfig(root=root)),
        *search_tools(workspace, SearchConfig(rg=RG)),
        *edit_tools(workspace, EditsConfig(journal_dir=tmp_path / "journal", git=None)),
    ]
    for item in tools:
        registry.register(item)
    return Gate(registry, audit=MemoryAuditSink(), new_id=sequential_ids())


async def _call(gate: Gate, name: str, **arguments: Any) -> Any:
    call = ToolCall(id="call-1", name=f"workspace.{name}", arguments=json.dumps(arguments))
    return await gate.handle(call, USER)


async def test_find_files_never_lists_an_ignored_name(gate: Gate) -> None:
    envelope = await _call(gate, "find_files", glob="**/*", type="any")
    assert envelope.status is Status.OK
    listed = [entry["path"] for entry in envelope.data["entries"]]
    assert listed == ["a.txt", "src", "src/b.txt"]


@pytest.mark.parametrize("path", IGNORED)
async def test_read_file_refuses_an_ignored_name(gate: Gate, path: str) -> None:
    envelope = await _call(gate, "read_file", path=path)
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS


async def test_search_text_never_searches_an_ignored_name(gate: Gate) -> None:
    envelope = await _call(gate, "search_text", pattern="hit")
    assert envelope.status is Status.OK
    found = sorted(match["path"] for match in envelope.data["matches"])
    assert found == ["a.txt", "src/b.txt"]
    chosen = await _call(gate, "search_text", pattern="hit", include=["*"])
    assert sorted(match["path"] for match in chosen.data["matches"]) == found


@pytest.mark.parametrize("path", [*IGNORED, ".git", "src/node_modules", "SRC/.GIT/x"])
async def test_search_text_refuses_to_search_an_ignored_path(gate: Gate, path: str) -> None:
    envelope = await _call(gate, "search_text", pattern="hit", paths=[path])
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS


@pytest.mark.parametrize("path", [*IGNORED, "node_modules/new.js", "new.secret"])
async def test_the_edit_tools_refuse_an_ignored_name(gate: Gate, path: str) -> None:
    envelope = await _call(gate, "preview_write", path=path, content="x\n")
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS
    patch = f"--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+x\n"
    patched = await _call(gate, "preview_patch", patch=patch)
    assert patched.error_type is ErrorCode.INVALID_ARGUMENTS


def test_ignore_patterns_match_one_name_at_any_depth_case_insensitively(tmp_path: Path) -> None:
    workspace = Workspace(tmp_path, ignore=(".git", "*.PYC", "node_modules"))
    assert workspace.ignore == (".git", "*.PYC", "node_modules")
    assert workspace.ignores(".GIT")
    assert workspace.ignores("mod.pyc")
    assert not workspace.ignores(".github")
    assert not workspace.ignores("node_modules2")
    assert workspace.ignored(WorkspaceFile(("src", "Node_Modules", "x.js")))
    assert not workspace.ignored(WorkspaceFile(("src", "x.js")))
    assert Workspace(tmp_path).ignore == (".git",)
    assert not Workspace(tmp_path, ignore=()).ignores(".git")


@pytest.mark.parametrize("pattern", ["", ".", "**", "a/b", "x{a,b}", "a\\b"])
def test_an_ignore_pattern_that_is_not_one_name_is_refused(tmp_path: Path, pattern: str) -> None:
    with pytest.raises(ConfigurationError):
        Workspace(tmp_path, ignore=(pattern,))
