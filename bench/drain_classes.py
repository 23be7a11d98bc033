"""Drain throughput with concurrency classes and per-source serialization active, as a
ratio to the plain engine, measured in the same run on the same server.

    .venv/bin/python bench/drain_classes.py [--jobs 5000] [--reps 3]

Both scenarios drain the same number of `diag.sleep {seconds: 0}` jobs (an empty handler)
with one in-process worker of 10 slots, on an embedded PostgreSQL with durable defaults
(fsync, synchronous_commit on):

* `plain`: every job class `default`, no source key; `WorkerConfig(concurrency=10)` (every
  class shares 10 slots), no global cap.
* `classes`: 20 % class `ai` under a global cap `ai=2`, 80 % `default`, and half of all
  jobs serialized over 100 source keys; `slots={"ai": 2, "default": 8}`.

A drain is timed from the worker's start to the moment every job is completed (polled in
the database). Prints one line per rep and scenario, then the medians and the ratio.
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

from jobrelay.db import migrate
from jobrelay.db.embedded import EmbeddedPostgres
from jobrelay.db.pool import open_pool
from jobrelay.jobs.enqueue import Enqueuer, EnqueueRequest
from jobrelay.jobs.types import build_registry
from jobrelay.jobs.worker import Worker, WorkerConfig


def _requests(n: int, classes: bool) -> list[EnqueueRequest]:
    out = []
    for i in range(n):
        payload: dict[str, Any] = {"seconds": 0}
        if classes:
            if i % 5 == 0:
                payload["concurrencyClass"] = "ai"
            if i % 2 == 0:
                payload["sourceKey"] = f"source-{i % 100}"
        out.append(EnqueueRequest("diag.sleep", payload))
    return out


async def _drain(dsn: str, n: int, classes: bool) -> float:
    registry = build_registry(diag_enabled=True)
    pool = await open_pool(dsn, min_size=2, max_size=16)
    try:
        async with pool.connection() as conn:
            await conn.execute("TRUNCATE jobs")
        enqueuer = Enqueuer(registry, payload_limit_bytes=262144)
        requests = _requests(n, classes)
        async with pool.connection() as conn, conn.transaction():
            for start in range(0, n, 1000):
                await enqueuer.enqueue_many(conn, requests[start : start + 1000])
        config = (
            WorkerConfig(slots={"ai": 2, "default": 8}, global_caps={"ai": 2})
            if classes
            else WorkerConfig(concurrency=10)
        )
        worker = Worker(pool=pool, registry=registry, config=config)
        started = time.perf_counter()
        await worker.start()
        try:
            while True:
                async with pool.connection() as conn:
                    cur = await conn.execute(
                        "SELECT count(*) AS n FROM jobs WHERE status = 'completed'"
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
    args = parser.parse_args()
    url = os.environ.get("DATABASE_URL")
    server = None
    if url is None:
        server = EmbeddedPostgres(Path(tempfile.gettempdir()) / "jobrelay-bench-classes")
        url = server.start()
    try:
        migrate.upgrade(url)
        results: dict[str, list[float]] = {"plain": [], "classes": []}
        print(f"# load average {os.getloadavg()}", flush=True)
        for rep in range(1, args.reps + 1):
            order = ["plain", "classes"] if rep % 2 else ["classes", "plain"]
            for name in order:
                rate = asyncio.run(_drain(url, args.jobs, name == "classes"))
                results[name].append(rate)
                print(
                    f"rep={rep} scenario={name} jobs={args.jobs} jobs_per_s={rate:.0f}", flush=True
                )
        plain, classes = (statistics.median(results[k]) for k in ("plain", "classes"))
        print(
            f"median plain={plain:.0f} classes={classes:.0f} ratio={classes / plain:.2f} "
            f"load={os.getloadavg()[0]:.2f}"
        )
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    sys.exit(main())
