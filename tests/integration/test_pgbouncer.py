"""Through PgBouncer in transaction pooling mode (issue 13): no prepared statements, no
session state, LISTEN only over the direct URL, and a session pooler refused at startup."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from jobrelay.db.errors import PoolerMismatch
from jobrelay.db.pool import check_transaction_pooler, open_pool
from tests.harness import (
    PgBouncer,
    PgServer,
    cli_env,
    jobrelay_command,
    run_cli,
    wait_until,
)


def _through(bouncer: PgBouncer, dsn: str) -> str:
    return bouncer.dsn(psycopg.conninfo.conninfo_to_dict(dsn)["dbname"] or "postgres")


@pytest.fixture
def session_bouncer(pg_server: PgServer, tmp_path: Path) -> Iterator[PgBouncer]:
    bouncer = PgBouncer(pg_server, tmp_path / "session-bouncer", pool_mode="session").start()
    try:
        yield bouncer
    finally:
        bouncer.stop()


async def test_the_check_accepts_transaction_pooling_only(
    db_dsn: str, pgbouncer: PgBouncer, session_bouncer: PgBouncer
) -> None:
    await check_transaction_pooler(_through(pgbouncer, db_dsn))
    for dsn in (_through(session_bouncer, db_dsn), db_dsn):
        with pytest.raises(PoolerMismatch, match="pool_mode=transaction"):
            await check_transaction_pooler(dsn)


async def test_a_pool_declared_pooled_repeats_statements_through_pgbouncer(
    db_dsn: str, pgbouncer: PgBouncer
) -> None:
    dsn = _through(pgbouncer, db_dsn)
    # The harness's bouncer really pools by transaction: a statement psycopg prepared is
    # missing (or already there under the same name) on the next server connection.
    with (
        psycopg.connect(dsn, autocommit=True, prepare_threshold=0) as a,
        psycopg.connect(dsn, autocommit=True, prepare_threshold=0) as b,
        pytest.raises(
            (psycopg.errors.InvalidSqlStatementName, psycopg.errors.DuplicatePreparedStatement)
        ),
    ):
        for n in range(20):
            for conn in (a, b):
                conn.execute("SELECT %s::int + 1", (n,))
    pool = await open_pool(dsn, min_size=2, max_size=4, transaction_pooler=True)
    try:
        for n in range(20):
            async with pool.connection() as one, pool.connection() as two:
                for conn in (one, two):
                    cursor = await conn.execute("SELECT %s::int + 1 AS v", (n,))
                    assert await cursor.fetchone() == {"v": n + 1}
    finally:
        await pool.close()


def test_a_session_pooler_declared_transaction_is_one_line_and_exit_2(
    db_dsn: str, session_bouncer: PgBouncer
) -> None:
    result = run_cli(
        "migrate",
        DATABASE_URL=_through(session_bouncer, db_dsn),
        JOBRELAY_DATABASE_POOLER="transaction",
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "pool_mode=transaction" in lines[0], result.stderr


@pytest.mark.slow
def test_a_worker_through_pgbouncer_without_a_direct_url_polls_and_says_so_once(
    db_dsn: str, pgbouncer: PgBouncer
) -> None:
    env = cli_env(
        DATABASE_URL=_through(pgbouncer, db_dsn),
        JOBRELAY_DATABASE_POOLER="transaction",
        JOBRELAY_DATABASE_DIRECT_URL=None,
        JOBRELAY_WORKER_POLL_INTERVAL_S="0.05",
        JOBRELAY_LOG_FORMAT="json",
    )
    worker = subprocess.Popen(
        [*jobrelay_command(), "worker", "--concurrency", "4"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        ids = []
        for n in range(3):
            created = subprocess.run(
                [*jobrelay_command(), "jobs", "enqueue", "diag.noop", "--payload", f'{{"n": {n}}}'],
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert created.returncode == 0, created.stderr
            ids.append(json.loads(created.stdout)["id"])

        def all_completed() -> bool:
            with psycopg.connect(db_dsn) as conn:
                rows = conn.execute(
                    "SELECT count(*) FROM all_jobs WHERE id = ANY(%s) AND status = 'completed'",
                    (ids,),
                ).fetchone()
            return bool(rows and rows[0] == len(ids))

        wait_until(all_completed, timeout_s=60, what="the polling worker to run every job")
    finally:
        worker.terminate()
        output, _ = worker.communicate(timeout=60)
    assert worker.returncode == 0, output
    assert output.count("database.listen_unavailable") == 1, output
    assert "prepared statement" not in output, output
