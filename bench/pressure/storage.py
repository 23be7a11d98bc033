"""The storage shape under a kept history: a drain with many finished jobs kept, as a ratio to
the same drain without them, and the dead row versions each job leaves, measured in the same
run on the same server (issue 27, migration 0017: finished jobs leave `jobs`).

    .venv/bin/python -m bench.pressure.storage [--jobs 20000] [--history 1000000] [--reps 3]

Each rep drains `--jobs` `diag.sleep {seconds: 0}` jobs (an empty handler) with one
in-process worker of 10 slots, twice, in an order that alternates between reps:

* `empty`: `finished_jobs` empty;
* `kept`: `--history` finished jobs kept in `finished_jobs` (in the partition of a purge day
  a week ahead, as a 7-day retention leaves them).

A drain is timed from the worker's start to the moment every job is finished (polled in
`finished_jobs`). With autovacuum off on both tables during the drain, the statistics then
give the dead row versions per drained job in `jobs` and in `finished_jobs` (each job:
inserted, claimed by an UPDATE, finished by a DELETE plus an INSERT into `finished_jobs`;
retention later drops its partition, no DELETE). Prints one line per drain, then the
medians and the ratio kept/empty (target >= 0.95).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from psycopg_pool import AsyncConnectionPool

from jobrelay.bootstrap import product_job_types
from jobrelay.db import migrate
from jobrelay.db.embedded import EmbeddedPostgres
from jobrelay.db.pool import Connection, open_pool
from jobrelay.jobs.enqueue import Enqueuer, EnqueueRequest
from jobrelay.jobs.worker import Worker, WorkerConfig

Pool = AsyncConnectionPool[Connection]
SCENARIOS = ("empty", "kept")
_STATS = """
SELECT coalesce(sum(n_dead_tup) FILTER (WHERE relname = 'jobs'), 0) AS jobs_dead,
       coalesce(sum(n_dead_tup) FILTER (WHERE relname LIKE 'finished_jobs%%'), 0)
           AS finished_dead,
       coalesce(sum(n_tup_del) FILTER (WHERE relname = 'jobs'), 0) AS jobs_deleted
FROM pg_stat_user_tables
WHERE relname = 'jobs' OR relname LIKE 'finished_jobs%%'
"""


async def _one(pool: Pool, sql: str, params: object = None) -> dict[str, float]:
    async with pool.connection() as conn:
        row = await (await conn.execute(sql, params)).fetchone()  # type: ignore[arg-type]
    assert row is not None
    return {key: float(value) for key, value in row.items()}


async def _reset(pool: Pool, history: int) -> None:
    async with pool.connection() as conn:
        await conn.execute("TRUNCATE jobs, finished_jobs, job_attempts")
        day = await (
            await conn.execute("SELECT jobrelay_finished_partition_v1(current_date + 7) AS name")
        ).fetchone()
        assert day is not None and day["name"]
        if history:
            await conn.execute(
                "INSERT INTO finished_jobs (id, type, status, payload, result, attempt_count, "
                "finished_at, purge_on) "
                "SELECT gen_random_uuid(), 'diag.sleep', 'completed', '{\"seconds\": 0}', "
                "'{}', 1, now() - interval '1 day', current_date + 7 "
                "FROM generate_series(1, %s)",
                (history,),
            )
        await conn.execute("VACUUM (ANALYZE) jobs")
        await conn.execute("VACUUM (ANALYZE) finished_jobs")
        for table in ("jobs", "finished_jobs_default", str(day["name"])):
            await conn.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
        await conn.execute("SELECT pg_stat_reset()")


async def _drain(dsn: str, jobs: int, history: int) -> dict[str, float]:
    registry = product_job_types(diag_enabled=True).registry()
    pool = await open_pool(dsn, min_size=2, max_size=16)
    try:
        await _reset(pool, history)
        enqueuer = Enqueuer(registry, payload_limit_bytes=262144)
        requests = [EnqueueRequest("diag.sleep", {"seconds": 0})] * jobs
        async with pool.connection() as conn, conn.transaction():
            for start in range(0, jobs, 1000):
                await enqueuer.enqueue_many(conn, requests[start : start + 1000])
        worker = Worker(pool=pool, registry=registry, config=WorkerConfig(concurrency=10))
        done_sql = (
            "SELECT count(*) AS n FROM finished_jobs WHERE status = 'completed' "
            "AND finished_at > now() - interval '1 hour'"
        )
        started = time.perf_counter()
        await worker.start()
        try:
            while True:
                if (await _one(pool, done_sql))["n"] >= jobs:
                    break
                await asyncio.sleep(0.01)
            elapsed = time.perf_counter() - started
        finally:
            await worker.stop()
        deadline = time.monotonic() + 30  # the backends' statistics are flushed within ~1 s
        stats = await _one(pool, _STATS)
        while stats["jobs_deleted"] < jobs and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
            stats = await _one(pool, _STATS)
        return {
            "jobs_per_s": jobs / elapsed,
            "dead_per_job_jobs": stats["jobs_dead"] / jobs,
            "dead_per_job_finished": stats["finished_dead"] / jobs,
        }
    finally:
        await pool.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--history", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    url = os.environ.get("DATABASE_URL")
    server = None
    if url is None:
        server = EmbeddedPostgres(Path(tempfile.gettempdir()) / "jobrelay-bench-storage")
        url = server.start()
    try:
        migrate.upgrade(url)
        rates: dict[str, list[float]] = {name: [] for name in SCENARIOS}
        dead: list[tuple[float, float]] = []
        print(f"# load average {os.getloadavg()} jobs={args.jobs} history={args.history}")
        for rep in range(1, args.reps + 1):
            order = SCENARIOS if rep % 2 else SCENARIOS[::-1]
            for name in order:
                history = args.history if name == "kept" else 0
                found = asyncio.run(_drain(url, args.jobs, history))
                rates[name].append(found["jobs_per_s"])
                dead.append((found["dead_per_job_jobs"], found["dead_per_job_finished"]))
                print(
                    f"rep={rep} scenario={name} jobs_per_s={found['jobs_per_s']:.0f} "
                    f"dead_per_job jobs={found['dead_per_job_jobs']:.2f} "
                    f"finished_jobs={found['dead_per_job_finished']:.2f}",
                    flush=True,
                )
        medians = {name: statistics.median(values) for name, values in rates.items()}
        print(
            f"median empty={medians['empty']:.0f} kept={medians['kept']:.0f} jobs/s "
            f"ratio kept/empty={medians['kept'] / medians['empty']:.2f} "
            f"dead_per_job jobs={statistics.median(d[0] for d in dead):.2f} "
            f"finished_jobs={statistics.median(d[1] for d in dead):.2f} "
            f"load={os.getloadavg()[0]:.2f}"
        )
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    sys.exit(main())
