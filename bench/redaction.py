"""Throughput of Redactor.text over a large mixed log, against a one-regex baseline.

The log is generated from a seed, so every run measures the same bytes: ordinary log
lines, stack traces, JSON lines, SQL and access-log URLs (full of timestamps, ids,
durations, paths, git SHAs, UUIDs and version strings), with a sprinkling of planted
e-mails, phones, payment cards, IBANs, PRC IDs, provider keys, JWTs, private keys,
URL passwords, password assignments and IP addresses.

Method: the log is cut into ~64 KiB line-aligned chunks (the unit a log excerpt or a
tool result would be). Each round passes every chunk through Redactor.text (default
policy), then through the baseline: one compiled e-mail regex `findall` over the same
chunks, the least any redaction must do. Reported: MB/s of each (median over rounds)
and their ratio. Nothing here asserts a time.

    .venv/bin/python bench/redaction.py                       # 100 MB, 3 rounds
    .venv/bin/python bench/redaction.py --size-mb 10 --rounds 5 --json out.json
"""

from __future__ import annotations

import argparse
import base64
import json
import platform
import random
import re
import statistics
import string
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from stdnum import iban, luhn
from stdnum.cn import ric

from handrail.shaping.redact import Kind, Redactor

CHUNK_BYTES = 64 * 1024
SEED = 20240501
BASELINE_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}")

_SERVICES = ("orders", "payments", "inventory", "auth", "search", "billing", "gateway")
_LEVELS = ("DEBUG", "INFO", "INFO", "INFO", "WARN", "ERROR")
_WORDS = (
    *("processed", "request", "for", "customer", "in", "batch", "retry", "cache", "miss"),
    *("upstream", "latency", "queue", "worker", "started", "finished", "timeout"),
    *("connection", "pool", "acquired", "released", "scheduled", "job", "invoice"),
    *("shipment", "refund", "checksum", "mismatch", "partition", "rebalanced", "offset"),
)
_PATHS = ("/api/v1/orders", "/api/v2/items", "/healthz", "/api/v1/users", "/static/app.js")
_HEX = "0123456789abcdef"
_B64 = string.ascii_letters + string.digits


class _Log:
    """A deterministic generator of log text, counting what it plants."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)  # noqa: S311 - reproducible test data, not secrets
        self.planted: Counter[str] = Counter()
        self.second = 0

    # --- ordinary content ---

    def stamp(self) -> str:
        self.second += self.rng.randint(0, 2)
        hours, rest = divmod(self.second % 86400, 3600)
        minutes, seconds = divmod(rest, 60)
        ms = self.rng.randint(0, 999)
        return f"2024-05-01T{hours:02d}:{minutes:02d}:{seconds:02d}.{ms:03d}Z"

    def hex(self, n: int) -> str:
        return "".join(self.rng.choice(_HEX) for _ in range(n))

    def uuid(self) -> str:
        h = self.hex(32)
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"

    def words(self, n: int) -> str:
        return " ".join(self.rng.choice(_WORDS) for _ in range(n))

    def plain(self) -> str:
        r = self.rng
        return (
            f"{self.stamp()} {r.choice(_LEVELS):5} [worker-{r.randint(1, 16)}] "
            f"app.{r.choice(_SERVICES)}: {self.words(r.randint(3, 9))} "
            f"order={r.randint(10000, 99999)} took {r.uniform(0.1, 900):.2f}ms "
            f"trace={self.hex(16)}"
        )

    def json_line(self) -> str:
        r = self.rng
        record = {
            "ts": self.stamp(),
            "level": r.choice(_LEVELS).lower(),
            "msg": self.words(r.randint(2, 6)),
            "request_id": self.uuid(),
            "duration_ms": round(r.uniform(0, 500), 3),
            "path": f"{r.choice(_PATHS)}/{r.randint(1, 99999)}",
            "score": r.random(),
            "version": f"{r.randint(1, 3)}.{r.randint(0, 20)}.{r.randint(0, 9)}",
        }
        return json.dumps(record)

    def traceback(self) -> str:
        r = self.rng
        frames = [
            f'  File "/srv/app/{r.choice(_SERVICES)}/handlers_{r.randint(1, 9)}.py", '
            f"line {r.randint(1, 900)}, in handle_{r.choice(_WORDS)}\n"
            f"    result = self.client.{r.choice(_WORDS)}(request, timeout=self.timeout)"
            for _ in range(r.randint(2, 6))
        ]
        return (
            "Traceback (most recent call last):\n"
            + "\n".join(frames)
            + f"\nConnectionError: upstream {r.choice(_SERVICES)} closed after "
            f"{r.randint(1, 30)}s (commit {self.hex(40)})"
        )

    def sql(self) -> str:
        r = self.rng
        customer, day, limit = r.randint(1, 10**6), r.randint(1, 30), r.choice((10, 50, 100))
        return (  # log text that looks like SQL, never run
            f"{self.stamp()} DEBUG sqlalchemy.engine: SELECT o.id, o.total_cents, o.status "  # noqa: S608
            "FROM orders AS o JOIN customers AS c ON c.id = o.customer_id "
            f"WHERE o.customer_id = {customer} AND o.created_at > '2024-04-{day:02d}' "
            f"ORDER BY o.id DESC LIMIT {limit}"
        )

    def access(self) -> str:
        r = self.rng
        return (
            f'81.2.{r.randint(0, 255)}.{r.randint(1, 254)} - - [{self.stamp()}] "GET https://api.example.com'
            f'{r.choice(_PATHS)}?page={r.randint(1, 50)}&sort=desc HTTP/1.1" '
            f"{r.choice((200, 200, 200, 304, 404, 500))} {r.randint(100, 90000)} "
            f'"Mozilla/5.0 (X11; Linux x86_64) Chrome/124.0.{r.randint(1000, 9999)}.'
            f'{r.randint(10, 99)}"'
        )

    # --- planted values ---

    def plant(self) -> str:
        kind, make = self.rng.choice(self._planters())
        self.planted[kind] += 1
        return f"{self.stamp()} INFO app.audit: {make()}"

    def _planters(self) -> tuple[tuple[str, Callable[[], str]], ...]:
        return (
            (Kind.EMAIL, lambda: f"mail sent to {self._email()}"),
            (Kind.PHONE, lambda: f"sms to +44 20 7946 0{self.rng.randint(100, 999)} queued"),
            (Kind.PHONE, lambda: f"customer phone {self._cn_mobile()}"),
            (Kind.PAYMENT_CARD, lambda: f"charge card={self._card()} amount=12.50"),
            (Kind.IBAN, lambda: f"payout to {self._iban()} scheduled"),
            (Kind.PRC_ID, lambda: f"kyc id_number={self._prc_id()} verified"),
            (Kind.CREDENTIAL, lambda: f"aws key AKIA{self._upper(16)} rotated"),
            (Kind.CREDENTIAL, lambda: f"auth header token ghp_{self._b64(36)} used"),
            (Kind.CREDENTIAL, lambda: f"bearer {self._jwt()} accepted"),
            (Kind.CREDENTIAL, lambda: f"connect postgres://app:{self._b64(12)}@db.internal/app"),
            (Kind.CREDENTIAL, lambda: f'config password = "{self._b64(14)}" loaded'),
            (
                Kind.IP_ADDRESS,
                lambda: f"peer 10.{self.rng.randint(0, 255)}.3.{self.rng.randint(1, 254)} joined",
            ),
            (Kind.HIGH_ENTROPY, lambda: f"signature {self._b64(40)} checked"),
        )

    def private_key(self) -> str:
        self.planted[Kind.CREDENTIAL] += 1
        body = "\n".join(self._b64(64) for _ in range(8))
        return f"-----BEGIN RSA PRIVATE KEY-----\n{body}\n-----END RSA PRIVATE KEY-----"

    def _digits(self, n: int) -> str:
        return "".join(self.rng.choice(string.digits) for _ in range(n))

    def _upper(self, n: int) -> str:
        return "".join(self.rng.choice(string.ascii_uppercase + string.digits) for _ in range(n))

    def _b64(self, n: int) -> str:
        while True:
            token = "".join(self.rng.choice(_B64) for _ in range(n))
            if any(c.isdigit() for c in token) and any(c.isupper() for c in token):
                return token

    def _cn_mobile(self) -> str:
        return self.rng.choice(("138", "139", "150", "186", "189")) + self._digits(8)

    def _email(self) -> str:
        name = self.rng.choice(("alice", "bob", "li.wei", "maria_k", "j.doe"))
        return f"{name}{self.rng.randint(1, 999)}@{self.rng.choice(('example.com', 'mail.cn'))}"

    def _card(self) -> str:
        prefix = self.rng.choice(("4", "51", "37", "6011", "62"))
        length = 15 if prefix == "37" else 16
        body = prefix + self._digits(length - len(prefix) - 1)
        number = body + luhn.calc_check_digit(body)
        return " ".join(number[i : i + 4] for i in range(0, len(number), 4))

    def _iban(self) -> str:
        bban = self._digits(18)
        number = "DE" + iban.calc_check_digits("DE00" + bban) + bban
        return iban.format(number)

    def _prc_id(self) -> str:
        while True:
            body = (
                self.rng.choice(("110101", "310104", "440305"))
                + f"{self.rng.randint(1950, 2005)}{self.rng.randint(1, 12):02d}"
                + f"{self.rng.randint(1, 28):02d}{self._digits(3)}"
            )
            number = body + ric.calc_check_digit(body + "0")
            if ric.is_valid(number):  # the district existed in the year of birth
                return number

    def _jwt(self) -> str:
        def part(obj: object) -> str:
            return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

        header = part({"alg": "HS256", "typ": "JWT"})
        payload = part({"sub": self._digits(8), "iat": 1714550400 + self.rng.randint(0, 10**6)})
        return f"{header}.{payload}.{self._b64(43)}"


def generate(size_bytes: int, seed: int = SEED) -> tuple[str, Counter[str]]:
    """A mixed log of about `size_bytes` bytes, and how many values of each kind it holds."""
    log = _Log(seed)
    makers = (
        (log.plain, 55),
        (log.json_line, 12),
        (log.traceback, 5),
        (log.sql, 10),
        (log.access, 15),
        (log.plant, 3),
    )
    choices = [make for make, weight in makers for _ in range(weight)]
    lines: list[str] = []
    size = 0
    while size < size_bytes:
        line = log.private_key() if log.rng.random() < 0.0002 else log.rng.choice(choices)()
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines) + "\n", log.planted


def chunks(text: str, size: int = CHUNK_BYTES) -> list[str]:
    """`text` cut at line ends into pieces of about `size` characters."""
    out: list[str] = []
    at = 0
    while at < len(text):
        end = text.find("\n", min(at + size, len(text)) - 1)
        end = len(text) if end == -1 else end + 1
        out.append(text[at:end])
        at = end
    return out


def _time(work: Callable[[], object]) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--size-mb", type=float, default=100.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    args = parser.parse_args(argv)

    text, planted = generate(int(args.size_mb * 1024 * 1024), args.seed)
    pieces = chunks(text)
    megabytes = len(text.encode()) / 1e6
    redactor = Redactor(hash_key=b"bench-redaction-key-0123456789")

    findings: Counter[str] = Counter()
    for piece in pieces:  # warm-up, and the count of findings
        findings.update(redactor.text(piece).counts)

    redactor_s: list[float] = []
    baseline_s: list[float] = []
    for _ in range(args.rounds):
        redactor_s.append(_time(lambda: [redactor.text(piece) for piece in pieces]))
        baseline_s.append(_time(lambda: [BASELINE_EMAIL.findall(piece) for piece in pieces]))

    redactor_mbps = megabytes / statistics.median(redactor_s)
    baseline_mbps = megabytes / statistics.median(baseline_s)
    result = {
        "size_mb": round(megabytes, 3),
        "chunks": len(pieces),
        "rounds": args.rounds,
        "redactor": {"mb_per_s": round(redactor_mbps, 2), "rounds_s": redactor_s},
        "baseline": {"mb_per_s": round(baseline_mbps, 2), "rounds_s": baseline_s},
        "ratio": round(baseline_mbps / redactor_mbps, 2),
        "findings": dict(sorted(findings.items())),
        "planted": dict(sorted(planted.items())),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
    }
    print(f"{'path':<34}{'MB/s':>10}")
    print(f"{'Redactor.text (default policy)':<34}{redactor_mbps:>10.1f}")
    print(f"{'baseline: one e-mail regex':<34}{baseline_mbps:>10.1f}")
    print(f"baseline / Redactor: {result['ratio']}x over {megabytes:.1f} MB, {len(pieces)} chunks")
    print(f"findings: {result['findings']}")
    print(f"planted:  {result['planted']}")
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
