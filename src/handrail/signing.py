"""Signing keys: named HMAC secrets, for confirmation tokens and result cursors alike.

Owns the key value (an id that travels in what it signs, and a secret never shown in a
repr). It never signs or verifies anything itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from handrail.errors import ConfigurationError

__all__ = ["KEY_ID", "SigningKey"]


KEY_ID = re.compile(r"[A-Za-z0-9_-]{1,32}")


_MIN_SECRET = 32


@dataclass(frozen=True, slots=True)
class SigningKey:
    """A named HMAC key of at least 32 random bytes; the name travels in each token."""

    key_id: str
    secret: bytes

    def __post_init__(self) -> None:
        if not KEY_ID.fullmatch(self.key_id):
            raise ConfigurationError("a key id is 1-32 characters of [A-Za-z0-9_-]")
        if len(self.secret) < _MIN_SECRET:
            raise ConfigurationError("a confirmation key needs at least 32 bytes of secret")

    def __repr__(self) -> str:
        return f"SigningKey(key_id={self.key_id!r}, secret=<hidden>)"
