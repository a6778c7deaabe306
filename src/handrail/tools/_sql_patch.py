"""The `patch_database` tool: version-checked changes of declared columns of one row.

Owns compiling each `PatchTarget`, the tool's schema and description, and the patch
path: the version token a plan binds, the resolve_version, impact and reconcile hooks,
and the UPDATE in one transaction, only at the expected version and within the
Principal's scope. It never changes a key, version or scope column, nor more than one row.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import date, datetime
from datetime import time as time_of_day
from decimal import Decimal
from types import MappingProxyType
from typing import Any, cast

import pydantic
import pydantic_core
import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, TypeAdapter

from handrail.canonical import canonical_json, sha256_hex
from handrail.context import ToolContext
from handrail.declare.definition import Tool
from handrail.declare.hooks import Found, NoProof, NotExecuted, Reconciled
from handrail.envelope import Trust
from handrail.errors import (
    ConfigurationError,
    InvalidArgument,
    NotFound,
    ToolFailed,
    ToolSignal,
    VersionConflict,
)
from handrail.plans import Impact
from handrail.shaping.policy import ResultPolicy
from handrail.spec import (
    ConfirmationMode,
    ConfirmationPolicy,
    IdempotencyMode,
    IdempotencyPolicy,
    ReconcilePolicy,
    RiskLevel,
    SideEffect,
    ToolHints,
)
from handrail.tools._sql_arguments import (
    UNUSABLE_TYPE,
    FacingSchema,
    named,
    one_of_refs,
    raw_tool,
    refuse_nul,
    schema_defs,
    signature,
    strict_model,
    validated,
)
from handrail.tools._sql_config import (
    CONTROL,
    PatchTarget,
    SqlConfig,
    check_attribute,
    check_identifier,
    check_name,
)
from handrail.tools._sql_database import MAX_SAFE_INTEGER, Cells, Database

__all__ = ["normal", "patch_tool"]

_MAX_KEY_CHARS = 64
_VERSION_TAG = "sqlpatch/1"
_TOKEN_FIELDS = 6


def normal(value: object) -> object:  # noqa: PLR0911 - a case per kind of value
    """A value in one canonical text form, so a row read back compares to what was written."""
    if value is None:
        return None
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int | float | Decimal):
        number = value if isinstance(value, Decimal) else Decimal(str(value))
        return format(number.normalize(), "f") if number.is_finite() else str(number)
    if isinstance(value, datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, date | time_of_day):
        return value.isoformat()
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    return str(value)


def _digest(values: Mapping[str, object]) -> str:
    return sha256_hex(canonical_json({k: normal(v) for k, v in values.items()}))[:16]


@dataclass(frozen=True, kw_only=True, slots=True)
class _Target:
    name: str
    table: sa.TableClause
    key_column: str
    version_column: str
    columns: tuple[str, ...]
    scope: Mapping[str, str]
    key_adapter: TypeAdapter[Any]
    fields_model: type[BaseModel]

    def where(self, key: object, principal_attribute: Callable[[str], object]) -> list[Any]:
        """The row's key and the principal's scope, as conditions."""
        conditions: list[Any] = [self.table.c[self.key_column] == key]
        conditions.extend(
            self.table.c[column] == principal_attribute(attribute)
            for column, attribute in self.scope.items()
        )
        return conditions

    def read(self, conn: sa.Connection, key: object, ctx: ToolContext) -> dict[str, Any] | None:
        """The row's key, version and patchable columns; None when there is no such row."""
        names = (self.key_column, self.version_column, *self.columns)
        statement = (
            sa.select(*(self.table.c[name] for name in names))
            .where(*self.where(key, ctx.principal.attribute))
            .limit(2)
        )
        rows = conn.execute(statement).fetchall()
        if len(rows) > 1:
            raise ToolFailed(
                f"The key of {self.name} matched more than one row, so nothing was changed: "
                f"the configured key column is not unique.",
            )
        return dict(zip(names, rows[0], strict=True)) if rows else None


@dataclass(frozen=True, kw_only=True, slots=True)
class _Patch:
    """One checked patch request."""

    target: _Target
    key: int | str
    expected: int
    fields: Mapping[str, Any]
    dry_run: bool


@dataclass(frozen=True, kw_only=True, slots=True)
class _Token:
    """What a plan binds as the target's version: the row, its version and the outcome.

    The outcome is a digest of the row's patchable columns as the patch leaves them, so
    reconciliation can tell "this write landed" from "another one did".
    """

    target: str
    key: int | str
    version: int | None
    digest: str
    dry_run: bool

    def text(self) -> str:
        """Canonical JSON, at most 256 characters (the store's column)."""
        values = [_VERSION_TAG, self.target, self.key, self.version, self.digest, self.dry_run]
        return canonical_json(values).decode()

    @classmethod
    def parse(cls, text: str | None) -> _Token | None:
        """The token in `text`, or None when it is not one."""
        try:
            values = json.loads(text or "")
        except ValueError:
            return None
        if not (
            isinstance(values, list)
            and len(values) == _TOKEN_FIELDS
            and values[0] == _VERSION_TAG
            and isinstance(values[1], str)
            and isinstance(values[2], int | str)
            and (values[3] is None or type(values[3]) is int)
            and isinstance(values[4], str)
            and isinstance(values[5], bool)
        ):
            return None
        return cls(
            target=values[1],
            key=values[2],
            version=values[3],
            digest=values[4],
            dry_run=values[5],
        )


def _compile_target(name: str, target: PatchTarget) -> _Target:
    check_name(name, "patch target")
    where = f"patch target {name!r}"
    if not target.description.strip():
        raise ConfigurationError(f"{where} needs a description for the model")
    check_identifier(target.table, f"{where}: table")
    if target.schema is not None:
        check_identifier(target.schema, f"{where}: schema")
    fixed = [target.key_column, target.version_column, *target.scope]
    for column in (*fixed, *target.columns):
        check_identifier(column, f"{where}: column")
    if len(set(fixed)) != len(fixed) or set(fixed) & set(target.columns):
        raise ConfigurationError(
            f"{where}: key, version and scope columns are distinct and never patchable",
        )
    if not target.columns:
        raise ConfigurationError(f"{where} declares no patchable columns")
    for attribute in target.scope.values():
        check_attribute(attribute, where)
    try:
        adapter: TypeAdapter[Any] = TypeAdapter(
            cast("Any", target.key_type), config=ConfigDict(strict=True)
        )
        key_schema = adapter.json_schema(schema_generator=FacingSchema)
    except UNUSABLE_TYPE as exc:
        raise ConfigurationError(f"{where}: the key type is not usable: {exc}") from exc
    if key_schema.get("type") not in {"integer", "string"} or "$defs" in key_schema:
        raise ConfigurationError(f"{where}: the key type must be an integer or a string type")
    names = (target.key_column, target.version_column, *target.scope, *target.columns)
    columns = [
        sa.column(c, sa.Integer) if c == target.version_column else sa.column(c) for c in names
    ]
    return _Target(
        name=name,
        table=sa.table(target.table, *columns, schema=target.schema),
        key_column=target.key_column,
        version_column=target.version_column,
        columns=tuple(target.columns),
        scope=MappingProxyType(dict(target.scope)),
        key_adapter=adapter,
        fields_model=strict_model(
            f"fields_{name}", target.columns, optional=True, extra={"minProperties": 1}
        ),
    )


def _key_schema(target: _Target) -> dict[str, Any]:
    schema = dict(target.key_adapter.json_schema(schema_generator=FacingSchema))
    if schema["type"] == "string":
        schema["maxLength"] = min(int(schema.get("maxLength", _MAX_KEY_CHARS)), _MAX_KEY_CHARS)
    return schema


def _expected(value: object) -> int:
    if isinstance(value, str) and value.isdigit() and value.isascii():
        value = int(value)
    if type(value) is not int or not 0 <= value <= MAX_SAFE_INTEGER:
        raise InvalidArgument("expected_version must be the row's version, a whole number.")
    return value


def _row_version(row: Mapping[str, Any], target: _Target) -> int | None:
    version = row[target.version_column]
    if type(version) is int and 0 <= version <= MAX_SAFE_INTEGER:
        return version
    return None


def patch_tool(config: SqlConfig, db: Database, namespace: str | None) -> Tool:
    """`patch_database` over the configured targets; ConfigurationError for a bad one."""
    targets = {name: _compile_target(name, t) for name, t in config.targets.items()}
    defs = schema_defs(
        {name: t.fields_model for name, t in targets.items()},
        {
            f"fields_{name}": f"Columns of {name!r} to set, with their new values."
            for name in targets
        },
    )
    key_schemas: list[dict[str, Any]] = []
    for target in targets.values():
        if _key_schema(target) not in key_schemas:
            key_schemas.append(_key_schema(target))
    key_text = "The key of the row to change."
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "target": {
                "type": "string",
                "enum": sorted(targets),
                "description": "Which table the row is in.",
            },
            "key": (
                {**key_schemas[0], "description": key_text}
                if len(key_schemas) == 1
                else {"anyOf": key_schemas, "description": key_text}
            ),
            "expected_version": {
                "anyOf": [
                    {"type": "integer", "minimum": 0, "maximum": MAX_SAFE_INTEGER},
                    {"type": "string", "pattern": "^[0-9]{1,16}$"},
                ],
                "description": "The row's version as you last read it; a newer row is refused.",
            },
            "fields": one_of_refs(
                sorted(f"fields_{name}" for name in targets),
                "The columns to change and their new values (at least one).",
            ),
            "dry_run": {
                "type": "boolean",
                "default": False,
                "description": "Only preview: the plan, when executed, writes nothing.",
            },
        },
        "required": ["target", "key", "expected_version", "fields"],
        "additionalProperties": False,
        "$defs": defs,
    }
    lines = [
        f"- {name} (key: {_key_schema(t)['type']}; fields: {signature(defs[f'fields_{name}'])})"
        f": {config.targets[name].description}"
        for name, t in sorted(targets.items())
    ]
    description = (
        "Change some columns of one row, only if the row is still at `expected_version` "
        "(read it first). The change becomes a plan that the user must confirm in the "
        "application; nothing is written before that, and the plan shows each column's "
        "current and new value. With `dry_run: true` the plan is only a preview.\n\n"
        "Tables:\n" + "\n".join(lines)
    )

    def request(arguments: Mapping[str, Any]) -> _Patch:
        target = targets[arguments["target"]]
        key = arguments["key"]
        refuse_nul(key, "key")
        try:
            key = target.key_adapter.validate_json(pydantic_core.to_json(key), strict=True)
        except pydantic.ValidationError:
            kind = _key_schema(target)["type"]
            raise InvalidArgument(f"key: {target.name} is keyed by a {kind}.") from None
        if isinstance(key, str) and (len(key) > _MAX_KEY_CHARS or CONTROL.search(key)):
            raise InvalidArgument(
                f"key: at most {_MAX_KEY_CHARS} characters, without control characters.",
            )
        fields = validated(target.fields_model, arguments["fields"], "fields", only_set=True)
        if not fields:
            raise InvalidArgument("fields: name at least one column to change.")
        return _Patch(
            target=target,
            key=key,
            expected=_expected(arguments["expected_version"]),
            fields=MappingProxyType(fields),
            dry_run=bool(arguments.get("dry_run", False)),
        )

    def current(patch: _Patch, ctx: ToolContext) -> dict[str, Any] | None:
        with db.reading(ctx) as conn:
            return patch.target.read(conn, patch.key, ctx)

    def refusal(patch: _Patch, row: Mapping[str, Any] | None) -> ToolSignal:
        if row is None:
            return NotFound(f"There is no {patch.target.name} row with that key.")
        return VersionConflict(
            f"The row is at version {_row_version(row, patch.target)}, not {patch.expected}: "
            f"it changed since it was read. Read it again and patch from its current values.",
        )

    def require(patch: _Patch, row: Mapping[str, Any] | None) -> Mapping[str, Any]:
        if row is None or _row_version(row, patch.target) != patch.expected:
            raise refusal(patch, row)
        return row

    def token(patch: _Patch, row: Mapping[str, Any] | None) -> _Token:
        target = patch.target
        if row is None:
            return _Token(
                target=target.name, key=patch.key, version=None, digest="", dry_run=patch.dry_run
            )
        current = {c: row[c] for c in target.columns}
        digest = _digest({**current, **patch.fields})
        version = _row_version(row, target)
        if not patch.dry_run and version == patch.expected + 1 and _digest(current) == digest:
            # The row shows this patch's outcome one version on: the plan still answers
            # to the version it was made against, so asking again replays, not refuses.
            version = patch.expected
        return _Token(
            target=target.name,
            key=patch.key,
            version=version,
            digest=digest,
            dry_run=patch.dry_run,
        )

    def outcome(
        target: _Target, row: Mapping[str, Any], *, written: bool, **more: object
    ) -> dict[str, Any]:
        cells = Cells(config.max_value_chars)
        shown = {column: cells.convert(value) for column, value in row.items()}
        out: dict[str, Any] = {
            "target": target.name,
            "key": shown[target.key_column],
            "version": shown[target.version_column],
            "written": written,
            **more,
            "row": shown,
        }
        if cells.clipped:
            out["clipped_values"] = cells.clipped
        return out

    def check(arguments: Mapping[str, Any], ctx: ToolContext) -> None:
        patch = request(arguments)
        require(patch, current(patch, ctx))

    def resolve_version(arguments: Mapping[str, Any], ctx: ToolContext) -> str:
        patch = request(arguments)
        return token(patch, current(patch, ctx)).text()

    def impact(arguments: Mapping[str, Any], ctx: ToolContext) -> Impact:
        patch = request(arguments)
        row = current(patch, ctx)
        cells = Cells(60)
        notes = (
            tuple(
                f"{column}: {json.dumps(cells.convert(row[column]), ensure_ascii=False)} -> "
                f"{json.dumps(cells.convert(value), ensure_ascii=False)}"
                for column, value in patch.fields.items()
            )
            if row is not None
            else ("the row was not found",)
        )
        return Impact(
            action="preview a patch of (dry run: nothing is written)" if patch.dry_run else "patch",
            target=f"{patch.target.name} row {json.dumps(patch.key, ensure_ascii=False)}",
            reversible=True,
            counts={"rows": 0 if patch.dry_run else 1},
            notes=notes,
        )

    def run(arguments: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        patch = request(arguments)
        target = patch.target
        if patch.dry_run:
            row = require(patch, current(patch, ctx))
            cells = Cells(config.max_value_chars)
            changes = {
                column: {"current": cells.convert(row[column]), "new": cells.convert(value)}
                for column, value in patch.fields.items()
            }
            return outcome(target, row, written=False, dry_run=True, changes=changes)
        version = target.table.c[target.version_column]
        statement = (
            sa.update(target.table)
            .where(*target.where(patch.key, ctx.principal.attribute), version == patch.expected)
            .values(
                {
                    **{target.table.c[c]: db.bind_value(v) for c, v in patch.fields.items()},
                    version: version + 1,
                },
            )
        )
        with db.writing(ctx) as conn:
            changed = conn.execute(statement).rowcount
            if changed > 1:
                # The key is not unique: raising rolls every change back.
                raise ToolFailed(
                    f"The key of {target.name} matched {changed} rows, so nothing was changed: "
                    f"the configured key column is not unique.",
                )
            written = target.read(conn, patch.key, ctx)
            if changed == 0 or written is None:
                # Tell NOT_FOUND from VERSION_CONFLICT by the row, in this transaction.
                raise refusal(patch, written)
        return outcome(
            target,
            written,
            written=True,
            dry_run=False,
            previous_version=patch.expected,
            changed=sorted(patch.fields),
        )

    def reconcile(_key: str, ctx: ToolContext) -> Reconciled:
        bound = _Token.parse(ctx.expected_version)
        if bound is None or bound.target not in targets:
            return NoProof("the plan names no row this tool can check")
        if bound.dry_run:
            return NotExecuted()  # a dry run never writes
        target = targets[bound.target]
        with db.reading(ctx) as conn:
            row = target.read(conn, bound.key, ctx)
        if row is None or bound.version is None:
            return NoProof("the row is gone; a person must check what happened")
        version = _row_version(row, target)
        if version == bound.version:
            return NotExecuted()  # every write of this tool moves the version on
        after = _digest({c: row[c] for c in target.columns})
        if version == bound.version + 1 and after == bound.digest:
            return Found(outcome(target, row, written=True, dry_run=False, reconciled=True))
        return NoProof("the row changed beyond this write; a person must compare it")

    def business_id(result: object) -> str | None:
        if isinstance(result, Mapping) and "target" in result:
            return f"{result['target']}/{result['key']}"
        return None

    return raw_tool(
        name=named(namespace, "patch_database"),
        description=description,
        input_schema=schema,
        fn=run,
        risk=RiskLevel.L2_REVERSIBLE_WRITE,
        side_effect=SideEffect.EXTERNAL_WRITE,
        permissions=config.write_permissions,
        timeout=config.statement_timeout + 2.0,
        confirmation=ConfirmationPolicy(mode=ConfirmationMode.CONFIRM),
        idempotency=IdempotencyPolicy(mode=IdempotencyMode.PLAN),
        reconcile_policy=ReconcilePolicy(not_found_grace=max(60.0, 10 * config.statement_timeout)),
        validators=[check],
        resolve_version=resolve_version,
        impact=impact,
        reconcile=reconcile,
        business_id=business_id,
        results=ResultPolicy(trust=Trust.UNTRUSTED),
        hints=ToolHints(read_only=False, destructive=False, idempotent=True, open_world=False),
    )
