"""A trailing newline must not pass a name check: `re.match` with `$` lets one through.

Argument keys come from the model; a key that passed as an identifier would put a raw
line break into the JSONPath of a field error (read by the model, kept in the audit).
"""

from __future__ import annotations

import pytest

from handrail.errors import ConfigurationError
from handrail.paths import json_path
from handrail.tools._sql_config import check_name


@pytest.mark.parametrize("key", ["limit\n", "a\nb", "\nlimit"])
def test_a_key_with_a_line_break_is_quoted_in_a_json_path(key: str) -> None:
    path = json_path(["filters", key])
    assert "\n" not in path
    assert path.startswith('$.filters["')


def test_a_plain_key_stays_a_dotted_step() -> None:
    assert json_path(["items", 2, "name"]) == "$.items[2].name"


@pytest.mark.parametrize("name", ["orders\n", "orders\r\n"])
def test_a_query_name_ending_in_a_newline_is_refused(name: str) -> None:
    with pytest.raises(ConfigurationError):
        check_name(name, "query")
