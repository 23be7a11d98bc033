"""Why the runbook exists: a crash empties an UNLOGGED jobs table, and after set-logged it
does not. PostgreSQL is really stopped with `pg_ctl stop -m immediate` (no shutdown
checkpoint, crash recovery on start)."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from jobrelay.db import migrate
from jobrelay.db.embedded import EmbeddedPostgres
from jobrelay.db.pool import open_pool
from jobrelay.ops.check import create_dedupe_index
from jobrelay.ops.control import set_pause
from jobrelay.ops.duplicates import reconcile_duplicates, registry_policies
from jobrelay.ops.logged import default_claim_check, set_logged
from tests.harness import SystemPostgres, own_server
from tests.jobs_support import build_registry
from tests.legacy_jobs import LEGACY_ROW_COUNT, job_count, make_legacy, persistence

POLICIES = registry_policies(build_registry(diag_enabled=True))


def _crash_and_restart(server: EmbeddedPostgres | SystemPostgres) -> str:
    server.stop(mode="immediate")
    return server.start()


@pytest.mark.slow
async def test_crash_empties_unlogged_jobs_but_not_after_set_logged(tmp_path: Path) -> None:
    server = own_server(tmp_path / "pgdata")
    dsn = server.start()
    try:
        migrate.upgrade(dsn)
        make_legacy(dsn)
        assert job_count(dsn) == LEGACY_ROW_COUNT

        dsn = _crash_and_restart(server)
        assert persistence(dsn) == "u"
        assert job_count(dsn) == 0, "crash recovery resets UNLOGGED tables: the jobs are gone"

        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "CREATE UNIQUE INDEX IF NOT EXISTS jobs_active_dedupe_key ON jobs "
                "(type, dedupe_key) WHERE dedupe_key IS NOT NULL "
                "AND status IN ('pending', 'in_progress')"
            )
            conn.execute("ALTER TABLE jobs SET LOGGED")
        make_legacy(dsn)  # the legacy shape again, rows and duplicates included

        pool = await open_pool(dsn, min_size=1, max_size=2)
        try:
            await reconcile_duplicates(pool, POLICIES, apply=True)
            assert await create_dedupe_index(pool) == "valid"
            await set_pause(pool, claims=True, enqueue=True, reason="runbook", actor="ops")
            report = await set_logged(pool)
            assert report["outcome"] == "converted", report
        finally:
            await pool.close()

        dsn = _crash_and_restart(server)
        assert persistence(dsn) == "p"
        assert job_count(dsn) == LEGACY_ROW_COUNT, "LOGGED: every row survives the crash"
        pool = await open_pool(dsn, min_size=1, max_size=2)
        try:
            async with pool.connection() as conn:
                assert await default_claim_check(conn)
        finally:
            await pool.close()
    finally:
        server.stop()
