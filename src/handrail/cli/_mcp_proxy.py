"""`handrail mcp proxy|approve|list`: a firewall in front of another MCP server.

`proxy` connects to an upstream (a command over stdio, or a Streamable HTTP URL),
imports the tools its policy file allows and whose definitions are pinned, and serves
them onward over stdio through the gate, as the configured principal. `approve` shows
what is new or changed upstream as a difference and pins the definitions an operator
names; `list` shows the pins (and, given an upstream, each tool's state now). Nothing
but protocol goes to stdout while serving; reports go to stderr. The SDK is imported
only when a command runs, never for `--help`.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from handrail.cli._common import CliError, HelpCommand, StoreOption, one_line_errors
from handrail.cli._raw import shown
from handrail.cli._reconcile import open_existing_store
from handrail.errors import ConfigurationError
from handrail.principal import Principal

if TYPE_CHECKING:
    from handrail.app import Handrail
    from handrail.mcp.pins import PinBook
    from handrail.mcp.policy import UpstreamPolicy
    from handrail.mcp.proxy import ImportReport, McpProxy
    from handrail.mcp.upstream import UpstreamTarget
    from handrail.writes.confirmation import Keyring

__all__ = ["add_proxy_commands", "approve", "list_pins", "proxy"]

UpstreamOption = Annotated[
    str | None,
    typer.Option(
        "--upstream",
        metavar="COMMAND",
        help=(
            "The upstream MCP server's command line, started over stdio (split like a "
            "shell would, never run by one)."
        ),
    ),
]
UpstreamUrlOption = Annotated[
    str | None,
    typer.Option("--upstream-url", metavar="URL", help="The upstream's Streamable HTTP URL."),
]
PassEnvOption = Annotated[
    list[str] | None,
    typer.Option(
        "--pass-env",
        metavar="NAME",
        help=(
            "An environment variable of this process to hand to a stdio upstream "
            "(repeatable; e.g. its API token). Others are not passed, beyond PATH, HOME "
            "and the like."
        ),
    ),
]
BearerEnvOption = Annotated[
    str | None,
    typer.Option(
        "--bearer-env",
        metavar="NAME",
        help="The environment variable holding a bearer token for an HTTP upstream.",
    ),
]
PolicyOption = Annotated[
    Path,
    typer.Option(
        "--policy",
        metavar="FILE",
        help=(
            "The operator's TOML policy: each upstream tool's risk, permissions and "
            'confirmation, and `unlisted = "confirm" | "hide"` (required).'
        ),
    ),
]
NamespaceOption = Annotated[
    str,
    typer.Option(
        "--namespace",
        help="The namespace of the imported tools (`NAMESPACE.tool`), also the pins' key.",
    ),
]
ApproveNewOption = Annotated[
    bool,
    typer.Option(
        "--approve-new",
        help=(
            "Pin tools seen for the first time without asking. Off by default: a new "
            "tool waits for `handrail mcp approve` like a changed one."
        ),
    ),
]
ProxyTenant = Annotated[
    str,
    typer.Option("--tenant", envvar="HANDRAIL_TENANT", help="Tenant the proxy acts for."),
]
ProxyUser = Annotated[
    str,
    typer.Option("--user", envvar="HANDRAIL_USER", help="User id the proxy acts for."),
]
ProxyPermissions = Annotated[
    list[str] | None,
    typer.Option(
        "--permission",
        "-p",
        help="A permission that user holds (repeatable). None by default.",
    ),
]
KeyringOption = Annotated[
    Path | None,
    typer.Option(
        "--keyring",
        metavar="FILE",
        help=(
            "The confirmation keys that sign plan tokens (Keyring.from_file); without it "
            "HANDRAIL_CONFIRMATION_KEYS when set. Needed when the policy allows writes "
            "and the store is not memory://."
        ),
    ),
]
ToolsOption = Annotated[
    list[str] | None,
    typer.Option("--tool", help="An upstream tool name to approve (repeatable)."),
]
AllOption = Annotated[bool, typer.Option("--all", help="Approve every new or changed tool.")]
OperatorOption = Annotated[
    str,
    typer.Option("--by", envvar="HANDRAIL_USER", help="Who approves (kept in the audit trail)."),
]
RecheckOption = Annotated[
    float,
    typer.Option(
        "--recheck",
        metavar="SECONDS",
        min=0.0,
        help=(
            "Look at the upstream's tools again this often (0: never), besides every new "
            "connection and every list_changed it sends; a changed definition is disabled."
        ),
    ),
]
_CONNECT_TIMEOUT = 60.0
_MAX_APPROVER = 256  # what a pin keeps of its approver


@one_line_errors
def proxy(
    *,
    policy: PolicyOption,
    store: StoreOption,
    tenant: ProxyTenant,
    user: ProxyUser,
    upstream: UpstreamOption = None,
    upstream_url: UpstreamUrlOption = None,
    pass_env: PassEnvOption = None,
    bearer_env: BearerEnvOption = None,
    namespace: NamespaceOption = "upstream",
    approve_new: ApproveNewOption = False,
    permission: ProxyPermissions = None,
    keyring: KeyringOption = None,
    recheck: RecheckOption = 300.0,
) -> None:
    """Serve an upstream MCP server's tools onward over stdio, through the gate.

    Only the tools the policy allows and whose definitions are pinned are served,
    with the policy's risk, permissions and confirmation; a definition that changes
    upstream disables its tool until it is approved again. Results are shaped,
    redacted and marked as untrusted data.
    """
    principal = _principal(tenant, user, permission)
    rules = _policy(policy)
    target = _target(upstream, upstream_url, pass_env, bearer_env)
    app = _open_app(store, rules, keyring)
    asyncio.run(
        _serve(app, rules, target, namespace, principal, approve_new=approve_new, recheck=recheck),
    )


@one_line_errors
def approve(
    *,
    policy: PolicyOption,
    store: StoreOption,
    by: OperatorOption,
    upstream: UpstreamOption = None,
    upstream_url: UpstreamUrlOption = None,
    pass_env: PassEnvOption = None,
    bearer_env: BearerEnvOption = None,
    namespace: NamespaceOption = "upstream",
    tool: ToolsOption = None,
    all_tools: AllOption = False,
) -> None:
    """Show what is new or changed upstream, and pin the definitions named.

    Without --tool or --all nothing is pinned: the differences are shown for review.
    Each approval is audited with the approver and the definition's SHA-256.
    """
    if not by.strip() or len(by) > _MAX_APPROVER or not by.isprintable():
        raise CliError(
            f"--by must name the person who approves: 1-{_MAX_APPROVER} printable characters"
        )
    rules = _policy(policy)
    target = _target(upstream, upstream_url, pass_env, bearer_env)
    app = _open_app(store, None, None)
    try:
        asyncio.run(
            _approve(
                app, rules, target, namespace, by=by, names=set(tool or ()), all_tools=all_tools
            )
        )
    finally:
        app.close()


@one_line_errors
def list_pins(
    *,
    store: StoreOption,
    namespace: Annotated[
        str | None,
        typer.Option("--namespace", help="Only this upstream's pins."),
    ] = None,
    upstream: UpstreamOption = None,
    upstream_url: UpstreamUrlOption = None,
    pass_env: PassEnvOption = None,
    bearer_env: BearerEnvOption = None,
    policy: Annotated[
        Path | None,
        typer.Option("--policy", metavar="FILE", help="With an upstream: hide what it hides."),
    ] = None,
) -> None:
    """List the pinned tool definitions; with an upstream, each listed tool's state now.

    States: pinned (served), changed (disabled until approved), new (waiting for
    approval), hidden (by the policy), gone (pinned but no longer listed). Reads an
    existing store only (a missing SQLite file is an error, never a new store).
    """
    from handrail.mcp.pins import PinBook  # noqa: PLC0415 - not for --help

    opened = open_existing_store(store)
    try:
        pins = PinBook(opened)  # a view: a change it finds is audited by the proxy
        if upstream is None and upstream_url is None:
            for pin in pins.pins(namespace):
                typer.echo(
                    f"{pin.upstream}.{pin.tool}\tpinned\tsha256:{pin.definition_hash[:16]}\t"
                    f"v{pin.version}\t{pin.approved_by}\t{pin.approved_at.isoformat()}",
                )
            return
        if policy is None:
            raise CliError("with --upstream or --upstream-url, --policy is required too")
        rules = _policy(policy)
        target = _target(upstream, upstream_url, pass_env, bearer_env)
        asyncio.run(_states(pins, rules, target, namespace or "upstream"))
    finally:
        opened.close()


def add_proxy_commands(mcp_app: typer.Typer) -> None:
    """Register `proxy`, `approve` and `list` on the `handrail mcp` sub-app."""
    mcp_app.command("proxy", cls=HelpCommand)(proxy)
    mcp_app.command("approve", cls=HelpCommand)(approve)
    mcp_app.command("list", cls=HelpCommand)(list_pins)


# --- parts ---------------------------------------------------------------------------------


def _principal(tenant: str, user: str, permissions: list[str] | None) -> Principal:
    if not tenant or not user:
        raise CliError("--tenant and --user must not be empty")
    try:
        return Principal(
            user_id=user,
            tenant_id=tenant,
            permissions=frozenset(p for p in permissions or () if p),
        )
    except ValueError as exc:
        raise CliError(str(exc)) from None


def _policy(path: Path) -> UpstreamPolicy:
    from handrail.mcp.policy import load_policy  # noqa: PLC0415 - not for --help

    return load_policy(path)


def _target(
    command: str | None,
    url: str | None,
    pass_env: list[str] | None,
    bearer_env: str | None,
) -> UpstreamTarget:
    from handrail.mcp.upstream import HttpUpstream, StdioUpstream  # noqa: PLC0415

    if (command is None) == (url is None):
        raise CliError("give exactly one of --upstream COMMAND and --upstream-url URL")
    if command is not None:
        if bearer_env is not None:
            raise CliError("--bearer-env is for --upstream-url; use --pass-env for a command")
        parsed = StdioUpstream.parse(command)
        return StdioUpstream(
            command=parsed.command,
            args=parsed.args,
            env={name: _environment(name) for name in pass_env or ()},
        )
    assert url is not None  # noqa: S101 - checked above
    if pass_env:
        raise CliError("--pass-env is for --upstream; use --bearer-env for a URL")
    headers = {} if bearer_env is None else {"Authorization": f"Bearer {_environment(bearer_env)}"}
    return HttpUpstream(url=url, headers=headers)


def _environment(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise CliError(f"the environment variable {name!r} is not set")
    return value


def _open_app(store: str, rules: UpstreamPolicy | None, keyring: Path | None) -> Handrail:
    from handrail.app import MEMORY, Handrail  # noqa: PLC0415 - not for --help
    from handrail.declare.registry import Registry  # noqa: PLC0415

    keys = _keyring(keyring)
    if keys is None and rules is not None and _may_write(rules):
        if store != MEMORY:
            raise CliError(
                "the policy allows writes: pass --keyring FILE or set "
                "HANDRAIL_CONFIRMATION_KEYS (the same keys in every process of this store)",
            )
        keys = _memory_keyring()
    try:
        return Handrail.open(store, registry=Registry(), keyring=keys)
    except ConfigurationError as exc:
        raise CliError(str(exc)) from None


def _may_write(rules: UpstreamPolicy) -> bool:
    from handrail.mcp.policy import Unlisted  # noqa: PLC0415

    return rules.unlisted is Unlisted.CONFIRM or any(r.writes for r in rules.tools.values())


def _keyring(path: Path | None) -> Keyring | None:
    from handrail.writes.confirmation import KEYRING_ENV, Keyring  # noqa: PLC0415

    if path is not None:
        return Keyring.from_file(path)
    return Keyring.from_env() if os.environ.get(KEYRING_ENV) else None


def _memory_keyring() -> Keyring:
    from handrail.writes.confirmation import Keyring  # noqa: PLC0415

    return Keyring.from_text(Keyring.new_key_text("memory"))


def _book(app: Handrail) -> PinBook:
    from handrail.mcp.pins import PinBook  # noqa: PLC0415

    return PinBook(app.store, audit=app.audit)


def _proxy(
    app: Handrail,
    rules: UpstreamPolicy,
    target: UpstreamTarget,
    namespace: str,
    *,
    approve_new: bool,
) -> McpProxy:
    from handrail.mcp.proxy import McpProxy  # noqa: PLC0415
    from handrail.mcp.upstream import Upstream  # noqa: PLC0415

    return McpProxy(
        Upstream(target),
        rules,
        _book(app),
        app.registry,
        namespace=namespace,
        approve_new=approve_new,
    )


def _report(report: ImportReport) -> None:
    for name in report.served:
        typer.echo(f"served\t{name}", err=True)
    for check in report.pending:
        typer.echo(
            f"{check.status.value}\t{check.upstream}.{check.tool.name}\t"
            f"not served until `handrail mcp approve`",
            err=True,
        )
    # Upstream names are untrusted text: escaped, so none can rewrite the terminal.
    for name in report.hidden:
        typer.echo(f"hidden\t{shown(name)}", err=True)
    for name, reason in report.refused:
        typer.echo(f"refused\t{shown(name)}\t{reason}", err=True)


async def _serve(
    app: Handrail,
    rules: UpstreamPolicy,
    target: UpstreamTarget,
    namespace: str,
    principal: Principal,
    *,
    approve_new: bool,
    recheck: float,
) -> None:
    from handrail.mcp.server import GatedServer, fixed_principal  # noqa: PLC0415

    firewall = _proxy(app, rules, target, namespace, approve_new=approve_new)
    watcher: asyncio.Task[None] | None = None
    try:
        _report(await firewall.sync(timeout=_CONNECT_TIMEOUT))
        if recheck > 0:
            watcher = asyncio.create_task(_rechecking(firewall, recheck))
        server = GatedServer(
            app, principal=fixed_principal(principal), name=f"handrail-{namespace}"
        )
        try:
            await server.run_stdio()
        finally:
            server.close()
    finally:
        if watcher is not None:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
        await firewall.aclose()
        await app.aclose()


async def _rechecking(firewall: McpProxy, every: float) -> None:
    """Sync the proxy with its upstream every `every` seconds until cancelled."""
    from handrail.mcp.upstream import UpstreamError  # noqa: PLC0415

    while True:
        await asyncio.sleep(every)
        try:
            await firewall.sync(timeout=_CONNECT_TIMEOUT)
        except UpstreamError as exc:
            # Reported, not fatal: calls fail with their own codes meanwhile, and the
            # next connection checks the pins again.
            typer.echo(f"recheck failed: {exc}", err=True)


async def _approve(
    app: Handrail,
    rules: UpstreamPolicy,
    target: UpstreamTarget,
    namespace: str,
    *,
    by: str,
    names: set[str],
    all_tools: bool,
) -> None:
    from handrail.mcp.pins import definition_diff  # noqa: PLC0415

    firewall = _proxy(app, rules, target, namespace, approve_new=False)
    try:
        report = await firewall.sync(timeout=_CONNECT_TIMEOUT)
    finally:
        await firewall.aclose()
    for name, reason in report.refused:
        typer.echo(f"refused\t{namespace}.{shown(name)}\t{reason}")
    waiting = {check.tool.name: check for check in report.pending}
    unknown = names - set(waiting)
    if unknown:
        raise CliError(
            f"not new or changed (or hidden by the policy): {', '.join(sorted(unknown))}",
        )
    if not waiting:
        typer.echo("every tool the policy allows is pinned as listed; nothing to approve")
        return
    for name, check in sorted(waiting.items()):
        typer.echo(f"== {namespace}.{name}: {check.status.value}")
        sys.stdout.write(definition_diff(check.pin, check.tool))
        if all_tools or name in names:
            pin = await asyncio.to_thread(firewall.pins.approve, namespace, check.tool, actor=by)
            typer.echo(f"approved {namespace}.{name} sha256:{pin.definition_hash} v{pin.version}")
    if not all_tools and not names:
        typer.echo("nothing approved: name tools with --tool NAME, or pass --all")


async def _states(
    pins: PinBook, rules: UpstreamPolicy, target: UpstreamTarget, namespace: str
) -> None:
    from handrail.mcp.pins import PinStatus  # noqa: PLC0415
    from handrail.mcp.proxy import unusable  # noqa: PLC0415
    from handrail.mcp.upstream import Upstream  # noqa: PLC0415

    upstream = Upstream(target)
    try:
        listed = await upstream.list_tools(timeout=_CONNECT_TIMEOUT)
    finally:
        await upstream.aclose()
    seen = set()
    for tool in sorted(listed, key=lambda t: t.name):
        seen.add(tool.name)
        name = shown(tool.name)  # untrusted text: escaped for the terminal
        if rules.rule(tool.name) is None:
            typer.echo(f"{namespace}.{name}\thidden")
            continue
        problem = unusable(namespace, tool)
        if problem is not None:
            typer.echo(f"{namespace}.{name}\trefused\t{problem}")
            continue
        check = await asyncio.to_thread(pins.check, namespace, tool)
        state = "pinned" if check.status is PinStatus.PINNED else check.status.value
        typer.echo(f"{namespace}.{tool.name}\t{state}\tsha256:{tool.definition_hash()[:16]}")
    for pin in pins.pins(namespace):
        if pin.tool not in seen:
            typer.echo(f"{namespace}.{shown(pin.tool)}\tgone\tsha256:{pin.definition_hash[:16]}")
