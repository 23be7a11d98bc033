"""One bad and one locked row beside a drain (issue 40), against the same drain without them.

One in-process worker of 100 slots drains `--jobs` `bench.rows` jobs (each sleeps
`--sleep-s`, so about 100 are in flight). The baseline drains them alone; the trial adds,
among the first jobs claimed, one whose result holds a NUL character (PostgreSQL cannot
store it) and one whose row another connection locks `FOR UPDATE` while it runs, for
`--lock-s` seconds. Printed per rep: the others' rate in both variants and its ratio
(trial / baseline, 1.0 = untouched), the poisoned job's end (failed once, with its reason),
and how long after the lock went the locked job completed, with its attempt count.

    .venv/bin/python -m bench.bad_rows --jobs 3000 --reps 3 --lock-s 60
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from jobrelay import Complete, JobContext, JobPayload, JobTypes
from jobrelay.bootstrap import product_job_types
from jobrelay.db import migrate
from jobrelay.db.embedded import EmbeddedPostgres
from jobrelay.db.pool import Connection, open_pool
from jobrelay.jobs.enqueue import Enqueuer, EnqueueRequest
from jobrelay.jobs.worker import Worker, WorkerConfig

SLOTS = 100


class RowsPayload(JobPayload):
    sleep_s: float = 0.0
    poison: bool = False


bench_types = JobTypes()


@bench_types.job_type("bench.rows")
async def rows_job(ctx: JobContext[RowsPayload]) -> Complete:
    await asyncio.sleep(ctx.payload.sleep_s)
    return Complete(result={"text": "before\x00after"} if ctx.payload.poison else {"ok": True})


def _registry() -> Any:
    group = product_job_types(diag_enabled=False)
    group.include(bench_types)
    return group.registry()


async def _count_done(pool: AsyncConnectionPool[Connection], ids: list[uuid.UUID]) -> int:
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT count(*) AS n FROM all_jobs WHERE id = ANY(%s) AND status = 'completed'",
            (ids,),
        )
        row = await cur.fetchone()
    assert row is not None
    return int(row["n"])


async def _job(pool: AsyncConnectionPool[Connection], job_id: uuid.UUID) -> dict[str, Any]:
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT status, attempt_count, last_error FROM all_jobs WHERE id = %s", (job_id,)
        )
        row = await cur.fetchone()
    assert row is not None
    return dict(row)


async def _until(probe: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not await probe():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(0.01)


async def _run(dsn: str, jobs: int, sleep_s: float, lock_s: float, bad: bool) -> dict[str, Any]:
    registry = _registry()
    pool = await open_pool(dsn, min_size=2, max_size=16)
    try:
        async with pool.connection() as conn:
            await conn.execute("TRUNCATE jobs, finished_jobs, job_attempts")
        requests = [EnqueueRequest("bench.rows", {"sleepS": sleep_s}) for _ in range(jobs)]
        if bad:  # among the first claimed: the claim takes the oldest first
            requests[:0] = [
                EnqueueRequest("bench.rows", {"sleepS": sleep_s, "poison": True}),
                EnqueueRequest("bench.rows", {"sleepS": max(1.0, sleep_s)}),
            ]
        enqueuer = Enqueuer(registry, payload_limit_bytes=262144)
        async with pool.connection() as conn, conn.transaction():
            enqueued = await enqueuer.enqueue_many(conn, requests)
        ids = [e.id for e in enqueued]
        poisoned, locked = (ids[0], ids[1]) if bad else (None, None)
        others = ids[2:] if bad else ids
        worker = Worker(pool=pool, registry=registry, config=WorkerConfig(concurrency=SLOTS))
        holder: psycopg.AsyncConnection[Any] | None = None
        started = time.perf_counter()
        await worker.start()
        try:
            if locked is not None:
                await _until(lambda: _is_running(pool, locked), 30, "the locked job to start")
                holder = await psycopg.AsyncConnection.connect(dsn)
                await holder.execute("SELECT 1 FROM jobs WHERE id = %s FOR UPDATE", (locked,))
            await _until(lambda: _all_done(pool, others), 600, f"{len(others)} jobs to complete")
            elapsed = time.perf_counter() - started
            result: dict[str, Any] = {"rate": len(others) / elapsed}
            if holder is not None and locked is not None and poisoned is not None:
                held_for = time.perf_counter() - started
                if lock_s > held_for:
                    await asyncio.sleep(lock_s - held_for)  # hold the lock for --lock-s
                still = await _job(pool, locked)
                await holder.rollback()
                released = time.perf_counter()
                await _until(lambda: _is_completed(pool, locked), 120, "the locked job")
                result["after_release_s"] = time.perf_counter() - released
                result["locked_while_held"] = still["status"]
                result["locked_attempts"] = (await _job(pool, locked))["attempt_count"]
                result["poisoned"] = await _job(pool, poisoned)
        finally:
            if holder is not None:
                await holder.close()
            await worker.stop()
        return result
    finally:
        await pool.close()


async def _all_done(pool: AsyncConnectionPool[Connection], ids: list[uuid.UUID]) -> bool:
    return await _count_done(pool, ids) >= len(ids)


async def _is_running(pool: AsyncConnectionPool[Connection], job_id: uuid.UUID) -> bool:
    return (await _job(pool, job_id))["status"] == "in_progress"


async def _is_completed(pool: AsyncConnectionPool[Connection], job_id: uuid.UUID) -> bool:
    return (await _job(pool, job_id))["status"] == "completed"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--sleep-s", type=float, default=0.05)
    parser.add_argument("--lock-s", type=float, default=60.0)
    args = parser.parse_args()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    url = os.environ.get("DATABASE_URL")
    server = None
    if url is None:
        server = EmbeddedPostgres(Path(tempfile.gettempdir()) / "jobrelay-bench-bad-rows")
        url = server.start()
    try:
        migrate.upgrade(url)
        print(f"# commit {commit} load average {os.getloadavg()}", flush=True)
        ratios: list[float] = []
        for rep in range(1, args.reps + 1):
            order = (False, True) if rep % 2 else (True, False)
            rates: dict[bool, float] = {}
            for bad in order:
                result = asyncio.run(_run(url, args.jobs, args.sleep_s, args.lock_s, bad))
                rates[bad] = result["rate"]
                if bad:
                    poisoned = result["poisoned"]
                    print(
                        f"rep={rep} locked job: {result['locked_while_held']} while held, "
                        f"completed {result['after_release_s']:.2f} s after the lock went, "
                        f"attempts {result['locked_attempts']}; poisoned job: "
                        f"{poisoned['status']} after {poisoned['attempt_count']} attempt(s): "
                        f"{poisoned['last_error']}",
                        flush=True,
                    )
            ratios.append(rates[True] / rates[False])
            print(
                f"rep={rep} others jobs_per_s baseline={rates[False]:.0f} "
                f"with_bad_rows={rates[True]:.0f} ratio={ratios[-1]:.2f}",
                flush=True,
            )
        print(
            f"ratio median {statistics.median(ratios):.2f} (min-max {min(ratios):.2f}-"
            f"{max(ratios):.2f}); # load average at the end {os.getloadavg()}",
            flush=True,
        )
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
