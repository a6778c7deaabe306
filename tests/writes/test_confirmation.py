"""Keyrings from key text, an environment variable or a file: the same key in every process."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from handrail import ConfirmationMode, Impact, Keyring, Plan, Principal, RiskLevel
from handrail.errors import ConfigurationError, ErrorCode, Refusal
from handrail.writes.confirmation import KEYRING_ENV

ALICE = Principal(user_id="alice", tenant_id="t1", permissions=frozenset())
OLD = Keyring.new_key_text("old", token_bytes=lambda n: b"o" * n)
NEW = Keyring.new_key_text("new", token_bytes=lambda n: b"n" * n)


def _plan() -> Plan:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    return Plan.create(
        plan_id="p-1",
        tool="create_ticket",
        schema_version="v1",
        arguments={"asset_id": "asset-1"},
        expected_version=None,
        user_id=ALICE.user_id,
        tenant_id=ALICE.tenant_id,
        risk=RiskLevel.L2_REVERSIBLE_WRITE,
        confirmation=ConfirmationMode.CONFIRM,
        required_approvals=0,
        impact=Impact(action="create ticket", target="asset-1", reversible=True),
        created_at=now,
        expires_at=now + timedelta(minutes=5),
    )


def test_a_token_issued_by_one_keyring_verifies_with_another_from_the_same_text() -> None:
    token = Keyring.from_text(OLD).issue(_plan(), ALICE)
    assert Keyring.from_text(OLD).verify(token.value, ALICE).plan_id == "p-1"


def test_the_first_entry_signs_and_later_ones_still_verify() -> None:
    old_token = Keyring.from_text(OLD).issue(_plan(), ALICE)
    rotated = Keyring.from_text(f"# rotated in 2026\n{NEW}\n{OLD}\n")
    assert rotated.signing_key_id == "new"
    assert rotated.verify(old_token.value, ALICE).key_id == "old"
    assert Keyring.from_text(f"{NEW}, {OLD}").signing_key_id == "new"
    with pytest.raises(Refusal) as refused:
        Keyring.from_text(NEW).verify(old_token.value, ALICE)
    assert refused.value.code is ErrorCode.CONFIRMATION_INVALID


def test_a_keyring_comes_from_an_environment_variable_or_a_file(tmp_path: Path) -> None:
    token = Keyring.from_text(NEW).issue(_plan(), ALICE)
    from_env = Keyring.from_env(environ={KEYRING_ENV: NEW})
    assert from_env.verify(token.value, ALICE).key_id == "new"
    path = tmp_path / "keys"
    path.write_text(f"{NEW}\n", encoding="utf-8")
    assert Keyring.from_file(path).verify(token.value, ALICE).key_id == "new"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "# only a comment\n",
        "no-separator",
        "k1:not base64!",
        "k1:c2hvcnQ",
        "bad id:" + "A" * 43,
    ],
)
def test_key_text_that_is_not_a_usable_key_is_refused(text: str) -> None:
    with pytest.raises(ConfigurationError):
        Keyring.from_text(text)


def test_a_refused_key_never_echoes_its_secret() -> None:
    short = "c2hvcnQgYnV0IHNlY3JldA"
    with pytest.raises(ConfigurationError) as refused:
        Keyring.from_text(f"k1:{short}")
    assert short not in str(refused.value)


def test_a_missing_variable_or_file_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=KEYRING_ENV):
        Keyring.from_env(environ={})
    with pytest.raises(ConfigurationError):
        Keyring.from_file(tmp_path / "missing")


def test_new_key_text_draws_32_bytes_and_checks_the_key_id() -> None:
    drawn: list[int] = []

    def token_bytes(n: int) -> bytes:
        drawn.append(n)
        return b"x" * n

    text = Keyring.new_key_text("k2", token_bytes=token_bytes)
    assert drawn == [32]
    assert text.startswith("k2:")
    assert Keyring.from_text(text).signing_key_id == "k2"
    with pytest.raises(ConfigurationError):
        Keyring.new_key_text("no spaces allowed")
