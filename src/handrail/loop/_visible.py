"""What of a model's streamed text a person may be shown while it arrives.

The loop asks for final answers as one JSON object (`LOOP_INSTRUCTIONS`), so a streamed
final answer is JSON text; shown as it comes, a chat would print braces and keys.
`VisibleText` tells prose from a structured answer by its first characters: prose
passes through as it comes; of a structured answer (bare or in a ```json fence) only
the growing `message` field is passed on, read from the partial JSON. It decides
nothing about the answer: the checked `RunAnswer` at the run's end is authoritative.
"""

from __future__ import annotations

import re
from enum import Enum, auto

import pydantic_core

__all__ = ["VisibleText"]

_OPEN_FENCE = re.compile(r"\A```(?:json)?\s*")
_FENCE_PREFIXES = ("`", "``", "```", "```j", "```js", "```jso", "```json")


class _Mode(Enum):
    UNDECIDED = auto()
    PROSE = auto()
    STRUCTURED = auto()


class VisibleText:
    """Feeds on a reply's deltas and returns the part of each a person may see now.

    `feed` returns text to show (possibly empty); `finish` takes the reply's whole text
    and returns what is still to show, so that what was shown, joined, is the prose as
    written or the structured answer's message (when its message was readable).
    """

    def __init__(self) -> None:
        self._mode = _Mode.UNDECIDED
        self._text = ""
        self._shown = ""
        self._body = 0  # where the JSON object starts, in STRUCTURED mode

    def feed(self, delta: str) -> str:
        """The part of the text so far that may be shown now and was not yet."""
        self._text += delta
        if self._mode is _Mode.UNDECIDED:
            self._decide()
        if self._mode is _Mode.PROSE:
            return self._advance(self._text)
        if self._mode is _Mode.STRUCTURED:
            return self._advance(self._message(partial=True))
        return ""

    def finish(self, text: str) -> str:
        """What is left to show once the reply's whole `text` is known."""
        self._text = text
        if self._mode is _Mode.UNDECIDED:
            self._decide()
            if self._mode is _Mode.UNDECIDED:
                self._mode = _Mode.PROSE
        if self._mode is _Mode.PROSE:
            return self._advance(text)
        return self._advance(self._message(partial=False))

    def _decide(self) -> None:
        start = self._text.lstrip()
        if not start:
            return
        if start.startswith("{"):
            self._mode = _Mode.STRUCTURED
            self._body = len(self._text) - len(start)
            return
        fence = _OPEN_FENCE.match(start)
        if fence is not None and start[fence.end() :].startswith("{"):
            self._mode = _Mode.STRUCTURED
            self._body = len(self._text) - len(start) + fence.end()
            return
        if fence is not None and fence.end() == len(start):
            return  # "```json\n" so far: what follows decides
        if start in _FENCE_PREFIXES:
            return
        self._mode = _Mode.PROSE

    def _message(self, *, partial: bool) -> str:
        body = self._text[self._body :]
        if not partial:
            body = body.rstrip().removesuffix("```")
        try:
            value = pydantic_core.from_json(body, allow_partial="trailing-strings")
        except ValueError:
            return ""
        message = value.get("message") if isinstance(value, dict) else None
        return message if isinstance(message, str) else ""

    def _advance(self, visible: str) -> str:
        # Only ever extend what was shown; text that no longer extends it is held back.
        if len(visible) <= len(self._shown) or not visible.startswith(self._shown):
            return ""
        new = visible[len(self._shown) :]
        self._shown = visible
        return new
