"""Detectors of credentials: where keys, tokens and passwords sit in a text.

Provider keys, private keys (PEM), JWTs, passwords in URLs, and literal secrets assigned
to names such as `password` or `api_key`; never code, a type, a template or a path that
merely names one. Never resolves overlaps nor decides what happens to a finding.
"""

from __future__ import annotations

import base64
import binascii
import json
import re

from handrail.shaping._candidates import RANK_CREDENTIAL, RANK_PEM, Candidate
from handrail.shaping._views import Views, finds
from handrail.shaping.findings import Kind

__all__ = ["assignments", "jwts", "pem", "provider", "secret_member", "url_passwords"]


_PLACEHOLDER = re.compile(
    r"\[(?:REDACTED:[a-z_]+|[a-z_]+:[0-9a-f]{12}|line dropped: [a-z_, ]+)\]",
)
"""What the Redactor writes in place of findings; never a finding itself."""


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
_ANY_KEYWORD_START = re.compile(b"|".join(re.escape(start) for start in _KEYWORD_STARTS))
"""One search for all of them: a text without any holds no assignment to look at."""
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


def secret_member(name: str, value: str) -> bool:
    """Whether `value`, held under the object key `name`, is a literal secret.

    As it would be in the text `{"name": "value"}`: `{"password": "hunter2"}` is.
    """
    match = _SECRET_NAME.search(name.encode("latin-1", "replace").lower())
    if match is None or not _name_boundary(name, match.start()):
        return False
    weak = match.group() in _WEAK_KEYWORDS
    return _literal_secret(value, value, len(value), quoted=True, weak=weak, name=name)


def provider(text: str, match: re.Match[str], found: list[Candidate]) -> None:
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
    found.append((RANK_CREDENTIAL, start, end, Kind.CREDENTIAL))


def pem(text: str, found: list[Candidate]) -> None:
    for match in _PEM.finditer(text):
        body = match.group("body") or match.group("open") or ""
        if len(_BASE64_CHAR.findall(body)) >= _PEM_BODY_MIN:
            found.append((RANK_PEM, match.start(), match.end(), Kind.CREDENTIAL))


def jwts(text: str, found: list[Candidate]) -> None:
    found.extend(
        (RANK_CREDENTIAL, m.start(), m.end(), Kind.CREDENTIAL)
        for m in _JWT.finditer(text)
        if _jwt_header(m.group().split(".", 1)[0])
    )


def _jwt_header(segment: str) -> bool:
    try:
        decoded = json.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)))
    except (binascii.Error, ValueError):
        return False
    return isinstance(decoded, dict) and "alg" in decoded


def url_passwords(text: str, found: list[Candidate]) -> None:
    """The password of `scheme://user:password@host`, not a template such as ${PW}."""
    found.extend(
        (RANK_CREDENTIAL, m.start(1), m.end(1), Kind.CREDENTIAL)
        for m in _URL_PASSWORD.finditer(text)
        if not _NOT_A_SECRET.fullmatch(m.group(1))
    )


def assignments(text: str, views: Views, found: list[Candidate]) -> None:
    """Literal values assigned to names ending in a secret's keyword; the value only.

    `password = "..."`, `PASSWORD=...`, `"api_key": "..."`, `Authorization: Bearer ...`,
    but not `password = get_password()` nor `password: str`.
    """
    low = views.low
    if _ANY_KEYWORD_START.search(low) is None:
        return
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
            found.append((RANK_CREDENTIAL, v_start, v_end, Kind.CREDENTIAL))


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
