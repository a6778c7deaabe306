"""Secret handles: tools read credentials from a host-side provider by name, never by value.

Owns the provider Protocol with a static and an environment implementation, per-call
access control (`Secrets`), and the `SecretLedger` of values handed out, which scrubs
them from every sink: text, JSON values, bytes and log records. It never stores a value
anywhere but the ledger, and never shows one in a repr or an error message.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import AnyStr, Protocol, TypeVar, cast
from urllib.parse import quote, quote_plus

from handrail.errors import ConfigurationError

__all__ = [
    "MIN_SECRET_LENGTH",
    "EnvSecretProvider",
    "ScrubbingFilter",
    "SecretAccessError",
    "SecretAccessReason",
    "SecretLedger",
    "SecretProvider",
    "Secrets",
    "StaticSecretProvider",
    "validate_handle",
]

MIN_SECRET_LENGTH = 8
"""Shorter values are refused: scrubbing them would mangle ordinary text, and a short
value is guessable anyway."""

_HANDLE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/@-]{0,127}")
_WILDCARD = "*"
# Nesting of the prefix-tree pattern; deeper groups fall back to a flat alternation so
# that neither this module nor the regex compiler recurses without bound.
_MAX_NESTING = 48
# Scrubbing repeats until nothing matches; a value built to re-form around its own
# placeholder never settles, and such text is dropped whole.
_MAX_PASSES = 4
_UNSCRUBBABLE = "[SECRET:*]"
_PERCENT = re.compile(r"%[0-9A-F]{2}")
_T = TypeVar("_T")


class SecretAccessReason(StrEnum):
    """Why a secret was not handed out; assert on this, never on the message."""

    UNDECLARED = "undeclared"
    """The tool did not declare the handle in `secrets=`."""
    MISSING = "missing"
    """The provider has no value for this handle and tenant."""
    TOO_SHORT = "too_short"
    """The value is shorter than MIN_SECRET_LENGTH and could not be scrubbed safely."""
    NOT_CONFIGURED = "not_configured"
    """The call has no secret provider at all."""


class SecretAccessError(ConfigurationError):
    """A tool asked for a secret it may not have or that is not configured.

    The message names the handle and the tool, never a value.
    """

    def __init__(
        self,
        reason: SecretAccessReason,
        *,
        handle: str,
        tool: str | None = None,
    ) -> None:
        who = f"tool {tool!r}" if tool is not None else "the ledger"
        super().__init__(f"{who} cannot use secret {handle!r}: {reason}")
        self.reason = reason
        self.handle = handle
        self.tool = tool


def validate_handle(handle: str) -> str:
    """Return `handle` when it is a well-formed secret handle, else ConfigurationError.

    Handles are names such as `stripe.api_key` or `db/password`: letters, digits and
    `_ . : / @ -`, at most 128 characters. They appear in placeholders and audit rows.
    """
    if not isinstance(handle, str) or _HANDLE.fullmatch(handle) is None:
        raise ConfigurationError(f"{handle!r} is not a valid secret handle")
    return handle


# --- providers ----------------------------------------------------------------------------


class SecretProvider(Protocol):
    """Where the host keeps its credentials; asked by handle, for one tenant.

    `get` blocks and must be cheap (cache in the implementation if the backend is slow).
    It returns None when there is no value for that handle and tenant.
    """

    def get(self, handle: str, *, tenant_id: str) -> str | None:
        """The value of `handle` for `tenant_id`, or None."""
        ...


class StaticSecretProvider:
    """Fixed values keyed by `(tenant_id, handle)`; tenant `"*"` applies to every tenant.

    A tenant's own value beats the `"*"` one. For tests and demos.
    """

    def __init__(self, values: Mapping[tuple[str, str], str]) -> None:
        checked: dict[tuple[str, str], str] = {}
        for key, value in values.items():
            if not _is_pair(key):
                raise ConfigurationError(f"{key!r} is not a (tenant_id, handle) pair")
            if not isinstance(value, str):
                raise ConfigurationError(f"the value for {key!r} is not a string")
            checked[(key[0], validate_handle(key[1]))] = value
        self._values: Mapping[tuple[str, str], str] = MappingProxyType(checked)

    def get(self, handle: str, *, tenant_id: str) -> str | None:
        """The tenant's value, else the `"*"` value, else None."""
        own = self._values.get((tenant_id, handle))
        if own is not None:
            return own
        return self._values.get((_WILDCARD, handle))

    def __repr__(self) -> str:
        return f"StaticSecretProvider(keys={sorted(self._values)!r})"


class EnvSecretProvider:
    """Values from environment variables, named explicitly per handle.

    `names` maps a handle to the variable that holds it for every tenant; `per_tenant`
    maps `(tenant_id, handle)` to a tenant's own variable, which wins. The environment
    (`os.environ` unless `environ` is given) is read at each `get`, so rotation needs
    no restart. An unset or empty variable is a missing value.
    """

    def __init__(
        self,
        names: Mapping[str, str],
        *,
        environ: Mapping[str, str] | None = None,
        per_tenant: Mapping[tuple[str, str], str] | None = None,
    ) -> None:
        self._names = MappingProxyType(
            {validate_handle(handle): _variable(name) for handle, name in names.items()},
        )
        tenants: dict[tuple[str, str], str] = {}
        for key, name in (per_tenant or {}).items():
            if not _is_pair(key):
                raise ConfigurationError(f"{key!r} is not a (tenant_id, handle) pair")
            tenants[(key[0], validate_handle(key[1]))] = _variable(name)
        self._per_tenant = MappingProxyType(tenants)
        self._environ = environ

    def get(self, handle: str, *, tenant_id: str) -> str | None:
        """The current value of the tenant's variable, else the shared one, else None."""
        name = self._per_tenant.get((tenant_id, handle)) or self._names.get(handle)
        if name is None:
            return None
        environ = os.environ if self._environ is None else self._environ
        return environ.get(name) or None

    def __repr__(self) -> str:
        handles = sorted({*self._names, *(handle for _, handle in self._per_tenant)})
        return f"EnvSecretProvider(handles={handles!r})"


def _is_pair(key: object) -> bool:
    return (
        isinstance(key, tuple)
        and len(key) == 2  # noqa: PLR2004
        and all(isinstance(part, str) and part for part in key)
    )


def _variable(name: str) -> str:
    if not isinstance(name, str) or not name or "=" in name or "\x00" in name:
        raise ConfigurationError(f"{name!r} is not an environment variable name")
    return name


# --- the ledger ---------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class _Compiled:
    """The ledger's forms compiled for one generation of recorded values."""

    text: re.Pattern[str]
    text_handles: Mapping[str, str]
    data: re.Pattern[bytes]
    data_handles: Mapping[bytes, str]


class SecretLedger:
    """The secret values handed out so far (thread-safe), to scrub them from every sink.

    Each value is known in its plain, JSON-escaped (once and twice), URL-quoted (`quote`
    and `quote_plus`) and base64 (standard and urlsafe, padded or not) forms; for base64
    also inside a longer encoded blob, such as an HTTP Basic credential. Every occurrence
    becomes `[SECRET:<handle>]`; overlapping occurrences become one placeholder naming
    each handle. The forms are compiled into one prefix-tree regex, rebuilt lazily after
    the ledger changes, so the cost of a scrub grows with the text, not with the number
    of values. Values stay recorded for the life of the ledger, rotated ones included.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, str] = {}
        self._compiled: _Compiled | None = None

    def record(self, handle: str, value: str) -> None:
        """Remember `value` as the secret behind `handle`; the first handle of a value stays."""
        validate_handle(handle)
        if len(value) < MIN_SECRET_LENGTH:
            raise SecretAccessError(SecretAccessReason.TOO_SHORT, handle=handle)
        with self._lock:
            if value in self._values:
                return
            self._values[value] = handle
            self._compiled = None

    def hand_out(self, handle: str, value: str, *, tenant_id: str) -> None:
        """Record `value` as handed to a tool for `tenant_id` (what `Secrets.get` calls).

        Here the same as `record`; a ledger shared by several workers
        (`handrail.record.shared_ledger`) also tells the others which handle went out.
        """
        del tenant_id  # one process: the value alone is what must be scrubbed
        self.record(handle, value)

    def scrub(self, text: str) -> str:
        """`text` with every known value, in any known form, replaced by its placeholder."""
        compiled = self._current()
        if compiled is None:
            return text
        return _scrub(text, compiled.text, compiled.text_handles, _placeholder, _UNSCRUBBABLE)

    def scrub_bytes(self, data: bytes) -> bytes:
        """`scrub` for bytes: the forms are matched as UTF-8 without decoding `data`."""
        compiled = self._current()
        if compiled is None:
            return data
        return _scrub(
            data,
            compiled.data,
            compiled.data_handles,
            lambda handles: _placeholder(handles).encode(),
            _UNSCRUBBABLE.encode(),
        )

    def scrub_value(self, value: _T) -> _T:
        """A copy of a JSON value with every string (object keys too) scrubbed.

        Mappings come back as dicts, lists as lists, tuples as tuples, bytes scrubbed as
        bytes; other objects are returned as they are, so serialize them first. Two keys
        that scrub to the same text are both kept, the later one with a `#n` suffix.
        The input is never mutated. A value that only appears across two strings once
        serialized (it contains `", "`) is caught by scrubbing the serialized text.
        """
        compiled = self._current()
        if compiled is None:
            return value
        return cast("_T", self._walk(value))

    def contains(self, text: str) -> bool:
        """True when `text` holds any known value in any known form."""
        compiled = self._current()
        return compiled is not None and compiled.text.search(text) is not None

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        with self._lock:
            handles = sorted(set(self._values.values()))
            count = len(self._values)
        return f"SecretLedger(handles={handles!r}, values={count})"

    def _current(self) -> _Compiled | None:
        compiled = self._compiled
        if compiled is not None:
            return compiled
        if not self._values:
            return None
        # Values are never removed, so the ledger is still non-empty under the lock.
        with self._lock:
            if self._compiled is None:
                self._compiled = _compile(self._values)
            return self._compiled

    def _walk(self, value: object) -> object:
        if isinstance(value, str):
            return self.scrub(value)
        if isinstance(value, bytes):
            return self.scrub_bytes(value)
        if isinstance(value, Mapping):
            result: dict[object, object] = {}
            for key, item in value.items():
                new_key = self.scrub(key) if isinstance(key, str) else key
                if new_key in result:
                    new_key = _free_key(result, str(new_key))
                result[new_key] = self._walk(item)
            return result
        if isinstance(value, list):
            return [self._walk(item) for item in value]
        if isinstance(value, tuple):
            return tuple(self._walk(item) for item in value)
        return value


def _free_key(taken: Mapping[object, object], key: str) -> str:
    n = 2
    while f"{key}#{n}" in taken:
        n += 1
    return f"{key}#{n}"


def _placeholder(handles: Sequence[str]) -> str:
    return f"[SECRET:{','.join(handles)}]"


def _scrub(
    text: AnyStr,
    pattern: re.Pattern[AnyStr],
    handles: Mapping[AnyStr, str],
    render: Callable[[Sequence[str]], AnyStr],
    unscrubbable: AnyStr,
) -> AnyStr:
    """Replace matches until none is left; text that never settles is dropped whole."""
    passes = 0
    while pattern.search(text) is not None:
        if passes == _MAX_PASSES:
            return unscrubbable[:0] if pattern.search(unscrubbable) else unscrubbable
        text = _scrub_pass(text, pattern, handles, render)
        passes += 1
    return text


def _scrub_pass(
    text: AnyStr,
    pattern: re.Pattern[AnyStr],
    handles: Mapping[AnyStr, str],
    render: Callable[[Sequence[str]], AnyStr],
) -> AnyStr:
    """One left-to-right pass; a match is widened over every match that overlaps it."""
    parts: list[AnyStr] = []
    last = 0
    found = pattern.search(text)
    while found is not None:
        start, end = found.span()
        names = [handles[found.group()]]
        position = start + 1
        while position < end:
            inner = pattern.match(text, position)
            if inner is not None and inner.end() > end:
                end = inner.end()
                name = handles[inner.group()]
                if name not in names:
                    names.append(name)
            position += 1
        parts.extend((text[last:start], render(names)))
        last = end
        found = pattern.search(text, end)
    parts.append(text[last:])
    return text[:0].join(parts)


def _compile(values: Mapping[str, str]) -> _Compiled:
    text_handles: dict[str, str] = {}
    data_handles: dict[bytes, str] = {}
    for value, handle in values.items():
        for form in _forms(value):
            text_handles.setdefault(form, handle)
            data_handles.setdefault(form.encode("utf-8", "surrogatepass"), handle)
    # Bytes patterns are built as text over latin-1, which maps each byte to one character.
    data_words = [form.decode("latin-1") for form in data_handles]
    return _Compiled(
        text=re.compile(_alternation(text_handles)),
        text_handles=MappingProxyType(text_handles),
        data=re.compile(_alternation(data_words).encode("latin-1")),
        data_handles=MappingProxyType(data_handles),
    )


def _forms(value: str) -> set[str]:
    """Every encoding of `value` that the ledger recognises."""
    forms = {value}
    escaped = {_json_body(value, ascii_only=flag) for flag in (True, False)}
    escaped |= {_json_body(form, ascii_only=flag) for form in escaped for flag in (True, False)}
    forms |= escaped | {form.replace("/", "\\/") for form in escaped}
    quoted = {
        quote(value, safe="", errors="surrogatepass"),
        quote(value, errors="surrogatepass"),
        quote_plus(value, errors="surrogatepass"),
    }
    forms |= quoted | {_PERCENT.sub(lambda m: m.group().lower(), form) for form in quoted}
    forms |= _base64_forms(value.encode("utf-8", "surrogatepass"))
    return forms


def _json_body(value: str, *, ascii_only: bool) -> str:
    return json.dumps(value, ensure_ascii=ascii_only)[1:-1]


def _base64_forms(raw: bytes) -> set[str]:
    """The value's base64, and the runs of it that survive inside a longer blob.

    At each of the three byte alignments, only the characters whose six bits all come
    from the value are the same whatever surrounds it.
    """
    forms: set[str] = set()
    bits = 8 * len(raw)
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        full = encode(raw).decode("ascii")
        forms.update((full, full.rstrip("=")))
        for offset in range(3):
            encoded = encode(bytes(offset) + raw).decode("ascii")
            first = -(-8 * offset // 6)
            stop = (8 * offset + bits) // 6
            forms.add(encoded[first:stop])
    return forms


def _alternation(words: Iterable[str]) -> str:
    """A regex for any of `words` (all non-empty), taking the longest at a position.

    Built as a prefix tree, so matching walks one branch instead of trying each word.
    """
    ordered = sorted(set(words))
    return _group(ordered, 0, len(ordered), 0, 0)


def _group(words: list[str], lo: int, hi: int, depth: int, nesting: int) -> str:
    """The pattern for `words[lo:hi]`, which share their first `depth` characters."""
    if nesting >= _MAX_NESTING:
        rest = sorted((word[depth:] for word in words[lo:hi]), key=len, reverse=True)
        return "(?:" + "|".join(map(re.escape, rest)) + ")"
    first, last = words[lo], words[hi - 1]
    common = depth
    limit = min(len(first), len(last))
    while common < limit and first[common] == last[common]:
        common += 1
    literal = re.escape(first[depth:common])
    terminal = len(first) == common
    children: list[str] = []
    start = lo + 1 if terminal else lo
    while start < hi:
        char = words[start][common]
        stop = start + 1
        while stop < hi and words[stop][common] == char:
            stop += 1
        children.append(_group(words, start, stop, common, nesting + 1))
        start = stop
    if not children:
        return literal
    body = "|".join(children)
    if terminal:
        return f"{literal}(?:{body})?"
    return f"{literal}(?:{body})"


# --- per-call access ----------------------------------------------------------------------


class Secrets:
    """Per-call secret access handed to a tool through its context.

    Only the handles the tool declared are readable, only for the caller's tenant, and
    every value handed out is recorded in the ledger first so that no sink shows it.
    """

    def __init__(
        self,
        provider: SecretProvider,
        *,
        tenant_id: str,
        allowed: frozenset[str],
        tool: str,
        ledger: SecretLedger,
    ) -> None:
        if not tenant_id:
            raise ConfigurationError("secret access needs a tenant_id")
        self._provider = provider
        self._tenant_id = tenant_id
        self._allowed = frozenset(validate_handle(handle) for handle in allowed)
        self._tool = tool
        self._ledger = ledger

    @property
    def allowed(self) -> frozenset[str]:
        """The handles this call may read."""
        return self._allowed

    def get(self, handle: str) -> str:
        """The value of a declared handle for the caller's tenant; SecretAccessError if not."""
        if handle not in self._allowed:
            raise SecretAccessError(SecretAccessReason.UNDECLARED, handle=handle, tool=self._tool)
        value = self._provider.get(handle, tenant_id=self._tenant_id)
        if value is None:
            raise SecretAccessError(SecretAccessReason.MISSING, handle=handle, tool=self._tool)
        if len(value) < MIN_SECRET_LENGTH:
            raise SecretAccessError(SecretAccessReason.TOO_SHORT, handle=handle, tool=self._tool)
        self._ledger.hand_out(handle, value, tenant_id=self._tenant_id)
        return value

    def __repr__(self) -> str:
        return (
            f"Secrets(tool={self._tool!r}, tenant_id={self._tenant_id!r}, "
            f"allowed={sorted(self._allowed)!r})"
        )


# --- logging ------------------------------------------------------------------------------

_RECORD_FIELDS = frozenset(
    {
        *logging.LogRecord("", 0, "", 0, "", None, None).__dict__,
        "message",
        "asctime",
        "taskName",
    },
)
_FORMATTER = logging.Formatter()


class ScrubbingFilter(logging.Filter):
    """Scrubs known secret values from log records; never drops a record.

    The message is formatted first (so `%`-arguments are covered), scrubbed, and stored
    with `args=None`. The exception is rendered to `exc_text`, scrubbed, and `exc_info`
    cleared so that no later formatter renders the raw exception again. Stack info and
    `extra=` fields are scrubbed too. Attach it to handlers: a logger's own filters do
    not see records propagated from its children.
    """

    def __init__(self, ledger: SecretLedger) -> None:
        super().__init__()
        self._ledger = ledger

    def filter(self, record: logging.LogRecord) -> bool:
        """Scrub `record` in place and let it through."""
        scrub = self._ledger.scrub
        try:
            message = record.getMessage()
        except (TypeError, ValueError, KeyError):
            message = f"{record.msg!s} {record.args!r}"
        record.msg = scrub(message)
        record.args = None
        if record.exc_info is not None and record.exc_info[0] is not None:
            if not record.exc_text:
                record.exc_text = _FORMATTER.formatException(record.exc_info)
            record.exc_info = None
        if record.exc_text:
            record.exc_text = scrub(record.exc_text)
        if record.stack_info:
            record.stack_info = scrub(record.stack_info)
        for name, value in list(vars(record).items()):
            if name not in _RECORD_FIELDS:
                setattr(record, name, self._ledger.scrub_value(value))
        return True

    def __repr__(self) -> str:
        return f"ScrubbingFilter({self._ledger!r})"
