"""Helpers for the jobs engine suites: the real registry and service on a test pool, an
in-process worker, real `jobrelay worker` processes, and direct row reads. Waiting is
polling with a deadline, never sleep."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import IO, Any, TypeVar

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from jobrelay.bootstrap import product_job_types
from jobrelay.db.listen import NotifyListener
from jobrelay.db.pool import Connection, open_pool
from jobrelay.jobs.declare import JobTypes
from jobrelay.jobs.enqueue import Enqueuer, EnqueueRequest
from jobrelay.jobs.failpoints import NO_FAILPOINTS, Failpoints
from jobrelay.jobs.models import Enqueued
from jobrelay.jobs.registry import Registry
from jobrelay.jobs.service import JobsService
from jobrelay.jobs.worker import Worker, WorkerConfig
from tests.harness import cli_env, jobrelay_command, wait_until

T = TypeVar("T")


def build_registry(
    *,
    diag_enabled: bool = True,
    failpoints: Failpoints = NO_FAILPOINTS,
    extra: JobTypes | None = None,
) -> Registry:
    """The product's job types (and `extra`), as a deployment with no app loads them."""
    group = product_job_types(diag_enabled=diag_enabled, failpoints=failpoints)
    if extra is not None:
        group.include(extra)
    return group.registry()


def registry() -> Registry:
    return build_registry(diag_enabled=True)


def service(
    pool: AsyncConnectionPool[Connection],
    *,
    limit: int = 256 * 1024,
    extra: JobTypes | None = None,
) -> JobsService:
    reg = build_registry(diag_enabled=True, extra=extra)
    return JobsService(pool=pool, registry=reg, enqueuer=Enqueuer(reg, payload_limit_bytes=limit))


async def enqueue(
    pool: AsyncConnectionPool[Connection], type_: str, payload: dict[str, Any], **kw: Any
) -> Enqueued:
    return await service(pool).enqueue(EnqueueRequest(type=type_, payload=payload, **kw))


async def row(pool: AsyncConnectionPool[Connection], job_id: uuid.UUID) -> dict[str, Any]:
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT * FROM all_jobs WHERE id = %s", (job_id,))
        found = await cur.fetchone()
    assert found is not None, f"job {job_id} not found"
    return dict(found)


async def fetch(
    pool: AsyncConnectionPool[Connection], sql: str, *args: Any
) -> list[dict[str, Any]]:
    async with pool.connection() as conn:
        cur = await conn.execute(sql, args or None)  # type: ignore[arg-type]
        return [dict(r) for r in await cur.fetchall()]


async def eventually(
    probe: Callable[[], Awaitable[T | None]], *, timeout_s: float = 20.0, what: str = "condition"
) -> T:
    """Poll an async probe until it returns a truthy value (the async `wait_until`)."""
    deadline = time.monotonic() + timeout_s
    last: T | None = None
    while time.monotonic() < deadline:
        last = await probe()
        if last:
            return last
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what} (last: {last!r})")


async def kill_and_await_reconnect(
    pool: AsyncConnectionPool[Connection], listener: NotifyListener
) -> None:
    """Terminate the backend of a `NotifyListener` and wait until it listens on another."""
    pid = listener.backend_pid
    async with pool.connection() as conn:
        await conn.execute("SELECT pg_terminate_backend(%s)", (pid,))

    async def reconnected() -> bool:
        return bool(listener.connected and listener.backend_pid != pid)

    await eventually(reconnected, what="the listener to reconnect")


@asynccontextmanager
async def running_worker(
    pool: AsyncConnectionPool[Connection],
    *,
    jitter: Callable[[], float] | None = None,
    failpoints: Failpoints | None = None,
    **config: Any,
) -> AsyncIterator[Worker]:
    defaults: dict[str, Any] = {"concurrency": 4, "poll_interval_s": 0.01, "lease_s": 10.0}
    extra: dict[str, Any] = {} if jitter is None else {"jitter": jitter}
    if failpoints is not None:
        extra["failpoints"] = failpoints
    worker = Worker(
        pool=pool,
        registry=build_registry(diag_enabled=True, failpoints=failpoints or NO_FAILPOINTS),
        config=WorkerConfig(**{**defaults, **config}),
        **extra,
    )
    await worker.start()
    try:
        yield worker
    finally:
        await worker.stop()


# -- worker processes ------------------------------------------------------------------


def start_worker(
    dsn: str, *args: str, read_live: bool = False, **env: str
) -> subprocess.Popen[str]:
    """A real `jobrelay worker` process on `dsn` (fast polling, quiet logs). Its output goes
    to a file, not a pipe: a worker logging more than a pipe holds (exceptions after a
    database crash) would block on its next write while nobody reads the pipe. With
    `read_live` it goes to `process.stdout`, a pipe the caller must keep reading."""
    settings = {
        "DATABASE_URL": dsn,
        "JOBRELAY_DIAG_JOBS_ENABLED": "true",
        "JOBRELAY_WORKER_POLL_INTERVAL_S": "0.05",
        "JOBRELAY_JOBS_RESCUE_INTERVAL_S": "0.2",
        "JOBRELAY_LOG_LEVEL": "WARNING",
        **env,
    }
    # Closed by stop_worker, which reads it back.
    log = None if read_live else tempfile.TemporaryFile(mode="w+", encoding="utf-8")  # noqa: SIM115
    process = subprocess.Popen(
        [*jobrelay_command(), "worker", *args],
        env=cli_env(**settings),
        stdout=subprocess.PIPE if log is None else log,
        stderr=subprocess.STDOUT,
        text=True,
    )
    if log is not None:
        _WORKER_LOGS[process.pid] = log
    return process


_WORKER_LOGS: dict[int, IO[str]] = {}


def stop_worker(process: subprocess.Popen[str], *, sig: int = signal.SIGTERM) -> str:
    """Signal the process (unless it ended) and return its output."""
    if process.poll() is None:
        process.send_signal(sig)
    log = _WORKER_LOGS.pop(process.pid, None)
    if log is None:
        output, _ = process.communicate(timeout=60)
        return output or ""
    process.wait(timeout=60)
    with log:
        log.seek(0)
        return log.read()


@contextmanager
def worker_processes(dsn: str, count: int, *args: str, **env: str) -> Iterator[list[Any]]:
    processes = [start_worker(dsn, *args, **env) for _ in range(count)]
    try:

        def started() -> bool:
            exited = [p for p in processes if p.poll() is not None]
            if exited:  # a worker that stopped at startup will never listen
                raise AssertionError(f"a worker exited at startup: {stop_worker(exited[0])}")
            return listening_workers(dsn) >= count

        wait_until(
            started,
            timeout_s=60,
            what=f"{count} workers to start (their LISTEN connections)",
        )
        yield processes
    except BaseException:
        for process in processes:
            print(stop_worker(process))  # shown by pytest on failure
        raise
    outputs = [stop_worker(process) for process in processes]  # every one, then check
    for process, output in zip(processes, outputs, strict=True):
        assert process.returncode == 0, output


def listening_workers(dsn: str) -> int:
    """Workers past startup (signal handlers installed): their LISTEN connections."""
    rows = query(
        dsn,
        "SELECT count(*) AS n FROM pg_stat_activity "
        "WHERE datname = current_database() AND query LIKE %s",
        "%LISTEN jobrelay_jobs%",
    )
    return int(rows[0]["n"])


def query(dsn: str, sql: str, *params: Any) -> list[dict[str, Any]]:
    """Rows of one statement on a fresh autocommit connection (sync tests)."""
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        return conn.execute(sql, params or None).fetchall()  # type: ignore[arg-type]


def enqueue_sync(
    dsn: str, requests: list[EnqueueRequest], *, extra: JobTypes | None = None
) -> list[Enqueued]:
    """Enqueue through the real service from a sync test (bulk, one transaction); `extra`:
    the job types of the app the workers load (`--app`)."""

    async def run() -> list[Enqueued]:
        pool = await open_pool(dsn, min_size=1, max_size=2)
        try:
            async with pool.connection() as conn, conn.transaction():
                return await service(pool, extra=extra).enqueue_many(requests, conn=conn)
        finally:
            await pool.close()

    return asyncio.run(run())


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    """The largest number of intervals open at one instant (an end at t closes before a
    start at t opens)."""
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return peak
