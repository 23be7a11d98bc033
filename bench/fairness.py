"""What fair claiming (issue 17) costs a single tenant's drain, as a ratio to the claim
without fairness measured in the same run on the same server, and what it buys when a second
tenant arrives behind a backlog.

    .venv/bin/python bench/fairness.py [--jobs 10000] [--reps 3] [--race 20000]

Drain: every scenario drains the same number of `diag.sleep {seconds: 0}` jobs (an empty
handler) with one in-process worker of 10 slots (`WorkerConfig(concurrency=10)`), on an
embedded PostgreSQL with durable defaults (fsync, synchronous_commit on):

* `fifo`: `fair_claims=False`, strict priority and arrival order (`claim_jobs.sql` with
  `fair` false; until issue 23 its own statement, `claim_jobs_fifo.sql`): the baseline.
* `fair`: `fair_claims=True` (the default), every job without a fairness key (NULL): a
  single tenant as deployed today.
* `fair_one_key`: `fair_claims=True`, every job with the same fairness key.
* `fair_100_keys`: `fair_claims=True`, the jobs spread over 100 keys (many tenants; not the
  single-tenant budget, shown for its cost).

A drain is timed from the worker's start to the moment every job is completed (polled in
the database). Prints one line per rep and scenario, then the medians and each ratio to
`fifo`.

Statement (`--statement`): the claim statement alone, `fair` true vs false, on one claim connection
(generic plan, as the worker runs it) over `--jobs` pending jobs without a key: rounds of 50
claims of 10 jobs each (committed; the claimed jobs are put back to pending after each
round), alternating the two statements; prints the median milliseconds per claim and the ratio.

Race (`--race N`, 0 to skip): tenant A enqueues N jobs, two in-process workers of 4 slots
drain them, and when 200 of A's jobs are done tenant B enqueues 10. Prints, with fairness and
without, how many of A's jobs completed while B's 10 waited and how long B waited.
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
from typing import Any

from psycopg_pool import AsyncConnectionPool

from jobrelay.bootstrap import product_job_types
from jobrelay.db import migrate
from jobrelay.db.embedded import EmbeddedPostgres
from jobrelay.db.pool import Connection, open_pool
from jobrelay.db.sql import Queries
from jobrelay.jobs import claims
from jobrelay.jobs.enqueue import Enqueuer, EnqueueRequest
from jobrelay.jobs.registry import Registry
from jobrelay.jobs.worker import Worker, WorkerConfig

SCENARIOS = ("fifo", "fair", "fair_one_key", "fair_100_keys")


def _requests(n: int, scenario: str, key: str | None = None) -> list[EnqueueRequest]:
    out = []
    for i in range(n):
        payload: dict[str, Any] = {"seconds": 0}
        if key is not None:
            payload["fairnessKey"] = key
        elif scenario == "fair_one_key":
            payload["fairnessKey"] = "org-a"
        elif scenario == "fair_100_keys":
            payload["fairnessKey"] = f"org-{i % 100:03d}"
        out.append(EnqueueRequest("diag.sleep", payload))
    return out


async def _enqueue(
    pool: AsyncConnectionPool[Connection], registry: Registry, requests: list[EnqueueRequest]
) -> None:
    enqueuer = Enqueuer(registry, payload_limit_bytes=262144)
    async with pool.connection() as conn, conn.transaction():
        for start in range(0, len(requests), 1000):
            await enqueuer.enqueue_many(conn, requests[start : start + 1000])


async def _count(pool: AsyncConnectionPool[Connection], sql: str) -> int:
    async with pool.connection() as conn:
        cur = await conn.execute(sql)  # type: ignore[arg-type]
        row = await cur.fetchone()
    assert row is not None
    return int(row["n"])


async def _wait_for(pool: AsyncConnectionPool[Connection], sql: str, at_least: int) -> None:
    """Poll `sql` (a count) until it reaches `at_least`."""
    while True:
        if await _count(pool, sql) >= at_least:
            return
        await asyncio.sleep(0.005)


# Completed jobs are in finished_jobs (migration 0017); all_jobs reads both tables.
_A_DONE = "SELECT count(*) AS n FROM all_jobs WHERE fairness_key = 'org-a' AND status = 'completed'"
_B_DONE = "SELECT count(*) AS n FROM all_jobs WHERE fairness_key = 'org-b' AND status = 'completed'"
_ALL_DONE = "SELECT count(*) AS n FROM all_jobs WHERE status = 'completed'"


async def _drain(dsn: str, n: int, scenario: str, config: WorkerConfig | None = None) -> float:
    """Drain `n` jobs of `scenario` with one in-process worker (10 slots; `config` replaces
    the scenario's fifo/fair configuration) and return jobs/s."""
    registry = product_job_types(diag_enabled=True).registry()
    pool = await open_pool(dsn, min_size=2, max_size=16)
    try:
        async with pool.connection() as conn:
            await conn.execute("TRUNCATE jobs, finished_jobs")
        await _enqueue(pool, registry, _requests(n, scenario))
        async with pool.connection() as conn:
            await conn.execute("ANALYZE jobs")
        if config is None:
            config = WorkerConfig(concurrency=10, fair_claims=scenario != "fifo")
        worker = Worker(pool=pool, registry=registry, config=config)
        started = time.perf_counter()
        await worker.start()
        try:
            await _wait_for(pool, _ALL_DONE, n)
            elapsed = time.perf_counter() - started
        finally:
            await worker.stop()
        return n / elapsed
    finally:
        await pool.close()


async def _race(dsn: str, n: int, fair: bool) -> tuple[int, float]:
    registry = product_job_types(diag_enabled=True).registry()
    pool = await open_pool(dsn, min_size=2, max_size=24)
    try:
        async with pool.connection() as conn:
            await conn.execute("TRUNCATE jobs, finished_jobs")
        await _enqueue(pool, registry, _requests(n, "", key="org-a"))
        config = WorkerConfig(concurrency=4, fair_claims=fair)
        workers = [Worker(pool=pool, registry=registry, config=config) for _ in range(2)]
        for worker in workers:
            await worker.start()
        try:
            a_done, b_done = _A_DONE, _B_DONE
            await _wait_for(pool, a_done, 200)
            arrived = time.perf_counter()
            before = await _count(pool, a_done)
            await _enqueue(pool, registry, _requests(10, "", key="org-b"))
            await _wait_for(pool, b_done, 10)
            waited = time.perf_counter() - arrived
            during = await _count(pool, a_done) - before
        finally:
            for worker in workers:
                await worker.stop()
        return during, waited
    finally:
        await pool.close()


_RESET = """
UPDATE jobs SET status = 'pending', claim_token = NULL, claimed_by = NULL, claimed_at = NULL,
    lease_expires_at = NULL, heartbeat_at = NULL, class_slot = NULL, attempt_count = 0
WHERE status = 'in_progress'
"""


async def _statement(dsn: str, n: int, rounds: int = 15) -> dict[str, float]:
    registry = product_job_types(diag_enabled=True).registry()
    queries = Queries("jobrelay.jobs")
    pool = await open_pool(dsn, min_size=1, max_size=4)
    try:
        async with pool.connection() as conn:
            await conn.execute("TRUNCATE jobs, finished_jobs")
        await _enqueue(pool, registry, _requests(n, "fair"))
        per_claim: dict[str, list[float]] = {"fifo": [], "fair": []}
        async with pool.connection() as conn:
            await conn.execute("ANALYZE jobs")
            await claims.configure_claim_session(conn)
            params = {
                "worker_id": "bench",
                "total": 10,
                "lease_s": 30.0,
                "classes": ["default"],
                "limits": [10],
                "caps": [None],
                "types": None,
                "floors": None,
            }
            for _ in range(rounds):
                for name in per_claim:
                    started = time.perf_counter()
                    for _ in range(50):
                        await conn.execute(
                            queries.claim_jobs, {**params, "fair": name == "fair"}, prepare=True
                        )
                    per_claim[name].append((time.perf_counter() - started) / 50 * 1000)
                    # Back to pending, untimed. Not a rollback per claim: psycopg drops its
                    # prepared statements on a rollback, and re-planning is not the claim.
                    async with pool.connection() as reset:
                        await reset.execute(_RESET)
        return {name: statistics.median(ms) for name, ms in per_claim.items()}
    finally:
        await pool.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=10000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--race", type=int, default=20000, help="A's backlog (0: no race)")
    parser.add_argument("--statement", action="store_true", help="time the claim statement")
    parser.add_argument("--no-drain", action="store_true", help="skip the drain scenarios")
    parser.add_argument(
        "--scenarios", default=",".join(SCENARIOS), help="drain scenarios, comma-separated"
    )
    args = parser.parse_args()
    url = os.environ.get("DATABASE_URL")
    server = None
    if url is None:
        server = EmbeddedPostgres(Path(tempfile.gettempdir()) / "jobrelay-bench-fairness")
        url = server.start()
    try:
        migrate.upgrade(url)
        print(f"# load average {os.getloadavg()}", flush=True)
        if args.statement:
            ms = asyncio.run(_statement(url, args.jobs))
            print(
                f"statement pending={args.jobs} fifo_ms={ms['fifo']:.3f} "
                f"fair_ms={ms['fair']:.3f} "
                f"ratio={ms['fair'] / ms['fifo']:.2f} "
                f"load={os.getloadavg()[0]:.2f}",
                flush=True,
            )
        scenarios = tuple(name for name in args.scenarios.split(",") if name in SCENARIOS)
        results: dict[str, list[float]] = {name: [] for name in scenarios}
        for rep in range(1, 0 if args.no_drain else args.reps + 1):
            # rotate the order each rep so no scenario always runs first
            order = scenarios[rep % len(scenarios) :] + scenarios[: rep % len(scenarios)]
            for name in order:
                rate = asyncio.run(_drain(url, args.jobs, name))
                results[name].append(rate)
                print(
                    f"rep={rep} scenario={name} jobs={args.jobs} jobs_per_s={rate:.0f}", flush=True
                )
        medians = {name: statistics.median(rates) for name, rates in results.items() if rates}
        base = medians.get("fifo", 0.0)
        print(
            "median "
            + " ".join(f"{name}={rate:.0f}" for name, rate in medians.items())
            + " ratios "
            + " ".join(f"{name}={rate / base:.2f}" for name, rate in medians.items() if base)
            + f" load={os.getloadavg()[0]:.2f}",
            flush=True,
        )
        if args.race:
            for fair in (True, False):
                during, waited = asyncio.run(_race(url, args.race, fair))
                print(
                    f"race backlog={args.race} fair={fair} a_done_while_b_waited={during} "
                    f"b_waited_s={waited:.2f} load={os.getloadavg()[0]:.2f}",
                    flush=True,
                )
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    sys.exit(main())
