"""A tool name with a trailing newline is refused at registration, like any other bad name.

The name check matched each segment with `^...$`, and `$` also matches before a final
newline: `ns.lookup\n` registered. Such a name reaches models, logs and terminals, and
the proxy builds names from what an upstream lists.
"""

from __future__ import annotations

import pytest

from handrail.declare.definition import Tool
from handrail.errors import RegistrationError
from handrail.spec import RiskLevel


def _noop(arguments: dict[str, object]) -> None:
    del arguments


@pytest.mark.parametrize("name", ["ns.lookup\n", "ns\n.lookup", "lookup\n"])
def test_a_name_ending_a_segment_with_a_newline_is_refused(name: str) -> None:
    with pytest.raises(RegistrationError, match="invalid tool name"):
        Tool.from_json_schema(
            name=name,
            description="Look up.",
            input_schema={"type": "object"},
            fn=_noop,
            risk=RiskLevel.L0_PUBLIC_READ,
        )
