"""The detectors behind the Redactor: where personal data and credentials sit in a text.

Python's regex engine is slow wherever a pattern may start at most characters, so no
detector scans a whole text that way. A text is first turned into byte views, one byte
per character: the text itself, lower-cased, by character class, and as a mask of
token characters. C-speed substring searches in those views find anchors (eleven
digits in a row, "AA00" where an IBAN could start, a "::", a keyword, a run of twenty
token characters); exact patterns and validators (checksums, numbering plans,
decoding) then run only on the lines holding an anchor. Overlapping findings are
resolved in favour of the more specific kind. Never decides what happens to a finding.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import ipaddress
import json
import math
import re
from collections import Counter
from collections.abc import Callable, Iterator

import phonenumbers
from stdnum import iban, luhn
from stdnum.cn import ric

from handrail.shaping._provider_gates import GATES, PROVIDER_PLUGINS
from handrail.shaping._views import CLASSES, TOKEN_PUNCTUATION, Views, finds, lines_holding
from handrail.shaping.findings import Finding, IpMode, Kind

__all__ = ["MIN_FINDING", "Detectors"]


MIN_FINDING = 5
"""No text shorter than this holds a finding of any kind."""

# Rank of each detector when findings overlap: lower wins (the more specific kind).
_RANK_PEM = 0
_RANK_CREDENTIAL = 1
_RANK_PRC_ID = 2
_RANK_IBAN = 3  # a valid IBAN often holds a Luhn-valid run of digits, never the reverse
_RANK_CARD = 4
_RANK_EMAIL = 5
_RANK_PHONE = 6
_RANK_IP = 7
_RANK_ENTROPY = 8

_Candidate = tuple[int, int, int, Kind]
"""(rank, start, end, kind) of one match before overlaps are resolved."""

_PLACEHOLDER = re.compile(
    r"\[(?:REDACTED:[a-z_]+|[a-z_]+:[0-9a-f]{12}|line dropped: [a-z_, ]+)\]",
)
"""What the Redactor writes in place of findings; never a finding itself."""


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


_PEM = re.compile(
    r"-{4,5} ?BEGIN ((?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?) ?-{4,5}"
    r"(?:(?P<body>.{16,65536}?)-{4,5} ?END \1 ?-{4,5}"
    r"|(?P<open>(?:(?:\r?\n|\\r\\n|\\n)[ \t]*(?:[A-Za-z0-9+/=]{16,}|[\w-]+: [^\r\n\\]*))+))",
    re.DOTALL,
)
_PEM_BODY_MIN = 64
_BASE64_CHAR = re.compile(r"[A-Za-z0-9+/=]")

_JWT = re.compile(
    r"eyJ(?<![A-Za-z0-9_-]eyJ)[A-Za-z0-9_-]{6,}(?:\.[A-Za-z0-9_-]+){1,3}\.[A-Za-z0-9_-]*"
    r"(?![A-Za-z0-9_.-])",
)

_URL_PASSWORD = re.compile(r"://[^\s:@/?#\[\]\"'<>]*:([^\s@/?#\[\]\"'<>]+)@[\w\[]")

_KEYWORD_STARTS = (
    b"pass",
    b"pwd",
    b"secret",
    b"token",
    b"api",
    b"access",
    b"private",
    b"auth",
    b"credential",
)
"""How every assignment keyword starts (in the lower-case view)."""
_TYPE = rb"[a-z_][\w.]*(?:\[[\w\[\], .|]{0,60}\])?"
"""A type annotation between a name and its `=`, in the lower-case view."""
_KEYWORD = re.compile(
    rb"(pass(?:wd|word|phrase)?|pwd|secret(?:[_-]?key)?|token|api[_-]?key|"
    rb"access[_-]?key|private[_-]?key|auth[_-]?key|credentials?|authorization)"
    rb"""(?:\\?["'])?[ \t]*(?::[ \t]*"""
    + _TYPE
    + rb"(?:[ \t]*\|[ \t]*"
    + _TYPE
    + rb")*[ \t]*(?==))?(?:=>|:=|=(?!=)|:(?!:))[ \t]*",
)
_SECRET_NAME = re.compile(
    rb"(?:pass(?:wd|word|phrase)?|pwd|secret(?:[_-]?key)?|token|api[_-]?key|"
    rb"access[_-]?key|private[_-]?key|auth[_-]?key|credentials?|authorization)\Z",
)
"""An object key naming a secret (in the lower-case view): its value is one."""
_WEAK_KEYWORDS = frozenset({b"token", b"authorization"})
"""Words that also name things other than secrets (lexer tokens): their values must
look random."""
_AUTH_SCHEME = re.compile(r"(?i)(?:bearer|basic|token|digest)[ \t]+")
_VALUE = re.compile(
    r"""(?:[bBrRuU]{1,2}(?=["']))?(?:\\?"(?P<dq>[^"'\\\r\n]{1,512})\\?"|"""
    r"""\\?'(?P<sq>[^"'\\\r\n]{1,512})\\?'|(?P<bare>[^\s"'`,;&<>(){}\[\]\\]{1,512}))""",
)
_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
_NOT_A_SECRET = re.compile(
    r"(?i)\$\{?[\w.:-]*\}?|\{\{.*\}\}|\{[\w.]*\}|%\(?\w*\)?s|<[^>]*>|\[[^\]]*\]|\([^)]*\)"
    r"|\*+|x{3,}|\.{3,}|none|null|nil|true|false|undefined|(?:u?int|uint|i|u|f|float)[0-9]+",
)
_ENV_NAME = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+")
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
_MIN_SECRET = 4
_MIN_DIGIT_SECRET = 6
_MIN_WEAK_SECRET = 8
_CODE_AFTER_VALUE = frozenset("()[],.")
_NAME_LOOKBACK = 64


_MIN_TOKEN = 20
_TOKEN_RUN = b"x" * _MIN_TOKEN
_HEX_TOKEN = re.compile(r"(?:0x)?[0-9a-fA-F-]+")
_HEX_ENTROPY = 3.0
_MAX_ENTROPY_THRESHOLD = 4.3
_ENTROPY_MARGIN = 0.9
"""A token must come within this many bits of log2(length), the most its length allows."""
_CLASS_RUN = re.compile(rb"A+|a+|0+")
_WORD = re.compile(r"[A-Z]?[a-z]{3,}|[A-Z]{4,}")
_WORDINESS_WEIGHT = 0.6
_MIN_SWITCHING = 0.14
_PATH_OR_PAIR = re.compile(r"[/=]")


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
        found: list[_Candidate] = []
        runs = _high_entropy(text, views, found, hex_tokens=hex_tokens)
        self._provider_keys(text, views, runs, found)
        if "PRIVATE KEY" in text:
            _pem(text, found)
        if "eyJ" in text:
            _jwts(text, found)
        if "://" in text:
            _url_passwords(text, found)
        _assignments(text, views, found)
        _numbers(text, views, found)
        if "@" in text:
            _emails(text, found)
        if "+" in text:
            _intl_phones(text, found)
        if ip_mode is not IpMode.OFF:
            _ips(text, views, found, everything=ip_mode is IpMode.ALL)
        return _resolve(found)

    def secret_member(self, name: str, value: str) -> bool:
        """Whether `value`, held under the object key `name`, is a literal secret.

        As it would be in the text `{"name": "value"}`: `{"password": "hunter2"}` is.
        """
        match = _SECRET_NAME.search(name.encode("latin-1", "replace").lower())
        if match is None or not _name_boundary(name, match.start()):
            return False
        weak = match.group() in _WEAK_KEYWORDS
        return _literal_secret(value, value, len(value), quoted=True, weak=weak, name=name)

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
        self, text: str, views: Views, runs: list[tuple[int, int]], found: list[_Candidate]
    ) -> None:
        longest = max((end - start for start, end in runs), default=0)
        lines: dict[int, list[tuple[int, int]]] = {}  # by gate, each searched once
        for gate, pattern in self._providers:
            if gate is None:
                for match in pattern.finditer(text):
                    _provider(text, match, found)
                continue
            if id(gate) not in lines:
                lines[id(gate)] = lines_holding(text, gate.anchors(views, runs, longest))
            for start, end in lines[id(gate)]:
                for match in pattern.finditer(text, max(0, start - 1), end + 1):
                    _provider(text, match, found)


def _resolve(found: list[_Candidate]) -> list[Finding]:
    """Non-overlapping findings: the lower rank wins, then the earlier, then the longer."""
    found.sort(key=lambda c: (c[0], c[1], -c[2]))
    starts: list[int] = []
    ends: list[int] = []
    kinds: list[Kind] = []
    for _, start, end, kind in found:
        i = bisect.bisect_right(starts, start)
        if (i and ends[i - 1] > start) or (i < len(starts) and starts[i] < end):
            continue
        starts.insert(i, start)
        ends.insert(i, end)
        kinds.insert(i, kind)
    return [Finding(kind=k, start=s, end=e) for s, e, k in zip(starts, ends, kinds, strict=True)]


def _emails(text: str, found: list[_Candidate]) -> None:
    for at in _finds_str(text, "@"):
        local = _EMAIL_LOCAL_REVERSED.match(text[max(0, at - 64) : at][::-1])
        domain = _EMAIL_DOMAIN.match(text, at + 1)
        if local is None or domain is None or text[at - 1] == ".":
            continue
        start = at - local.end()
        while text[start] == ".":
            start += 1
        if any(ch.isalnum() for ch in text[start:at]):
            found.append((_RANK_EMAIL, start, domain.end(), Kind.EMAIL))


def _finds_str(text: str, needle: str) -> Iterator[int]:
    at = text.find(needle)
    while at != -1:
        yield at
        at = text.find(needle, at + 1)


def _numbers(text: str, views: Views, found: list[_Candidate]) -> None:
    classes = views.classes
    anchors = [
        at
        for needle in _NUMBER_ANCHORS
        for at in finds(classes, needle)
        # Not the digits of a decimal fraction (0.5488135039...), which no detector takes.
        if at < 2 or classes[at - 1] != _DOT or classes[at - 2] != _ZERO  # noqa: PLR2004
    ]
    for start, end in lines_holding(text, anchors):
        found.extend(
            (_RANK_PHONE, *span, Kind.PHONE)
            for span in _validated(_CN_MOBILE, text, start, end, _cn_mobile_end)
        )
        found.extend(
            (_RANK_PRC_ID, m.start(), m.end(), Kind.PRC_ID)
            for m in _PRC_ID.finditer(text, start, end)
            if ric.is_valid(m.group())
        )
        found.extend(
            (_RANK_CARD, *span, Kind.PAYMENT_CARD)
            for span in _validated(_CARD, text, start, end, _card_end)
        )
    for start, end in lines_holding(text, finds(classes, _IBAN_ANCHOR)):
        found.extend(
            (_RANK_IBAN, *span, Kind.IBAN)
            for span in _validated(_IBAN, text, start, end, _iban_end)
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


def _intl_phones(text: str, found: list[_Candidate]) -> None:
    """International numbers, validated by their numbering plan.

    A candidate that runs into other digits is shortened a group at a time
    ("+44 20 7946 0958 12" holds "+44 20 7946 0958").
    """
    for match in _INTL_PHONE.finditer(text):
        candidate = match.group()
        while sum(ch.isdigit() for ch in candidate) >= _MIN_PHONE_DIGITS:
            if _valid_phone(candidate, None):
                start = match.start()
                found.append((_RANK_PHONE, start, start + len(candidate), Kind.PHONE))
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


def _ips(text: str, views: Views, found: list[_Candidate], *, everything: bool) -> None:
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


def _ip(match: re.Match[str], found: list[_Candidate], *, everything: bool) -> None:
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
        found.append((_RANK_IP, match.start(), match.end(), Kind.IP_ADDRESS))


def _provider(text: str, match: re.Match[str], found: list[_Candidate]) -> None:
    """Record the key in a provider pattern's match.

    That is the match's longest group if it is key-sized (some patterns capture only a
    prefix such as "ghp"), else the whole match without its delimiters.
    """
    start, end = match.span()
    widest = max(
        (match.span(g) for g in range(1, match.re.groups + 1) if match.start(g) != -1),
        key=lambda span: span[1] - span[0],
        default=(0, 0),
    )
    if widest[1] - widest[0] >= 16:  # noqa: PLR2004 - shorter groups are prefixes (ghp, glpat)
        start, end = widest
    while start < end and text[start] in " \t\r\n\"'=:":
        start += 1
    while end > start and text[end - 1] in " \t\r\n\"'":
        end -= 1
    if start == end or (start and text[start - 1].isalnum()):
        return  # inside a longer word
    if end < len(text) and text[end] == "(":
        return  # a function's name
    while end < len(text) and (text[end].isalnum() or text[end] in "_-"):
        end += 1  # a longer key of the same provider
    found.append((_RANK_CREDENTIAL, start, end, Kind.CREDENTIAL))


def _pem(text: str, found: list[_Candidate]) -> None:
    for match in _PEM.finditer(text):
        body = match.group("body") or match.group("open") or ""
        if len(_BASE64_CHAR.findall(body)) >= _PEM_BODY_MIN:
            found.append((_RANK_PEM, match.start(), match.end(), Kind.CREDENTIAL))


def _jwts(text: str, found: list[_Candidate]) -> None:
    found.extend(
        (_RANK_CREDENTIAL, m.start(), m.end(), Kind.CREDENTIAL)
        for m in _JWT.finditer(text)
        if _jwt_header(m.group().split(".", 1)[0])
    )


def _jwt_header(segment: str) -> bool:
    try:
        decoded = json.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)))
    except (binascii.Error, ValueError):
        return False
    return isinstance(decoded, dict) and "alg" in decoded


def _url_passwords(text: str, found: list[_Candidate]) -> None:
    """The password of `scheme://user:password@host`, not a template such as ${PW}."""
    found.extend(
        (_RANK_CREDENTIAL, m.start(1), m.end(1), Kind.CREDENTIAL)
        for m in _URL_PASSWORD.finditer(text)
        if not _NOT_A_SECRET.fullmatch(m.group(1))
    )


def _assignments(text: str, views: Views, found: list[_Candidate]) -> None:
    """Literal values assigned to names ending in a secret's keyword; the value only.

    `password = "..."`, `PASSWORD=...`, `"api_key": "..."`, `Authorization: Bearer ...`,
    but not `password = get_password()` nor `password: str`.
    """
    low = views.low
    for at in sorted(at for start in _KEYWORD_STARTS for at in finds(low, start)):
        match = _KEYWORD.match(low, at)
        if match is None or not _name_boundary(text, at):
            continue
        keyword = match.group(1)
        name = _name_before(text, at) + text[at : match.end(1)]
        value_at = match.end()
        scheme = _AUTH_SCHEME.match(text, value_at)
        if scheme:
            value_at = scheme.end()
        value = _VALUE.match(text, value_at)
        if value is None:
            continue
        quoted = value.group("bare") is None
        group = "bare" if not quoted else "dq" if value.group("dq") else "sq"
        secret = value.group(group)
        v_start, v_end = value.span(group)
        if quoted:
            scheme = _AUTH_SCHEME.match(secret)
            if scheme:
                v_start += scheme.end()
                secret = secret[scheme.end() :]
        else:
            trimmed = secret.rstrip(".,:;")  # the end of a sentence
            v_end -= len(secret) - len(trimmed)
            secret = trimmed
        weak = keyword in _WEAK_KEYWORDS
        if _literal_secret(secret, text, v_end, quoted=quoted, weak=weak, name=name):
            found.append((_RANK_CREDENTIAL, v_start, v_end, Kind.CREDENTIAL))


def _name_boundary(text: str, at: int) -> bool:
    """Whether a keyword at `at` begins a word or a camelCase/UPPER_CASE part of a name."""
    return at == 0 or not text[at - 1].isalpha() or text[at].isupper()


def _name_before(text: str, at: int) -> str:
    start = at
    while start > 0 and at - start < _NAME_LOOKBACK and text[start - 1] in _NAME_CHARS:
        start -= 1
    return text[start:at]


def _literal_secret(
    value: str, text: str, end: int, *, quoted: bool, weak: bool, name: str
) -> bool:
    """Whether an assigned value is a literal secret rather than code, a type or a template."""
    if value.isdigit():
        return len(value) >= _MIN_DIGIT_SECRET
    not_secret = (
        len(value) < _MIN_SECRET
        or _NOT_A_SECRET.fullmatch(value) is not None
        or _PLACEHOLDER.fullmatch(value) is not None
        or name.lower().lstrip("_.-") in {"pwd", "oldpwd"}  # the shell's working directory
        or _ENV_NAME.fullmatch(value) is not None  # the name of an environment variable
        or "://" in value  # a URL (one with a password is found as such)
        or value.startswith(("/", "./", "~/"))  # a path, such as /run/secrets/db
    )
    if quoted:
        not_secret = not_secret or any(ch.isspace() for ch in value)  # prose
    else:
        not_secret = (
            not_secret
            # a variable, attribute, type or keyword
            or (_IDENTIFIER.fullmatch(value) is not None and _reference(value))
            # a call, subscript or argument list
            or (end < len(text) and text[end] in _CODE_AFTER_VALUE)
        )
    return not not_secret and (not weak or _looks_random(value))


def _reference(identifier: str) -> bool:
    """Whether an unquoted identifier names something (no digits, or dotted)."""
    return "." in identifier or not any(ch.isdigit() for ch in identifier)


def _looks_random(value: str) -> bool:
    return len(value) >= _MIN_WEAK_SECRET and any(ch.isdigit() for ch in value)


def _high_entropy(
    text: str, views: Views, found: list[_Candidate], *, hex_tokens: bool
) -> list[tuple[int, int]]:
    """Record random-looking tokens; return every run of 20 or more token characters."""
    tokens, classes = views.tokens, views.classes
    runs: list[tuple[int, int]] = []
    at = tokens.find(_TOKEN_RUN)
    while at != -1:
        end = tokens.find(b" ", at + _MIN_TOKEN)
        if end == -1:
            end = len(tokens)
        runs.append((at, end))
        shape = classes[at:end]
        if hex_tokens or (b"A" in shape and b"a" in shape and b"0" in shape):
            found.extend(
                (_RANK_ENTROPY, start, stop, Kind.HIGH_ENTROPY)
                for start, stop in _pieces(text, at, end, hex_tokens=hex_tokens)
            )
        at = tokens.find(_TOKEN_RUN, end)
    return runs


def _pieces(text: str, start: int, end: int, *, hex_tokens: bool) -> Iterator[tuple[int, int]]:
    """The random-looking token without its padding, or else its random-looking parts.

    Parts are the values of key=value pairs and the segments of a path.
    """
    while end > start and text[end - 1] == "=":
        end -= 1
    token = text[start:end]
    if "=" not in token and _random(token, hex_tokens=hex_tokens):
        yield start, end
        return
    at = start
    for part in _PATH_OR_PAIR.split(token):
        if len(part) < len(token) and _random(part, hex_tokens=hex_tokens):
            yield at, at + len(part)
        at += len(part) + 1


def _random(token: str, *, hex_tokens: bool) -> bool:
    """Whether a token looks random rather than like a word, name, path or number.

    Base64 alphabets: mixed case and digits, entropy near that of random text of its
    length, and frequent switches between character classes that words (camelCase,
    snake_case, paths) do not have. Tuned on random tokens of 20 to 64 characters
    (about 97% of those with mixed case and digits found) against the source of the
    packages in this environment.
    """
    if len(token) < _MIN_TOKEN:
        return False
    if _HEX_TOKEN.fullmatch(token):
        digits = token.removeprefix("0x").replace("-", "")
        return hex_tokens and not digits.isdigit() and _entropy(digits.lower()) > _HEX_ENTROPY
    shape = token.encode("latin-1", "replace").translate(CLASSES)
    if not (b"A" in shape and b"a" in shape and b"0" in shape):
        return False
    if _entropy(token) <= min(_MAX_ENTROPY_THRESHOLD, math.log2(len(token)) - _ENTROPY_MARGIN):
        return False
    core = shape.translate(None, TOKEN_PUNCTUATION)  # separators of names and paths
    switching = (len(_CLASS_RUN.findall(core)) - 1) / (len(core) - 1)
    wordy = sum(map(len, _WORD.findall(token))) / len(token)
    return switching - _WORDINESS_WEIGHT * wordy > _MIN_SWITCHING


def _entropy(token: str) -> float:
    n = len(token)
    return math.log2(n) - sum(c * math.log2(c) for c in Counter(token).values()) / n
