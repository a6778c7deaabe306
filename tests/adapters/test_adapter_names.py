import pytest
from hypothesis import given
from hypothesis import strategies as st

from handrail.adapters import from_wire_name, to_wire_name
from handrail.adapters._names import WIRE_NAME
from handrail.errors import ConfigurationError

# Segments as ToolSpec accepts them: a letter, then letters, digits, '_' or '-'.
any_segment = st.from_regex(r"\A[A-Za-z][A-Za-z0-9_-]{0,20}\Z")
any_name = st.lists(any_segment, min_size=1, max_size=4).map(".".join)

# Segments that map: words joined by single underscores, so no '__' and no '_' at an end.
word = st.from_regex(r"\A[A-Za-z][A-Za-z0-9-]{0,6}\Z")
mappable_segment = st.lists(word, min_size=1, max_size=3).map("_".join)
mappable_name = (
    st.lists(mappable_segment, min_size=1, max_size=4)
    .map(".".join)
    .filter(lambda n: len(n) + n.count(".") <= 64)
)


@given(mappable_name)
def test_a_mappable_name_round_trips_through_its_wire_name(name: str) -> None:
    wire = to_wire_name(name)
    assert WIRE_NAME.fullmatch(wire)
    assert from_wire_name(wire) == name


@given(any_name)
def test_any_tool_name_either_round_trips_or_is_refused(name: str) -> None:
    try:
        wire = to_wire_name(name)
    except ConfigurationError:
        return
    assert WIRE_NAME.fullmatch(wire)
    assert from_wire_name(wire) == name


@given(st.text(alphabet="abAB09_-.", max_size=70))
def test_any_wire_text_maps_back_only_to_a_name_that_maps_to_it(wire: str) -> None:
    name = from_wire_name(wire)
    if name is not None:
        assert to_wire_name(name) == wire


def test_dots_become_double_underscores() -> None:
    assert to_wire_name("bookstore.check_inventory") == "bookstore__check_inventory"
    assert from_wire_name("bookstore__check_inventory") == "bookstore.check_inventory"


@pytest.mark.parametrize(
    "name",
    ["shop.get__book", "shop_.search", "a.b_", "x" * 40 + "." + "y" * 30],
)
def test_a_name_that_cannot_map_reversibly_is_refused(name: str) -> None:
    with pytest.raises(ConfigurationError):
        to_wire_name(name)


@pytest.mark.parametrize("wire", ["", "a___b", "a.b", "_a", "a__", "x" * 65, "a b"])
def test_a_wire_name_no_tool_could_have_maps_to_none(wire: str) -> None:
    assert from_wire_name(wire) is None
