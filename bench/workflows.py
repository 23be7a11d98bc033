"""Workflows (issue 42) against plain jobs, measured in the same run on the same server.

    .venv/bin/python -m bench.workflows                  # published sizes, ~10 minutes on 2 cores
    .venv/bin/python -m bench.workflows --quick          # smoke test, about a minute
    .venv/bin/python -m bench.workflows --scenarios drain,status --steps 2000

Every scenario runs `diag.noop` steps and jobs (an empty handler) with in-process workers
(`WorkerConfig(concurrency=--concurrency)`, production defaults otherwise: LISTEN, batched
completions) on an embedded PostgreSQL with durable defaults (or `DATABASE_URL`). Times
taken from job rows are the database's clock (`claimed_at`, `finished_at`, `available_at`).

1. `drain`: a fan-out/fan-in workflow of `--steps` steps (one start step, `--steps` - 2
   middle steps after it, one end step after all of them) drained by one worker, beside
   `--steps` plain jobs drained by a worker of the same configuration, `--reps` pairs in
   alternating order. Rate = jobs / (last `finished_at` - first `claimed_at`); the wall
   rate (worker start to the last job seen ended) is printed too. Also the time to build
   the `Workflow` in Python and to store it with `create_workflow` (checks, insert, commit).
2. `latency`: a chain of `--chain` steps, run by an idle worker: per edge, the downstream's
   `claimed_at` minus the upstream's `finished_at` (p50/p99), beside plain jobs' pickup
   latency (`claimed_at` - `available_at`) of `--chain` jobs enqueued one by one every
   `--interval-ms` to the same idle worker.
3. `held`: `--plain` plain jobs drained in a database that also holds `--held-workflows`
   workflows of `--held-steps` held steps each (a root step scheduled 100 years ahead, the
   others after it: never released), against the same drain in a database without them
   (two databases of the same server, `--pair-reps` pairs in alternating order, `VACUUM
   ANALYZE` of both before each drain). Also EXPLAIN (ANALYZE, BUFFERS) of the worker's
   step repair statement (`stuck_steps.sql`) over the held steps.
5. `http`: a `--steps`-step fan-out workflow created `--reps` times through
   `POST /v1/workflows` (the real app over ASGI, no network), then its status read
   `--status-reads` times while a worker drains it, with `stepLimit=0` (status and counts)
   and with the default page of 1,000 steps.
4. `status`: `get_workflow` on a running `--steps`-step fan-out workflow (a worker ran
   until half the steps ended, then stopped), 20 reads, p50/p99, beside fetching the same
   steps' job rows with one plain `SELECT ... FROM all_jobs WHERE workflow_id = ...`; each
   of get_workflow's two statements timed alone, and the plan of the steps statement.

Targets (issue 42): drain ratio >= 0.7, creating 10,000 steps < 1 s (< 2 s through HTTP),
per-edge p50 <= 5 ms, plain completions with held steps waiting within 5 % (ratio >= 0.95),
the status of a running 10,000-step workflow through HTTP < 20 ms. The script prints
each figure with its target and writes every line to `bench/results/workflows-<UTC>.txt`
with the commit, the date and the load average before and after each scenario; it never
fails on a target.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, LiteralString, cast

import psycopg
import structlog
from psycopg import sql as pgsql
from psycopg.conninfo import make_conninfo
from psycopg_pool import AsyncConnectionPool

from jobrelay.bootstrap import product_job_types
from jobrelay.db import migrate
from jobrelay.db.embedded import EmbeddedPostgres
from jobrelay.db.pool import Connection, open_pool
from jobrelay.db.sql import Queries
from jobrelay.jobs.enqueue import Enqueuer, EnqueueRequest
from jobrelay.jobs.registry import Registry
from jobrelay.jobs.worker import Worker, WorkerConfig
from jobrelay.jobs.workflows.graph import Workflow
from jobrelay.jobs.workflows.store import create_workflow, get_workflow

Pool = AsyncConnectionPool[Connection]
SCENARIOS = ("drain", "latency", "held", "status", "http")
STEP_TYPE = "diag.noop"
HELD_TYPE = "diag.sleep"  # held steps: served, never released (the plain drain polls noop)
WORKFLOW_QUERIES = Queries("jobrelay.jobs.workflows")
RESULTS = Path(__file__).parent / "results"
SERVER_PID: int | None = None  # the embedded server's postmaster, for its CPU time

RESET = (
    "TRUNCATE jobs, finished_jobs, job_attempts, workflows, workflow_steps, workflow_edges CASCADE"
)
DB_RATE = """
SELECT count(*) AS n,
    extract(epoch FROM max(finished_at) - min(claimed_at))::float8 AS span_s
FROM finished_jobs
WHERE status = 'completed' AND (%(workflow)s::uuid IS NULL OR workflow_id = %(workflow)s)
"""
EDGE_LATENCY = """
SELECT extract(epoch FROM down.claimed_at - up.finished_at)::float8 * 1000 AS ms,
    extract(epoch FROM down.claimed_at - up.claimed_at)::float8 * 1000 AS cycle_ms
FROM workflow_edges AS edge
JOIN finished_jobs AS up ON up.id = edge.upstream_id
JOIN finished_jobs AS down ON down.id = edge.downstream_id
WHERE up.workflow_id = %(workflow)s
"""
PICKUP_LATENCY = """
SELECT extract(epoch FROM claimed_at - available_at)::float8 * 1000 AS ms
FROM finished_jobs
WHERE workflow_id IS NULL
"""
PLAIN_STEP_ROWS = """
SELECT id, type, status, attempt_count, result, last_error, finished_at
FROM all_jobs
WHERE workflow_id = %(id)s
"""


class Report:
    """Every line printed, kept for the results file."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, line: str = "") -> None:
        self.lines.append(line)
        print(line, flush=True)

    def load(self, when: str) -> None:
        one, five, fifteen = os.getloadavg()
        self(f"# load average {when}: {one:.2f} {five:.2f} {fifteen:.2f}")


def _commit() -> str:
    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", *args], capture_output=True, text=True, check=False)

    commit = git("rev-parse", "--short", "HEAD").stdout.strip() or "unknown"
    return commit + ("+dirty" if git("diff", "--quiet", "HEAD").returncode else "")


def _registry() -> Registry:
    return product_job_types(diag_enabled=True).registry()


def _pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _spread(values: Sequence[float], digits: int = 2) -> str:
    return (
        f"{statistics.median(values):.{digits}f} "
        f"(min-max {min(values):.{digits}f}-{max(values):.{digits}f})"
    )


async def _one(pool: Pool, sql: LiteralString, params: dict[str, Any] | None = None) -> Any:
    async with pool.connection() as conn:
        cur = await conn.execute(sql, params or {})
        row = await cur.fetchone()
    assert row is not None
    return next(iter(row.values()))


async def _column(
    pool: Pool, sql: LiteralString, params: dict[str, Any], name: str = "ms"
) -> list[float]:
    async with pool.connection() as conn:
        cur = await conn.execute(sql, params)
        return [float(cast(float, r[name])) for r in await cur.fetchall()]


async def _until(probe: Callable[[], Awaitable[bool]], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not await probe():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(0.02)


async def _ended(pool: Pool, sql: LiteralString, params: dict[str, Any] | None = None) -> bool:
    return bool(await _one(pool, sql, params))


def _worker(pool: Pool, registry: Registry, concurrency: int) -> Worker:
    return Worker(pool=pool, registry=registry, config=WorkerConfig(concurrency=concurrency))


async def _enqueue_plain(pool: Pool, enqueuer: Enqueuer, n: int) -> None:
    async with pool.connection() as conn, conn.transaction():
        for start in range(0, n, 1000):
            requests = [EnqueueRequest(STEP_TYPE, {}) for _ in range(min(1000, n - start))]
            await enqueuer.enqueue_many(conn, requests)


def _fan(n: int, name: str = "fan", shape: str = "fan") -> Workflow:
    """One start step, n - 2 middle steps after it, one end step after all of them
    (`fanout`: the end step after the start step only; `flat`: no dependencies at all)."""
    workflow = Workflow(name).step("start", STEP_TYPE, {})
    middle = [f"m{i:05}" for i in range(max(n - 2, 0))]
    for step in middle:
        workflow.step(step, STEP_TYPE, {}, after=[] if shape == "flat" else ["start"])
    end_after = {"fan": middle or ["start"], "fanout": ["start"], "flat": []}[shape]
    return workflow.step("end", STEP_TYPE, {}, after=end_after)


async def _create(pool: Pool, enqueuer: Enqueuer, workflow: Workflow) -> uuid.UUID:
    async with pool.connection() as conn:
        created = await create_workflow(conn, enqueuer, workflow)
    return created.id


def _server_cpu_s() -> float:
    """CPU seconds of the embedded server's processes alive now (the postmaster and its
    children, from /proc); 0.0 without an embedded server."""
    if SERVER_PID is None:
        return 0.0
    ticks = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # a process that ended meanwhile
        if stat.parent.name == str(SERVER_PID) or fields[1] == str(SERVER_PID):
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


async def _drain(
    pool: Pool, registry: Registry, concurrency: int, done: LiteralString, timeout_s: float
) -> tuple[float, float, float]:
    """Run one worker until `done` is true: the wall time from its start, and the CPU
    seconds this process (worker and poll) and the server (its backends, the pool's open
    before and kept, so none ends in between) spent meanwhile."""
    worker = _worker(pool, registry, concurrency)
    cpu, server_cpu = time.process_time(), _server_cpu_s()
    started = time.perf_counter()
    await worker.start()
    try:
        await _until(lambda: _ended(pool, done), timeout_s, "the drain")
        wall = time.perf_counter() - started
        return wall, time.process_time() - cpu, _server_cpu_s() - server_cpu
    finally:
        await worker.stop()


async def _db_rate(pool: Pool, workflow: uuid.UUID | None, expected: int) -> float:
    async with pool.connection() as conn:
        cur = await conn.execute(DB_RATE, {"workflow": workflow})
        row = await cur.fetchone()
    assert row is not None
    if row["n"] != expected:
        raise SystemExit(f"{row['n']} jobs completed, expected {expected}")
    return float(row["n"]) / float(cast(float, row["span_s"]))


def _smaller(args: argparse.Namespace, **sizes: int) -> argparse.Namespace:
    return argparse.Namespace(**{**vars(args), **sizes})


# 1. drain ------------------------------------------------------------------------------------


TOP_STATEMENTS = """
SELECT calls, total_exec_time AS total_ms, rows,
    left(query, 400) AS query
FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
ORDER BY total_exec_time DESC
LIMIT 12
"""


async def _top_statements(pool: Pool, reset: bool) -> list[str]:
    """With --statements: reset pg_stat_statements, or its top statements by time."""
    async with pool.connection() as conn:
        if reset:
            await conn.execute("SELECT pg_stat_statements_reset()")
            return []
        rows = await (await conn.execute(TOP_STATEMENTS)).fetchall()
    return [
        f"{r['total_ms']:9.1f} ms {r['calls']:6} calls {r['rows']:7} rows  "
        + " ".join(str(r["query"]).split())[:160]
        for r in rows
    ]


async def _drain_pair(
    dsn: str, args: argparse.Namespace, workflow_first: bool, statements: dict[str, list[str]]
) -> dict[str, float]:
    registry = _registry()
    enqueuer = Enqueuer(registry, payload_limit_bytes=262144)
    pool = await open_pool(dsn, min_size=2, max_size=16)
    out: dict[str, float] = {}
    try:
        for kind in ("workflow", "plain") if workflow_first else ("plain", "workflow"):
            async with pool.connection() as conn:
                await conn.execute(RESET)
                await conn.execute("VACUUM ANALYZE jobs")
            workflow_id: uuid.UUID | None = None
            if kind == "workflow":
                started = time.perf_counter()
                workflow = _fan(args.steps, shape=args.shape)
                built = time.perf_counter()
                workflow_id = await _create(pool, enqueuer, workflow)
                out["build_s"] = built - started
                out["create_s"] = time.perf_counter() - built
            else:
                started = time.perf_counter()
                await _enqueue_plain(pool, enqueuer, args.steps)
                out["enqueue_s"] = time.perf_counter() - started
            if args.statements:
                await _top_statements(pool, reset=True)
            wall, cpu, server_cpu = await _drain(
                pool, registry, args.concurrency, "SELECT count(*) = 0 FROM jobs", 1800
            )
            if args.statements:
                statements[kind] = await _top_statements(pool, reset=False)
            out[f"{kind}_wall"] = args.steps / wall
            out[f"{kind}_cpu_ms"] = (cpu + server_cpu) * 1000 / args.steps
            out[kind] = await _db_rate(pool, workflow_id, args.steps)
    finally:
        await pool.close()
    return out


async def _release_plans(dsn: str, args: argparse.Namespace) -> dict[str, list[str]]:
    """The plans of the two release statements that run for every completion batch of
    steps (lock_dependents.sql, count_endings.sql) for 20 middle steps of a fresh fan-out
    workflow ending into its end step, rolled back; custom and generic (the worker's
    statements are prepared, so PostgreSQL may switch to the generic plan)."""
    registry = _registry()
    enqueuer = Enqueuer(registry, payload_limit_bytes=262144)
    pool = await open_pool(dsn, min_size=1, max_size=2)
    try:
        async with pool.connection() as conn:
            await conn.execute(RESET)
            created = await create_workflow(conn, enqueuer, _fan(args.steps))
            await conn.commit()
            await conn.execute("VACUUM ANALYZE")
    finally:
        await pool.close()
    ids = [created.steps[f"m{i:05}"] for i in range(min(20, args.steps - 2))]
    params = {"ids": ids, "ok": [True] * len(ids)}
    plans: dict[str, list[str]] = {}
    for mode in ("auto", "force_generic_plan"):
        for name in ("lock_dependents", "count_endings"):
            query: LiteralString = getattr(WORKFLOW_QUERIES, name)
            plans[f"{name} ({mode})"] = await _explain(
                dsn, query, params, rollback=True, plan_cache_mode=mode
            )
    return plans


def scenario_drain(dsn: str, args: argparse.Namespace, report: Report) -> None:
    report(f"## 1. drain: a {args.steps}-step workflow ({args.shape}) vs {args.steps} plain jobs")
    report(f"# one in-process worker, concurrency {args.concurrency}; {args.reps} pairs")
    # an untimed warm-up pair (caches, the first partitions of finished_jobs)
    asyncio.run(_drain_pair(dsn, _smaller(args, steps=min(args.steps, 1000)), True, {}))
    runs = []
    statements: dict[str, list[str]] = {}
    for rep in range(1, args.reps + 1):
        r = asyncio.run(_drain_pair(dsn, args, rep % 2 == 1, statements))
        runs.append(r)
        report(
            f"rep={rep} workflow_jobs_per_s={r['workflow']:.0f} plain_jobs_per_s={r['plain']:.0f} "
            f"ratio={r['workflow'] / r['plain']:.2f} (wall: {r['workflow_wall']:.0f} vs "
            f"{r['plain_wall']:.0f}, ratio {r['workflow_wall'] / r['plain_wall']:.2f}) "
            f"build_s={r['build_s']:.3f} create_s={r['create_s']:.3f}"
        )
    ratios = [r["workflow"] / r["plain"] for r in runs]
    wall = [r["workflow_wall"] / r["plain_wall"] for r in runs]
    report(
        f"drain workflow jobs/s {_spread([r['workflow'] for r in runs], 0)}, plain jobs/s "
        f"{_spread([r['plain'] for r in runs], 0)}"
    )
    report(f"drain ratio workflow/plain {_spread(ratios)} (target >= 0.70); wall {_spread(wall)}")
    report(
        f"drain CPU ms per job (this process + server): workflow "
        f"{_spread([r['workflow_cpu_ms'] for r in runs])}, plain "
        f"{_spread([r['plain_cpu_ms'] for r in runs])}, ratio "
        f"{_spread([r['workflow_cpu_ms'] / r['plain_cpu_ms'] for r in runs])}"
    )
    for kind, lines in statements.items():
        report(f"# top statements by execution time, {kind} drain of the last rep:")
        for line in lines:
            report("    " + line)
    total = [r["build_s"] + r["create_s"] for r in runs]
    report(
        f"creation of {args.steps} steps: build {_spread([r['build_s'] for r in runs], 3)} s + "
        f"create_workflow {_spread([r['create_s'] for r in runs], 3)} s = "
        f"{_spread(total, 3)} s (target < 1 s for 10,000 steps)"
    )
    for title, plan in asyncio.run(_release_plans(dsn, args)).items():
        report(f"# EXPLAIN (ANALYZE, BUFFERS) {title}, 20 middle steps ending, rolled back:")
        for line in plan:
            report("    " + line)
    enqueue = [r["enqueue_s"] for r in runs]
    report(
        f"baseline: enqueue_many of {args.steps} plain jobs in one transaction "
        f"{_spread(enqueue, 3)} s; ratio create_workflow/enqueue "
        f"{_spread([r['create_s'] / r['enqueue_s'] for r in runs])}"
    )


# 2. latency ----------------------------------------------------------------------------------


async def _latency(
    dsn: str, args: argparse.Namespace
) -> tuple[list[float], list[float], list[float], float, float]:
    registry = _registry()
    enqueuer = Enqueuer(registry, payload_limit_bytes=262144)
    pool = await open_pool(dsn, min_size=2, max_size=16)
    try:
        async with pool.connection() as conn:
            await conn.execute(RESET)
            await conn.execute("VACUUM ANALYZE jobs")
        worker = _worker(pool, registry, args.concurrency)
        await worker.start()
        try:
            workflow = Workflow("chain").step("s00000", STEP_TYPE, {})
            for i in range(1, args.chain):
                workflow.step(f"s{i:05}", STEP_TYPE, {}, after=[f"s{i - 1:05}"])
            started = time.perf_counter()
            workflow_id = await _create(pool, enqueuer, workflow)
            await _until(
                lambda: _ended(pool, "SELECT count(*) = 0 FROM jobs"), 1800, "the chain to end"
            )
            chain_s = time.perf_counter() - started
            chain_rate = await _db_rate(pool, workflow_id, args.chain)
            edges = await _column(pool, EDGE_LATENCY, {"workflow": workflow_id})
            cycles = await _column(pool, EDGE_LATENCY, {"workflow": workflow_id}, "cycle_ms")
            for _ in range(args.chain):
                tick = time.perf_counter()
                async with pool.connection() as conn:
                    await enqueuer.enqueue(conn, EnqueueRequest(STEP_TYPE, {}))
                rest = args.interval_ms / 1000 - (time.perf_counter() - tick)
                if rest > 0:
                    await asyncio.sleep(rest)
            await _until(
                lambda: _ended(pool, "SELECT count(*) = 0 FROM jobs"), 600, "the plain jobs"
            )
            pickup = await _column(pool, PICKUP_LATENCY, {})
        finally:
            await worker.stop()
    finally:
        await pool.close()
    return edges, cycles, pickup, chain_s, chain_rate


def scenario_latency(dsn: str, args: argparse.Namespace, report: Report) -> None:
    report(f"## 2. per-edge latency: a chain of {args.chain} steps vs plain pickup")
    edges, cycles, pickup, chain_s, chain_rate = asyncio.run(_latency(dsn, args))
    e50, e99, p50, p99 = (
        _pct(edges, 0.5),
        _pct(edges, 0.99),
        _pct(pickup, 0.5),
        _pct(pickup, 0.99),
    )
    report(
        f"edge upstream finished_at -> downstream claimed_at ms: p50={e50:.2f} p99={e99:.2f} "
        f"max={max(edges):.2f} ({len(edges)} edges; target p50 <= 5 ms)"
    )
    report(
        f"plain pickup available_at -> claimed_at ms: p50={p50:.2f} p99={p99:.2f} "
        f"max={max(pickup):.2f} ({len(pickup)} jobs, one every {args.interval_ms} ms)"
    )
    report(
        f"step cycle upstream claimed_at -> downstream claimed_at ms (run, completion flush, "
        f"release, claim): p50={_pct(cycles, 0.5):.2f} p99={_pct(cycles, 0.99):.2f}"
    )
    report(
        f"ratio edge/plain: p50 {e50 / p50:.2f} p99 {e99 / p99:.2f}; the chain ran "
        f"{1000 / chain_rate:.2f} ms per step (first claim to last finish); "
        f"{chain_s:.2f} s from create_workflow to the last step seen ended"
    )


# 3. held -------------------------------------------------------------------------------------


def _database(url: str, name: str) -> str:
    """A fresh, migrated database `name` on the server of `url`."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(pgsql.SQL("DROP DATABASE IF EXISTS {}").format(pgsql.Identifier(name)))
        conn.execute(pgsql.SQL("CREATE DATABASE {}").format(pgsql.Identifier(name)))
    dsn = make_conninfo(url, dbname=name)
    migrate.upgrade(dsn)
    return dsn


async def _hold(dsn: str, args: argparse.Namespace) -> float:
    registry = _registry()
    enqueuer = Enqueuer(registry, payload_limit_bytes=262144)
    pool = await open_pool(dsn, min_size=1, max_size=2)
    started = time.perf_counter()
    try:
        for w in range(args.held_workflows):
            workflow = Workflow(f"held{w:04}").step("root", HELD_TYPE, {"seconds": 0})
            for i in range(args.held_steps):
                workflow.step(f"h{i:03}", HELD_TYPE, {"seconds": 0}, after=["root"])
            await _create(pool, enqueuer, workflow)
        async with pool.connection() as conn:
            await conn.execute(
                "UPDATE jobs SET available_at = clock_timestamp() + interval '100 years' "
                "WHERE workflow_id IS NOT NULL AND available_at < '9999-12-31'"
            )
    finally:
        await pool.close()
    return time.perf_counter() - started


async def _plain_drain(dsn: str, args: argparse.Namespace) -> tuple[float, float, float]:
    registry = _registry()
    enqueuer = Enqueuer(registry, payload_limit_bytes=262144)
    pool = await open_pool(dsn, min_size=2, max_size=16)
    try:
        async with pool.connection() as conn:
            await conn.execute("TRUNCATE finished_jobs, job_attempts")
            await conn.execute("VACUUM ANALYZE jobs")
            await conn.execute("VACUUM ANALYZE workflow_steps")
        await _enqueue_plain(pool, enqueuer, args.plain)
        done: LiteralString = "SELECT count(*) = 0 FROM jobs WHERE type = 'diag.noop'"
        wall, cpu, server_cpu = await _drain(pool, registry, args.concurrency, done, 1800)
        rate = await _db_rate(pool, None, args.plain)
        return rate, args.plain / wall, (cpu + server_cpu) * 1000 / args.plain
    finally:
        await pool.close()


async def _explain(
    dsn: str,
    sql: LiteralString,
    params: dict[str, Any],
    *,
    rollback: bool = False,
    plan_cache_mode: str = "auto",
) -> list[str]:
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        if plan_cache_mode == "auto":
            cur = await conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)
        else:  # the plan a prepared statement gets: PREPARE with $n, then EXECUTE
            await conn.execute("SELECT set_config('plan_cache_mode', %s, true)", (plan_cache_mode,))
            names = [n for n in params if f"%({n})s" in sql]
            text = sql
            for i, n in enumerate(names, 1):
                text = text.replace(f"%({n})s", f"${i}")
            await conn.execute(pgsql.SQL("PREPARE bench_plan AS {}").format(pgsql.SQL(text)))
            values = pgsql.SQL(", ").join(pgsql.Literal(params[n]) for n in names)
            cur = await conn.execute(
                pgsql.SQL("EXPLAIN (ANALYZE, BUFFERS) EXECUTE bench_plan ({})").format(values)
            )
        lines = [str(r[0]) for r in await cur.fetchall()]
        if rollback:
            await conn.rollback()
        else:
            await conn.commit()
    return lines


def scenario_held(url: str, args: argparse.Namespace, report: Report) -> None:
    report(
        f"## 3. {args.plain} plain jobs drained with and without {args.held_workflows} "
        f"workflows x {args.held_steps} held steps waiting"
    )
    idle = _database(url, "jobrelay_bench_wf_idle")
    held = _database(url, "jobrelay_bench_wf_held")
    hold_s = asyncio.run(_hold(held, args))
    with psycopg.connect(held, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        row = conn.execute(
            "SELECT count(*) FROM jobs WHERE available_at = '9999-12-31'::timestamptz"
        ).fetchone()
    with psycopg.connect(idle, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    report(f"# {row[0] if row else '?'} held steps stored in {hold_s:.1f} s")
    for dsn in (idle, held):  # an untimed warm-up drain in each database
        asyncio.run(_plain_drain(dsn, _smaller(args, plain=min(args.plain, 1000))))
    ratios: list[float] = []
    walls: list[float] = []
    cpus: list[float] = []
    rates: dict[str, list[float]] = {"idle": [], "held": []}
    for rep in range(1, args.pair_reps + 1):
        order = ("idle", "held") if rep % 2 else ("held", "idle")
        got: dict[str, tuple[float, float, float]] = {}
        for variant in order:
            got[variant] = asyncio.run(_plain_drain(idle if variant == "idle" else held, args))
            rates[variant].append(got[variant][0])
        ratios.append(got["held"][0] / got["idle"][0])
        walls.append(got["held"][1] / got["idle"][1])
        cpus.append(got["held"][2] / got["idle"][2])
        report(
            f"rep={rep} order={'/'.join(order)} without_jobs_per_s={got['idle'][0]:.0f} "
            f"with_held_jobs_per_s={got['held'][0]:.0f} ratio={ratios[-1]:.3f} "
            f"(wall ratio {walls[-1]:.3f}) cpu_ms_per_job without={got['idle'][2]:.3f} "
            f"with={got['held'][2]:.3f} cpu_ratio={cpus[-1]:.3f}"
        )
    report(f"held jobs/s without {_spread(rates['idle'], 0)}, with {_spread(rates['held'], 0)}")
    report(
        f"held ratio with/without {_spread(ratios, 3)} (target within 5 %: >= 0.95); "
        f"wall {_spread(walls, 3)}"
    )
    report(
        f"held CPU per job with/without (this process + server; 1.0 = no cost) {_spread(cpus, 3)}"
    )
    plan = asyncio.run(
        _explain(held, WORKFLOW_QUERIES.stuck_steps, {"scan": 2000, "after": None}, rollback=True)
    )
    report("# the repair statement (stuck_steps.sql, one pass of 2,000 steps) over the held steps:")
    for line in plan:
        report("    " + line)


# 4. status -----------------------------------------------------------------------------------


async def _status(dsn: str, args: argparse.Namespace) -> dict[str, Any]:
    registry = _registry()
    enqueuer = Enqueuer(registry, payload_limit_bytes=262144)
    pool = await open_pool(dsn, min_size=2, max_size=16)
    try:
        async with pool.connection() as conn:
            await conn.execute(RESET)
        workflow_id = await _create(pool, enqueuer, _fan(args.steps))
        worker = _worker(pool, registry, args.concurrency)
        await worker.start()
        try:
            half = args.steps // 2
            await _until(
                lambda: _ended(pool, "SELECT count(*) >= %(n)s FROM finished_jobs", {"n": half}),
                1800,
                "half the steps to end",
            )
        finally:
            await worker.stop()
        async with pool.connection() as conn:
            await conn.execute("VACUUM ANALYZE")
        timings: dict[str, list[float]] = {"get_workflow": [], "plain": [], "row": [], "steps": []}
        view = None
        for _ in range(args.status_reads):
            async with pool.connection() as conn:
                t = time.perf_counter()
                view = await get_workflow(conn, workflow_id)
                timings["get_workflow"].append(time.perf_counter() - t)
                t = time.perf_counter()
                await (await conn.execute(PLAIN_STEP_ROWS, {"id": workflow_id})).fetchall()
                timings["plain"].append(time.perf_counter() - t)
                for name, sql in (
                    ("row", WORKFLOW_QUERIES.get_workflow),
                    ("steps", WORKFLOW_QUERIES.workflow_steps),
                ):
                    t = time.perf_counter()
                    await (
                        await conn.execute(
                            sql, {"id": workflow_id, "after": None, "limit": args.steps}
                        )
                    ).fetchall()
                    timings[name].append(time.perf_counter() - t)
        assert view is not None
        plan = await _explain(
            dsn,
            WORKFLOW_QUERIES.workflow_steps,
            {"id": workflow_id, "after": None, "limit": args.steps},
        )
        return {"timings": timings, "status": view.status, "counts": view.counts, "plan": plan}
    finally:
        await pool.close()


def scenario_status(dsn: str, args: argparse.Namespace, report: Report) -> None:
    report(f"## 4. get_workflow on a running {args.steps}-step workflow, {args.status_reads} reads")
    r = asyncio.run(_status(dsn, args))
    t = {k: [v * 1000 for v in vs] for k, vs in r["timings"].items()}
    report(f"# status {r['status']} counts {dict(sorted(r['counts'].items()))}")
    for name, label in (
        ("get_workflow", "get_workflow (both statements + Python)"),
        ("row", "  get_workflow.sql alone"),
        ("steps", "  workflow_steps.sql alone"),
        ("plain", "baseline: the same job rows, one plain SELECT"),
    ):
        report(f"{label} ms: p50={_pct(t[name], 0.5):.1f} p99={_pct(t[name], 0.99):.1f}")
    report(
        f"status ratio get_workflow/plain p50 "
        f"{_pct(t['get_workflow'], 0.5) / _pct(t['plain'], 0.5):.2f}"
    )
    report("# EXPLAIN (ANALYZE, BUFFERS) workflow_steps.sql:")
    for line in r["plan"]:
        report("    " + line)


# 5. http ------------------------------------------------------------------------------------


async def _http(dsn: str, args: argparse.Namespace) -> dict[str, list[float]]:
    """Create `--steps`-step fan-out workflows through POST /v1/workflows (the real ASGI app
    over the same server, no network), and read one's status while a worker drains it."""
    import httpx

    from jobrelay.api.app import create_app
    from jobrelay.bootstrap import build_services
    from jobrelay.settings import load_settings

    settings = load_settings(
        default_env=None,
        data_dir=Path(tempfile.mkdtemp(prefix="bench-workflows-api-")),
        db={"pool_min": 1, "pool_max": 8},
        jobs={"workflows_max_steps": max(args.steps, 10_000)},
    )
    body = {
        "name": "http",
        "steps": [{"name": "start", "type": STEP_TYPE}]
        + [
            {"name": f"m{i:05}", "type": STEP_TYPE, "after": ["start"]}
            for i in range(args.steps - 2)
        ]
        + [
            {"name": "end", "type": STEP_TYPE, "after": [f"m{i:05}" for i in range(args.steps - 2)]}
        ],
    }
    timings: dict[str, list[float]] = {"create": [], "status": [], "status_page": []}
    async with build_services(settings, dsn, serves_api=True) as services:
        assert services.local_issuer is not None
        token = services.local_issuer.mint("bench", admin=True)
        headers = {"Authorization": f"Bearer {token}"}
        transport = httpx.ASGITransport(app=create_app(services))
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
            async with services.pool.connection() as conn:
                await conn.execute(RESET)
            workflow_id = ""
            for _ in range(args.reps):
                t = time.perf_counter()
                answer = await client.post("/v1/workflows", json=body, headers=headers)
                timings["create"].append(time.perf_counter() - t)
                assert answer.status_code == 201, answer.text[:500]
                workflow_id = answer.json()["id"]
            # The worker is a process of its own, as in a deployment: an in-process one would
            # share the API's event loop and its time would show in every read.
            worker = subprocess.Popen(  # noqa: ASYNC220 (started once, before any measurement)
                [sys.executable, "-m", "jobrelay.cli.main", "worker"],
                env={
                    **os.environ,
                    "DATABASE_URL": dsn,
                    "JOBRELAY_DIAG_JOBS_ENABLED": "true",
                    "JOBRELAY_WORKER_CONCURRENCY": str(args.concurrency),
                    "JOBRELAY_LOG_LEVEL": "WARNING",
                },
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                await _until(
                    lambda: _ended(
                        services.pool,
                        "SELECT count(*) > 0 FROM finished_jobs WHERE workflow_id = %(id)s",
                        {"id": workflow_id},
                    ),
                    120,
                    "the worker process to start on the workflow",
                )
                for _ in range(args.status_reads):
                    for key, params in (("status", {"stepLimit": 0}), ("status_page", {})):
                        t = time.perf_counter()
                        read = await client.get(
                            f"/v1/workflows/{workflow_id}", params=params, headers=headers
                        )
                        timings[key].append(time.perf_counter() - t)
                        assert read.status_code == 200, read.text[:500]
            finally:
                worker.terminate()
                await asyncio.to_thread(worker.wait, 60)
    return timings


def scenario_http(dsn: str, args: argparse.Namespace, report: Report) -> None:
    report(f"## 5. HTTP: POST /v1/workflows of {args.steps} steps x{args.reps}, status reads")
    t = asyncio.run(_http(dsn, args))
    report(
        f"create through HTTP s: {_spread(t['create'], 3)} (target < 2 s; request body "
        f"{args.steps} steps, parsed, checked, stored, answered with the first 1,000 steps)"
    )
    for key, label in (
        ("status", "GET /v1/workflows/{id}?stepLimit=0 (status and counts) while it runs"),
        ("status_page", "GET /v1/workflows/{id} (status, counts, the first 1,000 steps)"),
    ):
        ms = [v * 1000 for v in t[key]]
        report(f"{label} ms: p50={_pct(ms, 0.5):.1f} p99={_pct(ms, 0.99):.1f}")
    report("(target for the status read < 20 ms)")


# main ----------------------------------------------------------------------------------------


def _args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated")
    parser.add_argument("--steps", type=int, default=10_000, help="steps of drain and status")
    parser.add_argument("--reps", type=int, default=3, help="drain pairs")
    parser.add_argument("--chain", type=int, default=1000, help="steps of the latency chain")
    parser.add_argument("--interval-ms", type=float, default=20.0, help="plain pickup spacing")
    parser.add_argument("--plain", type=int, default=10_000, help="plain jobs of `held`")
    parser.add_argument("--held-workflows", type=int, default=1000)
    parser.add_argument("--held-steps", type=int, default=100)
    parser.add_argument("--pair-reps", type=int, default=5, help="pairs of `held`")
    parser.add_argument("--status-reads", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=10, help="worker slots")
    parser.add_argument("--quick", action="store_true", help="smoke-test sizes")
    parser.add_argument(
        "--shape",
        choices=("fan", "fanout", "flat"),
        default="fan",
        help="the drain's workflow (ablation): fan-out/fan-in (default), fan-out without the "
        "fan-in end step, or steps without dependencies",
    )
    parser.add_argument("--no-results-file", action="store_true")
    parser.add_argument(
        "--statements",
        action="store_true",
        help="diagnostic: load pg_stat_statements (an embedded server of its own) and print "
        "the drain's top statements; adds overhead, so not for published figures",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.reps, args.chain, args.plain = 500, 1, 50, 500
        args.held_workflows, args.held_steps, args.pair_reps, args.status_reads = 20, 20, 2, 5
    unknown = set(args.scenarios.split(",")) - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenarios {sorted(unknown)}; known: {', '.join(SCENARIOS)}")
    if args.steps < 3:
        parser.error("--steps must be >= 3")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = _args(argv)
    # the workers' debug and info lines would bury the figures
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    report = Report()
    now = dt.datetime.now(dt.UTC)
    report(f"# bench.workflows {' '.join(sys.argv[1:])}")
    report(f"# date {now.isoformat(timespec='seconds')} commit {_commit()} cpus {os.cpu_count()}")
    url = os.environ.get("DATABASE_URL")
    server = None
    if url is None:
        name, options = "jobrelay-bench-workflows", {}
        if args.statements:
            name, options = name + "-statements", {"shared_preload_libraries": "pg_stat_statements"}
        server = EmbeddedPostgres(Path(tempfile.gettempdir()) / name, server_options=options)
        url = server.start()
        global SERVER_PID
        SERVER_PID = server.running_pid()
    try:
        migrate.upgrade(url)
        if args.statements:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        chosen = args.scenarios.split(",")
        runners = {
            "drain": scenario_drain,
            "latency": scenario_latency,
            "held": scenario_held,
            "status": scenario_status,
            "http": scenario_http,
        }
        for name in SCENARIOS:
            if name in chosen:
                report.load(f"before {name}")
                runners[name](url, args, report)
                report.load(f"after {name}")
    finally:
        if server is not None:
            server.stop()
    if not args.no_results_file:
        RESULTS.mkdir(exist_ok=True)
        path = RESULTS / f"workflows-{now.strftime('%Y%m%dT%H%M%SZ')}.txt"
        path.write_text("\n".join(report.lines) + "\n")
        print(f"# written to {path}")


if __name__ == "__main__":
    main()
