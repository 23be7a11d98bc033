"""Long-run health: a steady enqueue rate for an hour, optionally with one transaction held
open the whole time (a pinned xmin horizon), recording claim latency and dead tuples.

    .venv/bin/python -m bench.soak --minutes 60 --rate 100 --pin-xmin --out soak-pinned.csv
    .venv/bin/python -m bench.soak --minutes 60 --rate 100 --out soak-free.csv
    .venv/bin/python -m bench.soak_plot soak-free.csv soak-pinned.csv --png docs/images/soak.png

One embedded PostgreSQL of its own (server defaults: fsync and synchronous commit on,
autovacuum as configured), migrated to head. In-process:

- an enqueuer: `--rate` jobs per second of `diag.noop` in ten bulk calls a second (the
  enqueue path a batch or API client takes);
- one `Worker` of 10 slots with the production defaults (fair claims, batched completions,
  retention `--retention-s` with a prune every 60 s; since migration 0017 a completed job
  leaves `jobs` for `finished_jobs` at once, and retention drops whole partitions once
  their purge day (UTC) is over, so no job is purged before the day after it finished);
- a probe: ten times a second, one claim of one job by the worker's own statement in a
  transaction that is rolled back (it changes nothing), timed; with claim floors refreshed
  as the worker's claim loop refreshes them (`--no-floors`: neither uses floors);
- with `--pin-xmin`: a REPEATABLE READ transaction that took a snapshot and an xid at the
  start and stays open (an idle-in-transaction session, an open cursor, a stuck replica
  feedback: vacuum can remove nothing newer) to the end, or until minute
  `--release-after-min`, when it ends (as `idle_in_transaction_session_timeout` or an
  operator would end it) and the rest of the run shows the recovery.

Every `--window-s` (60 s) one CSV row: minute, probe p50/p99 (ms), dead and live tuples of
`jobs` (pg_stat_user_tables), its size with indexes (MB), pending jobs, completed so far
(`all_jobs`: the completed ones are in `finished_jobs`),
autovacuum runs of `jobs`, the age of the oldest xmin, the load average. The summary line
compares the last five windows' p99 with the first five's.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import os
import subprocess
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from jobrelay.bootstrap import product_job_types
from jobrelay.db import migrate
from jobrelay.db.embedded import EmbeddedPostgres
from jobrelay.db.pool import Connection, open_pool
from jobrelay.domain.jobs_config import QueueLimits
from jobrelay.jobs.claims import claim
from jobrelay.jobs.enqueue import Enqueuer, EnqueueRequest
from jobrelay.jobs.floors import ClaimFloors
from jobrelay.jobs.worker import Worker, WorkerConfig

_SAMPLE = """
SELECT s.n_dead_tup, s.n_live_tup, s.autovacuum_count,
       pg_total_relation_size('jobs') / 1048576.0 AS size_mb,
       (SELECT count(*) FROM jobs WHERE status = 'pending') AS pending,
       (SELECT count(*) FROM all_jobs WHERE status = 'completed') AS completed,
       (SELECT max(age(backend_xmin)) FROM pg_stat_activity) AS xmin_age
FROM pg_stat_user_tables AS s
WHERE s.relname = 'jobs'
"""
FIELDS = (
    "minute",
    "claim_p50_ms",
    "claim_p99_ms",
    "probes",
    "dead_tuples",
    "live_tuples",
    "size_mb",
    "pending",
    "completed",
    "autovacuum_runs",
    "oldest_xmin_age",
    "load1",
)


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000 if ordered else 0.0


class _Rollback(Exception):
    """Ends the probe's transaction without committing its claim."""


async def _probe(conn: Connection, floors: ClaimFloors | None) -> float:
    start = time.perf_counter()
    try:
        async with conn.transaction():
            current = None if floors is None else await floors.refresh(conn, ["default"])
            await claim(
                conn,
                QueueLimits(lease_s=60, total=1, slots={"default": 1}),
                worker_id="probe",
                floors=current,
            )
            raise _Rollback
    except _Rollback:
        pass
    return time.perf_counter() - start


async def soak(args: argparse.Namespace, dsn: str) -> list[dict[str, Any]]:
    registry = product_job_types(diag_enabled=True).registry()
    enqueuer = Enqueuer(registry, payload_limit_bytes=256 * 1024)
    pool = await open_pool(dsn, min_size=4, max_size=20)
    pin = None
    if args.pin_xmin:
        pin = await psycopg.AsyncConnection.connect(dsn)
        await pin.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        await pin.execute("SELECT txid_current()")  # an xid and a snapshot: xmin is pinned
    worker = Worker(
        pool=pool,
        registry=registry,
        config=WorkerConfig(
            concurrency=10,
            retention_s=args.retention_s,
            prune_interval_s=60.0,
            claim_floors=not args.no_floors,
        ),
    )
    stop = asyncio.Event()
    probes: list[float] = []
    rows: list[dict[str, Any]] = []

    async def enqueue() -> None:
        per_call = max(1, args.rate // 10)
        n = 0
        next_at = time.monotonic()
        while not stop.is_set():
            requests = [EnqueueRequest("diag.noop", {"i": n + i}) for i in range(per_call)]
            async with pool.connection() as conn:
                await enqueuer.enqueue_many(conn, requests)
            n += per_call
            next_at += 0.1
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))

    async def probe() -> None:
        floors = None if args.no_floors else ClaimFloors()  # as the worker's claim loop
        async with pool.connection() as conn:
            while not stop.is_set():
                probes.append(await _probe(conn, floors))
                await asyncio.sleep(0.1)

    async def release() -> None:
        if pin is None or args.release_after_min is None:
            return
        await asyncio.sleep(args.release_after_min * 60)
        await pin.close()
        print(f"# minute {args.release_after_min}: the pinned transaction ended", flush=True)

    async def sample() -> None:
        minute = 0
        started = time.monotonic()
        while not stop.is_set():
            await asyncio.sleep(args.window_s)
            window = probes[:]
            probes.clear()
            async with pool.connection() as conn:
                stats = await (await conn.execute(_SAMPLE)).fetchone()
            assert stats is not None
            minute += 1
            row = {
                "minute": round((time.monotonic() - started) / 60, 2),
                "claim_p50_ms": round(_pct(window, 0.5), 3),
                "claim_p99_ms": round(_pct(window, 0.99), 3),
                "probes": len(window),
                "dead_tuples": stats["n_dead_tup"],
                "live_tuples": stats["n_live_tup"],
                "size_mb": round(float(str(stats["size_mb"])), 1),
                "pending": stats["pending"],
                "completed": stats["completed"],
                "autovacuum_runs": stats["autovacuum_count"],
                "oldest_xmin_age": stats["xmin_age"],
                "load1": round(os.getloadavg()[0], 2),
            }
            rows.append(row)
            print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)

    await worker.start()
    tasks = [asyncio.create_task(t()) for t in (enqueue, probe, sample, release)]
    try:
        await asyncio.sleep(args.minutes * 60)
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        await worker.stop()
        if pin is not None and not pin.closed:
            await pin.close()
        await pool.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60)
    parser.add_argument("--rate", type=int, default=100, help="jobs enqueued per second")
    parser.add_argument("--pin-xmin", action="store_true")
    parser.add_argument(
        "--release-after-min", type=float, default=None, help="end the pinned transaction then"
    )
    parser.add_argument(
        "--no-floors",
        action="store_true",
        help="claims without claim floors (the claim before issue 27), worker and probe",
    )
    parser.add_argument("--retention-s", type=float, default=600.0)
    parser.add_argument("--window-s", type=float, default=60.0)
    parser.add_argument("--out", required=True, help="CSV of one row per window")
    args = parser.parse_args()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    started = datetime.now(UTC).strftime("%Y-%m-%dT%H:%MZ")
    print(
        f"# soak {started} commit {commit} rate {args.rate}/s minutes {args.minutes} "
        f"pin_xmin {args.pin_xmin} release_after_min {args.release_after_min} "
        f"retention {args.retention_s}s load {os.getloadavg()}",
        flush=True,
    )
    with tempfile.TemporaryDirectory() as tmp:
        server = EmbeddedPostgres(Path(tmp) / "pgdata")
        dsn = server.start()
        try:
            migrate.upgrade(dsn)
            rows = asyncio.run(soak(args, dsn))
        finally:
            server.stop()
    out = Path(args.out)
    with out.open("w", newline="") as f:
        f.write(
            f"# soak {started} commit {commit} rate {args.rate}/s pin_xmin {args.pin_xmin} "
            f"released at minute {args.release_after_min} "
            f"retention {args.retention_s}s window {args.window_s}s\n"
        )
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    head = [r["claim_p99_ms"] for r in rows[:5]]
    tail = [r["claim_p99_ms"] for r in rows[-5:]]
    if head and tail:
        first, last = max(head), max(tail)
        print(
            f"# claim p99: first five windows max {first:.2f} ms, last five max {last:.2f} ms, "
            f"ratio {last / first:.2f}; dead tuples at the end {rows[-1]['dead_tuples']}; "
            f"written {out}",
            flush=True,
        )


if __name__ == "__main__":
    main()
