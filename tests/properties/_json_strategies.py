"""Hypothesis strategies for JSON values, shared by the property tests of this folder."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st


def json_scalars(
    integers: st.SearchStrategy[int] | None = None,
    *,
    text_size: int = 20,
) -> st.SearchStrategy[Any]:
    """null, booleans, integers (all of them unless narrowed), finite floats and text."""
    return (
        st.none()
        | st.booleans()
        | (integers if integers is not None else st.integers())
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=text_size)
    )


def json_values(
    scalars: st.SearchStrategy[Any],
    *,
    width: int = 4,
    key_size: int = 8,
    max_leaves: int = 16,
) -> st.SearchStrategy[Any]:
    """Scalars nested in arrays and objects of at most `width` members."""
    return st.recursive(
        scalars,
        lambda children: (
            st.lists(children, max_size=width)
            | st.dictionaries(st.text(max_size=key_size), children, max_size=width)
        ),
        max_leaves=max_leaves,
    )
