"""The Shaper: a tool's raw result in, the bounded envelope the model reads out.

Order: known secret values scrubbed → projection (the tool's field allowlist) →
redaction → budget (truncate, or paginate a list) → envelope with every cut reported.
The full result, secrets scrubbed but otherwise untouched, is kept for people behind
the envelope's `ref` when a raw store is configured. Large text (`TextStream`) is read
incrementally into a head/failures/tail excerpt and never held whole.
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Final

from handrail.envelope import Envelope, Omission, Status, jsonable, result_envelope
from handrail.errors import AccessRefusedError, ConfigurationError, ErrorCode, Refusal
from handrail.shaping.budget import (
    Budget,
    HeuristicTokens,
    TokenEstimator,
    fit,
    json_size,
    json_text,
)
from handrail.shaping.excerpt import Excerpt, ExcerptBuilder, ExcerptLimits
from handrail.shaping.pages import Page
from handrail.shaping.policy import Overflow, RawKeeping
from handrail.shaping.stream import StreamKind, TextStream

if TYPE_CHECKING:
    from handrail.credentials import SecretLedger
    from handrail.principal import Principal
    from handrail.record.raw_results import RawResults
    from handrail.shaping.pages import Cursors
    from handrail.shaping.redact import Redactor
    from handrail.spec import ToolSpec

__all__ = ["CONTINUATION_TOOL", "Shaper"]

CONTINUATION_TOOL = "result_page"
"""The name of the continuation tool that serves further pages of a result."""

_JSON = "application/json"
_TEXT = "text/plain"
# Room kept for the JSON around a stream excerpt (keys, counts, failure lists).
_MIN_EXCERPT = 256
_MAX_RECOMPOSE = 6
_MAX_FAILURES = 20
_ASK_FOR_LESS = " Ask for less, with narrower filters or a smaller range, to see the rest."
_KEPT_FOR_PEOPLE = " The whole output is kept for people under the ref."
_SHOWN_OMISSIONS = 3
# Built once: a union written in `isinstance` is built again on every call.
_SIZED: Final = list | dict | str
# Looked up once: reading an enum member off its class costs a lookup every time.
_OK: Final = Status.OK
_TRUNCATED: Final = Status.TRUNCATED


class Shaper:
    """Turns results into envelopes within budgets; one per gate, shared by its calls.

    `max_chars` / `max_tokens` are the default budget of one result; a tool's
    ResultPolicy and the turn's share can only narrow it. `raw` keeps full results
    for people (and is required for pagination, together with `cursors`).
    """

    def __init__(
        self,
        *,
        redactor: Redactor,
        estimator: TokenEstimator | None = None,
        raw: RawResults | None = None,
        cursors: Cursors | None = None,
        max_chars: int = 16_000,
        max_tokens: int | None = None,
        continuation: str = CONTINUATION_TOOL,
    ) -> None:
        self._redactor = redactor
        self._estimator = estimator or HeuristicTokens()
        self._raw = raw
        self._cursors = cursors
        self._budget = Budget(max_chars=max_chars, max_tokens=max_tokens)
        self._continuation = continuation

    @property
    def budget(self) -> Budget:
        """The default budget of one result."""
        return self._budget

    @property
    def continuation(self) -> str:
        """The name of the continuation tool that serves further pages."""
        return self._continuation

    @property
    def paginates(self) -> bool:
        """Whether list results can be paged (a raw store and cursors are configured)."""
        return self._raw is not None and self._cursors is not None

    def redact_text(self, text: str) -> str:
        """`text` with the default redaction policy applied (for audit details)."""
        return self._redactor.text(text).text

    def redact_value(self, value: object) -> Any:  # noqa: ANN401 - JSON
        """A JSON value with the default redaction policy applied."""
        return self._redactor.value(value).value

    def budget_for(self, spec: ToolSpec, share: Budget | None = None) -> Budget:
        """The budget of one result of `spec`: the default, narrowed by the tool and turn."""
        policy = spec.results
        budget = self._budget.narrowed(policy.max_chars, policy.max_tokens)
        if share is not None:
            budget = budget.narrowed(share.max_chars, share.max_tokens)
        return budget

    async def shape(
        self,
        *,
        call_id: str,
        spec: ToolSpec,
        principal: Principal,
        result: object,
        share: Budget | None = None,
        ledger: SecretLedger | None = None,
    ) -> Envelope:
        """The envelope of a successful result of `spec`.

        Raises ValueError for a result that cannot be JSON (see `envelope.jsonable`).
        """
        if isinstance(result, Page):
            return self.page_envelope(call_id, spec.name, result)
        policy = spec.results
        budget = (
            self._budget
            if share is None and policy.max_chars is None and policy.max_tokens is None
            else self.budget_for(spec, share)
        )
        if isinstance(result, TextStream):
            return await self._shape_stream(
                call_id, spec, principal, result, budget=budget, ledger=ledger
            )
        data, encoded = jsonable(result)
        if ledger is not None and len(ledger):
            data = ledger.scrub_value(data)
            encoded = json_text(data).encode()
        projection = policy.projection
        shown, omissions = (data, ()) if projection is None else projection.apply(data)
        projected = projection is not None and shown != data
        # `data` is this call's own copy (see `jsonable`): unchanged, it is shown as is.
        shown, found = self._redactor.apply(shown, policy.redaction, share=True)
        counts = _counts(found) if found else {}
        if projected or counts:
            fits = budget.allows(json_text(shown), self._estimator)
        elif budget.max_tokens is None and len(encoded) <= budget.max_chars:
            # Unchanged data is measured by the text already encoded; UTF-8 has at
            # least one byte per character, so its length bounds the text's.
            fits = True
        else:
            fits = budget.allows(encoded.decode(), self._estimator)
        if (
            not fits
            and policy.overflow is Overflow.PAGINATE
            and isinstance(shown, list)
            and self.paginates
        ):
            ref = await self._keep(
                principal, spec, call_id, body=encoded, media_type=_JSON, size=len(encoded)
            )
            assert ref is not None  # noqa: S101 - paging implies a raw store
            page = self._page(spec, principal, ref=ref, data=data, offset=0, budget=budget)
            return self.page_envelope(call_id, spec.name, page)
        fitted, cuts = (shown, ()) if fits else fit(shown, budget, self._estimator)
        omissions = (*omissions, *cuts)
        ref = None
        keep = policy.keep_raw
        # ALWAYS, or WHEN_SHAPED when shaped (an enum member costs a lookup: one at most).
        if (omissions or counts or projected or keep is RawKeeping.ALWAYS) and (
            keep is not RawKeeping.NEVER
        ):
            ref = await self._keep(
                principal, spec, call_id, body=encoded, media_type=_JSON, size=len(encoded)
            )
        return self._envelope(
            call_id,
            spec,
            fitted,
            total=len(data) if isinstance(data, list) else None,
            omissions=omissions,
            counts=counts,
            ref=ref,
        )

    async def next_page(
        self,
        cursor: object,
        principal: Principal,
        lookup: Callable[[str], ToolSpec | None],
    ) -> Page:
        """The page a cursor points at, read from the stored result, never the tool.

        `lookup` finds the spec of the cursor's tool for this principal (the registry's
        lookup), so a tool the principal may no longer use yields no more pages. Raises
        an INVALID_ARGUMENTS Refusal for a cursor that is not valid for this principal,
        and NOT_FOUND when its record or its tool is gone.
        """
        if self._raw is None or self._cursors is None:
            raise ConfigurationError("pagination needs a raw store and cursors")
        claims = self._cursors.open(cursor, principal)
        spec = lookup(claims.tool)
        try:
            record = await self._raw.aread(claims.ref, principal)
        except AccessRefusedError:
            record = None
        data = json.loads(record.body) if record and record.media_type == _JSON else None
        if (
            spec is None
            or record is None
            or record.tool != claims.tool
            or not isinstance(data, list)
        ):
            raise Refusal(
                ErrorCode.NOT_FOUND,
                "That result is no longer available; repeat the original call.",
                stage="result",
            )
        return self._page(
            spec,
            principal,
            ref=claims.ref,
            data=data,
            offset=claims.offset,
            budget=self.budget_for(spec),
        )

    def page_envelope(self, call_id: str, tool: str, page: Page) -> Envelope:
        """The envelope of one page, answering call `call_id` of `tool`.

        It is truncated while more pages follow; its data block keeps the label and
        trust level of the tool whose result it is a page of.
        """
        shown = len(page.items)
        omissions: tuple[Omission, ...] = page.omitted
        if page.cursor is not None or page.offset:
            omissions = (
                Omission(path="$", unit="items", kept=shown, total=page.total),
                *omissions,
            )
        first, last = page.offset + 1, page.offset + shown
        summary = f"{page.tool} returned {page.total} item(s); items {first}-{last} are shown."
        if page.cursor is not None:
            summary += f" Call {self._continuation} with this cursor for the next page."
        if page.redacted:
            summary += _redaction_note(page.redacted)
        more = page.cursor is not None
        return Envelope(
            call_id=call_id,
            tool=tool,
            status=Status.TRUNCATED if more else Status.OK,
            summary=summary,
            data=page.items,
            truncated=more,
            cursor=page.cursor,
            ref=page.ref,
            trust=page.trust,
            source=page.source,
            omitted=omissions,
            redacted=page.redacted or {},
        )

    # --- internals ------------------------------------------------------------------------

    def _page(
        self,
        spec: ToolSpec,
        principal: Principal,
        *,
        ref: str,
        data: list[Any],
        offset: int,
        budget: Budget,
    ) -> Page:
        """Items from `offset` on, projected and redacted, as many as fit `budget`.

        Omission paths are relative to the page (`$[0]` is its first item).
        """
        assert self._cursors is not None  # noqa: S101 - checked by the callers
        policy = spec.results
        kept: list[Any] = []
        omissions: list[Omission] = []
        counts: Counter[str] = Counter()
        chars, tokens = 2, 1
        for index in range(offset, len(data)):
            item, cuts = (
                (data[index], ())
                if policy.projection is None
                else policy.projection.apply_item(data[index])
            )
            redacted = self._redactor.value(item, policy.redaction)
            text = json_text(redacted.value)
            size, cost = len(text) + 1, self._estimator.count(text)
            fits = chars + size <= budget.max_chars and (
                budget.max_tokens is None or tokens + cost <= budget.max_tokens
            )
            if not fits and kept:
                break
            value = redacted.value
            if not fits:
                # A single item over the whole budget is cut rather than never shown.
                room = Budget(max_chars=max(1, budget.max_chars - 2), max_tokens=budget.max_tokens)
                value, more = fit(value, room, self._estimator)
                cuts = (*cuts, *more)
            here = f"$[{len(kept)}]"
            omissions.extend(replace(o, path=here + o.path[1:]) for o in cuts)
            kept.append(value)
            counts.update(_counts(redacted.counts))
            chars, tokens = chars + size, tokens + cost
        following = offset + len(kept)
        cursor = (
            self._cursors.issue(ref=ref, offset=following, principal=principal, tool=spec.name)
            if following < len(data)
            else None
        )
        return Page(
            tool=spec.name,
            ref=ref,
            items=kept,
            offset=offset,
            total=len(data),
            cursor=cursor,
            omitted=tuple(omissions),
            redacted=dict(counts) or None,
            trust=policy.trust,
            source=policy.source or f"tool:{spec.name}",
        )

    async def _shape_stream(
        self,
        call_id: str,
        spec: ToolSpec,
        principal: Principal,
        stream: TextStream,
        *,
        budget: Budget,
        ledger: SecretLedger | None,
    ) -> Envelope:
        keeping = self._raw is not None and spec.results.keep_raw is not RawKeeping.NEVER
        spool = _Spool(self._raw.max_bytes if self._raw is not None and keeping else 0)
        builder = ExcerptBuilder(
            ExcerptLimits(max_chars=budget.max_chars), failures=stream.kind is StreamKind.LOG
        )
        async with contextlib.aclosing(stream.chunks()) as chunks:
            async for chunk in chunks:
                if keeping:
                    spool.write(chunk.encode("utf-8", errors="replace"))
                builder.feed(chunk)
        # The text gets the room the other fields leave, less what escaping and
        # redaction may add; composed again smaller while the whole does not fit.
        room = budget.max_chars
        for _ in range(_MAX_RECOMPOSE):
            excerpt = builder.recompose(room)
            data = _stream_data(excerpt, stream.kind)
            if ledger is not None and len(ledger):
                data = ledger.scrub_value(data)
            redacted = self._redactor.value(data, spec.results.redaction)
            size = json_size(redacted.value)
            if budget.allows(json_text(redacted.value), self._estimator) or room <= _MIN_EXCERPT:
                break
            over = size - budget.max_chars
            room = max(_MIN_EXCERPT, room - over - room // 10 if over > 0 else room * 3 // 4)
        counts = _counts(redacted.counts)
        omissions: tuple[Omission, ...] = ()
        if excerpt.truncated:
            omissions = (
                Omission(
                    path="$.text",
                    unit="lines",
                    kept=excerpt.kept_lines,
                    total=excerpt.total_lines,
                ),
            )
        fitted, cuts = fit(redacted.value, budget, self._estimator)
        omissions = (*omissions, *cuts)
        ref = None
        if keeping and (omissions or counts or spec.results.keep_raw is RawKeeping.ALWAYS):
            body = spool.value()
            if ledger is not None and len(ledger):
                body = ledger.scrub_bytes(body)
            ref = await self._keep(
                principal,
                spec,
                call_id,
                body=body,
                media_type=stream.media_type,
                size=spool.size,
                complete=not spool.cut,
            )
        return self._envelope(
            call_id,
            spec,
            fitted,
            total=None,
            omissions=omissions,
            counts=counts,
            ref=ref,
            hint=_KEPT_FOR_PEOPLE if ref is not None else "",
        )

    async def _keep(
        self,
        principal: Principal,
        spec: ToolSpec,
        call_id: str,
        *,
        body: bytes,
        media_type: str,
        size: int,
        complete: bool = True,
    ) -> str | None:
        if self._raw is None:
            return None
        return await self._raw.akeep(
            principal=principal,
            tool=spec.name,
            call_id=call_id,
            body=body,
            media_type=media_type,
            size=size,
            complete=complete,
        )

    def _envelope(
        self,
        call_id: str,
        spec: ToolSpec,
        data: Any,  # noqa: ANN401 - JSON
        *,
        total: int | None,
        omissions: tuple[Omission, ...],
        counts: dict[str, int],
        ref: str | None,
        hint: str = _ASK_FOR_LESS,
    ) -> Envelope:
        name = spec.name
        truncated = bool(omissions)
        if not truncated and (data is None or (isinstance(data, _SIZED) and not data)):
            status, summary = Status.EMPTY, f"{name} found nothing; this is a valid answer."
        else:
            status = _TRUNCATED if truncated else _OK
            summary = (
                f"{name} returned {total} item(s)."
                if total is not None
                else f"{name} returned a result."
            )
            if truncated:
                summary += " " + _cut_note(omissions, hint)
        if counts:
            summary += _redaction_note(counts)
        results = spec.results
        return result_envelope(
            call_id,
            name,
            status,
            summary,
            data,
            spec.schema_version,
            results.trust,
            results.source,
            omissions,
            counts,
            ref,
        )


def _stream_data(excerpt: Excerpt, kind: StreamKind) -> dict[str, Any]:
    """What the model gets of a stream: the excerpt, and for a log more.

    A log adds its failure lines (also those the excerpt's text had no room for), its
    failing tests and its exit code.
    """
    data: dict[str, Any] = {
        "text": excerpt.text,
        "lines": excerpt.total_lines,
        "chars": excerpt.total_chars,
    }
    if kind is StreamKind.LOG:
        data["failures"] = list(excerpt.failures[:_MAX_FAILURES])
        data["failed_tests"] = list(excerpt.failed_tests[:_MAX_FAILURES])
        data["exit_code"] = excerpt.exit_code
    return data


class _Spool:
    """The first `limit` bytes of a stream, for its raw record; counts the rest."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._parts: list[bytes] = []
        self._kept = 0
        self.size = 0

    @property
    def cut(self) -> bool:
        return self.size > self._kept

    def write(self, chunk: bytes) -> None:
        self.size += len(chunk)
        room = self._limit - self._kept
        if room > 0:
            part = chunk[:room]
            self._parts.append(part)
            self._kept += len(part)

    def value(self) -> bytes:
        return b"".join(self._parts)


def _counts(counts: Mapping[Any, int]) -> dict[str, int]:
    return {str(kind): n for kind, n in counts.items() if n}


def _cut_note(omissions: tuple[Omission, ...], hint: str) -> str:
    parts = [_describe(o) for o in omissions[:_SHOWN_OMISSIONS]]
    more = len(omissions) - _SHOWN_OMISSIONS
    tail = f"; and {more} more cut(s)" if more > 0 else ""
    return f"Only part is shown ({'; '.join(parts)}{tail}).{hint}"


def _describe(omission: Omission) -> str:
    if omission.unit == "fields":
        return f"{omission.path}: {omission.kept} of {omission.total} fields"
    return f"{omission.path}: first {omission.kept} of {omission.total} {omission.unit}"


def _redaction_note(counts: Mapping[str, int]) -> str:
    listed = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items()))
    return f" Sensitive values were redacted ({listed})."
