"""Argument schemas: derived from typed signatures, or taken raw and checked.

Owns signature → pydantic argument model → model-facing JSON Schema, the refusal of
schemas that ask the model for identity (by the rules of `identity`), and the one
function that picks the JSON Schema validator (`compile_validator`), whose field errors
are written for the model to repair its call. It never runs a tool.
"""

from __future__ import annotations

import inspect
import json
import re
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Annotated, Any, get_args, get_origin

import jsonschema_rs
import pydantic
from pydantic import BaseModel, ConfigDict
from pydantic.json_schema import GenerateJsonSchema

from handrail.context import ToolContext
from handrail.declare.identity import check_identity_parameters, take_declarations
from handrail.declare.integers import IntegerPlaces, UnsafeIntegerError
from handrail.declare.schema_store import SchemaStore
from handrail.errors import SchemaError, SignatureError
from handrail.paths import escape_pointer, json_path
from handrail.spec import BusinessValue, FromPrincipal

__all__ = [
    "ArgumentValidator",
    "DerivedSignature",
    "PreparedSchema",
    "compile_validator",
    "compile_validator_map",
    "derive_signature",
    "prepare_raw_schema",
]


_MAX_FIELD_ERRORS = 20
_MAX_MESSAGE = 160
# An enum error lists the allowed values within this many characters, then counts the rest.
_MAX_ENUM_LIST = 300
_MAX_ENUM_VALUE = 60
_UNSAFE = "is a whole number outside the safe integer range of ±(2**53 - 1)"


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
    elif isinstance(kind, _Kind.Enum):
        found.setdefault(json_path(base), _enum_message(kind.options, error.instance))
    else:
        found.setdefault(json_path(base), _clip(error.message))


def _shown(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= _MAX_ENUM_VALUE else text[:_MAX_ENUM_VALUE] + "…"


def _enum_message(options: list[Any], instance: object) -> str:
    """Every allowed value within a bound, how many more there are, and a case hint.

    The value given is not echoed: only values from the schema appear.
    """
    hint = ""
    if isinstance(instance, str):
        folded = instance.casefold()
        same = [o for o in options if isinstance(o, str) and o.casefold() == folded]
        if same:
            hint = f"wrong case: did you mean {_shown(same[0])}? Values are case-sensitive; "
    listed: list[str] = []
    used = 0
    for option in options:
        text = _shown(option)
        if listed and used + len(text) + 2 > _MAX_ENUM_LIST:
            break
        listed.append(text)
        used += len(text) + 2
    rest = len(options) - len(listed)
    more = f" and {rest} more" if rest else ""
    return f"{hint}must be one of {', '.join(listed)}{more}"


class ArgumentValidator:
    """A compiled Draft 2020-12 validator returning field errors as {json_path: message}.

    Messages are clipped so that a huge argument value is never echoed back whole. A
    valid value comes back from `check` with a whole-number float at each place the
    schema says integer turned into an int; those places are found once, here.
    """

    __slots__ = ("_convert", "_integers", "_is_valid", "_validator")

    def __init__(
        self,
        validator: jsonschema_rs.Draft202012Validator,
        integers: IntegerPlaces | None = None,
    ) -> None:
        self._validator = validator
        self._integers = integers
        # Bound once: `check` runs on every call.
        self._is_valid = validator.is_valid
        self._convert = None if integers is None else integers.converter

    @property
    def converts_integers(self) -> bool:
        """Whether an integer can stand anywhere in the schema (else `check` only checks)."""
        return self._integers is not None

    def errors(self, instance: object) -> dict[str, str]:
        """Field errors by path, empty when the instance is valid; at most 20, sorted."""
        if self._validator.is_valid(instance):
            return {}
        return self._errors(instance)

    def check(self, instance: Any) -> tuple[dict[str, str], Any]:  # noqa: ANN401 - JSON
        """Field errors and the value to use: `instance` itself, or a copy with ints.

        A whole-number float beyond ±(2**53 - 1) at an integer place is an error: its
        JSON text may have been rounded already.
        """
        if not self._is_valid(instance):
            return self._errors(instance), instance
        if self._convert is None:
            return {}, instance
        try:
            return {}, self._convert(instance)
        except UnsafeIntegerError as exc:
            return {json_path(exc.path): _UNSAFE}, instance

    def _errors(self, instance: object) -> dict[str, str]:
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
    msg = (
        f"external reference {uri[:120]!r} is not retrieved; inline it in the schema or "
        f"put the document in a SchemaStore"
    )
    raise SchemaError(msg)


def _object_schema(schema: object, owner: str) -> Mapping[str, Any]:
    if not isinstance(schema, Mapping):
        msg = (
            f"{owner}: tool parameters must be an object schema (a JSON object with type "
            f"'object'), not {type(schema).__name__}"
        )
        raise SchemaError(msg)
    return schema


def compile_validator(
    schema: Mapping[str, Any],
    *,
    schemas: SchemaStore | None = None,
) -> ArgumentValidator:
    """Compile a JSON Schema; the single place that chooses the validator library.

    jsonschema-rs (about 0.3-2 µs a call here, against about 47 µs for the reference
    `jsonschema`) with formats asserted, so `format` is a check and not a comment, and
    with external `$ref`s refused rather than fetched; with `schemas`, they are
    resolved from that store first. The places where integers stand are found here,
    once, so that a call converts only where the schema says integer.
    """
    document = dict(_object_schema(schema, "compile_validator"))
    if schemas is not None:
        document = schemas.resolve(document)
    try:
        validator = jsonschema_rs.Draft202012Validator(
            document,
            validate_formats=True,
            retriever=_no_retrieval,
        )
    except (jsonschema_rs.ValidationError, jsonschema_rs.ReferencingError, ValueError) as exc:
        raise SchemaError(f"invalid JSON Schema: {_clip(str(exc))}") from exc
    return ArgumentValidator(validator, _integer_places(document))


def _integer_places(document: dict[str, Any]) -> IntegerPlaces | None:
    validators: list[jsonschema_rs.ValidatorMap] = []

    def checks(pointer: str) -> Callable[[Any], bool] | None:
        if not validators:
            validators.append(compile_validator_map(document))
        found = validators[0].get(pointer)
        return None if found is None else found.is_valid

    def patterns(pattern: str) -> Callable[[Any], bool]:
        try:
            return jsonschema_rs.validator_for({"pattern": pattern}).is_valid
        except (jsonschema_rs.ValidationError, ValueError) as exc:
            raise SchemaError(f"invalid pattern {pattern[:80]!r}: {_clip(str(exc))}") from exc

    return IntegerPlaces.find(document, checks=checks, patterns=patterns)


def compile_validator_map(schema: Mapping[str, Any]) -> jsonschema_rs.ValidatorMap:
    """Validators for every subschema of `schema`, keyed by JSON pointer.

    The same library and options as `compile_validator`, for code that must check a
    value against one part of a schema. Raises SchemaError for a schema it refuses.
    """
    try:
        return jsonschema_rs.validator_map_for(
            dict(_object_schema(schema, "compile_validator_map")),
            validate_formats=True,
            retriever=_no_retrieval,
        )
    except (jsonschema_rs.ValidationError, jsonschema_rs.ReferencingError, ValueError) as exc:
        raise SchemaError(f"invalid JSON Schema: {_clip(str(exc))}") from exc


@dataclass(frozen=True, kw_only=True, slots=True)
class PreparedSchema:
    """A raw schema made model-facing, and its checked business-value declarations."""

    schema: dict[str, Any]
    business_values: Mapping[str, BusinessValue]


def prepare_raw_schema(
    tool_name: str,
    schema: Mapping[str, Any],
    trusted: Mapping[str, FromPrincipal],
    *,
    business_values: Mapping[str, BusinessValue] | None = None,
    schemas: SchemaStore | None = None,
) -> PreparedSchema:
    """Check a raw input schema and return its model-facing form.

    The schema must be a valid Draft 2020-12 object schema; `$ref`s to other documents
    are resolved from `schemas` into the schema itself. Trusted parameters are removed
    from `properties` and `required`; any other identity parameter is refused unless
    `business_values` declares it (keys: a top-level parameter name, or a JSON Pointer
    such as `#/properties/owner/properties/user_id`).
    """
    schema = _object_schema(schema, f"tool {tool_name!r}")
    if schema.get("type") != "object":
        raise SchemaError(f"tool {tool_name!r}: the input schema must have type 'object'")
    declared = schema.get("$schema")
    if declared not in {None, "https://json-schema.org/draft/2020-12/schema"}:
        raise SchemaError(f"tool {tool_name!r}: only Draft 2020-12 schemas are accepted")
    try:
        jsonschema_rs.meta.validate(dict(schema))
    except (jsonschema_rs.ValidationError, jsonschema_rs.ReferencingError, ValueError) as exc:
        raise SchemaError(f"tool {tool_name!r}: invalid JSON Schema: {_clip(str(exc))}") from exc
    try:
        facing = (schemas or SchemaStore()).resolve(schema)
    except SchemaError as exc:
        raise SchemaError(f"tool {tool_name!r}: {exc}") from exc
    props = dict(facing.get("properties") or {})
    for name in trusted:
        if name not in props:
            raise SchemaError(f"tool {tool_name!r}: trusted parameter {name!r} is not declared")
        del props[name]
    facing["properties"] = props
    if "required" in facing:
        facing["required"] = [r for r in facing["required"] if r not in trusted]
    exempt = check_identity_parameters(
        tool_name,
        facing,
        declared=_raw_declarations(tool_name, business_values or {}, trusted),
        declaration_error=SchemaError,
    )
    compile_validator(facing)
    return PreparedSchema(schema=facing, business_values=exempt)


def _raw_declarations(
    tool_name: str,
    business_values: Mapping[str, BusinessValue],
    trusted: Mapping[str, FromPrincipal],
) -> dict[str, BusinessValue]:
    declared: dict[str, BusinessValue] = {}
    hidden = {f"#/properties/{escape_pointer(name)}" for name in trusted}
    for key, value in business_values.items():
        if not isinstance(key, str) or not key:
            raise SchemaError(f"tool {tool_name!r}: business_values are keyed by name or pointer")
        pointer = key if key.startswith("#/") else f"#/properties/{escape_pointer(key)}"
        if pointer in hidden:
            msg = f"tool {tool_name!r}: {key!r} cannot be both trusted and a business value"
            raise SchemaError(msg)
        declared[pointer] = value
    return declared


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
    business_values: Mapping[str, BusinessValue]


def _marker(annotation: object, kind: type[Any]) -> Any:  # noqa: ANN401 - an instance of kind
    if get_origin(annotation) is Annotated:
        for extra in get_args(annotation)[1:]:
            if isinstance(extra, kind):
                return extra
    return None


def derive_signature(fn: Callable[..., Any], tool_name: str) -> DerivedSignature:
    """Build the argument model and model-facing JSON Schema from a typed signature.

    Refuses untyped, variadic and positional-only parameters and identity parameters
    declared neither trusted (`FromPrincipal`) nor a `BusinessValue`. A parameter
    annotated `ToolContext` is injected, not exposed.
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
        marker = _marker(annotation, FromPrincipal)
        if marker is not None:
            if _marker(annotation, BusinessValue) is not None:
                raise SignatureError(
                    f"tool {tool_name!r}: {name!r} cannot be both trusted (FromPrincipal) and "
                    f"a business value",
                )
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
    exempt = check_identity_parameters(
        tool_name,
        schema,
        declared=take_declarations(tool_name, schema),
        declaration_error=SignatureError,
    )
    compile_validator(schema)
    return DerivedSignature(
        model=model,
        json_schema=MappingProxyType(schema),
        context_parameter=context_parameter,
        trusted=MappingProxyType(trusted),
        is_async=inspect.iscoroutinefunction(fn),
        business_values=exempt,
    )


def _model_name(tool_name: str) -> str:
    parts = re.split(r"[^A-Za-z0-9]+", tool_name)
    return "".join(p[:1].upper() + p[1:] for p in parts if p) + "Arguments"
