"""`handrail tools`: what an application exposes to a principal, and its definitions.

Lists, specs and exports come from `Registry.exposed(principal)` only, so forbidden
(L4) and disabled tools never appear, whatever the options. The catalogue export, lint
and diff (`_tools_lint`) cover every tool some model may see, also never those.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from handrail.adapters import DefinitionFormat, exposed_definitions, from_wire_name, to_wire_name
from handrail.cli._common import (
    DEFAULT_APP,
    OPERATOR_TENANT,
    OPERATOR_USER,
    AppOption,
    CliError,
    HelpCommand,
    HelpGroup,
    PermissionOption,
    ScenarioOption,
    TenantOption,
    UserOption,
    console_for_output,
    exposed,
    folding_table,
    load_registry,
    one_line_errors,
    operator_principal,
    who,
)
from handrail.cli._tools_lint import diff_catalogues, lint_tools

if TYPE_CHECKING:
    from handrail.adapters.base import Adapter
    from handrail.declare.registry import Registry
    from handrail.spec import ToolSpec

__all__ = ["spec_document", "tools_app"]

tools_app = typer.Typer(
    cls=HelpGroup,
    help="The tools exposed to a principal; the catalogue's lint and review.",
    no_args_is_help=True,
)
tools_app.command("lint", cls=HelpCommand)(lint_tools)
tools_app.command("diff", cls=HelpCommand)(diff_catalogues)


@tools_app.command("list", cls=HelpCommand)
@one_line_errors
def list_tools(
    *,
    app_target: AppOption = DEFAULT_APP,
    tenant: TenantOption = OPERATOR_TENANT,
    user: UserOption = OPERATOR_USER,
    permission: PermissionOption = None,
    scenario: ScenarioOption = None,
) -> None:
    """List the tools exposed to the principal: name, risk, side effect, permissions."""
    principal, specs = exposed(
        app_target, tenant=tenant, user=user, permissions=permission, scenario=scenario
    )
    table = folding_table(
        "name",
        "risk",
        "side effect",
        "permissions",
        "schema_version",
        caption=(
            f"{len(specs)} tool(s) exposed to {who(principal)} holding "
            f"{', '.join(sorted(principal.permissions)) or 'no permissions'}; "
            f"forbidden and disabled tools are never listed"
        ),
    )
    for spec in specs:
        table.add_row(
            spec.name,
            spec.risk.name,
            spec.side_effect.value,
            ", ".join(sorted(spec.permissions)) or "-",
            spec.schema_version,
        )
    console_for_output().print(table)


def spec_document(spec: ToolSpec) -> dict[str, Any]:
    """Everything a spec declares, as JSON, with the model-facing schema last."""
    from handrail.adapters.json_schema import tool_definition  # noqa: PLC0415 - not for --help

    neutral = tool_definition(spec)
    schema = neutral.pop("input_schema")
    return {
        **neutral,
        "wire_name": to_wire_name(spec.name),
        "timeout": spec.timeout,
        "owner": spec.owner,
        "enabled_tenants": None if spec.enabled_tenants is None else sorted(spec.enabled_tenants),
        "scenarios": sorted(spec.scenarios),
        "trusted_parameters": {name: mark.attribute for name, mark in spec.trusted.items()},
        "business_values": {key: value.reason for key, value in spec.business_values.items()},
        "retry": {
            "max_attempts": spec.retry.max_attempts,
            "initial_backoff": spec.retry.initial_backoff,
            "max_backoff": spec.retry.max_backoff,
            "transient": [kind.__name__ for kind in spec.retry.transient],
        },
        "idempotency": spec.idempotency.mode.value,
        "confirmation": {
            "mode": spec.confirmation.mode.value,
            "approver_permission": spec.confirmation.approver_permission,
            "distinct_approvers": spec.confirmation.distinct_approvers,
            "ttl_seconds": spec.confirmation.ttl_seconds,
        },
        "hints": {
            "read_only": spec.hints.read_only,
            "destructive": spec.hints.destructive,
            "idempotent": spec.hints.idempotent,
            "open_world": spec.hints.open_world,
        },
        "input_schema": schema,
    }


@tools_app.command("show", cls=HelpCommand)
@one_line_errors
def show_tool(
    *,
    name: Annotated[str, typer.Argument(help="Full tool name, or its provider wire name.")],
    app_target: AppOption = DEFAULT_APP,
    tenant: TenantOption = OPERATOR_TENANT,
    user: UserOption = OPERATOR_USER,
    permission: PermissionOption = None,
    scenario: ScenarioOption = None,
) -> None:
    """Print one exposed tool's full spec, schema included, as JSON."""
    principal, specs = exposed(
        app_target, tenant=tenant, user=user, permissions=permission, scenario=scenario
    )
    wanted = {name, from_wire_name(name)}
    spec = next((s for s in specs if s.name in wanted), None)
    if spec is None:
        raise CliError(
            f"no tool {name!r} is exposed to {who(principal)}: it is not registered, or it "
            f"is disabled, forbidden, or needs permissions the principal lacks",
        )
    typer.echo(json.dumps(spec_document(spec), indent=2, ensure_ascii=False))


@tools_app.command("export", cls=HelpCommand)
@one_line_errors
def export_tools(
    *,
    fmt: Annotated[
        DefinitionFormat | None,
        typer.Option("--format", "-f", help="The wire format of the definitions."),
    ] = None,
    catalogue: Annotated[
        bool,
        typer.Option(
            "--catalogue",
            help=(
                "Instead of definitions, the approved-catalogue JSON: per tool what the "
                "model sees (name, description, schema), versions, risk, owner, "
                "deprecation and a hash, for every tool some model may see (principal "
                "options do not apply). Keep it; pass it to tools lint --approved and "
                "tools diff."
            ),
        ),
    ] = False,
    strict: Annotated[
        bool,
        typer.Option(
            "--strict",
            help=(
                "Strict-mode definitions (grammar-constrained arguments), as the adapter "
                "sends them with strict=True: openai-chat, openai-responses and anthropic "
                "only. Each schema rewrite is noted on stderr; a schema strict mode cannot "
                "take is an error."
            ),
        ),
    ] = False,
    app_target: AppOption = DEFAULT_APP,
    tenant: TenantOption = OPERATOR_TENANT,
    user: UserOption = OPERATOR_USER,
    permission: PermissionOption = None,
    scenario: ScenarioOption = None,
) -> None:
    """Print the tool definitions exposed to the principal as JSON, ready for a request.

    With --catalogue, print the approved-catalogue JSON instead.
    """
    if catalogue == (fmt is not None):
        raise CliError("give either --format or --catalogue")
    registry = load_registry(app_target)
    if fmt is None:
        typer.echo(_catalogue_json(registry), nl=False)
        return
    principal = operator_principal(registry, tenant=tenant, user=user, permissions=permission)
    if not strict:
        definitions = exposed_definitions(registry, principal, fmt, scenario=scenario)
        typer.echo(json.dumps(definitions, indent=2, ensure_ascii=False))
        return
    adapter = _strict_adapter(fmt)
    rendered = adapter.tool_definitions(registry.exposed(principal, scenario=scenario))
    for issue in rendered.issues:
        typer.echo(
            f"note: {issue.tool} {issue.path}: {issue.keyword} {issue.action.value} "
            f"({issue.detail})",
            err=True,
        )
    typer.echo(json.dumps(rendered.payload, indent=2, ensure_ascii=False))


def _catalogue_json(registry: Registry) -> str:
    """The catalogue of every registered tool that is neither forbidden nor disabled."""
    from handrail.declare.catalogue import Catalogue  # noqa: PLC0415 - not for --help
    from handrail.declare.exposure import never_exposed  # noqa: PLC0415

    return Catalogue.of(s for s in registry.specs() if never_exposed(s) is None).to_json()


def _strict_adapter(fmt: DefinitionFormat) -> Adapter:
    """The adapter of `fmt` in strict mode; formats without one are refused."""
    from handrail.adapters import (  # noqa: PLC0415 - not for --help
        AnthropicAdapter,
        OpenAIChatAdapter,
        OpenAIResponsesAdapter,
    )

    match fmt:
        case DefinitionFormat.OPENAI_CHAT:
            return OpenAIChatAdapter(strict=True)
        case DefinitionFormat.OPENAI_RESPONSES:
            return OpenAIResponsesAdapter(strict=True)
        case DefinitionFormat.ANTHROPIC:
            return AnthropicAdapter(strict=True)
        case _:
            raise CliError(
                f"--strict applies to openai-chat, openai-responses and anthropic, not {fmt}"
            )
