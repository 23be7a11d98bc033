"""Network partitions with real processes (issue 24): packets dropped on loopback, no RST.

Phase 1, the database: clients POST `chaos.work` jobs to a real `jobrelay api` while two
`jobrelay worker` processes drain them; the API and worker 1 reach PostgreSQL through TCP
relays whose ports are black-holed (`tests.partition.Blackhole`) for `cut_s`, `cuts` times;
worker 2 stays connected. Measured per cut: the slowest API answer during the cut, the
slowest `/readyz`, the first 201 after the heal, how long worker 1 took to log that it is
failing, and the first claim of worker 1 after the heal (its `loop.recovered` line).
Invariants: every job a 201 returned exists and completes, no fenced output twice
(`invariants.check_jobs`), no 5xx but 503.

Phase 2, SQS: a `jobrelay relay` reaches the emulator through a black-holed relay for
`cut_s`, `cuts` times, while a batch of `size // 10` items is delivered (an `sqs-worker`
completes them). Measured: the first send after each heal; invariant: no item failed.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import psycopg
from tests.partition import Blackhole, TcpRelay, postgres_relay, unavailable

from bench.chaos.db_restart import CLIENTS
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


def _log_time(procs: Processes, name: str, after_wall: float, **match: object) -> float | None:
    """Wall time of the first JSON log line of `name` at or after `after_wall` matching."""
    path = procs.logs / f"{name}.log"
    if not path.exists():
        return None
    for line in path.read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        stamp = record.get("timestamp") if isinstance(record, dict) else None
        if not stamp or not all(record.get(k) == v for k, v in match.items()):
            continue
        at = _wall(stamp)
        if at >= after_wall:
            return at
    return None


def _wall(stamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _summary(values: list[float]) -> dict[str, float | None]:
    return {
        "p50": percentile(values, 50),
        "max": max(values) if values else None,
    }


def partition(workdir: Path, *, size: int, cuts: int = 3, cut_s: float = 20.0) -> dict[str, Any]:
    if (reason := unavailable()) is not None:
        return {"scenario": "partition", "skipped": reason, "problems": []}
    db = Database(workdir).start()
    aws = Aws().start()
    try:
        figures = _database_phase(workdir, db, aws, size=size, cuts=cuts, cut_s=cut_s)
        figures.update(
            _sqs_phase(workdir, db, aws, items=max(50, size // 10), cuts=cuts, cut_s=cut_s)
        )
    finally:
        aws.stop()
        db.stop()
    problems = figures.pop("problems_db") + figures.pop("problems_sqs")
    return {
        "scenario": "partition",
        "size": size,
        "cuts": cuts,
        "cut_s": cut_s,
        **figures,
        "problems": problems,
    }


def _database_phase(
    workdir: Path, db: Database, aws: Aws, *, size: int, cuts: int, cut_s: float
) -> dict[str, Any]:
    port = free_port()
    api_relay, api_dsn = postgres_relay(db.dsn)
    worker_relay, worker_dsn = postgres_relay(db.dsn)
    env = base_env(
        db.dsn,
        workdir,
        lease_s=10.0,
        **aws.env,
        JOBRELAY_LOG_FORMAT="json",
        JOBRELAY_LOG_LEVEL="INFO",
        JOBRELAY_SQS_WORKER_WEBHOOK_URL=f"http://127.0.0.1:{port}/v1/webhooks/worker",
    )
    procs = Processes(env, workdir / "logs-db")
    ledger = Ledger()
    problems: list[str] = []
    slowest: list[float] = []
    ready: list[float] = []
    first_201: list[float] = []
    noticed: list[float] = []
    reclaimed: list[float] = []
    with api_relay, worker_relay:
        try:
            procs.start("api", "api", "--port", str(port), DATABASE_URL=api_dsn)
            procs.start("worker-1", "worker", "--concurrency", "8", DATABASE_URL=worker_dsn)
            procs.start("worker-2", "worker", "--concurrency", "8")
            wait_until(
                lambda: procs.check_alive() and api_ready(port), timeout_s=120, what="the API"
            )
            base_url = f"http://127.0.0.1:{port}"
            token = mint_token(env, "chaos", admin=True)
            answers: list[tuple[float, float, int]] = []  # (sent, took, status)
            load_stop = threading.Event()

            def timed_client() -> None:
                headers = {"Authorization": f"Bearer {token}"}
                with httpx.Client(base_url=base_url, timeout=10) as client:
                    while not load_stop.is_set() and len(ledger.job_ids) < size:
                        sent = time.monotonic()
                        try:
                            response = client.post(
                                "/v1/jobs",
                                json={
                                    "type": "chaos.work",
                                    "payload": {"key": uuid.uuid4().hex, "ms": 5, "fenced": True},
                                },
                                headers=headers,
                            )
                        except httpx.HTTPError:
                            answers.append((sent, time.monotonic() - sent, 0))
                            continue
                        answers.append((sent, time.monotonic() - sent, response.status_code))
                        if response.status_code == 201:
                            ledger.job_ids.add(uuid.UUID(response.json()["id"]))
                        elif response.status_code == 503:
                            time.sleep(0.05)

            clients = [threading.Thread(target=timed_client) for _ in range(CLIENTS)]
            for client in clients:
                client.start()
            wait_until(lambda: len(ledger.job_ids) >= 50, timeout_s=60, what="load")
            for _ in range(cuts):
                holes = [Blackhole(api_relay.port), Blackhole(worker_relay.port)]
                for hole in holes:
                    hole.cut()
                cut_at, cut_wall = time.monotonic(), time.time()
                try:
                    while time.monotonic() - cut_at < cut_s:
                        started = time.monotonic()
                        with contextlib.suppress(httpx.HTTPError):
                            httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=10)
                        ready.append(time.monotonic() - started)
                        time.sleep(0.5)
                finally:
                    for hole in holes:
                        hole.heal()
                healed_at, healed_wall = time.monotonic(), time.time()
                at = wait_until(
                    lambda healed_at=healed_at: next(
                        (s + t for s, t, c in list(answers) if c == 201 and s >= healed_at), None
                    ),
                    timeout_s=60,
                    what="a 201 after the heal",
                )
                first_201.append(at - healed_at)
                during = [t for s, t, _ in list(answers) if s < healed_at and s + t > cut_at]
                slowest.append(max(during, default=0.0))
                failing = _log_time(procs, "worker-1", cut_wall, event="loop.failing")
                if failing is not None:
                    noticed.append(failing - cut_wall)
                back = wait_until(
                    lambda healed_wall=healed_wall: _log_time(
                        procs, "worker-1", healed_wall, event="loop.recovered", loop="worker-claim"
                    ),
                    timeout_s=60,
                    what="worker 1 to claim again",
                )
                reclaimed.append(back - healed_wall)
                time.sleep(2)  # load between cuts: the next cut starts from a healthy stack
            load_stop.set()
            for client in clients:
                client.join()
            statuses = sorted({c for _, _, c in answers})
            if set(statuses) - {201, 503}:
                problems.append(f"answers other than 201 and 503: {statuses}")
            wait_until(lambda: _all_done(db.dsn), timeout_s=300, what="every job to end")
            procs.check_alive()
        finally:
            procs.stop_all()
    problems += check_jobs(db.dsn, ledger, read_finishes(workdir / "finish"))
    return {
        "accepted": len(ledger.job_ids),
        "api_slowest_answer_during_cut_s": _summary(slowest),
        "readyz_s": _summary(ready),
        "api_first_201_after_heal_s": _summary(first_201),
        "worker_logged_failing_after_cut_s": _summary(noticed),
        "worker_claimed_after_heal_s": _summary(reclaimed),
        "problems_db": problems,
    }


def _all_done(dsn: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM jobs WHERE status IN ('pending', 'in_progress')"
        ).fetchone()
    return bool(row) and row[0] == 0


def _sqs_phase(
    workdir: Path, db: Database, aws: Aws, *, items: int, cuts: int, cut_s: float
) -> dict[str, Any]:
    port = free_port()
    target = urlsplit(aws.env["JOBRELAY_AWS_ENDPOINT_URL"])
    sqs_relay = TcpRelay((target.hostname or "127.0.0.1", target.port or 80))
    env = base_env(
        db.dsn,
        workdir,
        lease_s=10.0,
        **aws.env,
        JOBRELAY_SQS_WORKER_WEBHOOK_URL=f"http://127.0.0.1:{port}/v1/webhooks/worker",
        JOBRELAY_SQS_WORKER_POLL_WAIT_S="1",
    )
    procs = Processes(env, workdir / "logs-sqs")
    problems: list[str] = []
    resumed: list[float] = []
    with sqs_relay:
        try:
            procs.start("api", "api", "--port", str(port))
            procs.start(
                "relay",
                "relay",
                JOBRELAY_AWS_ENDPOINT_URL=f"http://127.0.0.1:{sqs_relay.port}",
                JOBRELAY_RELAY_SEND_TIMEOUT_S="2",
            )
            procs.start("sqs-worker", "sqs-worker")
            wait_until(
                lambda: procs.check_alive() and api_ready(port), timeout_s=120, what="the API"
            )
            batch_id = _submit(db.dsn, port, env, items)
            for _ in range(cuts):
                hole = Blackhole(sqs_relay.port)
                hole.cut()
                try:
                    time.sleep(cut_s)  # the outage itself
                finally:
                    hole.heal()
                healed = time.monotonic()
                before = _sent(db.dsn, batch_id)
                if before >= items:
                    break
                at = wait_until(
                    lambda before=before: (
                        time.monotonic() if _sent(db.dsn, batch_id) > before else None
                    ),
                    timeout_s=60,
                    what="a send after the heal",
                )
                resumed.append(at - healed)
            wait_until(
                lambda: _sent(db.dsn, batch_id) >= items, timeout_s=300, what="every item sent"
            )
            failed = _failed(db.dsn, batch_id)
            if failed:
                problems.append(f"{failed} batch items failed during SQS outages")
            procs.check_alive()
        finally:
            procs.stop_all()
    return {
        "batch_items": items,
        "relay_first_send_after_heal_s": _summary(resumed),
        "problems_sqs": problems,
    }


def _submit(dsn: str, port: int, env: dict[str, str], items: int) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "WITH org AS (INSERT INTO organization (name, created_by, updated_by) "
            "VALUES ('chaos', 'ops', 'ops') RETURNING id), "
            "member AS (INSERT INTO organization_member (organization_id, subject, created_by, "
            "updated_by) SELECT id, 'chaos', 'ops', 'ops' FROM org) "
            "INSERT INTO project (organization_id, name, created_by, updated_by) "
            "SELECT id, 'chaos', 'ops', 'ops' FROM org RETURNING id"
        ).fetchone()
    assert row is not None
    token = mint_token(env, "chaos", admin=False)
    response = httpx.post(
        f"http://127.0.0.1:{port}/v1/projects/{row[0]}/batches",
        json={"type": "code2des", "items": [{"html": f"<p>{n}</p>"} for n in range(items)]},
        headers={"Authorization": f"Bearer {token}"},
        timeout=60,
    )
    response.raise_for_status()
    return str(response.json()["id"])


def _sent(dsn: str, batch_id: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM batch_item WHERE batch_id = %s AND dispatched_at IS NOT NULL",
            (batch_id,),
        ).fetchone()
    return int(row[0]) if row else 0


def _failed(dsn: str, batch_id: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM batch_item WHERE batch_id = %s AND error_message IS NOT NULL",
            (batch_id,),
        ).fetchone()
    return int(row[0]) if row else 0
