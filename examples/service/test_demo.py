import pytest

from examples.service.demo import main


def test_the_service_demo_plans_approves_in_the_console_and_executes_once(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main() == 0
    printed = capsys.readouterr().out
    assert "readyz: ready" in printed
    assert "approved so far by bob, carol" in printed
    assert ": SUCCEEDED, refunded 1500000 cents" in printed
    assert "server stopped (exit 0)" in printed
