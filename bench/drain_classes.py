"""Drain throughput with concurrency classes and per-source serialization active, as a
ratio to the plain engine, measured in the same run on the same server.

    .venv/bin/python bench/drain_classes.py [--jobs 5000] [--reps 3] [--sources 100]

Every scenario drains the same number of `diag.sleep {seconds: 0}` jobs (an empty handler)
with one in-process worker of 10 slots, on an embedded PostgreSQL with durable defaults
(fsync, synchronous_commit on):

* `plain`: every job class `default`, no source key; `WorkerConfig(concurrency=10)` (every
  class shares 10 slots), no global cap.
* `classes`: 20 % class `ai` under a global cap `ai=2`, 80 % `default`, and half of all
  jobs serialized over `--sources` source keys; `slots={"ai": 2, "default": 8}`.
* `cap_only` and `sources_only`: each half of `classes` alone, to tell their costs apart.

A drain is timed from the worker's start to the moment every job is completed (polled in
the database). Prints one line per rep and scenario, then the medians and each ratio to
`plain`.
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

from jobrelay.bootstrap import product_job_types
from jobrelay.db import migrate
from jobrelay.db.embedded import EmbeddedPostgres
from jobrelay.db.pool import open_pool
from jobrelay.jobs.enqueue import Enqueuer, EnqueueRequest
from jobrelay.jobs.worker import Worker, WorkerConfig

SCENARIOS = ("plain", "classes", "cap_only", "sources_only")


def _requests(n: int, scenario: str, sources: int) -> list[EnqueueRequest]:
    capped = scenario in ("classes", "cap_only")
    serialized = scenario in ("classes", "sources_only")
    out = []
    for i in range(n):
        payload: dict[str, Any] = {"seconds": 0}
        if capped and i % 5 == 0:
            payload["concurrencyClass"] = "ai"
        if serialized and i % 2 == 0:
            payload["sourceKey"] = f"source-{(i // 2) % sources}"
        out.append(EnqueueRequest("diag.sleep", payload))
    return out


def _config(scenario: str) -> WorkerConfig:
    if scenario == "plain":
        return WorkerConfig(concurrency=10)
    if scenario == "sources_only":
        return WorkerConfig(slots={"default": 10})
    return WorkerConfig(slots={"ai": 2, "default": 8}, global_caps={"ai": 2})


async def _drain(dsn: str, n: int, scenario: str, sources: int) -> float:
    registry = product_job_types(diag_enabled=True).registry()
    pool = await open_pool(dsn, min_size=2, max_size=16)
    try:
        async with pool.connection() as conn:
            await conn.execute("TRUNCATE jobs, finished_jobs, job_attempts")
        enqueuer = Enqueuer(registry, payload_limit_bytes=262144)
        requests = _requests(n, scenario, sources)
        async with pool.connection() as conn, conn.transaction():
            for start in range(0, n, 1000):
                await enqueuer.enqueue_many(conn, requests[start : start + 1000])
        worker = Worker(pool=pool, registry=registry, config=_config(scenario))
        started = time.perf_counter()
        await worker.start()
        try:
            while True:
                async with pool.connection() as conn:
                    cur = await conn.execute(
                        "SELECT count(*) AS n FROM all_jobs WHERE status = 'completed'"
                    )
                    row = await cur.fetchone()
                assert row is not None
                if row["n"] >= n:
                    break
                await asyncio.sleep(0.01)
            elapsed = time.perf_counter() - started
        finally:
            await worker.stop()
        return n / elapsed
    finally:
        await pool.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--sources", type=int, default=100, help="source keys (default 100)")
    args = parser.parse_args()
    url = os.environ.get("DATABASE_URL")
    server = None
    if url is None:
        server = EmbeddedPostgres(Path(tempfile.gettempdir()) / "jobrelay-bench-classes")
        url = server.start()
    try:
        migrate.upgrade(url)
        results: dict[str, list[float]] = {name: [] for name in SCENARIOS}
        print(f"# load average {os.getloadavg()} sources={args.sources}", flush=True)
        for rep in range(1, args.reps + 1):
            # rotate the order each rep so no scenario always runs first
            order = SCENARIOS[rep % len(SCENARIOS) :] + SCENARIOS[: rep % len(SCENARIOS)]
            for name in order:
                rate = asyncio.run(_drain(url, args.jobs, name, args.sources))
                results[name].append(rate)
                print(
                    f"rep={rep} scenario={name} jobs={args.jobs} jobs_per_s={rate:.0f}", flush=True
                )
        medians = {name: statistics.median(rates) for name, rates in results.items()}
        plain = medians["plain"]
        print(
            "median "
            + " ".join(f"{name}={rate:.0f}" for name, rate in medians.items())
            + " ratios "
            + " ".join(f"{name}={rate / plain:.2f}" for name, rate in medians.items())
            + f" load={os.getloadavg()[0]:.2f}"
        )
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    sys.exit(main())
