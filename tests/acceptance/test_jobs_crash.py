"""Crash and restart as a user would see them: real `jobrelay worker` processes killed with
SIGKILL, and a PostgreSQL server of our own stopped hard and started again."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from jobrelay.db import migrate
from tests.harness import cli_env, jobrelay_command, own_server, wait_until


def _worker(dsn: str, *, lease_s: float, concurrency: int = 4) -> subprocess.Popen[str]:
    env = cli_env(
        DATABASE_URL=dsn,
        JOBRELAY_JOBS_LEASE_S=str(lease_s),
        JOBRELAY_JOBS_RESCUE_INTERVAL_S="0.2",
        JOBRELAY_WORKER_POLL_INTERVAL_S="0.02",
        JOBRELAY_DIAG_JOBS_ENABLED="true",
    )
    return subprocess.Popen(
        [*jobrelay_command(), "worker", "--concurrency", str(concurrency)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _stop(process: subprocess.Popen[str]) -> str:
    if process.poll() is None:
        process.terminate()
    output, _ = process.communicate(timeout=60)
    return output


def _insert(dsn: str, jobs: list[tuple[str, dict[str, object]]]) -> list[uuid.UUID]:
    ids = [uuid.uuid4() for _ in jobs]
    with psycopg.connect(dsn, autocommit=True) as conn:
        for job_id, (job_type, payload) in zip(ids, jobs, strict=True):
            conn.execute(
                "INSERT INTO jobs (id, type, payload) VALUES (%s, %s, %s)",
                (job_id, job_type, Jsonb(payload)),
            )
    return ids


def _rows(dsn: str) -> dict[uuid.UUID, dict[str, object]]:
    try:
        with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
            return {r["id"]: r for r in conn.execute("SELECT * FROM all_jobs").fetchall()}
    except psycopg.OperationalError:
        return {}


def test_sigkill_mid_job_is_reclaimed_and_finished_by_another_worker(db_dsn: str) -> None:
    [job_id] = _insert(db_dsn, [("diag.sleep", {"seconds": 1.5})])
    first = _worker(db_dsn, lease_s=1.5)
    try:
        running = wait_until(
            lambda: _rows(db_dsn)[job_id]["status"] == "in_progress" and _rows(db_dsn)[job_id],
            timeout_s=60,
            what="the first worker to claim the job",
        )
        first.kill()  # SIGKILL: no release, no cleanup
        first.wait(timeout=30)
    finally:
        _stop(first)
    second = _worker(db_dsn, lease_s=1.5)
    try:
        done = wait_until(
            lambda: _rows(db_dsn)[job_id]["status"] == "completed" and _rows(db_dsn)[job_id],
            timeout_s=60,
            what="the second worker to complete the reclaimed job",
        )
    finally:
        _stop(second)
    assert done["attempt_count"] == 2
    assert done["claimed_by"] != running["claimed_by"]
    assert done["failure_kind"] is None


@pytest.mark.slow
def test_postgres_restart_loses_no_job_and_workers_reconnect(tmp_path: Path) -> None:
    server = own_server(tmp_path / "pgdata")
    admin = server.start()
    try:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute("CREATE DATABASE jobs_restart")
        dsn = server.dsn("jobs_restart")
        migrate.upgrade(dsn)
        ids = _insert(dsn, [("diag.sleep", {"seconds": 0.7})] * 12 + [("diag.noop", {})] * 8)
        worker = _worker(dsn, lease_s=3.0, concurrency=4)
        try:
            wait_until(
                lambda: sum(r["status"] == "in_progress" for r in _rows(dsn).values()) >= 2,
                timeout_s=60,
                what="running jobs before the restart",
            )
            server.stop("immediate")  # a crash: no shutdown checkpoint
            server.start()
            with psycopg.connect(dsn, autocommit=True) as conn:
                persistence = conn.execute(
                    "SELECT relpersistence FROM pg_class WHERE relname = 'jobs'"
                ).fetchone()
            assert persistence == ("p",)
            rows = _rows(dsn)
            assert set(rows) == set(ids), "every job survived the restart"
            wait_until(
                lambda: all(r["status"] == "completed" for r in _rows(dsn).values()),
                timeout_s=90,
                what="the reconnected worker to finish every job",
            )
        finally:
            output = _stop(worker)
        assert worker.returncode == 0, output
    finally:
        server.stop()
