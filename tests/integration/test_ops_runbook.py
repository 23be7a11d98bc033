"""The ops runbook on the legacy shape (issue 8): reconcile, index, SET LOGGED, verify."""

from __future__ import annotations

import hashlib
import json
import subprocess
import threading
import time
from pathlib import Path

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from jobrelay.db.pool import Connection, open_pool
from jobrelay.domain.jobs_config import QueueLimits
from jobrelay.jobs.claims import claim
from jobrelay.ops.check import check, create_dedupe_index
from jobrelay.ops.control import set_pause
from jobrelay.ops.duplicates import plan_as_json, reconcile_duplicates, registry_policies
from jobrelay.ops.logged import set_logged
from tests.harness import ApiHarness, run_cli, wait_until
from tests.jobs_support import build_registry
from tests.legacy_jobs import LEGACY_ROW_COUNT, job_count, make_legacy, persistence

POLICIES = registry_policies(build_registry(diag_enabled=True))


@pytest.fixture
async def legacy(db_dsn: str) -> str:
    make_legacy(db_dsn)
    return db_dsn


@pytest.fixture
async def legacy_pool(legacy: str) -> AsyncConnectionPool[Connection]:
    pool = await open_pool(legacy, min_size=1, max_size=4)
    yield pool  # type: ignore[misc]
    await pool.close()


def _states(dsn: str) -> dict[str, tuple[str, str | None, object]]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT id::text, status, last_error, payload FROM all_jobs "
            "WHERE dedupe_key NOT LIKE 'bulk:%'"
        ).fetchall()
    return {r[0]: (r[1], r[2], r[3]) for r in rows}


async def test_reconcile_index_and_set_logged_on_the_legacy_shape(
    legacy: str, legacy_pool: AsyncConnectionPool[Connection]
) -> None:
    before = _states(legacy)

    dry = await reconcile_duplicates(legacy_pool, POLICIES, apply=False)
    assert _states(legacy) == before, "a dry run changes nothing"
    summary = plan_as_json(dry)
    assert summary["byType"] == {
        "index.sync_delta": {"groups": 1, "cancelled": 2, "merged": 2},
        "media.process": {"groups": 2, "cancelled": 3, "merged": 0},
        "source.sync": {"groups": 1, "cancelled": 1, "merged": 0},
    }

    applied = await reconcile_duplicates(legacy_pool, POLICIES, apply=True)
    assert plan_as_json(applied)["plan"] == summary["plan"]
    after = _states(legacy)
    planned_losers = {loser: g for g in applied.groups for loser in g.cancelled}
    changed = {i for i in before if before[i] != after[i]}
    merged_survivors = {g.survivor for g in applied.groups if g.merged_payload is not None}
    assert changed == set(planned_losers) | merged_survivors, "exactly the planned rows"
    for loser, group in planned_losers.items():
        assert after[loser][0] == "cancelled"
        assert after[loser][1] == group.reason and group.survivor in group.reason
    (merge_group,) = [g for g in applied.groups if g.type == "index.sync_delta"]
    assert after[merge_group.survivor][2]["mediaIds"] == ["a", "b", "c", "d"]  # type: ignore[index]
    (supersede,) = [g for g in applied.groups if g.type == "source.sync"]
    assert after[supersede.survivor][2]["revision"] == 9  # type: ignore[index]
    assert job_count(legacy) == LEGACY_ROW_COUNT, "nothing is deleted"

    assert await create_dedupe_index(legacy_pool) == "valid"

    refused = await set_logged(legacy_pool)
    assert refused["outcome"] == "refused"
    assert "not paused" in refused["message"]
    assert persistence(legacy) == "u"

    await set_pause(legacy_pool, claims=True, enqueue=True, reason="set-logged", actor="ops")
    report = await set_logged(legacy_pool, lock_timeout_s=5)
    assert report["outcome"] == "converted", report
    verified = report["steps"]["4_convert_and_verify"]
    assert verified["ok"] and verified["claimWorks"] and verified["rowCountUnchanged"]
    # The cancelled duplicates left `jobs` for `finished_jobs`; the conversion counts `jobs`.
    assert verified["rowCountBefore"] == LEGACY_ROW_COUNT - len(planned_losers)
    assert verified["rowChecksumUnchanged"]
    measured = report["steps"]["2_measure"]
    assert measured["rowCount"] == LEGACY_ROW_COUNT - len(planned_losers)
    assert verified["rowChecksumBefore"] == measured["rowChecksum"] == _checksum(legacy)
    assert measured["tableBytes"] > 0 and measured["indexBytes"] > 0
    assert isinstance(measured["freeDiskBytes"], int | str)
    assert set(report["steps"]["6_record"]) == {"durationS", "lockHeldS", "rollbackBoundary"}
    assert persistence(legacy) == "p"
    with psycopg.connect(legacy) as conn:
        not_permanent = conn.execute(
            """
            SELECT c.relname FROM pg_class c
            WHERE c.relpersistence <> 'p' AND (
                c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = 'jobs'::regclass)
                OR c.oid = (SELECT reltoastrelid FROM pg_class WHERE oid = 'jobs'::regclass)
                OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid =
                             (SELECT reltoastrelid FROM pg_class WHERE oid = 'jobs'::regclass)))
            """
        ).fetchall()
        stored = conn.execute("SELECT kind, ok, report->>'outcome' FROM ops_run").fetchall()
    assert not_permanent == []
    assert ("set-logged", False, "refused") in stored
    assert ("set-logged", True, "converted") in stored
    assert job_count(legacy) == LEGACY_ROW_COUNT

    again = await set_logged(legacy_pool)
    assert again["outcome"] == "already_logged" and again["ok"]
    assert (await check(legacy_pool))["ok"]


async def test_a_live_lease_refuses_the_conversion(
    legacy: str, legacy_pool: AsyncConnectionPool[Connection]
) -> None:
    with psycopg.connect(legacy, autocommit=True) as conn:
        conn.execute(
            "UPDATE jobs SET status = 'in_progress', claim_token = gen_random_uuid(), "
            "lease_expires_at = clock_timestamp() + interval '10 minutes' "
            "WHERE id = (SELECT id FROM all_jobs WHERE status = 'pending' LIMIT 1)"
        )
    await set_pause(legacy_pool, claims=True, enqueue=True, reason=None, actor="ops")
    report = await set_logged(legacy_pool)
    assert report["outcome"] == "refused"
    assert "1 job(s) hold a live lease" in report["message"]
    assert persistence(legacy) == "u"


def _hold_lock(dsn: str, statement: str, release: threading.Event, held: threading.Event) -> None:
    with psycopg.connect(dsn) as conn:
        conn.execute(statement)  # type: ignore[arg-type]
        held.set()
        release.wait(60)
        conn.rollback()


def _checksum(dsn: str) -> str:
    """The runbook's documented checksum recomputed in Python from each row's md5: the two
    64-bit halves (signed) summed over all rows, then md5 of "<sum of high>:<sum of low>"."""
    with psycopg.connect(dsn) as conn:
        hashes = [h for (h,) in conn.execute("SELECT md5(j::text) FROM jobs AS j").fetchall()]

    def signed(half: str) -> int:
        value = int(half, 16)
        return value - (1 << 64) if value >= 1 << 63 else value

    high = sum(signed(h[:16]) for h in hashes)
    low = sum(signed(h[16:]) for h in hashes)
    return hashlib.md5(f"{high}:{low}".encode()).hexdigest()


def _write_once_the_runbook_waits(dsn: str, wrote: threading.Event) -> None:
    """Change one row in a transaction that commits only when the runbook waits for its lock:
    after the measurement, before the conversion (what a writer ignoring the pause does)."""
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "UPDATE jobs SET payload = payload || '{\"touched\": true}' "
            "WHERE id = (SELECT id FROM all_jobs WHERE status = 'pending' ORDER BY id LIMIT 1)"
        )
        with psycopg.connect(dsn) as probe:
            wait_until(
                lambda: probe.execute(
                    "SELECT 1 FROM pg_locks WHERE relation = 'jobs'::regclass "
                    "AND mode = 'AccessExclusiveLock' AND NOT granted"
                ).fetchone(),
                timeout_s=60,
                what="the runbook to wait for its lock",
            )
        conn.commit()
        wrote.set()


async def test_a_row_changed_during_the_runbook_fails_its_verification(
    legacy: str, legacy_pool: AsyncConnectionPool[Connection]
) -> None:
    await set_pause(legacy_pool, claims=True, enqueue=True, reason="set-logged", actor="ops")
    wrote = threading.Event()
    writer = threading.Thread(target=_write_once_the_runbook_waits, args=(legacy, wrote))
    writer.start()
    try:
        report = await set_logged(legacy_pool, lock_timeout_s=60)
    finally:
        writer.join()
    assert wrote.is_set()
    assert report["outcome"] == "converted_unverified" and not report["ok"], report
    verified = report["steps"]["4_convert_and_verify"]
    assert verified["rowCountUnchanged"], "the count alone cannot see an update"
    assert not verified["rowChecksumUnchanged"]
    assert verified["rowChecksumBefore"] == report["steps"]["2_measure"]["rowChecksum"]
    assert verified["rowChecksumAfter"] == _checksum(legacy) != verified["rowChecksumBefore"]
    assert "verification failed: rowChecksumUnchanged" in report["message"]
    assert "the rows changed between the measurement and the conversion" in report["message"]
    with psycopg.connect(legacy) as conn:
        stored = conn.execute("SELECT ok, report->>'outcome' FROM ops_run").fetchall()
    assert stored == [(False, "converted_unverified")]


def _cli(*args: str, dsn: str) -> subprocess.CompletedProcess[str]:
    return run_cli("ops", *args, DATABASE_URL=dsn)


def test_a_held_lock_aborts_within_the_timeout_and_changes_nothing(
    legacy: str, tmp_path: Path
) -> None:
    assert _cli("pause", dsn=legacy).returncode == 0
    release, held = threading.Event(), threading.Event()
    holder = threading.Thread(
        target=_hold_lock, args=(legacy, "LOCK TABLE jobs IN ACCESS SHARE MODE", release, held)
    )
    holder.start()
    try:
        assert held.wait(30)
        began = time.monotonic()
        result = _cli(
            "set-logged", "--lock-timeout", "1s", "--report", str(tmp_path / "r.json"), dsn=legacy
        )
        elapsed = time.monotonic() - began
    finally:
        release.set()
        holder.join()
    assert result.returncode == 2
    assert "set-logged aborted: could not lock jobs within 1s" in result.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["outcome"] == "aborted" and report["steps"]["3_lock"] == {"granted": False}
    assert elapsed < 60, "the command must give up instead of waiting for the lock"
    assert persistence(legacy) == "u"
    assert job_count(legacy) == LEGACY_ROW_COUNT


def test_a_foreign_key_to_an_unlogged_table_stops_before_any_lock(legacy: str) -> None:
    with psycopg.connect(legacy, autocommit=True) as conn:
        conn.execute("CREATE UNLOGGED TABLE legacy_tag (id int PRIMARY KEY)")
        conn.execute("ALTER TABLE jobs ADD COLUMN tag_id int REFERENCES legacy_tag (id)")
    assert _cli("pause", dsn=legacy).returncode == 0
    release, held = threading.Event(), threading.Event()
    holder = threading.Thread(
        target=_hold_lock, args=(legacy, "LOCK TABLE jobs IN ACCESS SHARE MODE", release, held)
    )
    holder.start()
    try:
        assert held.wait(30)
        # With the lock held, a run that tried to lock would end "aborted"; it must be refused.
        result = _cli("set-logged", "--lock-timeout", "30s", dsn=legacy)
    finally:
        release.set()
        holder.join()
    assert result.returncode == 2
    assert "set-logged refused" in result.stderr
    assert "jobs_tag_id_fkey (jobs -> legacy_tag)" in result.stderr
    assert persistence(legacy) == "u"


def test_not_paused_is_refused_with_the_reason_by_the_cli(legacy: str) -> None:
    result = _cli("set-logged", dsn=legacy)
    assert result.returncode == 2
    assert "jobs are not paused: run `jobrelay ops pause` first" in result.stderr


def test_dry_run_measures_and_changes_nothing(legacy: str) -> None:
    assert _cli("pause", dsn=legacy).returncode == 0
    result = _cli("set-logged", "--dry-run", dsn=legacy)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["outcome"] == "dry_run"
    assert report["steps"]["2_measure"]["rowCount"] == LEGACY_ROW_COUNT
    assert persistence(legacy) == "u"


@pytest.mark.parametrize("bad", ["soon", "-1s", "0ms"])
def test_bad_lock_timeout_is_named(legacy: str, bad: str) -> None:
    result = _cli("set-logged", "--lock-timeout", bad, dsn=legacy)
    assert result.returncode == 2
    assert f"--lock-timeout {bad!r}" in result.stderr


def test_ops_check_and_status_report_the_legacy_state(legacy: str) -> None:
    checked = _cli("check", dsn=legacy)
    assert checked.returncode == 1
    body = json.loads(checked.stdout)
    assert body["tables"]["jobs"] == "unlogged"
    assert body["dedupeIndex"] == "missing"
    assert body["duplicateGroups"] == 4
    status = json.loads(_cli("status", dsn=legacy).stdout)
    assert status["claimsPaused"] is False
    assert status["pendingByType"]["media.process"] > 0


def test_pause_resume_and_status_print_one_camel_case_shape(legacy: str) -> None:
    printed = {name: _cli(name, dsn=legacy) for name in ("pause", "status", "resume")}
    for name, result in printed.items():
        assert result.returncode == 0, (name, result.stderr)
    paused, status, resumed = (json.loads(printed[n].stdout) for n in ("pause", "status", "resume"))
    assert set(resumed) == set(paused), "resume prints the control row like pause"
    assert set(paused) <= set(status), "status adds lease and pending counts to the same row"
    assert all("_" not in key for key in resumed), resumed
    assert paused["claimsPaused"] is True and paused["enqueuePaused"] is True
    assert resumed["claimsPaused"] is False and resumed["enqueuePaused"] is False
    assert resumed["updatedBy"] == "ops"


def test_concurrent_enqueues_after_the_index_cannot_duplicate(legacy: str) -> None:
    applied = _cli("reconcile-duplicates", "--apply", "--create-index", dsn=legacy)
    assert applied.returncode == 0, applied.stderr
    assert json.loads(applied.stdout)["dedupeIndex"] == "valid"
    barrier = threading.Barrier(6)

    def enqueue() -> None:
        with psycopg.connect(legacy, autocommit=True) as conn:
            barrier.wait(30)
            for _ in range(10):
                conn.execute(
                    "INSERT INTO jobs (id, type, dedupe_key, payload) "
                    "VALUES (gen_random_uuid(), 'media.process', 'fresh:1', '{}') "
                    "ON CONFLICT (type, dedupe_key) "
                    "WHERE dedupe_key IS NOT NULL AND status IN ('pending', 'in_progress') "
                    "DO NOTHING"
                )

    threads = [threading.Thread(target=enqueue) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with psycopg.connect(legacy) as conn:
        active = conn.execute(
            "SELECT count(*) FROM all_jobs WHERE dedupe_key = 'fresh:1' "
            "AND status IN ('pending', 'in_progress')"
        ).fetchone()
        groups = conn.execute(
            "SELECT count(*) FROM (SELECT 1 FROM all_jobs WHERE dedupe_key IS NOT NULL AND status "
            "IN ('pending','in_progress') GROUP BY type, dedupe_key HAVING count(*) > 1) g"
        ).fetchone()
    assert active == (1,)
    assert groups == (0,)


NOOP = {"type": "diag.noop", "payload": {}}


async def test_pause_refuses_enqueue_over_http_and_stops_claims(api: ApiHarness) -> None:
    pool = api.services.pool
    await set_pause(pool, claims=True, enqueue=True, reason="quiesce", actor="ops")
    refused = await api.client.post(
        "/v1/jobs",
        json={"type": "diag.noop", "payload": {}},
        headers=api.headers("root", admin=True),
    )
    assert refused.status_code == 503
    assert refused.json()["type"].endswith("/paused")
    async with pool.connection() as conn:
        count = await (await conn.execute("SELECT count(*) AS n FROM all_jobs")).fetchone()
    assert count is not None and count["n"] == 0, "nothing stored while paused"

    await set_pause(pool, claims=True, enqueue=False, reason="drain", actor="ops")
    accepted = await api.client.post(
        "/v1/jobs",
        json={"type": "diag.noop", "payload": {}},
        headers=api.headers("root", admin=True),
    )
    assert accepted.status_code in (200, 201), accepted.text
    async with pool.connection() as conn:
        assert await claim(conn, QueueLimits(lease_s=30, total=10), worker_id="w") == []
    await set_pause(pool, claims=False, enqueue=False, reason=None, actor="ops")
    async with pool.connection() as conn:
        assert len(await claim(conn, QueueLimits(lease_s=30, total=10), worker_id="w")) == 1
