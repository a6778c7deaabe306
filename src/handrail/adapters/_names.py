"""Provider-safe tool names: the one reversible mapping between Handrail and wire names.

OpenAI and Anthropic accept only `^[a-zA-Z0-9_-]{1,64}$`, while Handrail names use dots
between namespace segments. A dot becomes `__`. A name that cannot map reversibly is
refused with a clear error, never altered silently.
"""

from __future__ import annotations

import re

from handrail.errors import ConfigurationError
from handrail.text import escape_lone_surrogates

__all__ = [
    "SEPARATOR",
    "WIRE_NAME",
    "from_wire_name",
    "name_from_wire",
    "name_to_wire",
    "to_wire_name",
    "wire_name_defect",
]

WIRE_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
"""What OpenAI (chat and Responses) and Anthropic accept as a function name."""

SEPARATOR = "__"
"""Stands for the dot between namespace segments on the wire."""


def _mappable_segment(segment: str) -> bool:
    # With no "__" inside and no "_" at either end, every "__" on the wire is a separator.
    return bool(segment) and SEPARATOR not in segment and segment.strip("_") == segment


def to_wire_name(name: str) -> str:
    """The provider-facing name for a Handrail tool name: `shop.search` -> `shop__search`.

    Raises ConfigurationError when the name cannot be sent reversibly: a segment holds
    `__` or starts or ends with `_`, or the result is not a valid provider name.
    """
    segments = name.split(".")
    if not all(_mappable_segment(s) for s in segments):
        raise ConfigurationError(
            f"tool name {name!r} cannot be sent to a provider reversibly: a name segment "
            f"must not contain {SEPARATOR!r} or start or end with '_'",
        )
    wire = SEPARATOR.join(segments)
    if not WIRE_NAME.fullmatch(wire):
        raise ConfigurationError(
            f"tool name {name!r} becomes {wire!r} on the wire, which is not a valid provider "
            f"function name (letters, digits, '_' and '-', at most 64 characters)",
        )
    return wire


def from_wire_name(wire: str) -> str | None:
    """The Handrail name behind a provider-facing name, or None if none could map to it.

    The exact inverse of `to_wire_name`: a model may answer with any string, and one
    that `to_wire_name` could not have produced names no tool.
    """
    if not WIRE_NAME.fullmatch(wire):
        return None
    name = ".".join(wire.split(SEPARATOR))
    try:
        return name if to_wire_name(name) == wire else None
    except ConfigurationError:
        return None


def name_from_wire(wire: str) -> str:
    """The Handrail name a model's call names; an unmappable name is kept verbatim.

    For parsing calls and transcripts: a name no tool could have is passed on unchanged,
    so that the transcript keeps what the model wrote; `wire_name_defect` says whether
    the call may run at all.
    """
    return from_wire_name(wire) or wire


def name_to_wire(name: str) -> str:
    r"""The wire name for a call's tool name; a name that cannot map is kept verbatim.

    For rendering transcripts: a call the model made to a name no tool has goes back
    exactly as the model wrote it, except that a lone surrogate (which no request body
    can hold as UTF-8) is written as a `\uXXXX` escape.
    """
    try:
        return to_wire_name(name)
    except ConfigurationError:
        return escape_lone_surrogates(name)


def wire_name_defect(wire: str) -> str | None:
    """Why a call's tool name must not run: it is not the wire name of any Handrail name.

    Only names `to_wire_name` produces resolve, so `shop.search` sent where Handrail
    sent `shop__search` (Gemini allows dots) never reaches a tool by a second spelling.
    Adapters set this as the call's defect; the gate then refuses it at stage 1.
    """
    if from_wire_name(wire) is None:
        return "the tool name is not the wire name of any tool Handrail sends"
    return None
