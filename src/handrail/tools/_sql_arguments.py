"""What the SQL tools show the model and take from it: strict argument models and schemas.

Owns building strict pydantic models from declared types, their JSON Schemas and the
one-line signatures in tool descriptions, checking the model's values against them,
and making a Tool from a finished schema (refusing identity asked of the model). It
never touches the database.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import pydantic
import pydantic_core
from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import GenerateJsonSchema, models_json_schema

from handrail.declare.definition import Tool
from handrail.declare.identity import check_identity_parameters
from handrail.errors import ConfigurationError, IdentityParameterError, InvalidArgument

__all__ = [
    "UNUSABLE_TYPE",
    "FacingSchema",
    "named",
    "one_of_refs",
    "raw_tool",
    "refuse_nul",
    "schema_defs",
    "signature",
    "strict_model",
    "validated",
]

_MAX_ERRORS = 5

# What pydantic and typing raise for an annotation that is not a usable type.
UNUSABLE_TYPE = (
    pydantic.PydanticUserError,
    pydantic.PydanticSchemaGenerationError,
    TypeError,
    AttributeError,
)


class FacingSchema(GenerateJsonSchema):
    """Pydantic's schema without titles that only repeat field names."""

    def field_title_should_be_set(self, schema: Any) -> bool:  # noqa: ANN401 - pydantic's type
        """Never add a title that merely repeats the field name."""
        del schema
        return False


def strict_model(
    name: str,
    declared: Mapping[str, object],
    *,
    optional: bool,
    extra: dict[str, Any] | None = None,
) -> type[BaseModel]:
    """A strict model whose fields are named by alias, so any column name works."""
    fields: dict[str, Any] = {}
    config = ConfigDict(extra="forbid", strict=True, json_schema_extra=extra)
    try:
        for index, (alias, annotation) in enumerate(declared.items()):
            typed = Annotated[annotation, Field(alias=alias)]  # type: ignore[valid-type]
            fields[f"f{index}"] = (typed, None) if optional else typed
        model = pydantic.create_model(name, __config__=config, **fields)
        model.model_json_schema()  # a type the model could not be told about is no use
    except UNUSABLE_TYPE as exc:
        raise ConfigurationError(f"{name}: a declared type is not usable: {exc}") from exc
    return model


def schema_defs(
    models: Mapping[str, type[BaseModel]], descriptions: Mapping[str, str]
) -> dict[str, Any]:
    """The JSON Schemas of several models, as one `$defs` object referenced by name."""
    _, top = models_json_schema(
        [(model, "validation") for model in models.values()],
        ref_template="#/$defs/{model}",
        schema_generator=FacingSchema,
    )
    defs: dict[str, Any] = dict(top.get("$defs", {}))
    for name, description in descriptions.items():
        entry = dict(defs[name])
        entry.pop("title", None)
        entry["description"] = description
        defs[name] = entry
    return defs


def one_of_refs(names: list[str], description: str) -> dict[str, Any]:
    """A reference to one of the named `$defs` entries, with a description."""
    refs = [{"$ref": f"#/$defs/{name}"} for name in names]
    if len(refs) == 1:
        return {**refs[0], "description": description}
    return {"anyOf": refs, "description": description}


def refuse_nul(value: object, where: str) -> None:
    """InvalidArgument if any text in `value`, keys included, holds a NUL."""
    stack: list[object] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str) and "\x00" in item:
            raise InvalidArgument(f"{where}: text must not contain NUL characters.")
        if isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def validated(
    model: type[BaseModel], value: object, where: str, *, only_set: bool
) -> dict[str, Any]:
    """Values checked against a declared model, by column or bind name."""
    refuse_nul(value, where)
    try:
        parsed = model.model_validate_json(pydantic_core.to_json(value), strict=True)
    except pydantic.ValidationError as exc:
        problems = [
            f"{where}.{'.'.join(str(part) for part in err['loc'])}: {err['msg']}"[:160]
            for err in exc.errors(include_url=False, include_input=False)[:_MAX_ERRORS]
        ]
        raise InvalidArgument(
            "These values do not fit the declared types: " + "; ".join(problems),
        ) from None
    return parsed.model_dump(by_alias=True, exclude_unset=only_set)


def signature(schema: Mapping[str, Any]) -> str:
    """`name: type` for each property, `?` marking optional ones, for descriptions."""
    required = set(schema.get("required", ()))
    parts = []
    for name, prop in schema.get("properties", {}).items():
        kinds = prop.get("anyOf", [prop])
        shown = "|".join(
            str(kind.get("format") or kind.get("type") or "value")
            for kind in kinds
            if kind.get("type") != "null"
        )
        nullable = any(kind.get("type") == "null" for kind in kinds)
        marker = "" if name in required else "?"
        parts.append(f"{name}{marker}: {shown}{' or null' if nullable else ''}")
    return ", ".join(parts)


def named(namespace: str | None, name: str) -> str:
    """The tool's name within its namespace, if it has one."""
    return f"{namespace}.{name}" if namespace else name


def raw_tool(**options: Any) -> Tool:  # noqa: ANN401 - Tool.from_json_schema's options
    """`Tool.from_json_schema`, with an identity column or bind refused as configuration."""
    try:
        check_identity_parameters(options["name"], options["input_schema"])
    except IdentityParameterError as exc:
        raise ConfigurationError(
            f"{exc} In SqlConfig, bind identity from the Principal with `principal_params` "
            f"(queries) or `scope` (patch targets).",
        ) from exc
    return Tool.from_json_schema(**options)
