"""Which names in a schema ask the model for identity or authority, and declared exceptions.

Owns the name rule (look-alike letters folded, compounds split into words), the walk
that finds every name a schema asks for (properties, required names, patterns and
schemas of property names) and the checking of `BusinessValue` declarations against
them. It never decides what a value means at run time: whatever a schema says,
identity, tenant and authority come only from the Principal.

The rule, applied to a name after folding (NFKD, combining marks and invisible format
characters dropped, Cyrillic, Greek and Armenian look-alikes mapped to the Latin letter
they imitate) and splitting into lower-case words (at every character that is not a
letter or digit, and at camelCase boundaries). A name asks for identity or authority
when

1. its words run together are one of the identity names (`tenant_id`, `user_id`,
   `principal`, `role`, `is_admin`, `permissions`, `org_id`, `acting_as`, ...);
2. one of its words is a word of authority, wherever it stands: `admin`, `superuser`,
   `sudo`, `impersonate` and their forms (`admin_mode`, `is_super_admin`);
3. two consecutive words form an identity phrase: user, org, tenant or principal
   followed by id, ids, uuid or guid, or `is admin`, `super user`, `acting as`, `on
   behalf`, `data scope` (`owner_user_id`, `ownerUserId`, `X-Tenant-ID`,
   `acting_as_user`);
4. a word, or the whole name, ends in a glued identity id (`owneruserid`,
   `TARGETTENANTID`); or
5. its last word, the thing it asks for, is a tenant, principal, role or permission
   (`x-tenant`, `targetTenant`, `user_role`, `granted_permissions`).

So `username`, `user_name`, `username_pattern`, `user_query`, `owner`, `customer_id`,
`role_description`, `tenant_email`, `principal_amount` and `lieutenant` are ordinary
names: `user` is a word of many ordinary names and says nothing about who is calling,
and a word that only qualifies another (`tenant_email` is an e-mail address) asks for
that other thing, while a user's *id*, a *role* or a *tenant* itself is identity.
Digits are not read as letters (`adm1n`): they look like digits to a reviewer and to
a model. A pattern of property names (`patternProperties`, a
`pattern` in `propertyNames`) asks for identity when its text does, or when it admits
plain identity names but not most ordinary ones (`^ten[a]nt$` does, `^[a-z_]+$` does
not); a `propertyNames` schema also when an `enum` or `const` in it names one.

This is a guard against schemas that ask for identity *by name*; prose in a
description can ask too, which is why no argument is ever used as identity.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import jsonschema_rs

from handrail.errors import IdentityParameterError, RegistrationError, SchemaError, SignatureError
from handrail.paths import escape_pointer, json_path
from handrail.spec import BusinessValue

__all__ = [
    "IdentityName",
    "asks_for_identity",
    "check_identity_parameters",
    "find_identity_names",
    "take_declarations",
]


# Rule 1: the whole name, words run together.
_WHOLE = frozenset(
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
# Rule 2: a word of authority, wherever it stands.
_AUTHORITY = frozenset(
    {
        "admin",
        "admins",
        "administrator",
        "administrators",
        "superuser",
        "superusers",
        "superadmin",
        "sudo",
        "impersonate",
        "impersonates",
        "impersonating",
        "impersonation",
        "impersonator",
        "datascope",
    },
)
# Rule 3: two consecutive words.
_OWNERS = (
    "user",
    "users",
    "org",
    "orgs",
    "organization",
    "organisation",
    "tenant",
    "tenants",
    "principal",
)
_IDS = ("id", "ids", "uuid", "guid")
_PAIRS = frozenset(
    {(owner, suffix) for owner in _OWNERS for suffix in _IDS}
    | {
        ("is", "admin"),
        ("is", "superuser"),
        ("super", "user"),
        ("super", "admin"),
        ("acting", "as"),
        ("on", "behalf"),
        ("data", "scope"),
    },
)
# Rule 4: a word that ends in an identity id written without separators.
_GLUED = tuple(sorted({f"{owner}{suffix}" for owner in _OWNERS for suffix in _IDS}))
# Rule 5: the last word, the thing the name asks for.
_HEADS = frozenset(
    {"tenant", "tenants", "principal", "principals", "role", "roles", "permission", "permissions"},
)

# Look-alikes of Latin letters, from Unicode's confusables.txt (UTS #39, the "MA" table):
# the Cyrillic, Greek, Armenian and Latin-extension letters whose prototype is one Latin
# letter. Look-alikes of capital I map to I (the table's prototype is l, because I and l
# look alike themselves); everything else maps to the table's prototype.
_LOOK_ALIKES = str.maketrans(
    {
        # Cyrillic capitals
        "\u0405": "S",
        "\u0406": "I",
        "\u0408": "J",
        "\u0410": "A",
        "\u0412": "B",
        "\u0415": "E",
        "\u041a": "K",
        "\u041c": "M",
        "\u041d": "H",
        "\u041e": "O",
        "\u0420": "P",
        "\u0421": "C",
        "\u0422": "T",
        "\u0423": "Y",
        "\u0425": "X",
        "\u0474": "V",
        "\u04ae": "Y",
        "\u04c0": "I",
        "\u050c": "G",
        "\u051c": "W",
        # Cyrillic small letters
        "\u0430": "a",
        "\u0433": "r",
        "\u0435": "e",
        "\u043e": "o",
        "\u0440": "p",
        "\u0441": "c",
        "\u0443": "y",
        "\u0445": "x",
        "\u0455": "s",
        "\u0456": "i",
        "\u0458": "j",
        "\u0461": "w",
        "\u0475": "v",
        "\u04af": "y",
        "\u04bb": "h",
        "\u04bd": "e",
        "\u04cf": "i",
        "\u0501": "d",
        "\u051b": "q",
        "\u051d": "w",
        # Greek capitals
        "\u037f": "J",
        "\u0391": "A",
        "\u0392": "B",
        "\u0395": "E",
        "\u0396": "Z",
        "\u0397": "H",
        "\u0399": "I",
        "\u039a": "K",
        "\u039c": "M",
        "\u039d": "N",
        "\u039f": "O",
        "\u03a1": "P",
        "\u03a4": "T",
        "\u03a5": "Y",
        "\u03a7": "X",
        "\u03d2": "Y",
        "\u03f9": "C",
        "\u03fa": "M",
        # Greek small letters
        "\u03b1": "a",
        "\u03b3": "y",
        "\u03b9": "i",
        "\u03bd": "v",
        "\u03bf": "o",
        "\u03c1": "p",
        "\u03c3": "o",
        "\u03c5": "u",
        "\u03f1": "p",
        "\u03f2": "c",
        "\u03f3": "j",
        # Armenian
        "\u054d": "U",
        "\u054f": "S",
        "\u0555": "O",
        "\u0561": "w",
        "\u0563": "q",
        "\u0566": "q",
        "\u0570": "h",
        "\u0578": "n",
        "\u057c": "n",
        "\u057d": "u",
        "\u0581": "g",
        "\u0584": "f",
        "\u0585": "o",
        # Latin extensions and IPA
        "\u0131": "i",
        "\u0251": "a",
        "\u0261": "g",
        "\u0263": "y",
        "\u0269": "i",
        "\u026a": "i",
        "\u028b": "u",
        "\u028f": "y",
        "\u1d04": "c",
        "\u1d0f": "o",
        "\u1d1c": "u",
        "\u1d20": "v",
        "\u1d21": "w",
        "\u1d22": "z",
    },
)
_SPLIT = re.compile(r"[A-Z]{2,}s(?![a-z])|[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
_DROPPED = frozenset({"Mn", "Me", "Cf"})
_REGEX_ESCAPE = re.compile(r"\\.")

# Plain spellings of identity names, and ordinary names: a pattern of property names
# that admits some of the first but fewer than half of the second singles out identity.
_CANDIDATES = (
    "tenant",
    "tenant_id",
    "tenantId",
    "TenantId",
    "TENANT_ID",
    "tenant-id",
    "user_id",
    "userId",
    "UserId",
    "USER_ID",
    "user-id",
    "userid",
    "user",
    "principal",
    "principal_id",
    "role",
    "roles",
    "is_admin",
    "isAdmin",
    "admin",
    "superuser",
    "permission",
    "permissions",
    "data_scope",
    "org_id",
    "orgId",
    "organization_id",
    "acting_as",
    "on_behalf_of",
    "impersonate",
)
_ORDINARY = (
    "name",
    "query",
    "note",
    "value",
    "item",
    "order_id",
    "orderId",
    "page",
    "limit",
    "title",
    "a",
    "x",
    "zz",
    "foo_bar",
    "Colour",
    "key-1",
    "lorem",
    "ipsum",
)
_MAX_LISTED = 10
_MAX_NODES = 200_000
_MAX_DEPTH = 512

_MARKER = BusinessValue.SCHEMA_KEYWORD
_BRANCH = re.compile(r"/(?:anyOf|oneOf|allOf)/[0-9]+$")
_DECLARABLE = re.compile(r"/(?:properties|patternProperties)/[^/]*$|/propertyNames$")


def _words(name: str) -> list[str]:
    decomposed = unicodedata.normalize("NFKD", name)
    kept = "".join(c for c in decomposed if unicodedata.category(c) not in _DROPPED)
    # NFKD again: a look-alike may map to a letter that still carries a mark.
    folded = unicodedata.normalize("NFKD", kept.translate(_LOOK_ALIKES))
    return [word.lower() for word in _SPLIT.findall(folded)]


def _words_ask(words: list[str]) -> bool:
    if not words:
        return False
    joined = "".join(words)
    if joined in _WHOLE or joined.endswith(_GLUED) or words[-1] in _HEADS:
        return True
    if any(word in _AUTHORITY or word.endswith(_GLUED) for word in words):
        return True
    return any(pair in _PAIRS for pair in itertools.pairwise(words))


def asks_for_identity(name: str) -> bool:
    """Whether a property name asks the model for identity, tenant or authority."""
    return _words_ask(_words(name))


def _pattern_text_asks(pattern: str) -> bool:
    return _words_ask(_words(_REGEX_ESCAPE.sub(" ", pattern)))


def _singles_out_identity(admits: Callable[[str], bool]) -> bool:
    if not any(admits(name) for name in _CANDIDATES):
        return False
    return 2 * sum(admits(name) for name in _ORDINARY) < len(_ORDINARY)


def _pattern_asks(pattern: str) -> bool:
    if _pattern_text_asks(pattern):
        return True
    try:
        validator = jsonschema_rs.validator_for({"type": "string", "pattern": pattern})
    except (jsonschema_rs.ValidationError, ValueError) as exc:
        msg = f"the property-name pattern {pattern[:80]!r} is not a valid regular expression"
        raise SchemaError(msg) from exc
    return _singles_out_identity(validator.is_valid)


def _display(path: list[str]) -> str:

    return json_path(path)


@dataclass(frozen=True, kw_only=True, slots=True)
class IdentityName:
    """One place where a schema asks the model for identity or authority.

    `key` is the JSON Pointer of where the name is (or would be) declared: the
    property's schema for a property or a required name, the pattern's schema for a
    pattern, the `propertyNames` schema for names constrained there. A BusinessValue
    declaration names this key.
    """

    key: str
    path: str
    name: str


def _literals(schema: object) -> Iterator[str]:
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            if isinstance(node.get("const"), str):
                yield node["const"]
            if isinstance(node.get("enum"), list):
                yield from (value for value in node["enum"] if isinstance(value, str))
            if isinstance(node.get("pattern"), str):
                yield node["pattern"]
            stack.extend(value for value in node.values() if isinstance(value, Mapping | list))
        elif isinstance(node, list):
            stack.extend(node)


class _NameSchemas:
    """Validators for `propertyNames` schemas, compiled in their document when needed."""

    def __init__(self, root: Mapping[str, Any]) -> None:
        self._root = root
        self._map: jsonschema_rs.ValidatorMap | None = None

    def admits(self, pointer: str) -> Callable[[str], bool] | None:
        if self._map is None:
            try:
                self._map = jsonschema_rs.validator_map_for(
                    dict(self._root),
                    validate_formats=True,
                    retriever=_refuse_retrieval,
                )
            except (jsonschema_rs.ValidationError, jsonschema_rs.ReferencingError, ValueError):
                return None
        validator = self._map.get(pointer)
        return None if validator is None else validator.is_valid


def _refuse_retrieval(uri: str) -> Any:  # noqa: ANN401 - the library's retriever signature
    # Schemas reach this check with their references resolved already; never fetch.
    msg = f"external reference {uri[:120]!r} is not retrieved"  # pragma: no cover
    raise SchemaError(msg)  # pragma: no cover


def _names_ask(schema: object, pointer: str, names: _NameSchemas) -> bool:
    if any(asks_for_identity(text) or _pattern_text_asks(text) for text in _literals(schema)):
        return True
    admits = names.admits(pointer)
    return admits is not None and _singles_out_identity(admits)


def find_identity_names(schema: Mapping[str, Any]) -> list[IdentityName]:
    """Every place in `schema` that asks for identity, authority or tenant, by key.

    Every object in the document is read, not only the places a validator evaluates,
    so a name is found in `$defs`, `items`, unions and unknown keywords alike.
    """
    found: dict[str, IdentityName] = {}
    names = _NameSchemas(schema)
    stack: list[tuple[object, str, list[str]]] = [(schema, "#", [])]
    visited = 0
    while stack:
        node, pointer, path = stack.pop()
        visited += 1
        if visited > _MAX_NODES or pointer.count("/") > _MAX_DEPTH:
            # JSON cannot hold a cycle; a Python object that does is not a schema.
            msg = f"a schema nested over {_MAX_DEPTH} levels or of over {_MAX_NODES} values"
            raise SchemaError(msg)
        if isinstance(node, list):
            stack.extend((item, f"{pointer}/{i}", path) for i, item in enumerate(node))
            continue
        if not isinstance(node, Mapping):
            continue
        for name, key, where in _named(node, pointer, path):
            if asks_for_identity(name):
                found.setdefault(key, IdentityName(key=key, path=_display(where), name=name))
        patterns = node.get("patternProperties")
        if isinstance(patterns, Mapping):
            for pattern, sub in patterns.items():
                key = f"{pointer}/patternProperties/{escape_pointer(str(pattern))}"
                if _pattern_asks(str(pattern)):
                    shown = f"{_display(path)} (keys matching /{pattern}/)"
                    found.setdefault(key, IdentityName(key=key, path=shown, name=str(pattern)))
                stack.append((sub, key, [*path, str(pattern)]))
        key = f"{pointer}/propertyNames"
        if "propertyNames" in node and _names_ask(node["propertyNames"], key, names):
            shown = f"{_display(path)} (property names)"
            found.setdefault(key, IdentityName(key=key, path=shown, name="propertyNames"))
        for keyword, value in node.items():
            if keyword == "properties" and isinstance(value, Mapping):
                stack.extend(
                    (sub, f"{pointer}/properties/{escape_pointer(str(name))}", [*path, str(name)])
                    for name, sub in value.items()
                )
            elif keyword != "patternProperties":
                stack.append((value, f"{pointer}/{escape_pointer(str(keyword))}", path))
    return sorted(found.values(), key=lambda item: (item.path, item.key))


def _named(
    node: Mapping[str, Any],
    pointer: str,
    path: list[str],
) -> Iterator[tuple[str, str, list[str]]]:
    """(name, declaration key, path) of each property an object schema names."""
    named: list[object] = []
    properties = node.get("properties")
    if isinstance(properties, Mapping):
        named.extend(properties)
    # A property can be demanded without being declared: `required` alone (with
    # additional properties allowed) asks the model for it just the same.
    if isinstance(node.get("required"), list):
        named.extend(node["required"])
    for keyword in ("dependentRequired", "dependentSchemas"):
        dependent = node.get(keyword)
        if isinstance(dependent, Mapping):
            named.extend(dependent)
            if keyword == "dependentRequired":
                named.extend(n for ns in dependent.values() if isinstance(ns, list) for n in ns)
    for name in named:
        text = str(name)
        yield text, f"{pointer}/properties/{escape_pointer(text)}", [*path, text]


def check_identity_parameters(
    tool_name: str,
    schema: Mapping[str, Any],
    *,
    declared: Mapping[str, BusinessValue] | None = None,
    declaration_error: type[RegistrationError] = SchemaError,
) -> Mapping[str, BusinessValue]:
    """Refuse a model-facing schema that asks for identity, tenant or authority.

    Such parameters must be declared trusted (`FromPrincipal`), so that they are filled
    from the authenticated Principal and never seen by the model, or, when they are
    business values and not the caller, declared with `BusinessValue`. `declared` maps
    JSON Pointers (an `IdentityName.key`) to declarations; a declaration that names no
    identity-like place raises `declaration_error`. Returns the declarations, checked.
    """
    if not isinstance(schema, Mapping):
        msg = (
            f"tool {tool_name!r}: the parameters must be an object schema (a JSON object "
            f"with type 'object'), not {type(schema).__name__}"
        )
        raise SchemaError(msg)
    declared = dict(declared or {})
    asked = find_identity_names(schema)
    keys = {name.key for name in asked}
    for key, value in declared.items():
        if not isinstance(value, BusinessValue):
            msg = f"tool {tool_name!r}: the declaration of {key!r} must be a BusinessValue"
            raise declaration_error(msg)
        if key not in keys:
            msg = (
                f"tool {tool_name!r}: {key!r} is declared a business value but the schema "
                f"asks for no identity-like name there; declare only what registration "
                f"refuses ({', '.join(sorted(keys)) or 'nothing here'})"
            )
            raise declaration_error(msg)
    undeclared = [name for name in asked if name.key not in declared]
    if undeclared:
        raise IdentityParameterError(_refusal(tool_name, undeclared))
    return MappingProxyType(declared)


def _refusal(tool_name: str, undeclared: list[IdentityName]) -> str:
    listed = undeclared[:_MAX_LISTED]
    more = f" and {len(undeclared) - len(listed)} more" if len(undeclared) > len(listed) else ""
    where = ", ".join(name.path for name in listed) + more
    keys = ", ".join(f"{name.key!r}: BusinessValue(reason=...)" for name in listed)
    return (
        f"tool {tool_name!r} asks the model for identity or authority at {where}. "
        f"Identity, tenant and permissions come from the Principal: declare such a "
        f"parameter trusted with FromPrincipal(...), or remove it. If it is a business "
        f"value and not the caller (a loan's principal, the customer an administrator "
        f"updates), declare it with a reason: Annotated[..., BusinessValue(reason=...)] "
        f"on a typed parameter or field, or business_values={{{keys}}} for a raw schema."
    )


def take_declarations(
    tool_name: str,
    schema: dict[str, Any],
) -> dict[str, BusinessValue]:
    """Remove the BusinessValue markers of a generated schema; return them by key.

    Only schemas Handrail generated from a typed signature carry markers. A marker on a
    union branch (`Optional`) belongs to the parameter; anywhere else but a property,
    a pattern's schema or `propertyNames` it is refused.
    """
    found: dict[str, BusinessValue] = {}
    stack: list[tuple[object, str]] = [(schema, "#")]
    while stack:
        node, pointer = stack.pop()
        if isinstance(node, list):
            stack.extend((item, f"{pointer}/{i}") for i, item in enumerate(node))
            continue
        if not isinstance(node, dict):
            continue
        if _MARKER in node:
            reason = node.pop(_MARKER)
            key = pointer
            while _BRANCH.search(key):
                key = _BRANCH.sub("", key)
            if not isinstance(reason, str) or not _DECLARABLE.search(key):
                msg = (
                    f"tool {tool_name!r}: BusinessValue at {pointer} is not on a parameter "
                    f"or a model field; annotate the whole type, for example "
                    f"Annotated[list[str], BusinessValue(reason=...)]"
                )
                raise SignatureError(msg)
            found[key] = BusinessValue(reason=reason)
        stack.extend((value, f"{pointer}/{escape_pointer(str(k))}") for k, value in node.items())
    return found
