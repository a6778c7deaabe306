"""DbosTaskRunner across worker processes: a worker killed with SIGKILL mid-task is
resumed by another after its last finished step, every effect once (adopted by name, or
taken over once its lease ran out); a live worker in one long step keeps its lease; two
live workers racing for a dead worker's tasks run each once; two workers on one
PostgreSQL share a queue whose concurrency limit holds.

Workers are `_dbos_worker.py` processes; everything they did is a row of the facts file
(`_dbos_host`), outside DBOS. The tests wait for those rows and for files, never for time
to pass; every process is killed in a `finally`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import pytest
from _dbos_host import WAIT_S, FileHost, release, wait_for

WORKER = Path(__file__).with_name("_dbos_worker.py")
TESTS = WORKER.parent.parent


class _Worker:
    """One worker process; its stderr goes to a file, shown when a wait fails."""

    def __init__(self, config: dict[str, Any], folder: Path) -> None:
        self.name: str = config["worker"]
        self._log_path = folder / f"stderr-{self.name}.txt"
        self._log: IO[bytes] = self._log_path.open("wb")
        path = [str(WORKER.parent), str(TESTS), os.environ.get("PYTHONPATH", "")]
        self.process = subprocess.Popen(  # noqa: S603 - our own interpreter and script
            [sys.executable, str(WORKER), json.dumps(config)],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, path))},
        )
        self._ready = folder / f"ready-{self.name}"

    def diagnosis(self) -> str:
        self._log.flush()
        tail = self._log_path.read_text(encoding="utf-8", errors="replace")[-3000:]
        return f"worker {self.name} (exit {self.process.poll()}):\n{tail}"

    def wait_ready(self) -> None:
        wait_for(
            lambda: self._ready.exists() or self.process.poll() is not None,
            f"worker {self.name} ready",
        )
        assert self._ready.exists(), self.diagnosis()

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        assert self.process.wait(timeout=WAIT_S) == -signal.SIGKILL

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=WAIT_S)
        self._log.close()


@contextmanager
def _workers(folder: Path) -> Iterator[list[_Worker]]:
    started: list[_Worker] = []
    try:
        yield started
    finally:
        for worker in started:
            worker.close()


def _start(started: list[_Worker], folder: Path, **config: Any) -> _Worker:
    worker = _Worker(config, folder)
    started.append(worker)
    worker.wait_ready()
    return worker


@pytest.mark.parametrize("takeover", ["adopt", "lease"])
def test_a_worker_killed_mid_task_is_resumed_by_another_after_its_last_finished_step(
    dbos_url: str, tmp_path: Path, takeover: str
) -> None:
    # "adopt": wb names the dead worker; "lease": no one does, wb's watcher finds the
    # task whose 2 s lease ran out and takes it over.
    facts = tmp_path / "facts.sqlite"
    host = FileHost(facts)
    steps = [
        {"name": "e1", "effect": True},
        {"name": "s2"},
        {"name": "s3", "wait": True},
        {"name": "e4", "effect": True},
    ]
    task = {"task_id": "t-kill", "steps": steps}
    config: dict[str, Any] = {"url": dbos_url, "facts": str(facts)}
    config |= {"lease": 2.0} if takeover == "lease" else {"lease": None}
    with _workers(tmp_path) as started:
        first = _start(started, tmp_path, worker="wa", submit=[task], **config)
        wait_for(lambda: ("s3", "wa") in host.runs("t-kill"), "s3 running on wa")
        first.kill()
        adopt = ["wa"] if takeover == "adopt" else []
        second = _start(started, tmp_path, worker="wb", adopt=adopt, **config)
        wait_for(lambda: ("s3", "wb") in host.runs("t-kill"), f"s3 resumed; {second.diagnosis()}")
        release(tmp_path, "t-kill", "s3")
        wait_for(lambda: host.state("t-kill") == "succeeded", f"done; {second.diagnosis()}")
    assert _takeovers(host, "t-kill") == ([("wb", "wa")] if takeover == "lease" else [])
    # e1 and s2 finished on the killed worker and never ran again; s3 had started and
    # ran again; every effect happened once.
    assert host.runs("t-kill") == [
        ("e1", "wa"),
        ("s2", "wa"),
        ("s3", "wa"),
        ("s3", "wb"),
        ("e4", "wb"),
    ]
    assert host.effects("t-kill") == ["e1", "e4"]
    # wb learns it is a recovery from its first replayed step, and says so.
    begins = [(attempt, worker) for _, attempt, worker, _ in host.events("t-kill", "begin")]
    assert begins == [(1, "wa"), (1, "wb"), (2, "wb")]
    (result,) = [json.loads(e[3]) for e in host.events("t-kill", "succeeded")]
    assert [value["step"] for value in result] == ["e1", "s2", "s3", "e4"]


def _takeovers(host: FileHost, task_id: str) -> list[tuple[str, str]]:
    """(claimant, previous holder) of every takeover of a task."""
    return [(worker, detail) for _, _, worker, detail in host.events(task_id, "takeover")]


def test_a_worker_restarted_under_its_own_id_takes_its_task_back(
    dbos_url: str, tmp_path: Path
) -> None:
    facts = tmp_path / "facts.sqlite"
    host = FileHost(facts)
    steps = [{"name": "e1", "effect": True}, {"name": "s2", "wait": True}]
    task = {"task_id": "t-again", "steps": steps}
    with _workers(tmp_path) as started:
        first = _start(
            started, tmp_path, url=dbos_url, worker="wa", facts=str(facts), submit=[task]
        )
        wait_for(lambda: len(host.runs("t-again")) == 2, "s2 running")
        first.kill()
        (tmp_path / "ready-wa").unlink()
        _start(started, tmp_path, url=dbos_url, worker="wa", facts=str(facts))
        wait_for(lambda: len(host.runs("t-again")) == 3, "s2 resumed")
        release(tmp_path, "t-again", "s2")
        wait_for(lambda: host.state("t-again") == "succeeded", "done")
    assert [name for name, _ in host.runs("t-again")] == ["e1", "s2", "s2"]
    assert host.effects("t-again") == ["e1"]


@pytest.mark.postgres
def test_two_workers_on_one_postgres_share_a_queue_whose_limit_holds(
    postgres_dbos_url: str, tmp_path: Path
) -> None:
    facts = tmp_path / "facts.sqlite"
    host = FileHost(facts)
    # At most two at once over both workers, at most one per worker: both must work.
    queue = {"name": "shared", "concurrency": 2, "worker_concurrency": 1}
    ids = [f"t-{n}" for n in range(6)]
    tasks = [
        {"task_id": i, "queue": "shared", "steps": [{"name": "s", "wait": True, "gauge": True}]}
        for i in ids
    ]
    config = {"url": postgres_dbos_url, "facts": str(facts), "queues": [queue]}
    done: list[str] = []
    with _workers(tmp_path) as started:
        _start(started, tmp_path, worker="wa", submit=tasks, **config)
        _start(started, tmp_path, worker="wb", **config)
        while len(done) < len(ids):
            expected = min(2, len(ids) - len(done))
            # Wait until the limit is reached (or all that is left runs), then free one.
            wait_for(
                lambda e=expected: len([i for i in ids if i not in done and host.runs(i)]) >= e,
                f"{expected} running",
            )
            running = [i for i in ids if i not in done and host.runs(i)]
            assert len(running) == expected
            release(tmp_path, running[0], "s")
            wait_for(lambda r=running[0]: host.state(r) == "succeeded", f"{running[0]} done")
            done.append(running[0])
    ((inside, peak),) = host.query("SELECT inside, peak FROM gauge")
    assert (inside, peak) == (0, 2)
    workers = {worker for i in ids for _, worker in host.runs(i)}
    assert workers == {"wa", "wb"}
    assert all(len(host.runs(i)) == 1 for i in ids)


# --- leases: a live worker keeps its task; racing takers run it once -------------------


def test_a_live_worker_in_one_long_step_keeps_its_lease(dbos_url: str, tmp_path: Path) -> None:
    facts = tmp_path / "facts.sqlite"
    host = FileHost(facts)
    task = {"task_id": "t-long", "steps": [{"name": "s1", "wait": True}]}
    # A 6 s lease renewed every 2 s: a loaded machine would have to stall a live worker
    # for 4 s to lose it.
    config = {"url": dbos_url, "facts": str(facts), "lease": 6.0}
    with _workers(tmp_path) as started:
        _start(started, tmp_path, worker="wa", submit=[task], **config)
        wait_for(lambda: host.runs("t-long") == [("s1", "wa")], "s1 running on wa")
        _start(started, tmp_path, worker="wb", **config)
        # Seven beats are at least 14 s (two leases) of one step; then wb looks three
        # more times at the task and must leave it.
        wait_for(lambda: len(host.events("t-long", "heartbeat")) >= 7, "two leases of s1")
        looked = len(host.events("t-long", "lease-check"))
        wait_for(lambda: len(host.events("t-long", "lease-check")) >= looked + 3, "wb looked")
        release(tmp_path, "t-long", "s1")
        wait_for(lambda: host.state("t-long") == "succeeded", "done")
    assert {worker for _, _, worker, _ in host.events("t-long", "lease-check")} == {"wb"}
    assert {worker for _, _, worker, _ in host.events("t-long", "heartbeat")} == {"wa"}
    assert _takeovers(host, "t-long") == []
    assert host.runs("t-long") == [("s1", "wa")]


def test_two_live_workers_racing_for_a_dead_workers_tasks_run_each_once(
    dbos_url: str, tmp_path: Path
) -> None:
    facts = tmp_path / "facts.sqlite"
    host = FileHost(facts)
    steps = [
        {"name": "e1", "effect": True},
        {"name": "s2", "wait": True},
        {"name": "e3", "effect": True},
    ]
    ids = [f"t-race-{n}" for n in range(3)]
    tasks = [{"task_id": i, "steps": steps} for i in ids]
    config = {"url": dbos_url, "facts": str(facts), "lease": 2.0}
    with _workers(tmp_path) as started:
        first = _start(started, tmp_path, worker="wa", submit=tasks, **config)
        wait_for(lambda: all(("s2", "wa") in host.runs(i) for i in ids), "s2 running on wa")
        first.kill()
        # Both start before either is waited for: their watchers look at the same time.
        racers = [_Worker({"worker": name, **config}, tmp_path) for name in ("wb", "wc")]
        started.extend(racers)
        for racer in racers:
            racer.wait_ready()
        for i in ids:
            wait_for(lambda i=i: len(host.runs(i)) == 3, f"{i} taken over")
            release(tmp_path, i, "s2")
            wait_for(lambda i=i: host.state(i) == "succeeded", f"{i} done")
    for i in ids:
        ((claimant, holder),) = _takeovers(host, i)
        assert (claimant in {"wb", "wc"}, holder) == (True, "wa")
        runs = host.runs(i)
        runner = runs[-1][1]  # the claimant re-enqueues; either racer may dequeue it
        assert runs == [("e1", "wa"), ("s2", "wa"), ("s2", runner), ("e3", runner)]
        assert runner in {"wb", "wc"}
        assert host.effects(i) == ["e1", "e3"]
