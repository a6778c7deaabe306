"""A finished run's answer in one shape, whether the model answered in JSON or in text.

Owns how the loop asks for a final answer (`LOOP_INSTRUCTIONS`), reading a final
reply (a JSON `FinalAnswer`, bare or fenced, else free text), `RunAnswer` (what a host
shows the user: the message, the state it may keep, the evidence check's verdict and
notice, the proven ids) and the stored JSON of a checked answer. It never checks
evidence itself (`answers` does) and never stores anything.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pydantic

from handrail.loop.answers import CheckedAnswer, FinalAnswer, FinalState, TextCheck

__all__ = ["LOOP_INSTRUCTIONS", "RunAnswer", "checked_json", "parse_final_answer"]

LOOP_INSTRUCTIONS = (
    "You act through the tools you are given. A tool call is a proposal: the "
    "application checks, runs or refuses it and shows you the result. A change to data "
    "usually becomes a plan that a person must confirm in the application; then say "
    "what will happen, never that it happened. When you are finished, reply without "
    "tool calls with one JSON object: "
    '{"state": "need_information" | "awaiting_confirmation" | "processing" | '
    '"succeeded" | "failed", "message": "<text for the user>", "command_ids": [], '
    '"evidence": [{"tool": "<tool name>", "plan_id": "<id>" or "business_id": "<id>"}]}. '
    'Use "succeeded" only for effects a tool result showed as done, each cited in evidence.'
)
"""How the loop asks for final answers; appended to MODEL_INSTRUCTIONS by default."""

_FENCE = re.compile(r"\A```(?:json)?\s*(?P<body>.*?)\s*```\Z", re.DOTALL)

_UNSUPPORTED = "The answer claims success, but no recorded action proves it."
_UNPROVEN = "The answer names ids that no recorded action of this account proves."
_INCOMPLETE = "The answer was too long to check in full."


@dataclass(frozen=True, kw_only=True, slots=True)
class RunAnswer:
    """What a finished run answers, in the same shape for JSON and free-text answers.

    `message` is the text to show the user (the model's words: a JSON answer's
    `message`, or the free text). `structured` is True for a JSON answer. `state` is
    the state a JSON answer may keep after the evidence check, and `claimed` the one
    it claimed (both None for free text, which states nothing). `verified` is the
    check's verdict: nothing the answer claims is left unproven. When it is False,
    `notice` is Handrail's own sentence for the user, shown beside the message.
    `proven` holds what the check found records for: the idempotency keys behind a
    JSON answer's evidence, or the keys and business ids free text named.
    """

    message: str
    structured: bool
    state: FinalState | None
    claimed: FinalState | None
    verified: bool
    notice: str | None
    proven: tuple[str, ...]

    @classmethod
    def of_answer(cls, checked: CheckedAnswer) -> RunAnswer:
        """The shape of a checked JSON answer."""
        return cls(
            message=checked.answer.message,
            structured=True,
            state=checked.answer.state,
            claimed=checked.claimed,
            verified=not checked.downgraded,
            notice=checked.notice,
            proven=checked.proven,
        )

    @classmethod
    def of_text(cls, text: str, check: TextCheck) -> RunAnswer:
        """The shape of a checked free-text answer."""
        notice = None
        if not check.complete:
            notice = _INCOMPLETE
        elif check.unsupported_success:
            notice = _UNSUPPORTED
        elif check.unproven:
            notice = _UNPROVEN
        return cls(
            message=text,
            structured=False,
            state=None,
            claimed=None,
            verified=check.ok,
            notice=notice,
            proven=tuple(r.text for r in check.references if r.proven),
        )


def parse_final_answer(text: str) -> FinalAnswer | None:
    """A structured answer, from JSON text or a fenced JSON block; None for free text."""
    body = text.strip()
    fenced = _FENCE.fullmatch(body)
    if fenced is not None:
        body = fenced["body"]
    if not body.startswith("{"):
        return None
    try:
        return FinalAnswer.model_validate_json(body)
    except pydantic.ValidationError:
        return None


def checked_json(checked: CheckedAnswer) -> dict[str, Any]:
    """A checked answer as the JSON a run's end keeps."""
    answer = checked.answer.model_dump(mode="json")
    return {
        **answer,
        "claimed": checked.claimed.value,
        "notice": checked.notice,
        "proven": list(checked.proven),
        "issues": [
            {
                "index": issue.index,
                "tool": issue.tool,
                "problem": issue.problem.value,
                "status": None if issue.status is None else issue.status.value,
            }
            for issue in checked.issues
        ],
    }
