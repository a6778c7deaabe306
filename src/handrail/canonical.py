"""Canonical JSON (RFC 8785, JCS) and the content hashes built on it.

One canonical form for everything that is hashed: argument hashes in the audit log,
schema and description versions, and (later) plan hashes. JCS sorts keys, removes
insignificant whitespace, writes UTF-8 and normalises numbers as ECMAScript does.
"""

from __future__ import annotations

import hashlib

import rfc8785

__all__ = ["canonical_json", "content_version", "sha256_hex"]


def canonical_json(value: object) -> bytes:
    """The RFC 8785 serialisation of a JSON value.

    Raises `rfc8785.CanonicalizationError` (a ValueError) for values JSON cannot
    represent exactly, such as NaN, infinities or integers beyond 2**53.
    """
    return rfc8785.dumps(value)  # type: ignore[arg-type]  # checked at run time by rfc8785


def sha256_hex(data: bytes) -> str:
    """Lower-case hex SHA-256."""
    return hashlib.sha256(data).hexdigest()


def content_version(value: object) -> str:
    """A short, stable version label derived from content: `sha256:` + 16 hex digits."""
    return "sha256:" + sha256_hex(canonical_json(value))[:16]
