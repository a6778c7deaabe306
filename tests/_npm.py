"""The pinned npm programs the MCP tests drive (mcp-tools/package-lock.json).

`make npm-tools` (run by `make test` when npm exists) installs them into .tools/npm.
A test asking for one that is absent skips with the reason, except under CI=true,
where it fails: CI must run the set-up.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

NPM_BIN = Path(__file__).resolve().parent.parent / ".tools" / "npm" / "node_modules" / ".bin"
"""Where `npm ci --prefix .tools/npm` puts the programs' launchers."""


def npm_program(name: str) -> Path:
    """The installed launcher of `name` (e.g. "mcp-inspector-cli", "mcp-server-everything")."""
    path = NPM_BIN / name
    if shutil.which("node") is None:
        reason = "Node.js (node) is not installed"
    elif not path.exists():
        reason = f"{path} is missing; run `make npm-tools`"
    else:
        return path
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}; CI must install the npm tools")
    pytest.skip(reason)
