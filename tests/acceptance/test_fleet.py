"""Many hosts (issue 13): 2 API processes, 3 jobs workers, 2 relays and 2 SQS workers run as
separate processes against one PostgreSQL server (through PgBouncer in transaction pooling
mode when the harness provides one), with 2,000 batch items and 5,000 jobs pushed at them.
One process of each kind is SIGKILLed along the way. Every invariant is checked at the end:
nothing lost, every job and item terminal, one fenced output per request, no batch item
delivered as two different children, and the survivors exit cleanly on SIGTERM."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psycopg
import pytest

from jobrelay.aws.clients import AwsEndpoint, ensure_resources
from jobrelay.aws.emulator import free_port
from jobrelay.db.pool import open_pool
from jobrelay.jobs.enqueue import EnqueueRequest
from jobrelay.jobs.models import Enqueued
from tests.e2e_support import tenant
from tests.harness import (
    AwsTestResources,
    PgBouncer,
    cli_env,
    jobrelay_command,
    run_cli,
    wait_until,
)
from tests.jobs_support import query, service

pytestmark = [pytest.mark.slow, pytest.mark.long]

NOOP_JOBS = 4_000
MEDIA_JOBS = 1_000  # media.process: a fenced output row per media id
SOURCES = 50  # media jobs are serialized per source
BATCHES = 4
ITEMS_PER_BATCH = 500


@dataclass
class Fleet:
    """Named processes of the `jobrelay` CLI, each with its own log file."""

    env: dict[str, str]
    logs: Path
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    codes: dict[str, int] = field(default_factory=dict)  # exit codes after `stop_all`

    def start(self, name: str, *args: str, **env: str) -> None:
        log = (self.logs / f"{name}.log").open("ab")
        self.processes[name] = subprocess.Popen(
            [*jobrelay_command(), *args],
            env={**self.env, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def kill(self, name: str) -> None:
        process = self.processes.pop(name)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)

    def stop_all(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for name, process in self.processes.items():
            try:
                self.codes[name] = process.wait(timeout=90)
            except subprocess.TimeoutExpired:
                process.kill()
                self.codes[name] = process.wait()

    def log(self, name: str) -> str:
        path = self.logs / f"{name}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def alive(self) -> None:
        for name, process in self.processes.items():
            assert process.poll() is None, f"{name} exited early:\n{self.log(name)}"


@contextmanager
def fleet(
    dsn: str, direct: str, emulator_url: str, resources: AwsTestResources, data_dir: Path
) -> Iterator[tuple[Fleet, list[int]]]:
    ports = [free_port(), free_port()]
    env = cli_env(
        DATABASE_URL=dsn,
        JOBRELAY_DATABASE_POOLER="transaction",
        JOBRELAY_DATABASE_DIRECT_URL=direct,
        JOBRELAY_DATA_DIR=str(data_dir),
        JOBRELAY_AWS_ENDPOINT_URL=emulator_url,
        JOBRELAY_SQS_QUEUE_NAME=resources.queues.work.rsplit("/", 1)[-1],
        JOBRELAY_SQS_DLQ_NAME=resources.queues.dead_letter.rsplit("/", 1)[-1],
        JOBRELAY_S3_BUCKET=resources.bucket,
        JOBRELAY_SQS_WORKER_POLL_WAIT_S="1",
        JOBRELAY_SQS_WORKER_VISIBILITY_TIMEOUT_S="6",
        JOBRELAY_SQS_WORKER_HEARTBEAT_S="2",
        JOBRELAY_JOBS_LEASE_S="3",
        JOBRELAY_JOBS_RESCUE_INTERVAL_S="0.5",
        JOBRELAY_RELAY_LEASE_S="3",
        JOBRELAY_RELAY_POLL_INTERVAL_S="0.5",
        JOBRELAY_WORKER_POLL_INTERVAL_S="0.2",
        JOBRELAY_LOG_LEVEL="WARNING",
        JOBRELAY_LOG_FORMAT="json",
    )
    logs = data_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    ships = Fleet(env=env, logs=logs)
    try:
        for n, port in enumerate(ports, start=1):
            ships.start(f"api-{n}", "api", "--port", str(port))
        for n in (1, 2, 3):
            ships.start(f"worker-{n}", "worker", "--concurrency", "6")
        for n in (1, 2):
            ships.start(f"relay-{n}", "relay")
        for n, port in enumerate(ports, start=1):
            ships.start(
                f"sqs-worker-{n}",
                "sqs-worker",
                JOBRELAY_SQS_WORKER_WEBHOOK_URL=f"http://127.0.0.1:{port}/v1/webhooks/worker",
            )
        for port in ports:
            wait_until(lambda port=port: _ready(port), timeout_s=90, what=f"the API on {port}")
        yield ships, ports
    finally:
        ships.stop_all()


def _ready(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _jobs() -> list[EnqueueRequest]:
    media = [
        EnqueueRequest(
            "media.process",
            {"mediaId": f"m{n}", "revision": 1, "sourceId": f"s{n % SOURCES}"},
        )
        for n in range(MEDIA_JOBS)
    ]
    noop = [EnqueueRequest("diag.noop", {"n": n}) for n in range(NOOP_JOBS)]
    return media + noop


async def _enqueue_through_the_pooler(dsn: str, requests: list[EnqueueRequest]) -> list[Enqueued]:
    """Bulk enqueue in one transaction, as a producer behind PgBouncer would (no prepared
    statements)."""
    pool = await open_pool(dsn, min_size=1, max_size=2, transaction_pooler=True)
    try:
        async with pool.connection() as conn, conn.transaction():
            return await service(pool).enqueue_many(requests, conn=conn)
    finally:
        await pool.close()


def _progress(dsn: str) -> dict[str, int]:
    # One active job per dedupe key, sampled at every look (the unique index's promise).
    doubled = query(
        dsn,
        "SELECT type, dedupe_key FROM all_jobs WHERE dedupe_key IS NOT NULL "
        "AND status IN ('pending', 'in_progress') GROUP BY 1, 2 HAVING count(*) > 1",
    )
    assert doubled == [], doubled
    [row] = query(
        dsn,
        "SELECT count(*) FILTER (WHERE status = 'completed') AS jobs_done, "
        "(SELECT count(*) FROM page_import WHERE status <> '0') AS items_done FROM all_jobs",
    )
    return {k: int(v) for k, v in row.items()}


def test_many_processes_on_one_server_keep_every_invariant_through_kills(
    db_dsn: str,
    fleet_dsn: str,
    emulator_url: str,
    fleet_queue: AwsTestResources,
    tmp_path: Path,
) -> None:
    project = tenant(db_dsn, "fleet")
    data_dir = tmp_path / "data"
    minted = run_cli("token", "--sub", "fleet", JOBRELAY_DATA_DIR=str(data_dir))
    assert minted.returncode == 0, minted.stderr
    headers = {"Authorization": f"Bearer {minted.stdout.strip()}"}
    started = time.monotonic()
    with fleet(fleet_dsn, db_dsn, emulator_url, fleet_queue, data_dir) as (ships, ports):
        enqueued = asyncio.run(_enqueue_through_the_pooler(fleet_dsn, _jobs()))
        batch_ids = []
        for n in range(BATCHES):
            items = [
                {"html": f"<html><head><title>p{n}-{i}</title></head><body>{i}</body></html>"}
                for i in range(ITEMS_PER_BATCH)
            ]
            response = httpx.post(
                f"http://127.0.0.1:{ports[n % 2]}/v1/projects/{project}/batches",
                json={"type": "page_import", "items": items},
                headers=headers,
                timeout=60,
            )
            assert response.status_code == 201, response.text
            batch_ids.append(response.json()["id"])
        wait_until(
            lambda: (
                _progress(db_dsn)["jobs_done"] >= 500 and _progress(db_dsn)["items_done"] >= 200
            ),
            timeout_s=180,
            what="some progress before the kills",
        )
        ships.alive()
        for name in ("worker-1", "relay-1", "sqs-worker-1", "api-1"):
            ships.kill(name)  # SIGKILL: no release, no cleanup
        wait_until(
            lambda: (
                _progress(db_dsn)
                == {"jobs_done": NOOP_JOBS + MEDIA_JOBS, "items_done": BATCHES * ITEMS_PER_BATCH}
            ),
            timeout_s=420,
            what="every job and every batch item to end",
        )
        ships.alive()
        batches = [
            httpx.get(
                f"http://127.0.0.1:{ports[1]}/v1/batches/{b}", headers=headers, timeout=10
            ).json()
            for b in batch_ids
        ]
    print(
        f"\nfleet: {NOOP_JOBS + MEDIA_JOBS} jobs and {BATCHES * ITEMS_PER_BATCH} items "
        f"in {time.monotonic() - started:.0f}s"
    )
    assert set(ships.codes.values()) == {0}, {n: ships.log(n) for n, c in ships.codes.items() if c}

    # Nothing lost: every job enqueued is stored once and completed.
    assert len({e.id for e in enqueued}) == NOOP_JOBS + MEDIA_JOBS
    [jobs] = query(
        db_dsn,
        "SELECT count(*) AS n, count(*) FILTER (WHERE status <> 'completed') AS open FROM all_jobs",
    )
    assert (jobs["n"], jobs["open"]) == (NOOP_JOBS + MEDIA_JOBS, 0)
    # One fenced output per media request, written by the job that completed it.
    media = query(
        db_dsn,
        "SELECT s.media_id, s.job_id = j.id AS by_completer FROM media_processing_state s "
        "JOIN all_jobs j ON j.type = 'media.process' AND j.payload->>'mediaId' = s.media_id",
    )
    assert len(media) == MEDIA_JOBS and all(m["by_completer"] for m in media)
    # Every item ended completed, each through one child and the stored message.
    failed = query(
        db_dsn,
        "SELECT p.error_message AS child_error, i.error_message AS dispatch_error, "
        "i.dispatch_attempts FROM page_import p JOIN batch_item i ON i.job_id = p.id "
        "WHERE p.status <> '1' LIMIT 5",
    )
    assert failed == [], failed
    for batch in batches:
        assert batch["status"] == "1", batch
        assert batch["counts"]["completed"] == ITEMS_PER_BATCH, batch
    [items] = query(
        db_dsn,
        "SELECT count(*) AS n, count(DISTINCT job_id) AS children, "
        "count(*) FILTER (WHERE dispatched_at IS NULL) AS undispatched FROM batch_item",
    )
    assert (items["n"], items["children"], items["undispatched"]) == (
        BATCHES * ITEMS_PER_BATCH,
    ) * 2 + (0,)
    [children] = query(
        db_dsn,
        "SELECT count(*) AS n, "
        "count(*) FILTER (WHERE status = '1' AND result_url IS NOT NULL) AS done FROM page_import",
    )
    assert (children["n"], children["done"]) == (BATCHES * ITEMS_PER_BATCH,) * 2


@pytest.fixture
async def fleet_queue(aws: AwsEndpoint) -> AwsTestResources:
    """A queue of this test's own with the product's redrive (5 receives, the default of
    JOBRELAY_SQS_MAX_RECEIVE_COUNT), not the tighter 3 of `aws_resources`: with a worker
    SIGKILLed holding messages and the emulator's non-atomic receives, a message may be
    received more often than in the other tests."""
    suffix = uuid.uuid4().hex[:12]
    queues = await ensure_resources(
        aws,
        queue_name=f"fleet-{suffix}",
        dlq_name=f"fleet-dlq-{suffix}",
        bucket=f"fleet-{suffix}",
        max_receive_count=5,
    )
    return AwsTestResources(queues=queues, bucket=f"fleet-{suffix}")


@pytest.fixture
def fleet_dsn(db_dsn: str, pgbouncer: PgBouncer) -> str:
    """Where the fleet connects: PgBouncer (transaction pooling) in front of the test database."""
    return pgbouncer.dsn(str(psycopg.conninfo.conninfo_to_dict(db_dsn)["dbname"]))
