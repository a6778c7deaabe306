"""What a tool may declare about its results, and what registration refuses."""

from __future__ import annotations

import pytest

from handrail.declare.definition import tool
from handrail.envelope import Trust
from handrail.errors import ConfigurationError, RegistrationError
from handrail.shaping.policy import Overflow, RawKeeping, ResultPolicy
from handrail.spec import RiskLevel


def test_defaults_are_the_cautious_ones() -> None:
    policy = ResultPolicy()
    assert policy.trust is Trust.UNTRUSTED
    assert policy.overflow is Overflow.TRUNCATE
    assert policy.keep_raw is RawKeeping.WHEN_SHAPED
    assert policy.projection is None


@pytest.mark.parametrize("field", ["max_chars", "max_tokens"])
def test_budgets_must_be_positive(field: str) -> None:
    with pytest.raises(ConfigurationError, match=field):
        ResultPolicy(**{field: 0})


def test_a_tool_cannot_claim_handrails_own_trust_level() -> None:
    with pytest.raises(ConfigurationError):
        ResultPolicy(trust=Trust.HANDRAIL)


@pytest.mark.parametrize("handle", ["", "a b", "x" * 200, "key\n"])
def test_secret_handles_are_checked_at_registration(handle: str) -> None:
    with pytest.raises(RegistrationError):

        @tool(risk=RiskLevel.L0_PUBLIC_READ, name="uses_secret", secrets={handle})
        async def uses_secret() -> None:
            """Use a secret."""


def test_declared_handles_are_kept_on_the_spec() -> None:
    @tool(risk=RiskLevel.L0_PUBLIC_READ, name="uses_secret", secrets=["github", "db/password"])
    async def uses_secret() -> None:
        """Use a secret."""

    assert uses_secret.spec.secrets == frozenset({"github", "db/password"})
