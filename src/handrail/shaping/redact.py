"""Redaction: personal data and credentials masked, hashed or dropped.

Applied to results before they reach the model and to text before it reaches a log.
The Redactor finds (see `_detectors`) and applies a RedactionPolicy; it never decides
which policy a tool gets, and never mutates what it is given.
"""

from __future__ import annotations

import bisect
import hmac
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

from handrail.errors import ConfigurationError
from handrail.shaping.findings import Finding, IpMode, Kind

if TYPE_CHECKING:
    from handrail.shaping._detectors import Detectors


__all__ = [
    "Finding",
    "IpMode",
    "Kind",
    "Redacted",
    "RedactedText",
    "RedactionAction",
    "RedactionPolicy",
    "Redactor",
]


_MIN_HASH_KEY_BYTES: Final = 16
_HASH_HEX_CHARS: Final = 12


class RedactionAction(StrEnum):
    """What happens to a finding."""

    MASK = "mask"
    """Replaced by `[REDACTED:<kind>]`."""
    HASH = "hash"
    """Replaced by `[<kind>:<keyed hash>]`: equal values stay equal, none is revealed."""
    DROP = "drop"
    """The value holding it is removed (its object member or list item, or its line
    of text)."""
    KEEP = "keep"
    """Left as it is (for a kind a tool must show, such as IPs of a network tool)."""


_NO_ACTIONS: Mapping[Kind, RedactionAction] = MappingProxyType({})
_NO_COUNTS: Mapping[Kind, int] = MappingProxyType({})


@dataclass(frozen=True, kw_only=True, slots=True)
class RedactionPolicy:
    """Per-tool redaction: a default action, per-kind overrides, and the IP mode.

    `hex_entropy` also counts long random-looking hex strings as HIGH_ENTROPY; it is
    off by default because git SHAs, UUIDs and digests fill ordinary logs.
    """

    default: RedactionAction = RedactionAction.MASK
    actions: Mapping[Kind, RedactionAction] = field(default_factory=lambda: _NO_ACTIONS)
    ip_addresses: IpMode = IpMode.PRIVATE
    hex_entropy: bool = False

    def __post_init__(self) -> None:
        if self.actions is not _NO_ACTIONS:
            object.__setattr__(self, "actions", MappingProxyType(dict(self.actions)))

    def action(self, kind: Kind) -> RedactionAction:
        """The action for findings of `kind`."""
        return self.actions.get(kind, self.default)

    @property
    def keeps_everything(self) -> bool:
        """Whether no finding would be acted on, so that nothing need be searched."""
        return self.default is RedactionAction.KEEP and all(
            action is RedactionAction.KEEP for action in self.actions.values()
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class RedactedText:
    """A redacted text, and how many findings were acted on (KEEP not counted), by kind."""

    text: str
    counts: Mapping[Kind, int] = field(default_factory=lambda: _NO_COUNTS)

    def __post_init__(self) -> None:
        if self.counts is not _NO_COUNTS:
            object.__setattr__(self, "counts", MappingProxyType(dict(self.counts)))


@dataclass(frozen=True, kw_only=True, slots=True)
class Redacted:
    """A redacted copy of a JSON value, and how many findings were acted on, by kind."""

    value: Any
    counts: Mapping[Kind, int] = field(default_factory=lambda: _NO_COUNTS)

    def __post_init__(self) -> None:
        if self.counts is not _NO_COUNTS:
            object.__setattr__(self, "counts", MappingProxyType(dict(self.counts)))


class _Dropped:
    """Marks a string whose holder (object member or list item) is to be removed."""


_DROPPED: Final = _Dropped()

# Built once: `isinstance(x, dict | list | tuple)` would build the union on every call.
_CONTAINER: Final = dict | list | tuple
_KEEP: Final = RedactionAction.KEEP


class Redactor:
    """Finds personal data and credentials in text and JSON, and applies a policy.

    `hash_key` keys the HMAC-SHA256 behind the HASH action: a plain hash of a phone
    number or card is reversed by trying every number, a keyed one is not. `policy` is
    the default; each call may pass a tool's own.
    """

    __slots__ = ("_detectors", "_key", "_min_finding", "_policy")

    def __init__(self, *, hash_key: bytes, policy: RedactionPolicy | None = None) -> None:
        if len(hash_key) < _MIN_HASH_KEY_BYTES:
            raise ConfigurationError(
                f"a redaction hash key needs at least {_MIN_HASH_KEY_BYTES} bytes"
            )
        # Loaded with the first Redactor, not with `import handrail`: the detectors pull
        # in detect-secrets (and with it requests), phonenumbers and python-stdnum.
        from handrail.shaping._detectors import MIN_FINDING, Detectors  # noqa: PLC0415

        self._detectors: Detectors = Detectors()
        self._min_finding = MIN_FINDING
        self._key = bytes(hash_key)
        self._policy = policy or RedactionPolicy()

    def find(self, text: str, policy: RedactionPolicy | None = None) -> list[Finding]:
        """Every finding in `text`, sorted and non-overlapping, whatever its action.

        The policy decides only which IP addresses and hex strings count.
        """
        policy = policy or self._policy
        return self._detectors.find(
            text, ip_mode=policy.ip_addresses, hex_tokens=policy.hex_entropy
        )

    def text(self, text: str, policy: RedactionPolicy | None = None) -> RedactedText:
        """`text` with each finding masked, hashed, or its whole line dropped."""
        policy = policy or self._policy
        if policy.keeps_everything:
            return RedactedText(text=text)
        counts: Counter[Kind] = Counter()
        redacted = self._apply(text, self.find(text, policy), policy, counts, lines=True)
        assert isinstance(redacted, str)  # noqa: S101 - lines=True never drops the whole text
        return RedactedText(text=redacted, counts=dict(counts))

    def value(self, value: Any, policy: RedactionPolicy | None = None) -> Redacted:  # noqa: ANN401 - JSON
        """A redacted copy of a JSON value; the input is never mutated.

        Strings and object keys are searched (all of them as one text, so a large value
        costs one scan); other scalars are kept as they are, tuples become lists. A
        string under a key naming a secret (`{"password": "hunter2"}`) is a credential
        as a whole. A finding to DROP removes the object member or list item holding
        it; in a string that is the whole value, it drops the line holding it, as
        `text` does. A key that redacts to one already present gets a ` (2)`, ` (3)`...
        suffix. Findings inside a removed member or item are counted as dropped.
        """
        redacted, counts = self.apply(value, policy)
        return Redacted(value=redacted, counts=counts)

    def apply(
        self,
        value: Any,  # noqa: ANN401 - JSON
        policy: RedactionPolicy | None = None,
        *,
        share: bool = False,
    ) -> tuple[Any, Mapping[Kind, int]]:
        """`value`'s redacted copy and counts, as `value` makes them, without the wrapper.

        With `share`, a value with nothing to redact comes back as the input itself
        rather than a copy, for callers that own the input (the Shaper's `jsonable`
        copy of a result).
        """
        policy = policy or self._policy
        if isinstance(value, str):
            redacted = self.text(value, policy)
            return redacted.text, redacted.counts
        if not isinstance(value, _CONTAINER):
            return value, _NO_COUNTS
        # The common case first: one quick walk gathers the strings in the order
        # `_collect` would; with no secret member and no finding, nothing changes.
        texts: list[str] = []
        joined: str | None = None
        found: list[Finding] = []
        status = _gather(value, texts, self._detectors, 0)
        if status != _FULL:
            if policy.default is not _KEEP or not policy.keeps_everything:
                joined = _SEPARATOR.join(texts)
                if len(joined) >= self._min_finding:  # shorter, `find` finds nothing
                    found = self.find(joined, policy)
            if not found:
                return (value if share and status == _PLAIN else _copy(value)), _NO_COUNTS
        return self._value(value, policy, joined, found)

    def _value(
        self,
        value: dict[Any, Any] | list[Any] | tuple[Any, ...],
        policy: RedactionPolicy,
        joined: str | None,
        found: list[Finding],
    ) -> tuple[Any, Mapping[Kind, int]]:
        """`value` redacted in full; `found` are the findings of `joined`, if known."""
        counts: Counter[Kind] = Counter()
        collected = _collect(value, self._detectors)
        results: list[Any] = list(collected.texts)
        if not policy.keeps_everything:
            text = _SEPARATOR.join(collected.texts)
            findings = found if text == joined else self.find(text, policy)
            per_text = _split(findings, collected.texts)
            for index in collected.secrets:
                per_text[index] = [Finding(kind=Kind.CREDENTIAL, start=0, end=len(results[index]))]
            for index, here in enumerate(per_text):
                if here:
                    results[index] = self._apply(results[index], here, policy, counts, lines=False)
        return _build(collected.root, results), dict(counts)

    def _apply(
        self,
        text: str,
        findings: list[Finding],
        policy: RedactionPolicy,
        counts: Counter[Kind],
        *,
        lines: bool,
    ) -> str | _Dropped:
        """`text` with `findings` acted on; without `lines`, a DROP drops all of it."""
        edits: list[_Edit] = []
        for finding in findings:
            action = policy.action(finding.kind)
            if action is RedactionAction.KEEP:
                continue
            counts[finding.kind] += 1
            if action is RedactionAction.DROP:
                edits.append(_Edit(finding.start, finding.end, None, (finding.kind,)))
            elif action is RedactionAction.HASH:
                edits.append(_Edit(finding.start, finding.end, self._hash(text, finding), ()))
            else:
                edits.append(_Edit(finding.start, finding.end, f"[REDACTED:{finding.kind}]", ()))
        if not edits:
            return text
        if not lines and any(edit.replacement is None for edit in edits):
            return _DROPPED
        return _join(text, _line_drops(text, edits))

    def _hash(self, text: str, finding: Finding) -> str:
        value = self._detectors.normalize(finding.kind, text[finding.start : finding.end])
        digest = hmac.digest(self._key, f"{finding.kind}\0{value}".encode(), "sha256").hex()
        return f"[{finding.kind}:{digest[:_HASH_HEX_CHARS]}]"


@dataclass(frozen=True, slots=True)
class _Edit:
    """Replace `text[start:end]`; a None replacement drops the lines it spans."""

    start: int
    end: int
    replacement: str | None
    dropped: tuple[Kind, ...]


def _line_drops(text: str, edits: list[_Edit]) -> list[_Edit]:
    """Edits with each drop widened to its whole lines and merged with what it touches."""
    merged: list[_Edit] = []
    for edit in edits:
        current = _widen(text, edit) if edit.replacement is None else edit
        while merged and merged[-1].end > current.start:
            previous = merged.pop()
            current = _widen(
                text,
                _Edit(
                    min(previous.start, current.start),
                    max(previous.end, current.end),
                    None,
                    tuple(dict.fromkeys(previous.dropped + current.dropped)),
                ),
            )
        merged.append(current)
    return merged


def _widen(text: str, edit: _Edit) -> _Edit:
    start = text.rfind("\n", 0, edit.start) + 1
    end = text.find("\n", max(edit.start, edit.end - 1))
    if end == -1:
        end = len(text)
    if end > start and text[end - 1] == "\r":
        end -= 1
    return _Edit(start, max(end, edit.end), None, edit.dropped)


def _join(text: str, edits: list[_Edit]) -> str:
    pieces: list[str] = []
    at = 0
    for edit in edits:
        pieces.append(text[at : edit.start])
        if edit.replacement is None:
            pieces.append(f"[line dropped: {', '.join(edit.dropped)}]")
        else:
            pieces.append(edit.replacement)
        at = edit.end
    pieces.append(text[at:])
    return "".join(pieces)


_SEPARATOR: Final = "\n\x00\n"
"""Between the strings of a JSON value scanned as one text. No detector matches across
it; a multi-line finding that would (a PEM block) is cut at it."""


@dataclass(frozen=True, slots=True)
class _Slot:
    """Where a string of the input goes: its index among the collected texts."""

    index: int


@dataclass(slots=True)
class _PendingList:
    items: list[Any] = field(default_factory=list)


@dataclass(slots=True)
class _PendingDict:
    members: list[tuple[Any, Any]] = field(default_factory=list)


_Pending = _PendingList | _PendingDict
_PENDING: Final = _PendingDict | _PendingList


@dataclass(frozen=True, slots=True)
class _Collected:
    """A JSON value with its strings (keys too) replaced by slots, and the strings."""

    root: Any
    texts: list[str]
    secrets: frozenset[int]
    """Slots of strings under keys that name a secret."""


def _collect(root: object, detectors: Detectors) -> _Collected:
    """Copy a JSON value's structure, collecting its strings.

    Iterative, so deep nesting is no problem; a value that contains itself is refused,
    as json.dumps refuses it.
    """
    texts: list[str] = []
    secrets: set[int] = set()

    def slot(text: str) -> _Slot:
        texts.append(text)
        return _Slot(len(texts) - 1)

    if not isinstance(root, _CONTAINER):
        return _Collected(root=root, texts=texts, secrets=frozenset())
    top = _pending(root)
    stack: list[tuple[Iterator[tuple[object, object]], _Pending, int]] = [
        (_entries(root), top, id(root))
    ]
    path = {id(root)}
    while stack:
        entries, out, container_id = stack[-1]
        entry = next(entries, None)
        if entry is None:
            stack.pop()
            path.discard(container_id)
            continue
        key, child = entry
        placed: Any
        if isinstance(child, _CONTAINER):
            if id(child) in path:
                raise ValueError("a JSON value cannot contain itself")
            placed = _pending(child)
            stack.append((_entries(child), placed, id(child)))
            path.add(id(child))
        elif isinstance(child, str):
            placed = slot(child)
            if isinstance(key, str) and detectors.secret_member(key, child):
                secrets.add(placed.index)
        else:
            placed = child
        if isinstance(out, _PendingDict):
            out.members.append((slot(key) if isinstance(key, str) else key, placed))
        else:
            out.items.append(placed)
    return _Collected(root=top, texts=texts, secrets=frozenset(secrets))


_MAX_QUICK_DEPTH: Final = 64
"""Deeper values take `_collect`'s iterative walk, which also refuses a value that
contains itself."""
_FULL: Final = 0
_PLAIN: Final = 1
_TUPLES: Final = 3


def _gather(node: object, texts: list[str], detectors: Detectors, depth: int) -> int:
    """Append the strings of a dict, list or tuple to `texts` in `_collect`'s order.

    `_PLAIN`, or `_TUPLES` when a tuple was among the containers; `_FULL`, with `texts`
    incomplete, when `node` needs the full walk: a string under a key naming a secret,
    or nesting deeper than `_MAX_QUICK_DEPTH`.
    """
    if depth > _MAX_QUICK_DEPTH:
        return _FULL
    status = _PLAIN
    if isinstance(node, dict):
        for key, child in node.items():
            if isinstance(child, str):
                texts.append(child)
                if isinstance(key, str):
                    if detectors.secret_member(key, child):
                        return _FULL
                    texts.append(key)
            elif isinstance(child, _CONTAINER):
                if isinstance(key, str):
                    texts.append(key)
                inner = _gather(child, texts, detectors, depth + 1)
                if inner == _FULL:
                    return _FULL
                status |= inner
            elif isinstance(key, str):
                texts.append(key)
        return status
    if isinstance(node, tuple):
        status = _TUPLES
    for child in node:  # type: ignore[attr-defined]
        if isinstance(child, str):
            texts.append(child)
        elif isinstance(child, _CONTAINER):
            inner = _gather(child, texts, detectors, depth + 1)
            if inner == _FULL:
                return _FULL
            status |= inner
    return status


def _copy(node: dict[Any, Any] | list[Any] | tuple[Any, ...]) -> dict[Any, Any] | list[Any]:
    """A copy of a value `_gather` walked, as `_build` makes it with nothing redacted."""
    if isinstance(node, dict):
        return {
            key: _copy(child) if isinstance(child, _CONTAINER) else child
            for key, child in node.items()
        }
    return [_copy(child) if isinstance(child, _CONTAINER) else child for child in node]


def _pending(container: dict[Any, Any] | list[Any] | tuple[Any, ...]) -> _Pending:
    return _PendingDict() if isinstance(container, dict) else _PendingList()


def _entries(
    container: dict[Any, Any] | list[Any] | tuple[Any, ...],
) -> Iterator[tuple[object, object]]:
    if isinstance(container, dict):
        return iter(list(container.items()))
    return ((None, item) for item in container)


def _split(findings: list[Finding], texts: list[str]) -> list[list[Finding]]:
    """The findings of the joined texts, per text, cut at the texts' ends."""
    per_text: list[list[Finding]] = [[] for _ in texts]
    starts: list[int] = []
    at = 0
    for text in texts:
        starts.append(at)
        at += len(text) + len(_SEPARATOR)
    for finding in findings:
        index = max(0, bisect.bisect_right(starts, finding.start) - 1)
        while index < len(texts) and starts[index] < finding.end:
            start = max(finding.start, starts[index]) - starts[index]
            end = min(finding.end, starts[index] + len(texts[index])) - starts[index]
            if start < end:
                per_text[index].append(Finding(kind=finding.kind, start=start, end=end))
            index += 1
    return per_text


def _build(root: Any, results: list[Any]) -> Any:  # noqa: ANN401 - JSON
    """The final value from a collected one and its redacted strings (or _DROPPED)."""
    if not isinstance(root, _PENDING):
        return root
    top: dict[Any, Any] | list[Any] = {} if isinstance(root, _PendingDict) else []
    stack: list[tuple[_Pending, dict[Any, Any] | list[Any]]] = [(root, top)]
    while stack:
        pending, out = stack.pop()
        pairs = (
            pending.members
            if isinstance(pending, _PendingDict)
            else [(None, item) for item in pending.items]
        )
        for key, item in pairs:
            value = results[item.index] if isinstance(item, _Slot) else item
            new_key = results[key.index] if isinstance(key, _Slot) else key
            if value is _DROPPED or new_key is _DROPPED:
                continue
            if isinstance(value, _PENDING):
                child: dict[Any, Any] | list[Any] = {} if isinstance(value, _PendingDict) else []
                stack.append((value, child))
                value = child
            if isinstance(out, dict):
                if new_key in out:  # two keys redacted alike
                    new_key = _free_key(out, new_key)
                out[new_key] = value
            else:
                out.append(value)
    return top


def _free_key(out: dict[Any, Any], key: object) -> str:
    """`key (n)` with the smallest n >= 2 not yet used in `out`."""
    n = 2
    while f"{key} ({n})" in out:
        n += 1
    return f"{key} ({n})"
