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
from handrail.shaping._provider_gates import GATES, PROVIDER_PLUGINS
from handrail.shaping._views import Views, lines_holding
from handrail.shaping.findings import Finding, IpMode, Kind

__all__ = ["MIN_FINDING", "Detectors"]


MIN_FINDING = 5
"""No text shorter than this holds a finding of any kind."""


class Detectors:
    """Every detector, compiled once; `find` runs those a text can hold."""

    __slots__ = ("_providers",)

    def __init__(self) -> None:
        self._providers = tuple(
            (GATES.get((plugin.__name__, index)), pattern)
            for plugin in PROVIDER_PLUGINS
            for index, pattern in enumerate(plugin().denylist)
        )

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
