"""How the jobs engine's costs grow: claim latency and drain rate with 10k, 100k and 1M pending
jobs and with 10M finished jobs kept, enqueue latency with 1M active dedupe keys.

    .venv/bin/python -m bench.scale.jobs [--pending 10000,100000,1000000] \
        [--finished 10000000] [--dedupe 10000,100000,1000000] [--claims 300] [--drain 5000]

One embedded PostgreSQL (fsync off: the figures are about data size, not the disk), migrated
to head, autovacuum as configured; rows are loaded with `INSERT ... SELECT generate_series`
(the shape the enqueue statements write, UUIDv7 ids) and then `ANALYZE`d, as autovacuum would
after such a load. For each size, in this order:

- **claim**: `--claims` claims of 10 jobs by `jobrelay.jobs.claims.claim` (the worker's
  statement, fair claims, class `default`) on one connection, each its own transaction;
  p50 and p99 in ms. The claimed jobs are then deleted (so the next size starts from the
  stated number of pending jobs).
- **drain**: one in-process `Worker` (10 slots, `diag.noop`) runs `--drain` jobs out of the
  pending ones; jobs/s from start to the last recorded completion.

Then the same two with `--finished` completed jobs kept beside 100,000 pending (in
`finished_jobs`, where a completion moves a job since migration 0017, kept forever: nothing
for the worker's pruner to purge), the case of a queue that keeps its history. Last, enqueue
one by one (`JobsService.enqueue`, its own transaction each) of 1,000 jobs with new dedupe
keys and 1,000 with keys already active, with `--dedupe` active keyed jobs in the table; p50
and p99 in ms.

The table gives each figure by size and the growth factor per 10x of data (1.0: flat).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from psycopg_pool import AsyncConnectionPool

from bench.batches_common import FAST
from bench.scale import RunInfo
from jobrelay.bootstrap import product_job_types
from jobrelay.db import migrate
from jobrelay.db.embedded import EmbeddedPostgres
from jobrelay.db.pool import Connection, open_pool
from jobrelay.domain.jobs_config import QueueLimits
from jobrelay.jobs.claims import claim
from jobrelay.jobs.enqueue import Enqueuer, EnqueueRequest
from jobrelay.jobs.service import JobsService
from jobrelay.jobs.worker import Worker, WorkerConfig

# Rows shaped like the enqueue statements' (enqueue_new.sql): a diag.noop job, class default.
_LOAD = """
INSERT INTO jobs (id, type, payload, status, dedupe_key, available_at, role)
SELECT uuidv7(), 'diag.noop', jsonb_build_object('i', g), %(status)s,
       CASE WHEN %(keyed)s THEN 'k-' || (%(first)s + g) END, clock_timestamp(), 'job'
FROM generate_series(1, %(n)s) AS g
"""
# Completed jobs go where a completion puts them (migration 0017), purge_on NULL: kept
# forever, in finished_jobs_default.
_LOAD_FINISHED = """
INSERT INTO finished_jobs (id, type, payload, status, dedupe_key, available_at, finished_at,
                           role, attempt_count, purge_on)
SELECT uuidv7(), 'diag.noop', jsonb_build_object('i', g), 'completed',
       CASE WHEN %(keyed)s THEN 'k-' || (%(first)s + g) END,
       clock_timestamp(), clock_timestamp(), 'job', 1, NULL
FROM generate_series(1, %(n)s) AS g
"""
_CHUNK = 500_000  # rows per load statement (one transaction each: WAL and memory stay small)


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


async def _load(
    conn: Connection, n: int, *, status: str, keyed: bool = False, first: int = 0
) -> None:
    """Insert `n` jobs of `status` in chunks, then ANALYZE; keyed: dedupe keys k-<first+1>...
    Completed ones go to `finished_jobs`, the others to `jobs`."""
    finished = status == "completed"
    done = 0
    while done < n:
        step = min(_CHUNK, n - done)
        await conn.execute(
            _LOAD_FINISHED if finished else _LOAD,
            {"n": step, "status": status, "keyed": keyed, "first": first + done},
        )
        done += step
    await conn.execute("ANALYZE finished_jobs" if finished else "ANALYZE jobs")


async def _count(conn: Connection, status: str) -> int:
    cursor = await conn.execute("SELECT count(*) AS n FROM jobs WHERE status = %s", (status,))
    row = await cursor.fetchone()
    assert row is not None
    return int(str(row["n"]))


async def _claims(conn: Connection, reps: int) -> list[float]:
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        async with conn.transaction():
            jobs = await claim(
                conn, QueueLimits(lease_s=600, total=10, slots={"default": 10}), worker_id="bench"
            )
        samples.append(time.perf_counter() - start)
        assert jobs, "no job to claim"
    await conn.execute("DELETE FROM jobs WHERE status = 'in_progress'")
    return samples


async def _drain(dsn: str, n: int) -> float:
    registry = product_job_types(diag_enabled=True).registry()
    pool = await open_pool(dsn, min_size=2, max_size=16)
    try:
        async with pool.connection() as conn:
            row = await (await conn.execute("SELECT clock_timestamp() AS now")).fetchone()
        assert row is not None
        worker = Worker(pool=pool, registry=registry, config=WorkerConfig(concurrency=10))
        started = time.perf_counter()
        await worker.start()
        try:
            await _wait_finished(pool, row["now"], n)
            elapsed = time.perf_counter() - started
        finally:
            await worker.stop()
        async with pool.connection() as conn:  # give back what the worker claimed ahead
            await conn.execute(
                "UPDATE jobs SET status = 'pending', claim_token = NULL, lease_expires_at = NULL"
                " WHERE status = 'in_progress'"
            )
        return n / elapsed
    finally:
        await pool.close()


async def _wait_finished(pool: AsyncConnectionPool[Connection], since: object, n: int) -> None:
    """Poll until `n` jobs completed since `since`, counted through the finished_at indexes
    (all_jobs: jobs_finished_at_idx and finished_jobs_finished_at_idx): counting every
    completed job (10M of them in the history case) would load the server."""
    while True:
        async with pool.connection() as conn:
            cursor = await conn.execute(
                "SELECT count(*) AS n FROM all_jobs"
                " WHERE finished_at >= %s AND status = 'completed'",
                (since,),
            )
            row = await cursor.fetchone()
        if row is not None and int(str(row["n"])) >= n:
            return
        await asyncio.sleep(0.005)


async def _timed(work: Callable[[int], Awaitable[object]], reps: int) -> list[float]:
    samples = []
    for i in range(reps):
        start = time.perf_counter()
        await work(i)
        samples.append(time.perf_counter() - start)
    return samples


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pending", default="10000,100000,1000000")
    parser.add_argument("--finished", type=int, default=10_000_000)
    parser.add_argument("--dedupe", default="10000,100000,1000000")
    parser.add_argument("--claims", type=int, default=300)
    parser.add_argument("--drain", type=int, default=5000)
    args = parser.parse_args()
    pending_sizes = [int(s) for s in args.pending.split(",")]
    dedupe_sizes = [int(s) for s in args.dedupe.split(",")]
    run = RunInfo()
    results: dict[str, dict[str, float]] = {}

    def record(metric: str, size: str, value: float) -> None:
        results.setdefault(metric, {})[size] = value
        print(f"  {metric:<40} {size:>12}: {value:10.2f}", flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        server = EmbeddedPostgres(Path(tmp) / "pgdata", server_options=FAST)
        dsn = server.start()
        try:
            migrate.upgrade(dsn)
            pool = await open_pool(dsn, min_size=1, max_size=4)
            try:
                async with pool.connection() as conn:
                    for size in pending_sizes:
                        await _load(conn, size - await _count(conn, "pending"), status="pending")
                        label = f"{size:,} pending"
                        print(label, flush=True)
                        samples = await _claims(conn, args.claims)
                        await _load(conn, size - await _count(conn, "pending"), status="pending")
                        record("claim of 10, p50 (ms)", label, _pct(samples, 0.5))
                        record("claim of 10, p99 (ms)", label, _pct(samples, 0.99))
                        record("drain (jobs/s)", label, await _drain(dsn, args.drain))
                    # History: 10M finished jobs beside 100,000 pending.
                    await conn.execute("TRUNCATE jobs, finished_jobs")
                    await _load(conn, args.finished, status="completed")
                    await _load(conn, 100_000, status="pending")
                    label = f"100,000 pending + {args.finished:,} finished"
                    print(label, flush=True)
                    samples = await _claims(conn, args.claims)
                    record("claim of 10, p50 (ms)", label, _pct(samples, 0.5))
                    record("claim of 10, p99 (ms)", label, _pct(samples, 0.99))
                    record("drain (jobs/s)", label, await _drain(dsn, args.drain))
                    # Enqueue with many active dedupe keys.
                    await conn.execute("TRUNCATE jobs, finished_jobs")
                registry = product_job_types(diag_enabled=True).registry()
                service = JobsService(
                    pool=pool,
                    registry=registry,
                    enqueuer=Enqueuer(registry, payload_limit_bytes=256 * 1024),
                )
                loaded = 0
                for size in dedupe_sizes:
                    async with pool.connection() as conn:
                        await _load(conn, size - loaded, status="pending", keyed=True, first=loaded)
                    loaded = size
                    label = f"{size:,} active keys"
                    print(label, flush=True)

                    async def new_key(i: int, label: str = label) -> object:
                        return await service.enqueue(
                            EnqueueRequest("diag.noop", {"i": i}, dedupe_key=f"new-{label}-{i}")
                        )

                    async def known_key(i: int) -> object:
                        return await service.enqueue(
                            EnqueueRequest("diag.noop", {"i": i}, dedupe_key=f"k-{i + 1}")
                        )

                    created = await _timed(new_key, 1000)
                    deduplicated = await _timed(known_key, 1000)
                    record("enqueue, new key, p50 (ms)", label, _pct(created, 0.5))
                    record("enqueue, new key, p99 (ms)", label, _pct(created, 0.99))
                    record("enqueue, active key, p50 (ms)", label, _pct(deduplicated, 0.5))
                    record("enqueue, active key, p99 (ms)", label, _pct(deduplicated, 0.99))
                    async with pool.connection() as conn:  # keep the stated number of keys
                        await conn.execute("DELETE FROM jobs WHERE dedupe_key LIKE 'new-%'")
            finally:
                await pool.close()
        finally:
            server.stop()
    print()
    print(run.footer())
    for metric, by_size in results.items():
        labels = list(by_size)
        values = [by_size[k] for k in labels]
        factors = [f"{b / a:.2f}" if a else "—" for a, b in itertools.pairwise(values)]
        cells = ", ".join(f"{k}: {v:.2f}" for k, v in by_size.items())
        print(f"| {metric} | {cells} | growth per step: {', '.join(factors)} |")


if __name__ == "__main__":
    asyncio.run(main())
