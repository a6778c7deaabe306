"""What the redaction detectors find: the kinds of sensitive data, and one finding.

Owns `Kind` (e-mail, card, credential, ...), `IpMode` (which IP addresses count) and
`Finding` (a kind at a span of a text). Shared by the detectors and the redactor, so
neither imports the other's logic. Never scans anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["Finding", "IpMode", "Kind"]


class Kind(StrEnum):
    """What a finding is; the key of `Envelope.redacted` and of per-kind actions."""

    EMAIL = "email"
    PHONE = "phone"
    PRC_ID = "prc_id"
    PAYMENT_CARD = "payment_card"
    IBAN = "iban"
    IP_ADDRESS = "ip_address"
    CREDENTIAL = "credential"
    """API keys of known providers, JWTs, private keys, passwords in URLs and
    connection strings, password assignments."""
    HIGH_ENTROPY = "high_entropy"
    """Strings that look random enough to be a secret of no known format."""


class IpMode(StrEnum):
    """Which IP addresses count as findings."""

    OFF = "off"
    PRIVATE = "private"
    """Private, loopback, link-local and other non-global addresses: internal topology."""
    ALL = "all"


@dataclass(frozen=True, kw_only=True, slots=True)
class Finding:
    """One match in a text: `text[start:end]` is a value of `kind`."""

    kind: Kind
    start: int
    end: int
