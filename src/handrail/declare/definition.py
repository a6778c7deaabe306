"""Tool: a ToolSpec bound to its implementation, built by `@tool` or from a raw schema.

A spec never exists without its implementation and the implementation is reachable
only through the Tool, which the gate calls after every check has passed. The Tool
never decides whether it may run; the gate does.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias, cast

import pydantic
from pydantic import BaseModel

from handrail.canonical import content_version
from handrail.context import ToolContext
from handrail.declare.schema import ArgumentValidator, compile_validator, derive_signature
from handrail.declare.schema import prepare_raw_schema as _prepare_raw_schema
from handrail.declare.schema_store import SchemaStore
from handrail.errors import ConfigurationError, ErrorCode, Refusal, RegistrationError
from handrail.fencing import run_in_thread
from handrail.paths import json_path
from handrail.plans import Impact
from handrail.shaping.policy import ResultPolicy
from handrail.spec import (
    BusinessValue,
    ConfirmationMode,
    ConfirmationPolicy,
    Deprecation,
    FromPrincipal,
    IdempotencyMode,
    IdempotencyPolicy,
    ReconcilePolicy,
    RetryPolicy,
    RiskLevel,
    SideEffect,
    TaskMode,
    ToolHints,
    ToolSpec,
)
from handrail.text import escape_unstorable

if TYPE_CHECKING:
    from handrail.declare.hooks import Reconciled

__all__ = [
    "BoundArguments",
    "BusinessIdSource",
    "BusinessValidator",
    "ImpactHook",
    "ReconcileHook",
    "Tool",
    "VersionHook",
    "tool",
]

BusinessValidator: TypeAlias = Callable[[Any, ToolContext], Awaitable[None] | None]
"""`(arguments, ctx)`; raises NotFound, Conflict or NeedsClarification to refuse.

`arguments` is the tool's argument model (decorated tools) or a dict (raw-schema tools).
"""

VersionHook: TypeAlias = Callable[[Any, ToolContext], "Awaitable[str | None] | str | None"]
"""`(arguments, ctx) -> version`: the target's current version, bound into the plan."""

ImpactHook: TypeAlias = Callable[[Any, ToolContext], "Awaitable[Impact] | Impact"]
"""`(arguments, ctx) -> Impact`: what the write will do, for the people who confirm it."""

ReconcileHook: TypeAlias = Callable[[str, ToolContext], "Awaitable[Reconciled] | Reconciled"]
"""`(idempotency_key, ctx)`: asks the downstream system what became of that key."""

BusinessIdSource: TypeAlias = str | Callable[[Any], "str | None"]
"""A result field name, or a function of the result, giving the downstream object's id."""

_Invoke: TypeAlias = Callable[["BoundArguments", ToolContext | None], Coroutine[Any, Any, object]]


@dataclass(frozen=True, slots=True)
class BoundArguments:
    """Arguments after stage 2: the typed value validators see, plus the plain JSON."""

    value: Any
    json: Mapping[str, Any]


@dataclass(frozen=True, kw_only=True, slots=True)
class Tool:
    """A registered tool's spec and runtime handle, inseparable.

    Build one with `@tool(...)` or `Tool.from_json_schema(...)`; register it with a
    Registry; run it only through a Gate.
    """

    spec: ToolSpec
    _invoke: _Invoke
    _validator: ArgumentValidator
    _model: type[BaseModel] | None
    validators: tuple[BusinessValidator, ...] = ()
    needs_context: bool = True
    """False only when neither the tool nor a validator reads a ToolContext."""
    resolve_version: VersionHook | None = None
    impact: ImpactHook | None = None
    reconcile: ReconcileHook | None = None
    business_id: BusinessIdSource | None = None

    def __post_init__(self) -> None:
        spec = self.spec
        if spec.read_only and (self.resolve_version or self.impact or self.reconcile):
            raise RegistrationError(
                f"tool {spec.name!r} reads only; version, impact and reconcile hooks are "
                f"for writes",
            )
        external = spec.side_effect is SideEffect.EXTERNAL_WRITE
        if external and spec.retry.max_attempts > 1 and self.reconcile is None:
            # Retrying a write whose outcome may be unknown is safe only when the
            # downstream system can be asked what became of the key.
            raise RegistrationError(
                f"tool {spec.name!r} is an automatically retried external write, so it "
                f"needs a reconcile hook",
            )

    def business_id_of(self, result: object) -> str | None:
        """The downstream id named by `business_id` in a result, as text, if any.

        Downstream text: a NUL or lone surrogate in it, which no store can hold, is
        written as an escape, so that recording an effect that happened never fails.
        """
        source = self.business_id
        if source is None:
            return None
        if callable(source):
            found = source(result)
        elif isinstance(result, Mapping):
            found = result.get(source)
        else:
            found = getattr(result, source, None)
        return None if found is None else escape_unstorable(str(found))[:256]

    @property
    def name(self) -> str:
        """The tool's full (namespaced) name."""
        return self.spec.name

    def schema_errors(self, arguments: Mapping[str, Any]) -> dict[str, str]:
        """Stage 2 check against the model-facing schema: {json_path: message}."""
        return self._validator.errors(arguments)

    def check_arguments(self, arguments: dict[str, Any]) -> tuple[dict[str, str], dict[str, Any]]:
        """Stage 2: field errors, and the arguments with ints where the schema says integer.

        The arguments come back unchanged (the same object) unless a whole-number float
        stood at an integer place; the caller's own object is never modified.
        """
        return self._validator.check(arguments)

    def bind(self, arguments: dict[str, Any]) -> BoundArguments:
        """Build typed arguments; a model's own validators can still refuse them."""
        if self._model is None:
            return BoundArguments(arguments, arguments)
        try:
            # `model_validate` with its defaults, less its own frame.
            value = self._model.__pydantic_validator__.validate_python(arguments)
        except pydantic.ValidationError as exc:
            errors = {
                json_path(err["loc"]): str(err["msg"])[:160]
                for err in exc.errors(include_url=False, include_input=False)
            }
            raise Refusal(
                ErrorCode.INVALID_ARGUMENTS,
                "The arguments do not match the tool's schema; correct the listed fields.",
                stage="schema",
                retryable=True,
                field_errors=errors,
            ) from None
        return BoundArguments(value, arguments)

    async def check(self, bound: BoundArguments, ctx: ToolContext) -> None:
        """Run the business validators in order; sync ones run in a worker thread."""
        for validator in self.validators:
            if inspect.iscoroutinefunction(validator):
                await validator(bound.value, ctx)
            else:
                outcome = await asyncio.to_thread(validator, bound.value, ctx)
                if inspect.isawaitable(outcome):
                    await outcome

    def invoke(self, bound: BoundArguments, ctx: ToolContext | None) -> Coroutine[Any, Any, object]:
        """Run the implementation. Only the gate calls this, after all four checks.

        `ctx` may be None only for a tool whose `needs_context` is False.
        """
        return self._invoke(bound, ctx)

    def with_validators(self, *validators: BusinessValidator) -> Tool:
        """A copy with more business validators, run after the existing ones."""
        return dataclasses.replace(
            self,
            validators=(*self.validators, *validators),
            needs_context=self.needs_context or bool(validators),
        )

    @classmethod
    def from_json_schema(
        cls,
        *,
        name: str,
        description: str,
        input_schema: Mapping[str, Any],
        fn: Callable[[dict[str, Any], ToolContext], Any],
        risk: RiskLevel,
        side_effect: SideEffect = SideEffect.NONE,
        permissions: Iterable[str] = (),
        trusted: Mapping[str, FromPrincipal] | None = None,
        timeout: float = 10.0,
        retry: RetryPolicy | None = None,
        idempotency: IdempotencyPolicy | None = None,
        confirmation: ConfirmationPolicy | None = None,
        owner: str | None = None,
        enabled: bool = True,
        enabled_tenants: Iterable[str] | None = None,
        scenarios: Iterable[str] = (),
        hints: ToolHints | None = None,
        schema_version: str | None = None,
        description_version: str | None = None,
        validators: Iterable[BusinessValidator] = (),
        reconcile_policy: ReconcilePolicy | None = None,
        resolve_version: VersionHook | None = None,
        impact: ImpactHook | None = None,
        reconcile: ReconcileHook | None = None,
        business_id: BusinessIdSource | None = None,
        results: ResultPolicy | None = None,
        secrets: Iterable[str] = (),
        defer_loading: bool = False,
        dependencies: Iterable[str] = (),
        examples: Iterable[Mapping[str, Any]] = (),
        rate_limit: str | None = None,
        deprecation: Deprecation | None = None,
        runs_as: TaskMode | None = None,
        business_values: Mapping[str, BusinessValue] | None = None,
        schemas: SchemaStore | None = None,
    ) -> Tool:
        """Declare a tool from a raw Draft 2020-12 schema and `fn(arguments, ctx)`.

        This is how MCP servers and other schema-first sources supply tools. Trusted
        parameters are removed from the model-facing schema and filled from the
        Principal before `fn` runs. `business_values` declares identity-like names that
        are business data (by parameter name, or JSON Pointer for nested places);
        `schemas` is the host's SchemaStore that `$ref`s to other documents resolve
        from, once, into the model-facing schema.
        """
        trusted = dict(trusted or {})
        prepared = _prepare_raw_schema(
            name,
            input_schema,
            trusted,
            business_values=business_values,
            schemas=schemas,
        )
        facing = prepared.schema
        spec = _build_spec(
            name=name,
            description=description,
            schema=facing,
            risk=risk,
            side_effect=side_effect,
            permissions=permissions,
            trusted=trusted,
            timeout=timeout,
            retry=retry,
            idempotency=idempotency,
            confirmation=confirmation,
            owner=owner,
            enabled=enabled,
            enabled_tenants=enabled_tenants,
            scenarios=scenarios,
            hints=hints,
            schema_version=schema_version,
            description_version=description_version,
            reconcile_policy=reconcile_policy,
            results=results,
            secrets=secrets,
            catalogue=_Catalogue(
                defer_loading=defer_loading,
                dependencies=frozenset(dependencies),
                examples=tuple(examples),
                rate_limit=rate_limit,
                deprecation=deprecation,
                task=runs_as,
            ),
            business_values=prepared.business_values,
        )
        is_async = inspect.iscoroutinefunction(fn)

        async def invoke(bound: BoundArguments, ctx: ToolContext | None) -> object:
            ctx = cast("ToolContext", ctx)  # needs_context is True for raw-schema tools
            arguments = dict(bound.json)
            for param, marker in trusted.items():
                arguments[param] = ctx.principal.attribute(marker.attribute)
            if is_async:
                return await fn(arguments, ctx)
            return await _in_thread(fn, arguments, ctx)

        return cls(
            spec=spec,
            _invoke=invoke if runs_as is None else _task_only(invoke, name),
            _validator=compile_validator(facing),
            _model=None,
            validators=tuple(validators),
            resolve_version=resolve_version,
            impact=impact,
            reconcile=reconcile,
            business_id=business_id,
        )


class WorkerAbortedError(Exception):
    """A sync tool raised SystemExit or another BaseException in its worker thread.

    In a worker thread such an exception would end only that thread; re-raised on the
    event loop it would stop the whole service. It is a failure of the tool instead.
    """


def _guarded(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> object:
    try:
        return fn(*args, **kwargs)
    except Exception:
        raise
    except BaseException as exc:
        raise WorkerAbortedError(type(exc).__name__) from exc


async def _in_thread(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> object:  # noqa: ANN401
    # Run sync code off the event loop; contextvars are copied like asyncio.to_thread.
    # A write attempt's thread passes its fence first: it never starts the tool after
    # the attempt was abandoned or its lease ran out.
    return await run_in_thread(_guarded, fn, args, kwargs)


@dataclass(frozen=True, kw_only=True, slots=True)
class _Catalogue:
    """The catalogue facts of a declaration, passed on to its ToolSpec as they are."""

    defer_loading: bool
    dependencies: frozenset[str]
    examples: tuple[Mapping[str, Any], ...]
    rate_limit: str | None
    deprecation: Deprecation | None
    task: TaskMode | None = None


def _build_spec(
    *,
    name: str,
    description: str,
    schema: Mapping[str, Any],
    risk: RiskLevel,
    side_effect: SideEffect,
    permissions: Iterable[str],
    trusted: Mapping[str, FromPrincipal],
    timeout: float,
    retry: RetryPolicy | None,
    idempotency: IdempotencyPolicy | None,
    confirmation: ConfirmationPolicy | None,
    owner: str | None,
    enabled: bool,
    enabled_tenants: Iterable[str] | None,
    scenarios: Iterable[str],
    hints: ToolHints | None,
    schema_version: str | None,
    description_version: str | None,
    reconcile_policy: ReconcilePolicy | None,
    results: ResultPolicy | None,
    secrets: Iterable[str],
    catalogue: _Catalogue,
    business_values: Mapping[str, BusinessValue],
) -> ToolSpec:
    description = inspect.cleandoc(description)
    if side_effect is not SideEffect.NONE and confirmation is None:
        # The dangerous choice has no default: a write states who must agree.
        raise RegistrationError(
            f"tool {name!r} writes, so it must declare a ConfirmationPolicy explicitly",
        )
    return ToolSpec(
        name=name,
        description=description,
        input_schema=schema,
        schema_version=schema_version or content_version(dict(schema)),
        description_version=description_version or content_version(description),
        risk=risk,
        side_effect=side_effect,
        permissions=frozenset(permissions),
        timeout=timeout,
        retry=retry or RetryPolicy(),
        idempotency=idempotency or _default_idempotency(side_effect, confirmation),
        confirmation=confirmation or ConfirmationPolicy(),
        reconcile=reconcile_policy or ReconcilePolicy(),
        owner=owner,
        enabled=enabled,
        enabled_tenants=None if enabled_tenants is None else frozenset(enabled_tenants),
        scenarios=frozenset(scenarios),
        hints=hints or ToolHints(read_only=side_effect is SideEffect.NONE),
        trusted=trusted,
        results=results or ResultPolicy(),
        secrets=frozenset(secrets),
        business_values=business_values,
        defer_loading=catalogue.defer_loading,
        dependencies=catalogue.dependencies,
        examples=catalogue.examples,
        rate_limit=catalogue.rate_limit,
        deprecation=catalogue.deprecation,
        task=catalogue.task,
    )


def _default_idempotency(
    side_effect: SideEffect,
    confirmation: ConfirmationPolicy | None,
) -> IdempotencyPolicy:
    """Reads have no key; a confirmed write is keyed by its plan, any other by command id."""
    if side_effect is SideEffect.NONE:
        return IdempotencyPolicy()
    if confirmation is not None and confirmation.mode is not ConfirmationMode.NONE:
        return IdempotencyPolicy(mode=IdempotencyMode.PLAN)
    return IdempotencyPolicy(mode=IdempotencyMode.COMMAND_ID)


def _signature_invoker(
    fn: Callable[..., Any],
    context_parameter: str | None,
    trusted: Mapping[str, FromPrincipal],
    *,
    is_async: bool,
) -> _Invoke:
    async def run(bound: BoundArguments, ctx: ToolContext | None) -> object:
        # A pydantic model's __dict__ holds exactly its field values.
        kwargs = dict(bound.value.__dict__)
        if ctx is not None:
            for param, marker in trusted.items():
                kwargs[param] = ctx.principal.attribute(marker.attribute)
            if context_parameter is not None:
                kwargs[context_parameter] = ctx
        if is_async:
            return await fn(**kwargs)
        return await _in_thread(fn, **kwargs)

    def invoke(bound: BoundArguments, ctx: ToolContext | None) -> Coroutine[Any, Any, object]:
        # An async tool that needs no context is its own coroutine: no wrapper around it
        # (`**` copies the fields).
        if ctx is None and is_async:
            return cast("Coroutine[Any, Any, object]", fn(**bound.value.__dict__))
        return run(bound, ctx)

    return invoke


def _task_only(invoke: _Invoke, name: str) -> _Invoke:
    """A task tool's body runs only inside its task (with `ctx.task`), never inline."""

    def run(bound: BoundArguments, ctx: ToolContext | None) -> Coroutine[Any, Any, object]:
        if ctx is None or ctx.task is None:
            raise ConfigurationError(
                f"tool {name!r} runs as a task: register TaskService.bind(tool), not the tool"
            )
        return invoke(bound, ctx)

    return run


def tool(
    *,
    risk: RiskLevel,
    name: str | None = None,
    namespace: str | None = None,
    description: str | None = None,
    side_effect: SideEffect = SideEffect.NONE,
    permissions: Iterable[str] = (),
    timeout: float = 10.0,
    retry: RetryPolicy | None = None,
    idempotency: IdempotencyPolicy | None = None,
    confirmation: ConfirmationPolicy | None = None,
    owner: str | None = None,
    enabled: bool = True,
    enabled_tenants: Iterable[str] | None = None,
    scenarios: Iterable[str] = (),
    hints: ToolHints | None = None,
    schema_version: str | None = None,
    description_version: str | None = None,
    validators: Iterable[BusinessValidator] = (),
    reconcile_policy: ReconcilePolicy | None = None,
    resolve_version: VersionHook | None = None,
    impact: ImpactHook | None = None,
    reconcile: ReconcileHook | None = None,
    business_id: BusinessIdSource | None = None,
    results: ResultPolicy | None = None,
    secrets: Iterable[str] = (),
    defer_loading: bool = False,
    dependencies: Iterable[str] = (),
    examples: Iterable[Mapping[str, Any]] = (),
    rate_limit: str | None = None,
    deprecation: Deprecation | None = None,
    runs_as: TaskMode | None = None,
) -> Callable[[Callable[..., Any]], Tool]:
    """Declare a tool from a typed function; the signature becomes its schema.

    `risk` has no default: every tool states how much harm a wrong call can do. The
    docstring is the model-facing description unless `description` is given. The
    decorated name is bound to the Tool, so the function runs only through a gate.

    Hooks; `args` is the validated argument model, `ctx` the call's ToolContext, and
    each may be a plain or an async function:

    - `validators`: `(args, ctx) -> None`, stage 3 of every call, before authorization;
      raise `NotFound`, `Conflict` or `NeedsClarification` to refuse.
    - `resolve_version` (writes): `(args, ctx) -> str | None`, the target's current
      version, bound into the plan and asked again right before it runs; a different
      answer is VERSION_CONFLICT and nothing is written.
    - `impact` (writes): `(args, ctx) -> Impact`, what the write will do, for the
      people who confirm it (money as `Amount`, counts, reversibility).
    - `reconcile` (writes): `(idempotency_key, ctx) -> Found(result) | NotExecuted() |
      NoProof(reason)`, asked by the Reconciler about a write left OUTCOME_UNKNOWN;
      `ctx.principal` is the requester.
    - `business_id` (writes): a result field name, or `(result) -> str | None`: the
      downstream object's id, kept in the execution record and the WriteOutcome.

    `resolve_version`, `impact` and `reconcile` are refused on a tool that only reads.

    `runs_as=TaskMode(...)` makes the function the body of an asynchronous task: bind
    the tool with `handrail.tasks.TaskService.bind` before registering it; the body
    reaches its steps, effects and progress through `ctx.task` (a ToolContext parameter).
    """

    def decorate(fn: Callable[..., Any]) -> Tool:
        base = name or fn.__name__
        full_name = f"{namespace}.{base}" if namespace else base
        text = description or inspect.getdoc(fn)
        if not text:
            raise RegistrationError(f"tool {full_name!r} needs a description or a docstring")
        derived = derive_signature(fn, full_name)
        validators_ = tuple(validators)
        invoke = _signature_invoker(
            fn, derived.context_parameter, derived.trusted, is_async=derived.is_async
        )
        spec = _build_spec(
            name=full_name,
            description=text,
            schema=derived.json_schema,
            risk=risk,
            side_effect=side_effect,
            permissions=permissions,
            trusted=derived.trusted,
            timeout=timeout,
            retry=retry,
            idempotency=idempotency,
            confirmation=confirmation,
            owner=owner,
            enabled=enabled,
            enabled_tenants=enabled_tenants,
            scenarios=scenarios,
            hints=hints,
            schema_version=schema_version,
            description_version=description_version,
            reconcile_policy=reconcile_policy,
            results=results,
            secrets=secrets,
            catalogue=_Catalogue(
                defer_loading=defer_loading,
                dependencies=frozenset(dependencies),
                examples=tuple(examples),
                rate_limit=rate_limit,
                deprecation=deprecation,
                task=runs_as,
            ),
            business_values=derived.business_values,
        )
        return Tool(
            spec=spec,
            _invoke=invoke if runs_as is None else _task_only(invoke, full_name),
            _validator=compile_validator(derived.json_schema),
            _model=derived.model,
            validators=validators_,
            needs_context=bool(
                derived.context_parameter is not None
                or derived.trusted
                or validators_
                or runs_as is not None,
            ),
            resolve_version=resolve_version,
            impact=impact,
            reconcile=reconcile,
            business_id=business_id,
        )

    return decorate
