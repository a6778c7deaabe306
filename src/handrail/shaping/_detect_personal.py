"""Detectors of personal data: e-mail addresses, phones, PRC IDs, cards, IBANs, IPs.

Numbers are searched through anchors in the byte views (eleven digits, two groups of
four, "AA00"), then matched exactly and validated (numbering plans, checksums) on the
lines holding one. Never resolves overlaps nor decides what happens to a finding.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterator

import phonenumbers
from stdnum import iban, luhn
from stdnum.cn import ric

from handrail.shaping._candidates import (
    RANK_CARD,
    RANK_EMAIL,
    RANK_IBAN,
    RANK_IP,
    RANK_PHONE,
    RANK_PRC_ID,
    Candidate,
)
from handrail.shaping._views import Views, finds, lines_holding
from handrail.shaping.findings import Kind

__all__ = ["emails", "intl_phones", "ips", "numbers"]


_EMAIL_LOCAL_REVERSED = re.compile(r"[A-Za-z0-9._%+-]{1,64}")
_EMAIL_DOMAIN = re.compile(
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,63}(?![A-Za-z0-9-])",
)

# Digit runs: never inside a longer number or word (a hex id), nor the fraction of a
# decimal (0.4111...).
_NOT_AFTER_NUMBER = r"(?<![0-9A-Za-z])(?<![0-9]\.)"
_NOT_BEFORE_NUMBER = r"(?![0-9A-Za-z])(?!\.[0-9])"

_NUMBER_ANCHORS = (b"00000000000", b"0000 0000", b"0000-0000")
"""Eleven digits in a row, or two groups of four: every phone, card and ID has one."""
_SHARED_BY_NUMBER_ANCHORS = b"0000"
"""Four digits in a row, which each of the number anchors holds: one search screens them."""
_IBAN_ANCHOR = b"AA00"
_DOT = ord(".")
_ZERO = ord("0")

_CN_MOBILE = re.compile(
    _NOT_AFTER_NUMBER
    + r"(?:(?:\+|00)86[ -]?)?(1[3-9][0-9])([ -]?)([0-9]{4})\2([0-9]{4})"
    + _NOT_BEFORE_NUMBER,
)
_INTL_PHONE = re.compile(
    r"\+(?<![\w+]\+)[0-9](?:[ .-]?(?:\([0-9]{1,4}\)|[0-9])){6,16}" + _NOT_BEFORE_NUMBER,
)
_PHONE_LAST_GROUP = re.compile(r"[ .-]?(?:\([0-9]{1,4}\)|[0-9]+)$")
_MIN_PHONE_DIGITS = 7

_PRC_ID = re.compile(r"(?<![0-9A-Za-z])(?<![0-9]\.)[0-9]{17}[0-9Xx](?![0-9A-Za-z])(?!\.[0-9])")

_CARD = re.compile(
    _NOT_AFTER_NUMBER
    + r"(?:[0-9]{13,19}|[0-9]{4}([ -])[0-9]{4,6}(?:\1[0-9]{1,6}){1,3})"
    + _NOT_BEFORE_NUMBER,
)
_CARD_BRANDS: tuple[tuple[re.Pattern[str], frozenset[int]], ...] = (
    (re.compile(r"4"), frozenset({13, 16, 19})),  # Visa
    (re.compile(r"5[1-5]|222[1-9]|22[3-9][0-9]|2[3-6][0-9]{2}|27[01][0-9]|2720"), frozenset({16})),
    (re.compile(r"3[47]"), frozenset({15})),  # American Express
    (re.compile(r"6011|64[4-9]|65"), frozenset(range(16, 20))),  # Discover
    (re.compile(r"62"), frozenset(range(16, 20))),  # UnionPay
    (re.compile(r"35(?:2[89]|[3-8][0-9])"), frozenset(range(16, 20))),  # JCB
    (re.compile(r"30[0-5]|3[689]"), frozenset(range(14, 20))),  # Diners Club
)

_IBAN = re.compile(
    r"(?<![A-Za-z0-9])[A-Z]{2}[0-9]{2}"
    r"(?:[A-Z0-9]{11,30}|(?: [A-Z0-9]{4}){2,7}(?: [A-Z0-9]{1,4})?)(?![A-Za-z0-9])",
)
_MIN_IBAN = 15

_IPV4_ANCHOR = re.compile(rb"\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]")
_IPV4 = re.compile(r"(?<![\w.])(?:[0-9]{1,3}\.){3}[0-9]{1,3}(?!\w)(?!\.[0-9])")
_IPV6_ANCHOR = re.compile(rb"::|:[0-9A-Fa-f]{1,4}:[0-9A-Fa-f]{1,4}:[0-9A-Fa-f]{1,4}:")
_H16 = "[0-9A-Fa-f]{1,4}"
_IPV4_TAIL = r"[0-9]{1,3}(?:\.[0-9]{1,3}){3}"
_IPV6 = re.compile(
    rf"(?<![\w:.])(?:(?:{_H16}:){{7}}{_H16}"
    rf"|(?:{_H16}(?::{_H16}){{0,6}})?::(?:{_H16}(?::{_H16}){{0,6}})?(?::{_IPV4_TAIL})?"
    rf"|(?:{_H16}(?::{_H16}){{0,5}})?::{_IPV4_TAIL}"
    rf"|(?:{_H16}:){{6}}{_IPV4_TAIL})"
    rf"(?:%[\w.-]+)?(?![\w:])(?!\.[0-9])",
)
_SPECIAL_FIRST_OCTETS = frozenset({0, 10, 100, 127, 169, 172, 192, 198, 203, *range(224, 256)})
"""First octets of every IPv4 block that is not global (RFC 6890 and its updates); an
address starting otherwise is global."""
_MIN_IPV6_HEX_DIGITS = 4
_MIN_IPV6_GROUPS = 2


def emails(text: str, found: list[Candidate]) -> None:
    for at in _finds_str(text, "@"):
        local = _EMAIL_LOCAL_REVERSED.match(text[max(0, at - 64) : at][::-1])
        domain = _EMAIL_DOMAIN.match(text, at + 1)
        if local is None or domain is None or text[at - 1] == ".":
            continue
        start = at - local.end()
        while text[start] == ".":
            start += 1
        if any(ch.isalnum() for ch in text[start:at]):
            found.append((RANK_EMAIL, start, domain.end(), Kind.EMAIL))


def _finds_str(text: str, needle: str) -> Iterator[int]:
    at = text.find(needle)
    while at != -1:
        yield at
        at = text.find(needle, at + 1)


def numbers(text: str, views: Views, found: list[Candidate]) -> None:
    classes = views.classes
    if _SHARED_BY_NUMBER_ANCHORS in classes:
        _numbers(text, classes, found)
    if _IBAN_ANCHOR in classes:
        for start, end in lines_holding(text, finds(classes, _IBAN_ANCHOR)):
            found.extend(
                (RANK_IBAN, *span, Kind.IBAN)
                for span in _validated(_IBAN, text, start, end, _iban_end)
            )


def _numbers(text: str, classes: bytes, found: list[Candidate]) -> None:
    """Phones, PRC ids and cards: validated matches on the lines holding a number anchor."""
    anchors = [
        at
        for needle in _NUMBER_ANCHORS
        for at in finds(classes, needle)
        # Not the digits of a decimal fraction (0.5488135039...), which no detector takes.
        if at < 2 or classes[at - 1] != _DOT or classes[at - 2] != _ZERO  # noqa: PLR2004
    ]
    for start, end in lines_holding(text, anchors):
        found.extend(
            (RANK_PHONE, *span, Kind.PHONE)
            for span in _validated(_CN_MOBILE, text, start, end, _cn_mobile_end)
        )
        found.extend(
            (RANK_PRC_ID, m.start(), m.end(), Kind.PRC_ID)
            for m in _PRC_ID.finditer(text, start, end)
            if ric.is_valid(m.group())
        )
        found.extend(
            (RANK_CARD, *span, Kind.PAYMENT_CARD)
            for span in _validated(_CARD, text, start, end, _card_end)
        )


def _validated(
    pattern: re.Pattern[str],
    text: str,
    start: int,
    end: int,
    valid_end: Callable[[re.Match[str]], int | None],
) -> Iterator[tuple[int, int]]:
    """Spans of the matches that validate.

    After a match that does not, the search goes on from its next character, so that
    "0958 4111 1111 1111 1111" still holds a card.
    """
    at = start
    while (match := pattern.search(text, at, end)) is not None:
        stop = valid_end(match)
        if stop is None:
            at = match.start() + 1
        else:
            yield match.start(), stop
            at = stop


def _cn_mobile_end(match: re.Match[str]) -> int | None:
    number = match.group(1) + match.group(3) + match.group(4)
    return match.end() if _valid_phone(number, "CN") else None


def intl_phones(text: str, found: list[Candidate]) -> None:
    """International numbers, validated by their numbering plan.

    A candidate that runs into other digits is shortened a group at a time
    ("+44 20 7946 0958 12" holds "+44 20 7946 0958").
    """
    for match in _INTL_PHONE.finditer(text):
        candidate = match.group()
        while sum(ch.isdigit() for ch in candidate) >= _MIN_PHONE_DIGITS:
            if _valid_phone(candidate, None):
                start = match.start()
                found.append((RANK_PHONE, start, start + len(candidate), Kind.PHONE))
                break
            candidate = _PHONE_LAST_GROUP.sub("", candidate)


def _valid_phone(number: str, region: str | None) -> bool:
    try:
        return phonenumbers.is_valid_number(phonenumbers.parse(number, region))
    except phonenumbers.NumberParseException:
        return False


def _card_end(match: re.Match[str]) -> int | None:
    """Where the card a match starts ends, or None.

    In "4111 1111 1111 1111 12" the last group belongs to something else.
    """
    text, start, end = match.string, match.start(), match.end()
    while True:
        if _valid_card(text[start:end]):
            return end
        separator = max(text.rfind(" ", start, end), text.rfind("-", start, end))
        if separator == -1:
            return None
        end = separator


def _valid_card(candidate: str) -> bool:
    digits = candidate.replace(" ", "").replace("-", "")
    return luhn.is_valid(digits) and any(
        brand.match(digits) and len(digits) in lengths for brand, lengths in _CARD_BRANDS
    )


def _iban_end(match: re.Match[str]) -> int | None:
    """Where the IBAN a match starts ends, or None; a trailing group may be a word."""
    text, start, end = match.string, match.start(), match.end()
    while end - start >= _MIN_IBAN:
        if iban.is_valid(text[start:end]):
            return end
        space = text.rfind(" ", start, end)
        if space == -1:
            return None
        end = space
    return None


def ips(text: str, views: Views, found: list[Candidate], *, everything: bool) -> None:
    anchors = [m.start() for m in _IPV4_ANCHOR.finditer(views.raw)]
    for start, end in lines_holding(text, anchors):
        for match in _IPV4.finditer(text, start, end):
            _ip(match, found, everything=everything)
    anchors = [m.start() for m in _IPV6_ANCHOR.finditer(views.raw)]
    for start, end in lines_holding(text, anchors):
        for match in _IPV6.finditer(text, start, end):
            candidate = match.group()
            if "::" in candidate and "." not in candidate:
                groups = [g for g in candidate.split("%", 1)[0].split(":") if g]
                if len(groups) < _MIN_IPV6_GROUPS or sum(map(len, groups)) < _MIN_IPV6_HEX_DIGITS:
                    continue  # slices such as [::2] and a bare loopback
            _ip(match, found, everything=everything)


def _ip(match: re.Match[str], found: list[Candidate], *, everything: bool) -> None:
    candidate = match.group()
    if ":" not in candidate:
        octets = candidate.split(".")
        if any(len(o) > 1 and o[0] == "0" for o in octets) or any(int(o) > 255 for o in octets):  # noqa: PLR2004
            return  # not an address (ipaddress refuses leading zeros too)
        if not everything and int(octets[0]) not in _SPECIAL_FIRST_OCTETS:
            return  # a global address, decided without ipaddress's slower checks
    try:
        address = ipaddress.ip_address(candidate)
    except ValueError:
        return
    if everything or not address.is_global:
        found.append((RANK_IP, match.start(), match.end(), Kind.IP_ADDRESS))
