"""One bad or locked row never stalls a worker (issue 40), with real `jobrelay worker`
processes and a second database connection holding the locks.

A result PostgreSQL cannot store fails only its job, once, with a reason naming the place;
a job row another transaction locks is skipped by the batched writes and written once the
lock goes, without another attempt. The other jobs complete while the bad or locked one
waits: the tests assert that order (they finish while the lock is still held), and bound
every wait with a deadline generous enough for a loaded machine."""

from __future__ import annotations

import contextlib
import os
import re
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from jobrelay.db.pool import Connection
from jobrelay.domain.jobs_config import QueueLimits
from jobrelay.jobs import claims
from jobrelay.jobs.completer import Completer
from jobrelay.jobs.counters import WorkerCounters
from jobrelay.jobs.enqueue import EnqueueRequest
from jobrelay.jobs.metrics import WorkerMetrics
from jobrelay.jobs.worker_config import WorkerConfig, WorkerStats
from tests.apps.rows import REASONS, job_types
from tests.harness import PgBouncer, free_port, wait_until
from tests.jobs_support import (
    enqueue_sync,
    listening_workers,
    query,
    service,
    worker_processes,
)

Pool = AsyncConnectionPool[Connection]

APP = "tests.apps.rows:job_types"
# This repository importable by the worker process, for `tests.apps`.
APP_PATH = os.pathsep.join(
    p for p in (str(Path(__file__).parents[2]), os.environ.get("PYTHONPATH")) if p
)
# Ordinary jobs beside the bad or locked ones; each must complete while those wait.
OTHERS = 30


def _status(dsn: str, ids: list[uuid.UUID]) -> dict[uuid.UUID, dict]:  # type: ignore[type-arg]
    rows = query(
        dsn,
        "SELECT id, status, attempt_count, failure_kind, last_error, result "
        "FROM all_jobs WHERE id = ANY(%s)",
        ids,
    )
    return {r["id"]: r for r in rows}


def _attempts(dsn: str, job_id: uuid.UUID) -> list[dict]:  # type: ignore[type-arg]
    return query(dsn, "SELECT * FROM job_attempts WHERE job_id = %s ORDER BY attempt", job_id)


def _all_completed(dsn: str, ids: list[uuid.UUID]) -> bool:
    found = _status(dsn, ids)
    return len(found) == len(ids) and all(r["status"] == "completed" for r in found.values())


def _ordinary(dsn: str, count: int) -> list[uuid.UUID]:
    return [e.id for e in enqueue_sync(dsn, [EnqueueRequest("diag.noop", {})] * count)]


def _deferred(port: int, write: str) -> float:
    """`jobrelay_jobs_rows_deferred_total{write=...}` on the worker's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    pattern = rf'^jobrelay_jobs_rows_deferred_total\{{write="{write}"\}} (\S+)$'
    found = re.search(pattern, text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


@contextmanager
def row_locked(dsn: str, job_id: uuid.UUID, mode: str) -> Iterator[psycopg.Connection]:
    """Another session holding `SELECT ... FOR <mode>` on the job's row until the block ends."""
    with psycopg.connect(dsn, application_name=f"holder-{mode.replace(' ', '-')}") as conn:
        conn.execute(f"SELECT id FROM jobs WHERE id = %s FOR {mode}", (job_id,))  # type: ignore[arg-type]
        yield conn
        conn.rollback()


def test_poisoned_results_fail_alone_once_with_their_reason(db_dsn: str) -> None:
    """NUL in a string and in a key, a lone surrogate, a result over the limit: each fails
    permanently after one attempt naming the problem; the 30 jobs beside them complete."""
    with worker_processes(
        db_dsn, 1, "--app", APP, PYTHONPATH=APP_PATH, JOBRELAY_WORKER_RESULT_LIMIT_BYTES="4096"
    ):
        poisoned = {
            poison: e.id
            for poison, e in zip(
                REASONS,
                enqueue_sync(
                    db_dsn,
                    [EnqueueRequest("rows.result", {"poison": p, "marker": 1}) for p in REASONS],
                    extra=job_types,
                ),
                strict=True,
            )
        }
        good = [
            e.id
            for e in enqueue_sync(
                db_dsn,
                [EnqueueRequest("rows.result", {"marker": i}) for i in range(OTHERS)],
                extra=job_types,
            )
        ]
        wait_until(lambda: _all_completed(db_dsn, good), timeout_s=30, what="the good jobs")
        wait_until(
            lambda: all(
                r["status"] == "failed" for r in _status(db_dsn, list(poisoned.values())).values()
            ),
            timeout_s=30,
            what="the poisoned jobs to fail",
        )
    found = _status(db_dsn, list(poisoned.values()))
    for poison, job_id in poisoned.items():
        job = found[job_id]
        assert (job["attempt_count"], job["failure_kind"]) == (1, "permanent"), job
        assert job["last_error"].startswith("result cannot be stored: "), job
        assert REASONS[poison] in job["last_error"], (poison, job["last_error"])
        [attempt] = _attempts(db_dsn, job_id)
        assert attempt["outcome"] == "permanent" and REASONS[poison] in attempt["error"], attempt
    results = _status(db_dsn, good)
    assert sorted(r["result"]["marker"] for r in results.values()) == list(range(OTHERS))


async def test_a_batch_postgresql_refuses_is_split_and_only_the_bad_row_fails(
    pool: Pool,
) -> None:
    """The path the pre-check normally spares: a completion whose result reaches SQL with a
    NUL. The batch is halved until the row stands alone; the rest is written in that round."""
    jobs = service(pool)
    ids = [(await jobs.enqueue(EnqueueRequest("diag.noop", {}))).id for _ in range(12)]
    async with pool.connection() as conn:
        claimed = await claims.claim(conn, QueueLimits(lease_s=30, total=12), worker_id="split")
    assert len(claimed) == 12
    stats, metrics = WorkerStats(), WorkerMetrics()
    completer = Completer(
        pool=pool,
        config=WorkerConfig(),
        counters=WorkerCounters(stats, metrics),
        freed=lambda: None,
    )
    bad = claimed[5]
    completer.start()
    for job in claimed:
        result = {"text": "a\x00b"} if job is bad else {"id": str(job.id)}
        completer.add(claims.Done(job, result=result))
    await completer.stop()

    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT id, status, attempt_count, last_error FROM all_jobs WHERE id = ANY(%s)",
            (ids,),
        )
        rows = {r["id"]: r for r in await cur.fetchall()}
    assert rows[bad.id]["status"] == "failed" and rows[bad.id]["attempt_count"] == 1
    assert "result cannot be stored: NUL character at $.text" in rows[bad.id]["last_error"]
    others = [r for job_id, r in rows.items() if job_id != bad.id]
    assert [r["status"] for r in others] == ["completed"] * 11, others
    assert stats.split_out == 1
    assert (
        metrics.registry.get_sample_value("jobrelay_jobs_rows_refused_total", {"found": "split"})
        == 1
    )


RUNNING_LOCKS = ["KEY SHARE", "SHARE", "NO KEY UPDATE", "UPDATE"]


@pytest.mark.parametrize("route", ["one worker", "two workers through PgBouncer"])
def test_running_jobs_locked_by_another_session_complete_once_after_the_lock(
    db_dsn: str, route: str, request: pytest.FixtureRequest
) -> None:
    """Four running jobs, each row held by another session in one lock mode until its
    handler ended: their completions are deferred, 30 jobs enqueued after them complete
    meanwhile, and each locked job completes once (one attempt) when its lock goes. The
    same with two worker processes through PgBouncer in transaction mode."""
    env: dict[str, str] = {"JOBRELAY_WORKER_CONCURRENCY": "8"}
    count = 1
    if route != "one worker":
        bouncer: PgBouncer = request.getfixturevalue("pgbouncer")
        dbname = psycopg.conninfo.conninfo_to_dict(db_dsn)["dbname"] or "postgres"
        env |= {
            "DATABASE_URL": bouncer.dsn(str(dbname)),
            "JOBRELAY_DATABASE_POOLER": "transaction",
            "JOBRELAY_DATABASE_DIRECT_URL": db_dsn,
        }
        count = 2
    ports = [free_port() for _ in range(count)]
    with contextlib.ExitStack() as workers:
        for port in ports:  # one process each: each its own /metrics port
            workers.enter_context(
                worker_processes(db_dsn, 1, JOBRELAY_WORKER_METRICS_PORT=str(port), **env)
            )
        wait_until(lambda: listening_workers(db_dsn) >= count, timeout_s=60, what="the workers")
        locked = [
            e.id
            for e in enqueue_sync(
                db_dsn, [EnqueueRequest("diag.sleep", {"seconds": 1.5})] * len(RUNNING_LOCKS)
            )
        ]
        wait_until(
            lambda: all(r["status"] == "in_progress" for r in _status(db_dsn, locked).values()),
            timeout_s=30,
            what="the sleeping jobs to run",
        )
        with contextlib.ExitStack() as stack:
            for job_id, mode in zip(locked, RUNNING_LOCKS, strict=True):
                stack.enter_context(row_locked(db_dsn, job_id, mode))
            # Every completion was tried and deferred (so the worker met each lock) ...
            wait_until(
                lambda: sum(_deferred(p, "complete") for p in ports) >= len(RUNNING_LOCKS),
                timeout_s=30,
                what="the locked completions to be deferred",
            )
            # ... and jobs enqueued after them complete while the locks are held.
            others = _ordinary(db_dsn, OTHERS)
            wait_until(lambda: _all_completed(db_dsn, others), timeout_s=30, what="the others")
            held = _status(db_dsn, locked)
            assert all(
                (r["status"], r["attempt_count"]) == ("in_progress", 1) for r in held.values()
            ), held
        wait_until(lambda: _all_completed(db_dsn, locked), timeout_s=30, what="the locked jobs")
    # One attempt, and it succeeded: no failed or rescued attempt on record.
    assert [_attempts(db_dsn, job_id) for job_id in locked] == [[]] * len(locked)
    assert all(r["attempt_count"] == 1 for r in _status(db_dsn, locked).values())


def test_pending_jobs_locked_by_another_session_wait_for_the_lock_then_run_once(
    db_dsn: str,
) -> None:
    """KEY SHARE does not stop the claim (the completion waits for the lock); UPDATE keeps the
    job from being claimed at all. Either way the others complete meanwhile, and the locked
    job completes once after its lock goes."""
    key_share, update = (e.id for e in enqueue_sync(db_dsn, [EnqueueRequest("diag.noop", {})] * 2))
    port = free_port()
    with contextlib.ExitStack() as locks:
        locks.enter_context(row_locked(db_dsn, key_share, "KEY SHARE"))
        locks.enter_context(row_locked(db_dsn, update, "UPDATE"))
        with worker_processes(db_dsn, 1, JOBRELAY_WORKER_METRICS_PORT=str(port)):
            others = _ordinary(db_dsn, OTHERS)
            wait_until(lambda: _all_completed(db_dsn, others), timeout_s=30, what="the others")
            wait_until(
                lambda: _deferred(port, "complete") >= 1,
                timeout_s=30,
                what="the KEY SHARE job's completion to be deferred",
            )
            held = _status(db_dsn, [key_share, update])
            assert (held[key_share]["status"], held[key_share]["attempt_count"]) == (
                "in_progress",
                1,
            )
            assert (held[update]["status"], held[update]["attempt_count"]) == ("pending", 0)
            locks.close()  # the worker keeps running: both finish once the locks go
            wait_until(
                lambda: _all_completed(db_dsn, [key_share, update]),
                timeout_s=30,
                what="the formerly locked jobs",
            )
    ended = _status(db_dsn, [key_share, update])
    assert [r["attempt_count"] for r in ended.values()] == [1, 1], ended
    assert [_attempts(db_dsn, job_id) for job_id in (key_share, update)] == [[], []]
