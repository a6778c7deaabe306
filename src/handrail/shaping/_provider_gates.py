"""The credential formats of detect-secrets' plugins, and the cheap gates in front of them.

Provider patterns are taken from the plugins as they are (never rewritten by hand). A
pattern that cannot be found quickly on its own gets a gate: a part every match must
contain, searched first with C-speed substring or byte-regex searches. Tests check each
gate against its pattern and fail if an upgrade of detect-secrets changes a pattern.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal

from detect_secrets.plugins.artifactory import ArtifactoryDetector
from detect_secrets.plugins.aws import AWSKeyDetector
from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
from detect_secrets.plugins.base import RegexBasedDetector
from detect_secrets.plugins.cloudant import CloudantDetector
from detect_secrets.plugins.discord import DiscordBotTokenDetector
from detect_secrets.plugins.github_token import GitHubTokenDetector
from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
from detect_secrets.plugins.ibm_cloud_iam import IbmCloudIamDetector
from detect_secrets.plugins.ibm_cos_hmac import IbmCosHmacDetector
from detect_secrets.plugins.mailchimp import MailchimpDetector
from detect_secrets.plugins.npm import NpmDetector
from detect_secrets.plugins.openai import OpenAIDetector
from detect_secrets.plugins.pypi_token import PypiTokenDetector
from detect_secrets.plugins.sendgrid import SendGridDetector
from detect_secrets.plugins.slack import SlackDetector
from detect_secrets.plugins.softlayer import SoftlayerDetector
from detect_secrets.plugins.square_oauth import SquareOAuthDetector
from detect_secrets.plugins.stripe import StripeDetector
from detect_secrets.plugins.telegram_token import TelegramBotTokenDetector
from detect_secrets.plugins.twilio import TwilioKeyDetector

if TYPE_CHECKING:
    from handrail.shaping._views import Views

__all__ = ["GATES", "PROVIDER_PLUGINS", "Gate"]

PROVIDER_PLUGINS: tuple[type[RegexBasedDetector], ...] = (
    AWSKeyDetector,
    ArtifactoryDetector,
    AzureStorageKeyDetector,
    CloudantDetector,
    DiscordBotTokenDetector,
    GitHubTokenDetector,
    GitLabTokenDetector,
    IbmCloudIamDetector,
    IbmCosHmacDetector,
    MailchimpDetector,
    NpmDetector,
    OpenAIDetector,
    PypiTokenDetector,
    SendGridDetector,
    SlackDetector,
    SoftlayerDetector,
    SquareOAuthDetector,
    StripeDetector,
    TelegramBotTokenDetector,
    TwilioKeyDetector,
)
"""detect-secrets plugins whose `denylist` patterns find provider keys. Its other regex
plugins are covered here more precisely: BasicAuth (only the password of a URL is the
finding), JwtToken (the header must decode), PrivateKey (the whole PEM block), IPPublic
(IP addresses follow the policy's IpMode)."""


@dataclass(frozen=True, slots=True)
class Gate:
    """Where a provider pattern that does not start with a literal can match, found fast.

    Its anchors are the matches of `pattern` in the latin-1 view (`raw`) or its ASCII
    lower-case (`low`), or else the runs of at least `min_token` token characters; with
    both, `min_token` is only a quick precondition. Every match of the provider pattern
    holds an anchor and lies within the anchor's line and a character either side, so
    the pattern only runs there. Patterns without a gate start with a literal, which the
    regex engine finds fast on its own.
    """

    view: Literal["raw", "low"] = "raw"
    pattern: re.Pattern[bytes] | None = None
    min_token: int = 0

    def anchors(self, views: Views, runs: list[tuple[int, int]], longest: int) -> list[int]:
        """Positions of the anchors, given the token runs of the text and the longest."""
        if longest < self.min_token:
            return []
        if self.pattern is None:
            return [start for start, end in runs if end - start >= self.min_token]
        view = views.raw if self.view == "raw" else views.low
        return [match.start() for match in self.pattern.finditer(view)]


_GITLAB = Gate("raw", re.compile(rb"gl[a-z]{2,5}-"))
_PYPI = Gate("raw", re.compile(rb"pypi-AgE"))
_CLOUDANT_KEY = Gate(
    "low", re.compile(rb"(?:cloudant|cl|clou)[_-]?(?:api)?(?:key|pwd|pw|pass|token)")
)
_CLOUDANT_URL = Gate("low", re.compile(rb"\.cloudant\.com"))

GATES: Mapping[tuple[str, int], Gate] = MappingProxyType(
    {
        ("AWSKeyDetector", 1): Gate("low", re.compile(rb"aws"), min_token=40),
        ("ArtifactoryDetector", 0): Gate("raw", re.compile(rb"AKC")),
        # `\d` is any Unicode digit; the latin-1 view shows those beyond latin-1 as "?".
        ("ArtifactoryDetector", 1): Gate("raw", re.compile(rb"AP[0-9A-F?]")),
        ("CloudantDetector", 0): _CLOUDANT_KEY,
        ("CloudantDetector", 1): _CLOUDANT_KEY,
        ("CloudantDetector", 2): _CLOUDANT_URL,
        ("CloudantDetector", 3): _CLOUDANT_URL,
        ("DiscordBotTokenDetector", 0): Gate(
            "raw", re.compile(rb"\.[a-zA-Z0-9_?-]{6}\.[a-zA-Z0-9_?-]{27}")
        ),
        # All but the one starting "GR1348941", which the regex engine finds fast.
        **{("GitLabTokenDetector", index): _GITLAB for index in (0, 2, 3, 4, 5, 6)},
        ("IbmCloudIamDetector", 0): Gate(min_token=44),
        ("IbmCosHmacDetector", 0): Gate("low", re.compile(rb"secret[-_]?(?:access)?[-_]?key")),
        ("MailchimpDetector", 0): Gate("raw", re.compile(rb"-us[0-9]"), min_token=36),
        ("PypiTokenDetector", 0): _PYPI,
        ("PypiTokenDetector", 1): _PYPI,
        ("SlackDetector", 0): Gate("low", re.compile(rb"xox[abposr]-")),
        ("SlackDetector", 1): Gate("low", re.compile(rb"hooks\.slack\.com/services/t")),
        ("SoftlayerDetector", 0): Gate(
            "low", re.compile(rb"(?:softlayer|sl)[_-]?(?:api)?[_-]?(?:key|pwd|pass|token)")
        ),
        ("SoftlayerDetector", 1): Gate("low", re.compile(rb"api.softlayer.com/soap/")),
        ("StripeDetector", 0): Gate("raw", re.compile(rb"k_live_")),
        ("TelegramBotTokenDetector", 0): Gate(
            "raw", re.compile(rb":[0-9A-Za-z_?-]{35}"), min_token=35
        ),
    }
)
"""Gates by plugin and index in its `denylist`: for the patterns that do not start with
a literal, and for families of patterns that share one (a gate used by several is
searched once). Each is a part every match must contain; tests check them against the
patterns, and that the patterns are the ones reviewed."""
