"""What every command shares: one-line errors, options, loading an app, the principal.

An application is imported like uvicorn does (`module:attribute`, from the current
directory). The principal whose view is shown is built here from the options, never
from anything a model wrote. Commands import the core (registry, store, gate) when they
run, so `handrail --help` loads none of it.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import operator
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ParamSpec, TypeVar

import typer
import typer.core
from rich.console import Console
from rich.table import Table

from handrail.errors import HandrailError
from handrail.principal import Principal

if TYPE_CHECKING:
    from handrail.declare.registry import Registry
    from handrail.spec import ToolSpec

__all__ = [
    "DEFAULT_APP",
    "DEFAULT_DB",
    "OPERATOR_TENANT",
    "OPERATOR_USER",
    "STORE_OPTION",
    "AppOption",
    "CliError",
    "DbOption",
    "HelpCommand",
    "HelpGroup",
    "PermissionOption",
    "ScenarioOption",
    "StoreOption",
    "TenantOption",
    "UserOption",
    "console_for_output",
    "exposed",
    "folding_table",
    "import_attribute",
    "load_registry",
    "one_line_errors",
    "operator_principal",
    "unwrapped",
    "who",
]

DEFAULT_APP = "examples.bookstore:build_app"
DEFAULT_DB = Path(".handrail") / "handrail.db"
OPERATOR_TENANT = "acme"
OPERATOR_USER = "operator"
EXIT_ERROR = 2
PIPE_WIDTH = 200


class CliError(Exception):
    """A problem the operator can fix; shown as one line, exit code 2."""


_P = ParamSpec("_P")
_R = TypeVar("_R")


def one_line_errors(command: Callable[_P, _R]) -> Callable[_P, _R]:
    """Show expected failures as `error: ...` on stderr and exit 2, without a traceback."""

    @functools.wraps(command)
    def run(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return command(*args, **kwargs)
        except (CliError, HandrailError, OSError) as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(EXIT_ERROR) from None

    return run


# --- help ----------------------------------------------------------------------------------


def unwrapped(text: str | None) -> str | None:
    """Help text with its paragraphs joined into lines, for the terminal to wrap.

    Typer keeps a docstring's line breaks inside a paragraph and then wraps again, so a
    sentence would break twice. Paragraphs stay apart (blank lines).
    """
    if not text:
        return text
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(" ".join(line.strip() for line in p.splitlines()) for p in paragraphs)


def _no_flag_placeholders(params: list[Any]) -> list[Any]:
    # A flag takes no value: no `<bool>` beside it (Typer shows the type otherwise).
    for param in params:
        if isinstance(param, typer.core.TyperOption) and param.is_flag and param.metavar is None:
            param.metavar = ""
    return params


class HelpCommand(typer.core.TyperCommand):
    """A command whose help has no stray line breaks and no `<bool>` beside flags."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # noqa: ANN401 - Typer's options
        kwargs["help"] = unwrapped(kwargs.get("help"))
        super().__init__(*args, **kwargs)

    def get_params(self, ctx: Any) -> list[Any]:  # noqa: ANN401 - Typer's click is private
        """The parameters, flags without a value placeholder."""
        return _no_flag_placeholders(super().get_params(ctx))


class HelpGroup(typer.core.TyperGroup):
    """A group whose help has no stray line breaks and no `<bool>` beside flags."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # noqa: ANN401 - Typer's options
        kwargs["help"] = unwrapped(kwargs.get("help"))
        super().__init__(*args, **kwargs)

    def get_params(self, ctx: Any) -> list[Any]:  # noqa: ANN401 - Typer's click is private
        """The parameters, flags without a value placeholder."""
        return _no_flag_placeholders(super().get_params(ctx))


# --- options -------------------------------------------------------------------------------

AppOption = Annotated[
    str,
    typer.Option(
        "--app",
        envvar="HANDRAIL_APP",
        metavar="MODULE:ATTRIBUTE",
        help=(
            "The application whose registry to use, imported from the current directory "
            "like uvicorn does: the attribute is a Registry, an object with a `.registry`, "
            "or a callable returning either."
        ),
    ),
]
DbOption = Annotated[
    Path,
    typer.Option("--db", envvar="HANDRAIL_DB", help="The SQLite file of the audit store."),
]
STORE_OPTION = typer.Option(
    "--store",
    envvar="HANDRAIL_STORE",
    metavar="URL",
    help=(
        "Handrail's store (plans, executions, runs, raw results, audit): a SQLite file "
        "path, sqlite:///path, or a postgresql:// URL."
    ),
)
StoreOption = Annotated[str, STORE_OPTION]
TenantOption = Annotated[
    str,
    typer.Option("--tenant", help="Tenant of the principal whose view is shown."),
]
UserOption = Annotated[str, typer.Option("--user", help="User id of that principal.")]
PermissionOption = Annotated[
    list[str] | None,
    typer.Option(
        "--permission",
        "-p",
        help=(
            "A permission the principal holds (repeatable). Without this option the "
            "principal is an operator view holding every permission that any registered, "
            "non-forbidden tool requires; pass --permission '' for none. Forbidden (L4) "
            "and disabled tools are never shown, whatever the permissions."
        ),
    ),
]
ScenarioOption = Annotated[
    str | None,
    typer.Option("--scenario", help="Only tools offered in this scenario."),
]


# --- loading an application ------------------------------------------------------------------


def import_attribute(target: str, *, option: str) -> Any:  # noqa: ANN401 - user code
    """Import `module:attribute` with the current directory on sys.path."""
    module_name, colon, attribute = target.partition(":")
    if not colon or not module_name or not attribute:
        raise CliError(f"{option} must look like module:attribute, not {target!r}")
    here = str(Path.cwd())
    if here not in sys.path:
        sys.path.insert(0, here)
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - importing user code may raise anything
        raise CliError(
            f"cannot import {module_name!r} for {option} {target} from {here}: "
            f"{type(exc).__name__}: {exc}",
        ) from None
    try:
        return operator.attrgetter(attribute)(module)
    except AttributeError:
        raise CliError(f"module {module_name!r} has no attribute {attribute!r}") from None


def load_registry(target: str) -> Registry:
    """The Registry of the application named by `--app`."""
    from handrail.declare.registry import Registry  # noqa: PLC0415 - not for --help

    found = import_attribute(target, option="--app")
    if callable(found) and not isinstance(found, Registry):
        try:
            found = found()
        except Exception as exc:  # noqa: BLE001 - the app factory is user code
            raise CliError(f"--app {target} failed: {type(exc).__name__}: {exc}") from None
    registry = found if isinstance(found, Registry) else getattr(found, "registry", None)
    if not isinstance(registry, Registry):
        raise CliError(f"--app {target} gave neither a Registry nor an object with .registry")
    return registry


def operator_principal(
    registry: Registry,
    *,
    tenant: str,
    user: str,
    permissions: Sequence[str] | None,
) -> Principal:
    """The principal whose view is shown: given permissions, or all that tools require."""
    if not tenant or not user:
        raise CliError("--tenant and --user must not be empty")
    if permissions is None:
        # Forbidden tools are never exposed, so their permissions would change nothing.
        granted = frozenset().union(
            *(spec.permissions for spec in registry.specs() if not spec.forbidden),
        )
    else:
        granted = frozenset(p for p in permissions if p)
    return Principal(user_id=user, tenant_id=tenant, permissions=granted)


def exposed(
    target: str,
    *,
    tenant: str,
    user: str,
    permissions: Sequence[str] | None,
    scenario: str | None,
) -> tuple[Principal, tuple[ToolSpec, ...]]:
    """The operator's principal and the specs the app's registry exposes to it."""
    registry = load_registry(target)
    principal = operator_principal(registry, tenant=tenant, user=user, permissions=permissions)
    return principal, registry.exposed(principal, scenario=scenario)


def console_for_output(pipe_width: int = PIPE_WIDTH) -> Console:
    """Rich output; into a pipe or file, lines are `pipe_width` wide instead of 80."""
    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = pipe_width
    return console


def folding_table(*columns: str, caption: str | None = None) -> Table:
    """A table whose cells wrap rather than cut: a clipped name or call id misleads."""
    table = Table(caption=caption)
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


def who(principal: Principal) -> str:
    """`user@tenant`, for messages."""
    return f"{principal.user_id}@{principal.tenant_id}"
