"""Final answers of a run, checked against execution records (DESIGN invariant 10).

A final answer may claim an effect only when a SUCCEEDED execution record of the
principal's tenant, of the tool it cites (by a name the run showed the model), proves
it: a `succeeded` answer whose evidence does not hold is downgraded, with the reasons.
Free text is checked too: the execution keys and business ids it names, and success
words said without any proof. Nothing the model writes is taken as proof of anything;
records of another tenant never count.
"""

from __future__ import annotations

import asyncio
import re
import unicodedata
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Self

import pydantic

from handrail.adapters import to_wire_name
from handrail.errors import ConfigurationError
from handrail.execution import ExecutionRecord, ExecutionStatus, plan_key

if TYPE_CHECKING:
    from handrail.principal import Principal
    from handrail.spec import ToolSpec
    from handrail.store.base import Store

__all__ = [
    "DEFAULT_SUCCESS_WORDS",
    "CheckedAnswer",
    "Evidence",
    "EvidenceChecker",
    "EvidenceIssue",
    "EvidenceProblem",
    "FinalAnswer",
    "FinalState",
    "ReferenceKind",
    "TextCheck",
    "TextReference",
    "tool_names_of",
]

DEFAULT_SUCCESS_WORDS = (
    "done",
    "created",
    "succeeded",
    "successful",
    "successfully",
    "completed",
    "finished",
    "submitted",
    "已完成",
    "已创建",
    "已提交",
    "已处理",
    "成功",
)
"""Words that claim an effect. Negation is not parsed: "not done" is flagged too."""

_KEY = re.compile(r"\bhk1_[0-9a-f]{64}\b", re.ASCII)
_ID = Annotated[str, pydantic.StringConstraints(min_length=1, max_length=200)]


class FinalState(StrEnum):
    """Where the user's request stands at the end of a run."""

    NEED_INFORMATION = "need_information"
    AWAITING_CONFIRMATION = "awaiting_confirmation"
    PROCESSING = "processing"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class Evidence(pydantic.BaseModel):
    """One effect a final answer cites: the tool and at least one id of its execution.

    `plan_id` is the id of a confirmed plan, as a planning envelope showed it;
    `business_id` the downstream id a tool's result named (a ticket number); `key` the
    execution's idempotency key, as the host knows it.
    """

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    tool: _ID
    key: _ID | None = None
    plan_id: _ID | None = None
    business_id: _ID | None = None

    @pydantic.model_validator(mode="after")
    def _names_an_execution(self) -> Self:
        if self.key is None and self.plan_id is None and self.business_id is None:
            msg = "evidence needs a key, a plan_id or a business_id"
            raise ValueError(msg)
        return self


class FinalAnswer(pydantic.BaseModel):
    """The schema of a run's final output; `FinalAnswer.model_json_schema()` for the model."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    state: FinalState
    message: Annotated[str, pydantic.StringConstraints(max_length=20_000)]
    command_ids: Annotated[tuple[_ID, ...], pydantic.Field(max_length=50)] = ()
    evidence: Annotated[tuple[Evidence, ...], pydantic.Field(max_length=50)] = ()


class EvidenceProblem(StrEnum):
    """Why a cited effect is not proven."""

    NO_EVIDENCE = "no_evidence"
    """`succeeded` was claimed with no evidence at all."""
    NOT_EXPOSED = "not_exposed"
    """The cited tool name is not one the run showed its model (`tool_names`)."""
    NOT_FOUND = "not_found"
    """No record of the principal's tenant has this id (another tenant's does not count)."""
    WRONG_TOOL = "wrong_tool"
    """A record has the id, but it is the execution of another tool."""
    MISMATCH = "mismatch"
    """The ids given point at different executions."""
    NOT_IN_RUN = "not_in_run"
    """The record exists but was not made by this run."""
    IN_PROGRESS = "in_progress"
    """The record is PREPARED, RUNNING or UNKNOWN: the effect is not known yet."""
    FAILED = "failed"
    """The record is FAILED_FINAL: the effect did not happen."""
    NOT_CHECKED = "not_checked"
    """Free text named more references than one check looks up."""


@dataclass(frozen=True, kw_only=True, slots=True)
class EvidenceIssue:
    """One reason an answer was downgraded; `index` is the evidence item's, or None."""

    index: int | None
    tool: str | None
    problem: EvidenceProblem
    status: ExecutionStatus | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckedAnswer:
    """An answer after the check: the state it may keep, and why it lost any.

    `answer` carries the accepted state and the model's message unchanged; `notice` is
    Handrail's own sentence for the user when the state was downgraded. `proven` lists
    the idempotency keys of the SUCCEEDED records that proved the evidence.
    """

    answer: FinalAnswer
    claimed: FinalState
    issues: tuple[EvidenceIssue, ...] = ()
    proven: tuple[str, ...] = ()
    notice: str | None = None

    @property
    def downgraded(self) -> bool:
        """True when the answer lost the state it claimed."""
        return self.answer.state is not self.claimed


class ReferenceKind(StrEnum):
    """What a reference in free text looks like."""

    KEY = "key"
    BUSINESS_ID = "business_id"


@dataclass(frozen=True, kw_only=True, slots=True)
class TextReference:
    """One execution key or business id found in free text, and what the store says."""

    text: str
    kind: ReferenceKind
    status: ExecutionStatus | None = None
    problem: EvidenceProblem | None = None

    @property
    def proven(self) -> bool:
        """True when a SUCCEEDED record of the tenant has this id."""
        return self.problem is None


@dataclass(frozen=True, kw_only=True, slots=True)
class TextCheck:
    """What free text claims, and what of it is proven.

    `unsupported_success` is True when the text uses a success word and no reference in
    it is proven. `complete` is False when the text was longer than one check scans.
    """

    references: tuple[TextReference, ...] = ()
    success_words: tuple[str, ...] = ()
    unsupported_success: bool = False
    complete: bool = True

    @property
    def unproven(self) -> tuple[TextReference, ...]:
        """The references no SUCCEEDED record proves."""
        return tuple(r for r in self.references if not r.proven)

    @property
    def ok(self) -> bool:
        """True when every reference is proven and no success is claimed without proof."""
        return self.complete and not self.unsupported_success and not self.unproven


_NOTICES = {
    FinalState.PROCESSING: (
        "The answer claimed success, but the action is not finished or its outcome is not"
        " known yet."
    ),
    FinalState.FAILED: "The answer claimed success, but the recorded action failed.",
    FinalState.NEED_INFORMATION: ("The answer claimed success, but no recorded action proves it."),
}


@dataclass(frozen=True, kw_only=True, slots=True)
class _Verdict:
    record: ExecutionRecord | None
    problem: EvidenceProblem | None


class EvidenceChecker:
    """Checks final answers and free text against the execution records of a store.

    `business_id_patterns` find business ids in free text (for example `TK-[0-9]+`);
    business ids are looked up among the tenant's `scan_limit` most recently updated
    records, so an older one is not found and its claim is downgraded (fail-closed).
    """

    def __init__(
        self,
        store: Store,
        *,
        business_id_patterns: Sequence[str | re.Pattern[str]] = (),
        success_words: Sequence[str] = DEFAULT_SUCCESS_WORDS,
        scan_limit: int = 500,
        max_references: int = 50,
        max_text_chars: int = 100_000,
    ) -> None:
        for name, value in (
            ("scan_limit", scan_limit),
            ("max_references", max_references),
            ("max_text_chars", max_text_chars),
        ):
            if isinstance(value, bool) or value < 1:
                msg = f"{name} must be a positive integer"
                raise ConfigurationError(msg)
        self._store = store
        self._patterns = tuple(re.compile(p) for p in business_id_patterns)
        words = [w for w in success_words if w]
        if not words:
            msg = "success_words needs at least one word"
            raise ConfigurationError(msg)
        self._success = re.compile(
            "|".join(
                rf"\b{re.escape(w)}\b" if w.isascii() else re.escape(w)
                for w in sorted(words, key=len, reverse=True)
            ),
            re.IGNORECASE,
        )
        self._scan_limit = scan_limit
        self._max_references = max_references
        self._max_text_chars = max_text_chars

    async def check(
        self,
        answer: FinalAnswer,
        principal: Principal,
        *,
        run_calls: Collection[str] | None = None,
        tool_names: Mapping[str, str] | None = None,
    ) -> CheckedAnswer:
        """`check_sync` off the event loop (the store is blocking)."""
        return await asyncio.to_thread(
            self.check_sync, answer, principal, run_calls=run_calls, tool_names=tool_names
        )

    def check_sync(
        self,
        answer: FinalAnswer,
        principal: Principal,
        *,
        run_calls: Collection[str] | None = None,
        tool_names: Mapping[str, str] | None = None,
    ) -> CheckedAnswer:
        """Accept a `succeeded` answer only when every evidence item is proven.

        Each item must name a SUCCEEDED record of the principal's tenant, of the cited
        tool, whose other cited ids agree; with `run_calls` (the idempotency keys of the
        executions this run made) the record must also be one of them. `tool_names`
        maps every name the run's model was shown a tool under (its registry name and
        its wire names, `tool_names_of`) to its registry name: with it, the cited tool
        is read through it, and a name outside it proves nothing (NOT_EXPOSED); without
        it, the cited tool must be the registry name itself. Otherwise the
        state is downgraded: to `processing` when a cited record is still PREPARED,
        RUNNING or UNKNOWN (the effect may yet happen: never report it failed), else to
        `failed` when a cited record is FAILED_FINAL, else to `need_information`.
        Answers in any other state claim no effect and are returned as they are.
        """
        if answer.state is not FinalState.SUCCEEDED:
            return CheckedAnswer(answer=answer, claimed=answer.state)
        lookup = _Lookup(self._store, principal.tenant_id, self._scan_limit)
        issues: list[EvidenceIssue] = []
        proven: list[str] = []
        if not answer.evidence:
            issues.append(EvidenceIssue(index=None, tool=None, problem=EvidenceProblem.NO_EVIDENCE))
        for index, item in enumerate(answer.evidence):
            verdict = lookup.evidence(item, run_calls, tool_names)
            record = verdict.record
            if verdict.problem is None and record is not None:
                proven.append(record.idempotency_key)
                continue
            issues.append(
                EvidenceIssue(
                    index=index,
                    tool=item.tool,
                    problem=verdict.problem or EvidenceProblem.NOT_FOUND,
                    status=None if record is None else record.status,
                ),
            )
        if not issues:
            return CheckedAnswer(answer=answer, claimed=answer.state, proven=tuple(proven))
        state = _downgraded(issues)
        return CheckedAnswer(
            answer=answer.model_copy(update={"state": state}),
            claimed=answer.state,
            issues=tuple(issues),
            proven=tuple(proven),
            notice=_NOTICES[state],
        )

    async def check_text(self, text: str, principal: Principal) -> TextCheck:
        """`check_text_sync` off the event loop (the store is blocking)."""
        return await asyncio.to_thread(self.check_text_sync, text, principal)

    def check_text_sync(self, text: str, principal: Principal) -> TextCheck:
        """What free text claims: the ids it names, looked up, and its success words.

        Keys and business ids are each looked up in the tenant's records; success words
        are flagged when no reference proves anything. The text is NFKC-normalised and
        stripped of invisible format characters first, so full-width or zero-width
        disguises read as what they show.
        """
        complete = len(text) <= self._max_text_chars
        plain = _normalised(text[: self._max_text_chars])
        found: dict[str, ReferenceKind] = {}
        for match in _KEY.finditer(plain):
            found.setdefault(match.group(), ReferenceKind.KEY)
        for pattern in self._patterns:
            for match in pattern.finditer(plain):
                if match.group():
                    found.setdefault(match.group(), ReferenceKind.BUSINESS_ID)
        lookup = _Lookup(self._store, principal.tenant_id, self._scan_limit)
        references: list[TextReference] = []
        for position, (ref, kind) in enumerate(found.items()):
            if position >= self._max_references:
                references.append(
                    TextReference(text=ref, kind=kind, problem=EvidenceProblem.NOT_CHECKED),
                )
                continue
            verdict = lookup.reference(ref, kind)
            references.append(
                TextReference(
                    text=ref,
                    kind=kind,
                    status=None if verdict.record is None else verdict.record.status,
                    problem=verdict.problem,
                ),
            )
        words = tuple(dict.fromkeys(m.group().casefold() for m in self._success.finditer(plain)))
        supported = any(r.proven for r in references)
        return TextCheck(
            references=tuple(references),
            success_words=words,
            unsupported_success=bool(words) and not supported,
            complete=complete,
        )


def tool_names_of(specs: Iterable[ToolSpec]) -> dict[str, str]:
    """Every name a model is shown these tools under, mapped to the registry name.

    A tool's registry name, and the wire name adapters send it as (`crm.update_email`
    goes out as `crm__update_email`); a tool that cannot go out under a wire name has
    its registry name alone. A name that would stand for two tools is left out: it
    proves nothing.
    """
    names: dict[str, set[str]] = {}
    for spec in specs:
        names.setdefault(spec.name, set()).add(spec.name)
        try:
            wire = to_wire_name(spec.name)
        except ConfigurationError:
            continue
        names.setdefault(wire, set()).add(spec.name)
    return {name: next(iter(tools)) for name, tools in names.items() if len(tools) == 1}


class _Lookup:
    """Store look-ups for one check, confined to one tenant; business ids scanned once."""

    def __init__(self, store: Store, tenant_id: str, scan_limit: int) -> None:
        self._store = store
        self._tenant = tenant_id
        self._scan_limit = scan_limit
        self._by_business_id: dict[str, list[ExecutionRecord]] | None = None

    def _get(self, key: str) -> ExecutionRecord | None:
        record = self._store.get_execution(key)
        # Another tenant's record is reported exactly as a missing one: no existence leak.
        return record if record is not None and record.tenant_id == self._tenant else None

    def _business(self, business_id: str) -> list[ExecutionRecord]:
        if self._by_business_id is None:
            index: dict[str, list[ExecutionRecord]] = {}
            for record in self._store.list_executions(
                tenant_id=self._tenant, limit=self._scan_limit
            ):
                if record.business_id is not None and record.tenant_id == self._tenant:
                    index.setdefault(record.business_id, []).append(record)
            self._by_business_id = index
        return self._by_business_id.get(business_id, [])

    def evidence(
        self,
        item: Evidence,
        run_calls: Collection[str] | None,
        tool_names: Mapping[str, str] | None,
    ) -> _Verdict:
        tool = item.tool if tool_names is None else tool_names.get(item.tool)
        if tool is None:
            return _Verdict(record=None, problem=EvidenceProblem.NOT_EXPOSED)
        if item.key is not None:
            record = self._get(item.key)
        elif item.plan_id is not None:
            key = plan_key(tenant_id=self._tenant, tool=tool, plan_id=item.plan_id)
            record = self._get(key)
        else:
            assert item.business_id is not None  # noqa: S101 - the model validator ensures it
            candidates = self._business(item.business_id)
            record = _best([r for r in candidates if r.tool == tool])
            if record is None and candidates:
                return _Verdict(record=None, problem=EvidenceProblem.WRONG_TOOL)
        if record is None:
            return _Verdict(record=None, problem=EvidenceProblem.NOT_FOUND)
        problem = _problem(record, item, tool, run_calls)
        return _Verdict(record=record, problem=problem)

    def reference(self, ref: str, kind: ReferenceKind) -> _Verdict:
        record = self._get(ref) if kind is ReferenceKind.KEY else _best(self._business(ref))
        if record is None:
            return _Verdict(record=None, problem=EvidenceProblem.NOT_FOUND)
        return _Verdict(record=record, problem=_status_problem(record.status))


def _problem(
    record: ExecutionRecord, item: Evidence, tool: str, run_calls: Collection[str] | None
) -> EvidenceProblem | None:
    if record.tool != tool:
        return EvidenceProblem.WRONG_TOOL
    if (item.plan_id is not None and record.plan_id != item.plan_id) or (
        item.business_id is not None and record.business_id != item.business_id
    ):
        return EvidenceProblem.MISMATCH
    if run_calls is not None and record.idempotency_key not in run_calls:
        return EvidenceProblem.NOT_IN_RUN
    return _status_problem(record.status)


def _status_problem(status: ExecutionStatus) -> EvidenceProblem | None:
    if status is ExecutionStatus.SUCCEEDED:
        return None
    if status is ExecutionStatus.FAILED_FINAL:
        return EvidenceProblem.FAILED
    return EvidenceProblem.IN_PROGRESS


_RANK = {
    ExecutionStatus.SUCCEEDED: 0,
    ExecutionStatus.UNKNOWN: 1,
    ExecutionStatus.RUNNING: 2,
    ExecutionStatus.PREPARED: 3,
    ExecutionStatus.FAILED_FINAL: 4,
}


def _best(records: Sequence[ExecutionRecord]) -> ExecutionRecord | None:
    """Of several records with one business id, the one that says most for the claim."""
    return min(records, key=lambda r: _RANK[r.status], default=None)


def _downgraded(issues: Sequence[EvidenceIssue]) -> FinalState:
    problems = {issue.problem for issue in issues}
    if EvidenceProblem.IN_PROGRESS in problems:
        return FinalState.PROCESSING
    if EvidenceProblem.FAILED in problems:
        return FinalState.FAILED
    return FinalState.NEED_INFORMATION


def _normalised(text: str) -> str:
    folded = unicodedata.normalize("NFKC", text)
    return "".join(ch for ch in folded if unicodedata.category(ch) != "Cf")
