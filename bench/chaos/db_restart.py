"""`pg_ctl stop -m immediate` and restart under HTTP enqueue load: clients POST
`chaos.work` jobs to a real `jobrelay api` process while 2 `jobrelay worker` processes drain
them; the server is crashed and started again `restarts` times. The ledger holds every id a
201 returned; every one must exist and complete. Measured: the time from the server
accepting connections again to the first claim and to the first 201, and the accepted
enqueue rate of the clean first segment vs the segments with a restart."""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg

from bench.chaos.invariants import Ledger, check_jobs, read_finishes
from bench.chaos.stack import (
    Aws,
    Database,
    Processes,
    api_ready,
    base_env,
    mint_token,
    percentile,
    wait_until,
)
from jobrelay.aws.emulator import free_port

CLIENTS = 4
CLIENT_TIMEOUT_S = 5.0


@dataclass
class Load:
    base_url: str
    token: str
    ledger: Ledger
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    statuses: dict[int, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    accepted_at: list[float] = field(default_factory=list)  # monotonic time of each 201

    def run(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        with httpx.Client(base_url=self.base_url, timeout=CLIENT_TIMEOUT_S) as client:
            n = 0
            while not self.stop.is_set():
                n += 1
                payload = {"key": uuid.uuid4().hex, "ms": 5, "fenced": n % 5 == 0}
                try:
                    response = client.post(
                        "/v1/jobs",
                        json={"type": "chaos.work", "payload": payload},
                        headers=headers,
                    )
                except httpx.HTTPError as exc:
                    with self.lock:
                        self.failures.append(type(exc).__name__)
                    continue
                with self.lock:
                    code = response.status_code
                    self.statuses[code] = self.statuses.get(code, 0) + 1
                    if code == 201:
                        self.ledger.job_ids.add(uuid.UUID(response.json()["id"]))
                        self.accepted_at.append(time.monotonic())
                    else:
                        self.ledger.rejected += 1
                if response.status_code == 503:
                    time.sleep(0.05)

    def accepted(self) -> int:
        with self.lock:
            return len(self.accepted_at)

    def count(self, status: int) -> int:
        with self.lock:
            return self.statuses.get(status, 0)


def _connect(dsn: str) -> Any:
    try:
        conn = psycopg.connect(dsn, autocommit=True, connect_timeout=1)
    except psycopg.OperationalError:
        return None
    with conn:
        row = conn.execute("SELECT clock_timestamp()").fetchone()
    return (time.monotonic(), None if row is None else row[0])


def db_restart(workdir: Path, *, size: int, restarts: int | None = None) -> dict[str, Any]:
    restarts = restarts or max(1, min(5, size // 1000))
    db = Database(workdir).start()
    aws = Aws().start()
    port = free_port()
    env = base_env(
        db.dsn,
        workdir,
        lease_s=5.0,
        JOBRELAY_WORKER_POLL_INTERVAL_S="0.25",
        **aws.env,
        JOBRELAY_SQS_WORKER_WEBHOOK_URL=f"http://127.0.0.1:{port}/v1/webhooks/worker",
    )
    procs = Processes(env, workdir / "logs")
    ledger = Ledger()
    problems: list[str] = []
    back: list[tuple[float, float]] = []  # (first claim, first 201) after each restart
    try:
        procs.start("api", "api", "--port", str(port))
        for n in (1, 2):
            procs.start(f"worker-{n}", "worker", "--concurrency", "8")
        wait_until(lambda: procs.check_alive() and api_ready(port), timeout_s=120, what="the API")
        load = Load(f"http://127.0.0.1:{port}", mint_token(env, "chaos", admin=True), ledger)
        clients = [threading.Thread(target=load.run) for _ in range(CLIENTS)]
        started = time.monotonic()
        for client in clients:
            client.start()
        segment = size // (restarts + 1)
        marks: list[float] = []
        try:
            for k in range(restarts):
                wait_until(
                    lambda k=k: load.accepted() >= segment * (k + 1),
                    timeout_s=300,
                    what="load before the crash",
                )
                marks.append(time.monotonic())
                rejected = load.count(503)
                db.stop("immediate")  # a crash: no checkpoint, recovery on start
                wait_until(
                    lambda r=rejected: load.count(503) >= r + 5,
                    timeout_s=60,
                    what="503s while the database is down",
                )
                db.server.start()
                accepted_mono, accepted_at = wait_until(
                    lambda: _connect(db.dsn), timeout_s=120, what="the restart"
                )
                after = load.accepted()
                claim = wait_until(
                    lambda a=accepted_at: db.one(
                        "SELECT min(claimed_at) AS t FROM all_jobs WHERE claimed_at > %s", (a,)
                    )["t"],
                    timeout_s=120,
                    what="a claim after the restart",
                )
                wait_until(
                    lambda a=after: load.accepted() > a,
                    timeout_s=120,
                    what="a 201 after the restart",
                )
                with load.lock:
                    first_201 = min(t for t in load.accepted_at if t > accepted_mono)
                back.append(((claim - accepted_at).total_seconds(), first_201 - accepted_mono))
            wait_until(lambda: load.accepted() >= size, timeout_s=600, what="the whole load")
        finally:
            load.stop.set()
            for client in clients:
                client.join(timeout=60)
        ended = time.monotonic()
        wait_until(
            lambda: (
                db.one("SELECT count(*) AS n FROM jobs WHERE status IN ('pending', 'in_progress')")[
                    "n"
                ]
                == 0
            ),
            timeout_s=300,
            what="every job to end",
        )
        dead = procs.dead()
        codes = procs.stop_all()
        problems += [f"{name} exited on its own" for name in dead]
        problems += [f"{name} exited {code} on SIGTERM" for name, code in codes.items() if code]
        problems += check_jobs(db.dsn, ledger, read_finishes(workdir / "finish"))
        unexpected = {s: n for s, n in load.statuses.items() if s not in (201, 503)}
        if unexpected:
            problems.append(f"answers other than 201 and 503: {unexpected}")
        if load.failures:
            problems.append(
                f"{len(load.failures)} requests got no answer within "
                f"{CLIENT_TIMEOUT_S}s ({sorted(set(load.failures))})"
            )
    finally:
        procs.stop_all()
        db.stop()
        aws.stop()
    with load.lock:
        times = list(load.accepted_at)
    clean_end = marks[0] if marks else ended
    clean_rate = sum(1 for t in times if t <= clean_end) / (clean_end - started)
    chaos_rate = sum(1 for t in times if t > clean_end) / (ended - clean_end)
    return {
        "scenario": "db-restart",
        "size": size,
        "restarts": len(back),
        "accepted": len(times),
        "answers": load.statuses,
        "restart_to_first_claim_s": [round(c, 3) for c, _ in back],
        "restart_to_first_201_s": [round(a, 3) for _, a in back],
        "restart_to_first_claim_p50_s": percentile([c for c, _ in back], 50),
        "clean_accepted_per_s": clean_rate,
        "chaos_accepted_per_s": chaos_rate,
        "chaos_vs_clean": chaos_rate / clean_rate if clean_rate else None,
        "problems": problems,
    }
