"""Running a suite of scenarios through the real agent loop, gate, writes and store.

Each scenario gets a world of its own (`_world`): a fresh store, the shop downstream,
a simulated clock. Its task (and follow-ups) run through `AgentLoop` with the scripted
model playing its reference cassette, or with the model a factory gives (an
OpenAI-compatible endpoint). Plans are answered as the scenario's person decides: a
confirmation through `Writes` (the token a person would use), or a no (`cancel`,
which rejects the plan). Writes left UNKNOWN are reconciled by a `Reconciler` after the
scenario's delay. Then every metric of `report.METRICS` (but BFCL's `accuracy`) is
scored from what the world kept (`_scoring`), and the scenario's checks decide whether
it passed. Totals are sums of counts and percentiles recomputed over every sample.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from handrail.errors import ConfigurationError, HandrailError
from handrail.eval._observed import Declined, Observation, RunUse
from handrail.eval._scenario import Decision, Scenario
from handrail.eval._scoring import Scored, score, totals
from handrail.eval._world import World
from handrail.eval.report import EvalReport
from handrail.execution import ExecutionRecord, ExecutionStatus
from handrail.loop import RunOutcome, RunStatus
from handrail.loop.agent import read_run
from handrail.loop.models import SCRIPTED_MODEL, ScriptedModelClient
from handrail.testing import ScriptExhaustedError

if TYPE_CHECKING:
    from handrail.loop.models import ModelClient
    from handrail.telemetry import Telemetry

__all__ = ["REFERENCE_MODEL", "ModelFactory", "play", "run_scenarios", "run_suite"]

ModelFactory = Callable[[str], "ModelClient"]
"""Given a scenario's name, the model client to drive it (None in `run_suite`: each
scenario's own scripted model, clearly named as such)."""

REFERENCE_MODEL = f"{SCRIPTED_MODEL} (reference cassettes, not a real model)"
"""The model a report names when the scripted model played the reference cassettes."""

DECLINE_REASON = "No. I did not ask for that; do not do it."
"""What the person says when declining a plan."""

_RECONCILE_PASSES = 3
_MAX_PERSON_ANSWERS = 20


async def run_suite(
    suite: str = "builtin",
    *,
    model: ModelFactory | None = None,
    model_name: str | None = None,
    only: tuple[str, ...] = (),
    sqlite_dir: Path | None = None,
    telemetry: Telemetry | None = None,
    now: Callable[[], datetime] | None = None,
) -> EvalReport:
    """Run the scenarios of `suite` (those named in `only`, or all) and report them.

    `model` makes the client of each scenario (for a real model: the clock then runs
    with real time too); without it the scripted model plays each scenario's reference
    cassette. A client with an `aclose` method is closed after its scenario.
    `sqlite_dir` keeps each scenario's store in a SQLite file there instead of memory;
    `telemetry` goes to the gate, the writes and the loop. ConfigurationError for an
    unknown suite or scenario name.
    """
    if suite != "builtin":
        raise ConfigurationError(f"there is no suite {suite!r}; the one suite is 'builtin'")
    from handrail.eval.suite import builtin_suite  # noqa: PLC0415 - the scenarios load on use

    return await run_scenarios(
        builtin_suite(),
        suite=suite,
        model=model,
        model_name=model_name,
        only=only,
        sqlite_dir=sqlite_dir,
        telemetry=telemetry,
        now=now,
    )


async def run_scenarios(
    scenarios: Sequence[Scenario],
    *,
    suite: str = "custom",
    model: ModelFactory | None = None,
    model_name: str | None = None,
    only: tuple[str, ...] = (),
    sqlite_dir: Path | None = None,
    telemetry: Telemetry | None = None,
    now: Callable[[], datetime] | None = None,
) -> EvalReport:
    """Run the given scenarios and report them, as `run_suite` does for the built-in ones."""
    clock = now or (lambda: datetime.now(UTC))
    chosen = _chosen(scenarios, only)
    started = clock()
    scored: list[Scored] = []
    names: list[str] = []
    for scenario in chosen:
        client = _client(scenario, model)
        names.append(client.name)
        try:
            observation = await play(
                scenario,
                client,
                real_time=model is not None,
                sqlite=None if sqlite_dir is None else sqlite_dir / f"{scenario.name}.db",
                telemetry=telemetry,
            )
        finally:
            close = getattr(client, "aclose", None)
            if model is not None and close is not None:
                await close()
        scored.append(score(observation))
    return EvalReport(
        suite=suite,
        model=model_name or _model_name(model, names),
        started_at=started,
        finished_at=clock(),
        scenarios=tuple(s.result for s in scored),
        totals=totals(scored),
    )


def _chosen(scenarios: Sequence[Scenario], only: tuple[str, ...]) -> list[Scenario]:
    by_name = {s.name: s for s in scenarios}
    if len(by_name) != len(scenarios):
        raise ConfigurationError("two scenarios share a name")
    unknown = [name for name in only if name not in by_name]
    if unknown:
        known = ", ".join(sorted(by_name))
        raise ConfigurationError(f"no scenario named {', '.join(unknown)} (known: {known})")
    return [s for s in scenarios if not only or s.name in only]


def _client(scenario: Scenario, model: ModelFactory | None) -> ModelClient:
    if model is None:
        return ScriptedModelClient(scenario.cassette)
    return model(scenario.name)


def _model_name(model: ModelFactory | None, names: Sequence[str]) -> str:
    if model is None:
        return REFERENCE_MODEL
    distinct = sorted(set(names))
    return ", ".join(distinct) if distinct else "no scenario ran"


# --- one scenario ------------------------------------------------------------------------------


async def play(
    scenario: Scenario,
    model: ModelClient,
    *,
    real_time: bool = False,
    sqlite: Path | None = None,
    telemetry: Telemetry | None = None,
) -> Observation:
    """Run one scenario in a fresh world and gather what it left behind.

    `real_time`: the clock runs with real time too (a real model); `sqlite`: the file
    of the scenario's store (replaced if it exists), else the store is in memory.
    """
    world = World.open(scenario, model, real_time=real_time, sqlite=sqlite, telemetry=telemetry)
    try:
        return await _play(world)
    finally:
        world.close()


async def _play(world: World) -> Observation:
    scenario = world.scenario
    outcomes: list[RunOutcome] = []
    declined: list[Declined] = []
    problems: list[str] = []
    person = iter(scenario.person)
    conversation = f"conversation-{scenario.name}"
    try:
        for task in (scenario.task, *scenario.follow_ups):
            outcome = await world.loop.run(task, scenario.principal, conversation_id=conversation)
            outcome = await _answer_plans(world, outcome, person, declined)
            outcomes.append(outcome)
    except (HandrailError, ScriptExhaustedError) as exc:
        problems.append(f"the scenario stopped: {type(exc).__name__}: {exc}")
    declined = [_with_state(world, d) for d in declined]
    at_end = tuple(world.store.list_executions(tenant_id=scenario.principal.tenant_id, limit=500))
    await _reconcile(world, at_end)
    after = tuple(world.store.list_executions(tenant_id=scenario.principal.tenant_id, limit=500))
    return Observation(
        scenario=scenario,
        specs={spec.name: spec for spec in world.registry.specs()},
        calls=(*world.watcher.calls, *world.host_calls),
        requests=tuple(world.watcher.requests),
        replies=tuple(world.model.replies),
        runs=tuple(_use(world, outcome) for outcome in outcomes),
        audit=tuple(world.audit.events),
        records_at_end=at_end,
        records_after=after,
        declined=tuple(declined),
        shop=world.shop,
        problems=tuple(problems),
    )


async def _answer_plans(
    world: World,
    outcome: RunOutcome,
    person: Iterator[Decision],
    declined: list[Declined],
) -> RunOutcome:
    """Answer each plan the run waits for, as the person decides, until the run stops."""
    scenario, principal = world.scenario, world.scenario.principal
    answers = 0
    while outcome.status is RunStatus.SUSPENDED and outcome.plan_ids:
        answers += 1
        if answers > _MAX_PERSON_ANSWERS:
            break
        plan_id = outcome.plan_ids[0]
        decision = next(person, Decision.DECLINE)
        if decision is Decision.DECLINE:
            # The person's no ends the run: every plan it waits for is declined with it.
            for waiting in outcome.plan_ids:
                record = await world.writes.get_plan(waiting, principal)
                declined.append(
                    Declined(plan_id=waiting, tool=record.plan.tool, after=len(world.watcher.calls))
                )
            return await world.loop.cancel(outcome.run_id, principal, reason=DECLINE_REASON)
        token = await world.writes.issue_token(plan_id, principal)
        await world.writes.confirm(plan_id, token.value, principal)
        if scenario.after_confirm is not None:
            await scenario.after_confirm(world, plan_id)
        world.watcher.resuming = True
        try:
            outcome = await world.loop.resume(
                outcome.run_id, principal, plan_id=plan_id, token=None
            )
        finally:
            world.watcher.resuming = False
        if scenario.after_resume is not None:
            await scenario.after_resume(world, plan_id)
    return outcome


async def _reconcile(world: World, at_end: Sequence[ExecutionRecord]) -> None:
    """Settle the writes left UNKNOWN: wait the scenario's delay, then a pass, up to three."""
    tenant = world.scenario.principal.tenant_id
    if not any(r.status is ExecutionStatus.UNKNOWN for r in at_end):
        return
    for _ in range(_RECONCILE_PASSES):
        world.clock.advance(world.scenario.reconcile_after)
        report = await world.reconciler.run_once(tenant_id=tenant)
        if not report.still_unknown and not report.retried:
            return


def _with_state(world: World, declined: Declined) -> Declined:
    plan = world.store.get_plan(declined.plan_id)
    return replace(declined, state=None if plan is None else plan.state)


def _use(world: World, outcome: RunOutcome) -> RunUse:
    record = world.store.get_run(outcome.run_id)
    used = 0.0
    if record is not None:
        used = float(read_run(record).budget.get("elapsed_seconds", 0.0))
    return RunUse(
        outcome=outcome,
        used_seconds=used,
        deadline_seconds=world.scenario.budget.deadline_seconds,
    )
