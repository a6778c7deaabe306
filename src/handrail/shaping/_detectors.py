"""The detectors behind the Redactor: where personal data and credentials sit in a text.

Python's regex engine is slow wherever a pattern may start at most characters, so no
detector scans a whole text that way. A text is first turned into byte views, one byte
per character: the text itself, lower-cased, by character class, and as a mask of
token characters. C-speed substring searches in those views find anchors (eleven
digits in a row, "AA00" where an IBAN could start, a "::", a keyword, a run of twenty
token characters); exact patterns and validators (checksums, numbering plans,
decoding) then run only on the lines holding an anchor. Overlapping findings are
resolved in favour of the more specific kind (`_candidates`). The detectors themselves
live in `_detect_personal`, `_detect_credentials` and `_detect_entropy`; this module runs
them. Never decides what happens to a finding.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable

import phonenumbers

from handrail.shaping._candidates import Candidate, resolve
from handrail.shaping._detect_credentials import (
    assignments,
    jwts,
    pem,
    provider,
    secret_member,
    url_passwords,
)
from handrail.shaping._detect_entropy import high_entropy
from handrail.shaping._detect_personal import emails, intl_phones, ips, numbers
from handrail.shaping._provider_gates import GATES, PROVIDER_PLUGINS, Gate
from handrail.shaping._views import Views, lines_holding
from handrail.shaping.findings import Finding, IpMode, Kind

__all__ = ["MIN_FINDING", "Detectors"]


MIN_FINDING = 5
"""No text shorter than this holds a finding of any kind."""

_SCREENED = 256
"""Texts up to this long are screened for provider keys before the patterns run one by
one; beyond it one search per pattern, each led by its literal, is the cheaper."""


class Detectors:
    """Every detector, compiled once; `find` runs those a text can hold."""

    __slots__ = ("_providers", "_screen")

    def __init__(self) -> None:
        self._providers = tuple(
            (GATES.get((plugin.__name__, index)), pattern)
            for plugin in PROVIDER_PLUGINS
            for index, pattern in enumerate(plugin().denylist)
        )
        self._screen = _ProviderScreen(self._providers)

    def find(self, text: str, *, ip_mode: IpMode, hex_tokens: bool = False) -> list[Finding]:
        """Sorted, non-overlapping findings in `text`."""
        if len(text) < MIN_FINDING:
            # Nothing this short is a finding (tests/shaping check it against `scan`).
            return []
        return self.scan(text, ip_mode=ip_mode, hex_tokens=hex_tokens)

    def scan(self, text: str, *, ip_mode: IpMode, hex_tokens: bool = False) -> list[Finding]:
        """`find` without its shortcut for short texts."""
        views = Views.of(text)
        found: list[Candidate] = []
        runs = high_entropy(text, views, found, hex_tokens=hex_tokens)
        self._provider_keys(text, views, runs, found)
        if "PRIVATE KEY" in text:
            pem(text, found)
        if "eyJ" in text:
            jwts(text, found)
        if "://" in text:
            url_passwords(text, found)
        assignments(text, views, found)
        numbers(text, views, found)
        if "@" in text:
            emails(text, found)
        if "+" in text:
            intl_phones(text, found)
        if ip_mode is not IpMode.OFF:
            ips(text, views, found, everything=ip_mode is IpMode.ALL)
        return resolve(found)

    def secret_member(self, name: str, value: str) -> bool:
        """Whether `value`, held under the object key `name`, is a literal secret.

        As it would be in the text `{"name": "value"}`: `{"password": "hunter2"}` is.
        """
        return secret_member(name, value)

    @staticmethod
    def normalize(kind: Kind, value: str) -> str:
        """The canonical form of a finding, so that equal values hash alike."""
        if kind is Kind.EMAIL:
            return value.lower()
        if kind in {Kind.PAYMENT_CARD, Kind.IBAN, Kind.PRC_ID}:
            return "".join(ch for ch in value if ch.isalnum()).upper()
        if kind is Kind.PHONE:
            try:
                number = phonenumbers.parse(value, "CN")
            except phonenumbers.NumberParseException:  # pragma: no cover - findings parse
                return value
            return phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.E164)
        if kind is Kind.IP_ADDRESS:
            return str(ipaddress.ip_address(value.split("%", 1)[0]))
        return value

    def _provider_keys(
        self, text: str, views: Views, runs: list[tuple[int, int]], found: list[Candidate]
    ) -> None:
        longest = max((end - start for start, end in runs), default=0)
        if len(text) <= _SCREENED and not self._screen.may_hold(text, views, longest):
            return
        lines: dict[int, list[tuple[int, int]]] = {}  # by gate, each searched once
        for gate, pattern in self._providers:
            if gate is None:
                for match in pattern.finditer(text):
                    provider(text, match, found)
                continue
            if id(gate) not in lines:
                lines[id(gate)] = lines_holding(text, gate.anchors(views, runs, longest))
            for start, end in lines[id(gate)]:
                for match in pattern.finditer(text, max(0, start - 1), end + 1):
                    provider(text, match, found)


class _ProviderScreen:
    """Whether a text could hold a provider key: three searches instead of one per pattern.

    The ungated patterns are joined into one alternation, and so are the gates' patterns
    of each view. An alternation matches wherever one of its branches does, so when none
    of the three matches, no ungated pattern matches and no gate has an anchor: the
    patterns one by one would find nothing either. (A gate's `min_token` only narrows
    its anchors, so leaving it out keeps the screen sound; a gate made of `min_token`
    alone is kept as the shortest run that passes it.)
    """

    __slots__ = ("_low", "_raw", "_shortest_run", "_ungated")

    def __init__(self, providers: Iterable[tuple[Gate | None, re.Pattern[str]]]) -> None:
        ungated: list[re.Pattern[str]] = []
        gates: dict[int, Gate] = {}
        for gate, pattern in providers:
            if gate is None:
                ungated.append(pattern)
            else:
                gates[id(gate)] = gate
        self._ungated = _joined(ungated)
        self._raw = _joined_bytes(
            [g.pattern for g in gates.values() if g.pattern is not None and g.view == "raw"]
        )
        self._low = _joined_bytes(
            [g.pattern for g in gates.values() if g.pattern is not None and g.view == "low"]
        )
        self._shortest_run = min(
            (g.min_token for g in gates.values() if g.pattern is None), default=None
        )

    def may_hold(self, text: str, views: Views, longest: int) -> bool:
        """False only if no provider pattern can match `text` (its views, longest run)."""
        return (
            (self._shortest_run is not None and longest >= self._shortest_run)
            or (self._ungated is not None and self._ungated.search(text) is not None)
            or (self._raw is not None and self._raw.search(views.raw) is not None)
            or (self._low is not None and self._low.search(views.low) is not None)
        )


def _joined(patterns: list[re.Pattern[str]]) -> re.Pattern[str] | None:
    """One pattern matching wherever any of `patterns` does."""
    joined = _alternation([(p.pattern, p.flags) for p in patterns])
    return None if joined is None else re.compile(*joined)


def _joined_bytes(patterns: list[re.Pattern[bytes]]) -> re.Pattern[bytes] | None:
    """`_joined` of byte patterns (latin-1 maps their bytes to text and back unchanged)."""
    joined = _alternation([(p.pattern.decode("latin-1"), p.flags) for p in patterns])
    return None if joined is None else re.compile(joined[0].encode("latin-1"), joined[1])


def _alternation(sources: list[tuple[str, int]]) -> tuple[str, int] | None:
    """The alternation of pattern sources that share their flags, and those flags."""
    if not sources:
        return None
    flags = {flags for _, flags in sources}
    if len(flags) != 1:
        raise ValueError(f"patterns to join differ in their flags: {sorted(flags)}")
    return "|".join(f"(?:{source})" for source, _ in sources), flags.pop()
