"""Built-in tool packs that are safe by construction.

Each pack is a frozen config plus a builder that returns ordinary `Tool`s for a
`Registry`: the workspace (files, search, edits) beneath one root, commands in a
sandbox, HTTP fetches that cannot reach private addresses, SQL templates and patches,
deterministic helpers, and `search_tools` over the registry's deferred tools. The model
supplies only narrow, validated parameters.
"""

from handrail.tools.catalogue import SEARCH_TOOLS, search_tools_tool
from handrail.tools.commands import CommandsConfig, command_tools
from handrail.tools.helpers import helper_tools
from handrail.tools.http import (
    AddressAllowance,
    BlockedDestination,
    FetchResult,
    FetchTimedOut,
    HttpConfig,
    OtherContent,
    Resolver,
    StaticResolver,
    SystemResolver,
    http_tools,
)
from handrail.tools.sandbox import (
    ISOLATION,
    KillReason,
    LeftOut,
    Protection,
    Sandbox,
    SandboxConfig,
    SandboxLimits,
    SandboxResult,
    SandboxUnavailableError,
    SandboxUser,
    WorkspaceChanges,
)
from handrail.tools.sql import PatchTarget, QueryTemplate, SqlConfig, sql_engine, sql_tools
from handrail.tools.workspace.edits import (
    ChangeRecord,
    ChangeState,
    EditsConfig,
    FileChange,
    edit_tools,
    load_change,
    rollback,
)
from handrail.tools.workspace.files import WorkspaceConfig, read_tools
from handrail.tools.workspace.paths import Workspace
from handrail.tools.workspace.search import SearchConfig, SearchResult, TextSearch, search_tools

__all__ = [
    "ISOLATION",
    "SEARCH_TOOLS",
    "AddressAllowance",
    "BlockedDestination",
    "ChangeRecord",
    "ChangeState",
    "CommandsConfig",
    "EditsConfig",
    "FetchResult",
    "FetchTimedOut",
    "FileChange",
    "HttpConfig",
    "KillReason",
    "LeftOut",
    "OtherContent",
    "PatchTarget",
    "Protection",
    "QueryTemplate",
    "Resolver",
    "Sandbox",
    "SandboxConfig",
    "SandboxLimits",
    "SandboxResult",
    "SandboxUnavailableError",
    "SandboxUser",
    "SearchConfig",
    "SearchResult",
    "SqlConfig",
    "StaticResolver",
    "SystemResolver",
    "TextSearch",
    "Workspace",
    "WorkspaceChanges",
    "WorkspaceConfig",
    "command_tools",
    "edit_tools",
    "helper_tools",
    "http_tools",
    "load_change",
    "read_tools",
    "rollback",
    "search_tools",
    "search_tools_tool",
    "sql_engine",
    "sql_tools",
]
