"""`make demo`'s service line: start `handrail serve` on the payments example, use it, stop.

Starts the server on a free port of 127.0.0.1 with `examples/service/handrail.toml`
(a confirmation keyring drawn for this run unless HANDRAIL_CONFIRMATION_KEYS is set),
makes an API key for alice of tenant acme, asks /readyz, posts one Anthropic turn
with a read and a refund, prints what came back and the console URL, then stops the
server with SIGINT and waits for it to close.

    .venv/bin/python -m examples.service.demo
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from queue import Empty, Queue

import httpx

from handrail import Keyring, Principal
from handrail.mcp.keys import ApiKeys
from handrail.server.config import load_config
from handrail.store import open_store
from handrail.writes.confirmation import KEYRING_ENV

CONFIG = Path(__file__).with_name("handrail.toml")
STARTUP_SECONDS = 120.0
_ANNOUNCED = re.compile(r"serving the API on (\S+)/v1")
ALICE = Principal(
    user_id="alice",
    tenant_id="acme",
    permissions=frozenset({"order.read", "order.refund"}),
)
TURN = {
    "role": "assistant",
    "content": [
        {
            "type": "tool_use",
            "id": "toolu_read",
            "name": "payments__get_order",
            "input": {"order_id": "ORD-1001"},
        },
        {
            "type": "tool_use",
            "id": "toolu_refund",
            "name": "payments__refund_order",
            "input": {"order_id": "ORD-1001", "amount_cents": 5000, "reason": "damaged"},
        },
    ],
}


def _lines(stream: object, into: Queue[str]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        into.put(line)


def main() -> int:
    """Run the service once; 0 when it answered and stopped cleanly."""
    env = dict(os.environ)
    env.setdefault(KEYRING_ENV, Keyring.new_key_text("demo"))
    command = [str(Path(sys.executable).with_name("handrail")), "serve", "--config", str(CONFIG)]
    server = subprocess.Popen(  # noqa: S603 - our own CLI, an argument list
        [*command, "--port", "0"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: Queue[str] = Queue()
    threading.Thread(target=_lines, args=(server.stderr, lines), daemon=True).start()
    try:
        url = _announced(lines)
        key = _key()
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}) as client:
            print(f"readyz: {client.get('/readyz').json()['status']}")
            answer = client.post("/v1/calls/anthropic", json=TURN).json()
            for envelope in answer["envelopes"]:
                print(f"{envelope['tool']}: {envelope['status']} {envelope['summary']}")
        print(f"console: {url}/ (API docs: {url}/docs)")
    finally:
        server.send_signal(signal.SIGINT)
        code = server.wait(timeout=60)
    print(f"server stopped (exit {code})")
    return code


def _announced(lines: Queue[str]) -> str:
    while True:
        try:
            line = lines.get(timeout=STARTUP_SECONDS)
        except Empty:
            raise SystemExit("the server did not announce its URL") from None
        sys.stderr.write(line)
        if (found := _announced_url(line)) is not None:
            return found


def _announced_url(line: str) -> str | None:
    match = _ANNOUNCED.search(line)
    return None if match is None else match.group(1)


def _key() -> str:
    store = open_store(load_config(CONFIG).handrail.store)
    try:
        return ApiKeys(store).create(ALICE, label="service demo").key
    finally:
        store.close()


if __name__ == "__main__":
    raise SystemExit(main())
