"""A DBOS task worker process for the cross-process tests: `python _dbos_worker.py '<json>'`.

The JSON names DBOS's system database (`url`), this worker's id (`worker`), the workers
it adopts (`adopt`), its task lease in seconds (`lease`, null: no takeover), the facts
file (`facts`), its queues (`queues`: name, concurrency, worker_concurrency) and the
tasks it submits once started (`submit`: arguments of `_dbos_setup.submission`). It
starts a `DbosTaskRunner` with the scripted body, submits, touches
`<facts dir>/ready-<worker>` and then serves until it is killed.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from _dbos_host import FileHost, script_body
from _dbos_setup import submission

from handrail.tasks.dbos import DbosTaskRunner, TaskQueue

SERVE_LIMIT_S = 600.0
"""A worker gives up after this long, should its parent fail to kill it."""


async def _serve(config: dict[str, Any]) -> None:
    facts = Path(config["facts"])
    host = FileHost(facts, worker=config["worker"])
    queues = [TaskQueue(**queue) for queue in config.get("queues", [{"name": "default"}])]
    runner = DbosTaskRunner(
        host,
        system_database_url=config["url"],
        worker_id=config["worker"],
        queues=queues,
        adopt=config.get("adopt", ()),
        lease_seconds=config.get("lease", 30.0),
    )
    runner.register("script", script_body(host))
    await runner.start()
    try:
        for task in config.get("submit", []):
            made = submission(task["task_id"], task["steps"], queue=task.get("queue", "default"))
            host.add(made)
            await runner.submit(made)
        (facts.parent / f"ready-{config['worker']}").touch()
        await asyncio.sleep(SERVE_LIMIT_S)
    finally:
        await runner.stop()


if __name__ == "__main__":
    asyncio.run(_serve(json.loads(sys.argv[1])))
