"""The `SET LOGGED` runbook of seed 003, as code: quiesce check, measurements, a bounded
lock, the conversion, verification and a report (stdout, file, and an `ops_run` row).

The verification compares the row count and a checksum of every row (an order-independent
aggregate of `md5(row::text)`, computed in the database) before and after the conversion:
the rewrite must carry every row over byte for byte, and the runbook's quiesce must have held.

Every outcome is a report; `outcome` says which: `converted`, `already_logged`, `dry_run`,
`refused` (a pre-flight condition failed, nothing locked) or `aborted` (the lock was not
granted within `lock_timeout`, nothing changed).
"""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from jobrelay.db.pool import Connection, transaction
from jobrelay.domain.jobs_config import QueueLimits
from jobrelay.ids import new_uuid
from jobrelay.jobs.claims import claim
from jobrelay.ops.control import SQL, control_status

# A conservative rewrite rate for the duration estimate (table + indexes are rewritten).
_ESTIMATE_BYTES_PER_S = 64 * 1024 * 1024

ClaimCheck = Callable[[Connection], Awaitable[bool]]

ROLLBACK_BOUNDARY = (
    "The conversion is one transaction: until its COMMIT any failure (lock timeout, error, "
    "crash) leaves the table UNLOGGED with every row. After COMMIT the table is permanent; "
    "going back means `ALTER TABLE … SET UNLOGGED`, another full rewrite."
)
NEXT_STEPS = [
    "jobrelay ops resume            # claims and enqueue resume",
    "restart the workers, then watch `jobrelay ops status` for claims",
    "restart test: `pg_ctl -D <data dir> stop -m immediate` then start; "
    "`jobrelay ops check` must show the table logged with the same row count",
]


async def default_claim_check(conn: Connection) -> bool:
    """Insert a `diag.noop` job and claim it with the engine's own claim statement.

    Runs in one transaction that is rolled back, with the pause flags lifted inside it only
    (other sessions still see them set), so nothing is left behind and no worker wakes up.
    """
    job_id = new_uuid()
    async with conn.transaction(force_rollback=True):
        await conn.execute(
            SQL.set_pause, {"claims": False, "enqueue": False, "reason": None, "actor": "ops"}
        )
        await conn.execute(SQL.verify_claim_insert, {"id": job_id})
        claimed = await claim(conn, QueueLimits(lease_s=30, total=1), worker_id="ops-verify")
    return [job.id for job in claimed] == [job_id]


async def set_logged(
    pool: AsyncConnectionPool[Connection],
    *,
    table: str = "jobs",
    lock_timeout_s: float = 5.0,
    dry_run: bool = False,
    actor: str = "ops",
    claim_check: ClaimCheck = default_claim_check,
) -> dict[str, Any]:
    """Run the runbook on `table` and return its report (also stored in `ops_run`)."""
    started = datetime.now(UTC)
    report: dict[str, Any] = {"table": table, "lockTimeoutS": lock_timeout_s, "steps": {}}
    try:
        await _run(pool, report, table, lock_timeout_s, dry_run, claim_check)
    finally:
        report["startedAt"] = started.isoformat()
        report["finishedAt"] = datetime.now(UTC).isoformat()
        if not dry_run:
            await store_report(pool, "set-logged", report, started, actor)
    return report


async def _run(
    pool: AsyncConnectionPool[Connection],
    report: dict[str, Any],
    table: str,
    lock_timeout_s: float,
    dry_run: bool,
    claim_check: ClaimCheck,
) -> None:
    steps: dict[str, Any] = report["steps"]
    async with pool.connection() as conn:
        facts = await _facts(conn, table)
        if facts is None:
            _finish(report, "refused", f"table {table} does not exist")
            return
        if facts["persistence"] == "p":
            steps["1_preflight"] = {"persistence": "logged"}
            _finish(report, "already_logged", f"table {table} is already LOGGED; nothing to do")
            return

        # Step 1: quiesced, no live lease, no foreign key to or from an UNLOGGED table.
        control = await control_status(pool)
        foreign_keys = [
            dict(r)
            for r in await (
                await conn.execute(SQL.unlogged_foreign_keys, {"table": table})
            ).fetchall()
        ]
        steps["1_preflight"] = {
            "claimsPaused": control["claims_paused"],
            "enqueuePaused": control["enqueue_paused"],
            "liveLeases": int(control["live_leases"]),
            "unloggedForeignKeys": foreign_keys,
        }
        refusal = _refusal(control, foreign_keys)
        if refusal:
            _finish(report, "refused", refusal)
            return

        # Step 2: what will be rewritten, and whether the disk can take it.
        before = await _fingerprint(conn, table)
        steps["2_measure"] = await _measure(conn, facts, before)
        needed = steps["2_measure"]["rewriteBytes"]
        free = steps["2_measure"]["freeDiskBytes"]
        if isinstance(free, int) and free < 2 * needed:
            _finish(report, "refused", f"only {free} bytes free; the rewrite needs ~{needed}")
            return
        if dry_run:
            _finish(report, "dry_run", "pre-flight passed; nothing was changed")
            return

        # Steps 3 and 4: bounded lock, conversion, all in one transaction.
        timing = await _convert(conn, table, lock_timeout_s)
        if timing is None:
            steps["3_lock"] = {"granted": False}
            _finish(
                report,
                "aborted",
                f"could not lock {table} within {lock_timeout_s:g}s (another session holds "
                "a conflicting lock); nothing was changed, the table is still UNLOGGED",
            )
            return
        steps["3_lock"] = {"granted": True, "waitS": timing["wait_s"]}

        after = await _facts(conn, table)
        assert after is not None
        claim_ok = await claim_check(conn)
        verification = _verify(after, before, await _fingerprint(conn, table), claim_ok)
        steps["4_convert_and_verify"] = verification
        steps["5_next"] = NEXT_STEPS
        steps["6_record"] = {
            "durationS": timing["duration_s"],
            "lockHeldS": timing["held_s"],
            "rollbackBoundary": ROLLBACK_BOUNDARY,
        }
        if verification["ok"]:
            _finish(report, "converted", f"table {table} is LOGGED and verified")
        else:
            _finish(report, "converted_unverified", _unverified_message(table, verification))


def _refusal(control: dict[str, Any], foreign_keys: list[dict[str, Any]]) -> str | None:
    if not (control["claims_paused"] and control["enqueue_paused"]):
        return "jobs are not paused: run `jobrelay ops pause` first (claims and enqueue)"
    if int(control["live_leases"]) > 0:
        return (
            f"{control['live_leases']} job(s) hold a live lease: let them finish or expire "
            "(`jobrelay ops status`)"
        )
    if foreign_keys:
        named = ", ".join(
            f"{fk['constraint_name']} ({fk['referencing']} -> {fk['referenced']})"
            for fk in foreign_keys
        )
        return (
            f"foreign key(s) between the table and an UNLOGGED table: {named}; convert that "
            "table first or drop the constraint"
        )
    return None


async def _facts(conn: Connection, table: str) -> dict[str, Any] | None:
    row = await (await conn.execute(SQL.relation_facts, {"table": table})).fetchone()
    return dict(row) if row is not None else None


@dataclass(frozen=True)
class Fingerprint:
    """The row count of a table and a checksum of all its rows, in any order."""

    rows: int
    checksum: str


# Each row's md5 is split into two 64-bit halves that are summed exactly (numeric): a sum does
# not depend on row order (no ORDER BY, no sort of the table) and needs constant memory, unlike
# string_agg over sorted hashes. The md5 of the two sums keeps the report readable.
_FINGERPRINT = sql.SQL(
    """
    SELECT count(*) AS n,
           md5(coalesce(sum(('x' || substr(h, 1, 16))::bit(64)::bigint::numeric), 0)::text
               || ':' ||
               coalesce(sum(('x' || substr(h, 17, 16))::bit(64)::bigint::numeric), 0)::text)
           AS checksum
    FROM (SELECT md5(counted_row::text) AS h FROM ({}) AS counted_row) AS hashed
    """
)


async def _fingerprint(conn: Connection, table: str) -> Fingerprint:
    """Count and checksum every row of `table` (one full scan)."""
    return await fingerprint(conn, sql.SQL("SELECT * FROM {}").format(sql.Identifier(table)))


async def fingerprint(
    conn: Connection, rows: sql.Composable, params: Mapping[str, Any] | None = None
) -> Fingerprint:
    """Count and checksum the rows a query returns (a row's text is its table row's).

    `params` fill the placeholders of `rows`, bound by the server like any statement's.
    """
    query = _FINGERPRINT.format(rows)
    row = await (await conn.execute(query, params)).fetchone()
    assert row is not None
    return Fingerprint(rows=int(str(row["n"])), checksum=str(row["checksum"]))


async def _measure(conn: Connection, facts: dict[str, Any], rows: Fingerprint) -> dict[str, Any]:
    rewrite = int(facts["table_bytes"]) + int(facts["index_bytes"])
    location = await (await conn.execute(SQL.data_directory)).fetchone()
    data_dir = location["data_directory"] if location else None
    free: int | str = "unknown (the server's data directory is not on this machine)"
    if isinstance(data_dir, str) and location and location["via_socket"]:
        free = _free_bytes(data_dir) or free
    return {
        "rowCount": rows.rows,
        "rowChecksum": rows.checksum,
        "tableBytes": int(facts["table_bytes"]),
        "indexBytes": int(facts["index_bytes"]),
        "toastBytes": int(facts["toast_bytes"]),
        "rewriteBytes": rewrite,
        "freeDiskBytes": free,
        "estimatedDurationS": round(max(0.1, rewrite / _ESTIMATE_BYTES_PER_S), 2),
    }


async def _convert(conn: Connection, table: str, lock_timeout_s: float) -> dict[str, float] | None:
    began = time.monotonic()
    try:
        async with conn.transaction():
            await conn.execute(
                "SELECT set_config('lock_timeout', %s, true)", (f"{int(lock_timeout_s * 1000)}ms",)
            )
            await conn.execute(
                sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(sql.Identifier(table))
            )
            locked = time.monotonic()
            await conn.execute(sql.SQL("ALTER TABLE {} SET LOGGED").format(sql.Identifier(table)))
    except pg_errors.LockNotAvailable:
        return None
    committed = time.monotonic()
    return {
        "wait_s": round(locked - began, 4),
        "held_s": round(committed - locked, 4),
        "duration_s": round(committed - began, 4),
    }


def _free_bytes(directory: str) -> int | None:
    """Free bytes of the file system holding `directory`, if it is on this machine."""
    try:
        stats = os.statvfs(directory)
    except OSError:
        return None
    return stats.f_bavail * stats.f_frsize


def _verify(
    facts: dict[str, Any], before: Fingerprint, after: Fingerprint, claim_ok: bool
) -> dict[str, Any]:
    indexes: dict[str, dict[str, Any]] = facts["indexes"] or {}
    toast = facts["toast"]
    toast_indexes: dict[str, str] = facts["toast_indexes"] or {}
    checks = {
        "tablePermanent": facts["persistence"] == "p",
        "indexesPermanent": all(i["persistence"] == "p" for i in indexes.values()),
        "indexesValid": all(i["valid"] for i in indexes.values()),
        "toastPermanent": toast is None or toast["persistence"] == "p",
        "toastIndexesPermanent": all(p == "p" for p in toast_indexes.values()),
        "rowCountUnchanged": before.rows == after.rows,
        "rowChecksumUnchanged": before.checksum == after.checksum,
        "claimWorks": claim_ok,
    }
    return {
        **checks,
        "ok": all(checks.values()),
        "rowCountBefore": before.rows,
        "rowCountAfter": after.rows,
        "rowChecksumBefore": before.checksum,
        "rowChecksumAfter": after.checksum,
        "indexes": sorted(indexes),
        "toast": toast["name"] if toast else None,
    }


def _unverified_message(table: str, verification: dict[str, Any]) -> str:
    """Name every failed check; a changed checksum says what it means and what to do."""
    failed = [name for name, value in verification.items() if value is False]
    message = f"table {table} was converted, but verification failed: {', '.join(failed)}"
    if not verification["rowChecksumUnchanged"]:
        message += (
            f"; the rows changed between the measurement and the conversion (checksum "
            f"{verification['rowChecksumBefore']} before, {verification['rowChecksumAfter']} "
            "after): a session wrote despite the pause; keep jobs paused and compare the table "
            "with your backup before resuming"
        )
    return message


def _finish(report: dict[str, Any], outcome: str, message: str) -> None:
    report["outcome"] = outcome
    report["message"] = message
    report["ok"] = outcome in {"converted", "already_logged", "dry_run"}


async def store_report(
    pool: AsyncConnectionPool[Connection],
    kind: str,
    report: dict[str, Any],
    started: datetime,
    actor: str,
) -> None:
    """Record a runbook's report in `ops_run`; a failure to record is noted in the report."""
    try:
        async with transaction(pool) as conn:
            await conn.execute(
                SQL.insert_ops_run,
                {
                    "id": new_uuid(),
                    "kind": kind,
                    "ok": bool(report.get("ok")),
                    "report": Jsonb(report),
                    "started_at": started,
                    "finished_at": datetime.now(UTC),
                    "actor": actor,
                },
            )
    except psycopg.Error as exc:  # the report still reaches stdout and --report
        report["storeError"] = str(exc).splitlines()[0]
