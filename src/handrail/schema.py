"""Argument schemas: derived from typed signatures, or taken raw and checked.

Owns signature → pydantic argument model → model-facing JSON Schema, the refusal of
schemas that ask the model for identity, and the one function that picks the JSON
Schema validator (`compile_validator`). It never runs a tool.
"""

from __future__ import annotations

import inspect
import json
import re
import typing
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Annotated, Any, get_args, get_origin

import jsonschema_rs
import pydantic
from pydantic import BaseModel, ConfigDict
from pydantic.json_schema import GenerateJsonSchema

from handrail.context import ToolContext
from handrail.errors import IdentityParameterError, SchemaError, SignatureError
from handrail.spec import FromPrincipal

__all__ = [
    "ArgumentValidator",
    "DerivedSignature",
    "check_identity_parameters",
    "compile_validator",
    "compile_validator_map",
    "derive_signature",
    "json_path",
    "prepare_raw_schema",
]

# Parameter names that ask the model who it is or what it may do. Compared after
# lower-casing and removing everything but letters and digits.
_IDENTITY_NAMES = frozenset(
    {
        "tenant",
        "tenantid",
        "user",
        "userid",
        "principal",
        "principalid",
        "role",
        "roles",
        "isadmin",
        "admin",
        "superuser",
        "issuperuser",
        "permission",
        "permissions",
        "datascope",
        "orgid",
        "organizationid",
        "organisationid",
        "actingas",
        "impersonate",
        "onbehalfof",
    },
)
_NORMALISE = re.compile(r"[^a-z0-9]")
_MAX_FIELD_ERRORS = 20
_MAX_MESSAGE = 160


def _normalise(name: str) -> str:
    # NFKC first, so that full-width or styled letters (U+FF54 for "t") fold to ASCII.
    return _NORMALISE.sub("", unicodedata.normalize("NFKC", name).casefold())


def _property_names(schema: object, path: str = "$") -> Iterator[tuple[str, str]]:
    """Every (json_path, property name) declared or required anywhere in a schema."""
    if isinstance(schema, Mapping):
        props = schema.get("properties")
        if isinstance(props, Mapping):
            for name, sub in props.items():
                yield f"{path}.{name}", str(name)
                yield from _property_names(sub, f"{path}.{name}")
        # A property can be demanded without being declared: `required` alone (with
        # additional properties allowed) asks the model for it just the same.
        named: list[object] = []
        if isinstance(schema.get("required"), list):
            named.extend(schema["required"])
        for keyword in ("dependentRequired", "dependentSchemas"):
            dependent = schema.get(keyword)
            if isinstance(dependent, Mapping):
                named.extend(dependent)
                if keyword == "dependentRequired":
                    named.extend(n for ns in dependent.values() if isinstance(ns, list) for n in ns)
        for name in named:
            yield f"{path}.{name}", str(name)
        for key, sub in schema.items():
            if key != "properties":
                yield from _property_names(sub, path)
    elif isinstance(schema, list):
        for item in schema:
            yield from _property_names(item, path)


def check_identity_parameters(tool_name: str, schema: Mapping[str, Any]) -> None:
    """Refuse a model-facing schema that asks for identity, tenant or authority.

    Such parameters must be declared trusted (`FromPrincipal`) so that they are filled
    from the authenticated Principal and never seen by the model.
    """
    offending = sorted(
        {path for path, name in _property_names(schema) if _normalise(name) in _IDENTITY_NAMES},
    )
    if offending:
        raise IdentityParameterError(
            f"tool {tool_name!r} asks the model for identity or authority at "
            f"{', '.join(offending)}. Identity, tenant and permissions come from the "
            f"Principal: declare the parameter trusted with FromPrincipal(...) or remove it.",
        )


# --- validation ----------------------------------------------------------------------------


_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


def json_path(parts: Iterable[str | int]) -> str:
    """A JSONPath for a location: `$.items[2].name`; odd keys as `$["a b"]`, clipped."""
    out = "$"
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _IDENTIFIER.match(part):
            out += f".{part}"
        else:
            out += f"[{json.dumps(part[:64], ensure_ascii=False)}]"
    return out


def _clip(message: str) -> str:
    return message if len(message) <= _MAX_MESSAGE else message[: _MAX_MESSAGE - 1] + "…"


_Kind = jsonschema_rs.ValidationErrorKind


def _is_type_mismatch(branch: list[jsonschema_rs.ValidationError], path: list[str | int]) -> bool:
    return (
        len(branch) == 1
        and isinstance(branch[0].kind, _Kind.Type)
        and list(branch[0].instance_path) == path
    )


def _collect(error: jsonschema_rs.ValidationError, found: dict[str, str]) -> None:
    """Add one error as {json_path: message}, pointing at the field that is wrong."""
    base = list(error.instance_path)
    kind = error.kind
    if isinstance(kind, _Kind.AnyOf | _Kind.OneOfNotValid):
        # `Optional[Model]` becomes anyOf [Model, null]: when only one branch has the
        # right type, its errors say what is wrong far better than "no branch matched".
        branches = [b for b in kind.context if not _is_type_mismatch(b, base)]
        if len(branches) == 1 and branches[0]:
            for sub in branches[0]:
                _collect(sub, found)
            return
    if isinstance(kind, _Kind.Required):
        found.setdefault(json_path([*base, str(kind.property)]), "is required")
    elif isinstance(kind, _Kind.AdditionalProperties):
        for name in kind.unexpected[:_MAX_FIELD_ERRORS]:
            found.setdefault(json_path([*base, str(name)]), "is not allowed")
    else:
        found.setdefault(json_path(base), _clip(error.message))


class ArgumentValidator:
    """A compiled Draft 2020-12 validator returning field errors as {json_path: message}.

    Messages are clipped so that a huge argument value is never echoed back whole.
    """

    __slots__ = ("_validator",)

    def __init__(self, validator: jsonschema_rs.Draft202012Validator) -> None:
        self._validator = validator

    def errors(self, instance: object) -> dict[str, str]:
        """Field errors by path, empty when the instance is valid; at most 20, sorted."""
        if self._validator.is_valid(instance):
            return {}
        found: dict[str, str] = {}
        for error in self._validator.iter_errors(instance):
            _collect(error, found)
            if len(found) >= _MAX_FIELD_ERRORS:
                break
        # Sorted, so that the same mistake always reads the same way.
        return dict(sorted(found.items())[:_MAX_FIELD_ERRORS])


def _no_retrieval(uri: str) -> Any:  # noqa: ANN401 - the library's retriever signature
    # jsonschema-rs fetches unknown `$ref` targets over HTTP unless told otherwise. A
    # schema (from an MCP server, say) must never make the host send a request.
    msg = f"external reference {uri[:120]!r} is not retrieved; inline it in the schema"
    raise SchemaError(msg)


def compile_validator(schema: Mapping[str, Any]) -> ArgumentValidator:
    """Compile a JSON Schema; the single place that chooses the validator library.

    jsonschema-rs (about 0.3-2 µs a call here, against about 47 µs for the reference
    `jsonschema`) with formats asserted, so `format` is a check and not a comment, and
    with external `$ref`s refused rather than fetched.
    """
    try:
        validator = jsonschema_rs.Draft202012Validator(
            dict(schema),
            validate_formats=True,
            retriever=_no_retrieval,
        )
    except (jsonschema_rs.ValidationError, jsonschema_rs.ReferencingError, ValueError) as exc:
        raise SchemaError(f"invalid JSON Schema: {_clip(str(exc))}") from exc
    return ArgumentValidator(validator)


def compile_validator_map(schema: Mapping[str, Any]) -> jsonschema_rs.ValidatorMap:
    """Validators for every subschema of `schema`, keyed by JSON pointer.

    The same library and options as `compile_validator`, for code that must check a
    value against one part of a schema. Raises SchemaError for a schema it refuses.
    """
    try:
        return jsonschema_rs.validator_map_for(
            dict(schema),
            validate_formats=True,
            retriever=_no_retrieval,
        )
    except (jsonschema_rs.ValidationError, jsonschema_rs.ReferencingError, ValueError) as exc:
        raise SchemaError(f"invalid JSON Schema: {_clip(str(exc))}") from exc


# --- raw schemas (MCP-style tools) --------------------------------------------------------------


def prepare_raw_schema(
    tool_name: str,
    schema: Mapping[str, Any],
    trusted: Mapping[str, FromPrincipal],
) -> dict[str, Any]:
    """Check a raw input schema and return its model-facing form.

    The schema must be a valid Draft 2020-12 object schema. Trusted parameters are
    removed from `properties` and `required`; any other identity parameter is refused.
    """
    if not isinstance(schema, Mapping) or schema.get("type") != "object":
        raise SchemaError(f"tool {tool_name!r}: the input schema must have type 'object'")
    declared = schema.get("$schema")
    if declared not in {None, "https://json-schema.org/draft/2020-12/schema"}:
        raise SchemaError(f"tool {tool_name!r}: only Draft 2020-12 schemas are accepted")
    try:
        jsonschema_rs.meta.validate(dict(schema))
    except (jsonschema_rs.ValidationError, jsonschema_rs.ReferencingError) as exc:
        raise SchemaError(f"tool {tool_name!r}: invalid JSON Schema: {_clip(str(exc))}") from exc
    facing = dict(schema)
    props = dict(schema.get("properties") or {})
    for name in trusted:
        if name not in props:
            raise SchemaError(f"tool {tool_name!r}: trusted parameter {name!r} is not declared")
        del props[name]
    facing["properties"] = props
    if "required" in schema:
        facing["required"] = [r for r in schema["required"] if r not in trusted]
    check_identity_parameters(tool_name, facing)
    compile_validator(facing)
    return facing


# --- signatures (decorated tools) ----------------------------------------------------------------


class _ModelFacingSchema(GenerateJsonSchema):
    """Pydantic's schema without auto-generated titles, which only cost tokens."""

    def field_title_should_be_set(self, schema: Any) -> bool:  # noqa: ANN401 - pydantic's type
        """Never add a title that merely repeats the field name."""
        del schema
        return False


@dataclass(frozen=True, kw_only=True, slots=True)
class DerivedSignature:
    """What a typed function signature yields: the argument model and its schema."""

    model: type[BaseModel]
    json_schema: Mapping[str, Any]
    context_parameter: str | None
    trusted: Mapping[str, FromPrincipal]
    is_async: bool


def _trusted_marker(annotation: object) -> FromPrincipal | None:
    if get_origin(annotation) is Annotated:
        for extra in get_args(annotation)[1:]:
            if isinstance(extra, FromPrincipal):
                return extra
    return None


def derive_signature(fn: Callable[..., Any], tool_name: str) -> DerivedSignature:
    """Build the argument model and model-facing JSON Schema from a typed signature.

    Refuses untyped, variadic and positional-only parameters and identity parameters
    not declared trusted. A parameter annotated `ToolContext` is injected, not exposed.
    """
    try:
        signature = inspect.signature(fn)
        hints = typing.get_type_hints(fn, include_extras=True)
    except (NameError, TypeError) as exc:
        raise SignatureError(f"tool {tool_name!r}: cannot resolve annotations: {exc}") from exc

    fields: dict[str, Any] = {}
    context_parameter: str | None = None
    trusted: dict[str, FromPrincipal] = {}
    for name, param in signature.parameters.items():
        if param.kind in {param.VAR_POSITIONAL, param.VAR_KEYWORD}:
            raise SignatureError(f"tool {tool_name!r}: *args/**kwargs ({name!r}) are not allowed")
        if param.kind is param.POSITIONAL_ONLY:
            raise SignatureError(
                f"tool {tool_name!r}: positional-only parameter {name!r} is not allowed",
            )
        if name not in hints:
            raise SignatureError(f"tool {tool_name!r}: parameter {name!r} has no type annotation")
        annotation = hints[name]
        if annotation is ToolContext:
            if context_parameter is not None:
                raise SignatureError(f"tool {tool_name!r}: more than one ToolContext parameter")
            context_parameter = name
            continue
        marker = _trusted_marker(annotation)
        if marker is not None:
            trusted[name] = marker
            continue
        bare = get_args(annotation)[0] if get_origin(annotation) is Annotated else annotation
        if bare is Any or bare is object:
            raise SignatureError(
                f"tool {tool_name!r}: parameter {name!r} is typed {bare!r}, which tells the "
                f"model nothing; give it a concrete type",
            )
        if name.startswith("_"):
            raise SignatureError(f"tool {tool_name!r}: parameter {name!r} starts with '_'")
        default = ... if param.default is param.empty else param.default
        fields[name] = (annotation, default)

    try:
        model = pydantic.create_model(
            _model_name(tool_name),
            __config__=ConfigDict(extra="forbid", arbitrary_types_allowed=False),
            **fields,
        )
        schema = model.model_json_schema(schema_generator=_ModelFacingSchema)
    except (pydantic.PydanticUserError, pydantic.PydanticSchemaGenerationError, TypeError) as exc:
        raise SignatureError(f"tool {tool_name!r}: cannot build a schema: {exc}") from exc
    schema.pop("title", None)
    schema.setdefault("properties", {})
    check_identity_parameters(tool_name, schema)
    compile_validator(schema)
    return DerivedSignature(
        model=model,
        json_schema=MappingProxyType(schema),
        context_parameter=context_parameter,
        trusted=MappingProxyType(trusted),
        is_async=inspect.iscoroutinefunction(fn),
    )


def _model_name(tool_name: str) -> str:
    parts = re.split(r"[^A-Za-z0-9]+", tool_name)
    return "".join(p[:1].upper() + p[1:] for p in parts if p) + "Arguments"
