"""The operator's policy for an upstream is strict: what it does not say is an error, not a default.

(Named test_upstream_policy, not test_policy: tests/test_policy.py holds that basename.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from handrail.errors import ConfigurationError
from handrail.mcp.policy import Unlisted, load_policy, parse_policy
from handrail.spec import ConfirmationMode, RiskLevel, SideEffect

GOOD = """
unlisted = "hide"
unlisted_permissions = ["ops"]

[tools.lookup]
risk = "L1"
permissions = ["books.read"]
timeout = 5.0

[tools.notes_add]
risk = "L2_REVERSIBLE_WRITE"
confirmation = "confirm"

[tools.wipe]
risk = "L3"
confirmation = "approve"
approver_permission = "notes.approve"
distinct_approvers = 2
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "upstream.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_policy_file_gives_each_named_tool_its_risk_side_effect_permissions_and_confirmation(
    tmp_path: Path,
) -> None:
    policy = load_policy(_write(tmp_path, GOOD))

    lookup = policy.rule("lookup")
    assert lookup is not None
    assert lookup.risk is RiskLevel.L1_INTERNAL_READ
    assert lookup.side_effect is SideEffect.NONE
    assert lookup.permissions == {"books.read"}
    assert lookup.confirmation.mode is ConfirmationMode.NONE
    assert lookup.timeout == 5.0
    notes = policy.rule("notes_add")
    assert notes is not None
    assert notes.side_effect is SideEffect.EXTERNAL_WRITE
    assert notes.confirmation.mode is ConfirmationMode.CONFIRM
    wipe = policy.rule("wipe")
    assert wipe is not None
    assert wipe.confirmation.mode is ConfirmationMode.APPROVE
    assert wipe.confirmation.approver_permission == "notes.approve"
    assert wipe.confirmation.distinct_approvers == 2


def test_unlisted_hide_hides_every_tool_the_file_does_not_name(tmp_path: Path) -> None:
    policy = load_policy(_write(tmp_path, GOOD))

    assert policy.unlisted is Unlisted.HIDE
    assert policy.rule("delete_everything") is None


def test_unlisted_confirm_makes_an_unnamed_tool_a_high_risk_write_needing_confirmation() -> None:
    policy = parse_policy({"unlisted": "confirm", "unlisted_permissions": ["ops"]})

    rule = policy.rule("anything")
    assert rule is not None
    assert rule.risk is RiskLevel.L3_HIGH_RISK_WRITE
    assert rule.side_effect is SideEffect.EXTERNAL_WRITE
    assert rule.confirmation.mode is ConfirmationMode.CONFIRM
    assert rule.permissions == {"ops"}


def test_a_file_without_the_unlisted_setting_is_refused_naming_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path, '[tools.lookup]\nrisk = "L0"\n')

    with pytest.raises(ConfigurationError, match="unlisted") as caught:
        load_policy(path)
    assert str(path) in str(caught.value)


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('unlisted = "hide"\nunlisted_tools = "confirm"\n', "unlisted_tools"),
        ('unlisted = "hide"\n[tools.lookup]\nrisk = "L0"\nreadOnlyHint = true\n', "readOnlyHint"),
        ('unlisted = "hide"\n[tools.lookup]\nrisk = "L1"\nside_effect = "none"\n', "side_effect"),
    ],
)
def test_an_unknown_key_is_refused_and_named(tmp_path: Path, text: str, key: str) -> None:
    with pytest.raises(ConfigurationError, match=f"unknown key .*{key}"):
        load_policy(_write(tmp_path, text))


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('unlisted = "allow"\n', "unlisted"),
        ('unlisted = "hide"\n[tools.x]\nrisk = "L9"\n', "tools.x.risk"),
        ('unlisted = "hide"\n[tools.x]\npermissions = ["a"]\n', "missing key 'tools.x.risk'"),
        ('unlisted = "hide"\n[tools.x]\nrisk = "L2"\nconfirmation = "none"\n', "confirmation"),
        ('unlisted = "hide"\n[tools.x]\nrisk = "L1"\nconfirmation = "confirm"\n', "confirmation"),
        ('unlisted = "hide"\n[tools.x]\nrisk = "L3"\nconfirmation = "approve"\n', "approver"),
        ('unlisted = "hide"\n[tools.x]\nrisk = "L1"\ntimeout = "5"\n', "tools.x.timeout"),
        ('unlisted = "hide"\n[tools.x]\nrisk = "L1"\npermissions = [""]\n', "permission"),
        ("unlisted = \n", "not valid TOML"),
    ],
)
def test_a_wrong_value_is_refused_naming_the_file_and_the_key(
    tmp_path: Path,
    text: str,
    problem: str,
) -> None:
    path = _write(tmp_path, text)

    with pytest.raises(ConfigurationError) as caught:
        load_policy(path)
    assert str(path) in str(caught.value)
    assert problem in str(caught.value)


def test_a_missing_policy_file_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cannot read"):
        load_policy(tmp_path / "absent.toml")


def test_a_forbidden_tool_is_named_with_l4_and_stays_a_read_without_confirmation() -> None:
    policy = parse_policy({"unlisted": "hide", "tools": {"wipe": {"risk": "L4"}}})

    rule = policy.rule("wipe")
    assert rule is not None
    assert rule.risk is RiskLevel.L4_FORBIDDEN


def test_business_values_are_declared_per_tool_with_a_reason() -> None:
    policy = parse_policy(
        {
            "unlisted": "hide",
            "tools": {"m": {"risk": "L1", "business_values": {"user_id": "the member read"}}},
        },
    )

    rule = policy.rule("m")
    assert rule is not None
    assert rule.business_values["user_id"].reason == "the member read"


def test_a_business_value_without_a_reason_is_refused_naming_the_key() -> None:
    with pytest.raises(ConfigurationError, match=r"tools\.m\.business_values"):
        parse_policy(
            {"unlisted": "hide", "tools": {"m": {"risk": "L1", "business_values": {"u": " "}}}},
        )
