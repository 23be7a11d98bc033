"""Invariant 12, parents always end, with two real `jobrelay worker` processes: every path
(all succeed, mixed, all fail, dispatch fails, a child of unknown type or with an invalid
payload, all sources, zero sources) ends its `ccip.batch` terminal, also with failures
injected between the writes of parent, dispatch and child creation."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from jobrelay.db.pool import Connection, open_pool
from jobrelay.domain.errors import InvalidInput
from jobrelay.jobs.enqueue import Enqueuer, EnqueueRequest
from jobrelay.jobs.failpoints import Failpoints, InjectedFailure
from jobrelay.jobs.registry import Registry
from tests.harness import wait_until
from tests.jobs_support import (
    build_registry,
    eventually,
    fetch,
    query,
    row,
    running_worker,
    service,
    worker_processes,
)

WORKER_FAILPOINTS = "dispatch.before_children=1,dispatch.after_children=1,child.before_reconcile=2"


def _sources(dsn: str, active: list[str], inactive: list[str]) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for source in active + inactive:
            conn.execute(
                "INSERT INTO ccip_source (id, active) VALUES (%s, %s)", (source, source in active)
            )


def _batches(dsn: str) -> dict[str, uuid.UUID]:
    """One batch per path, each created in one transaction through the real service."""

    async def run() -> dict[str, uuid.UUID]:
        pool = await open_pool(dsn, min_size=1, max_size=2)
        jobs = service(pool)
        ids: dict[str, uuid.UUID] = {}
        try:
            for name, payload in {
                "all_ok": {"sourceIds": ["ok1", "ok2"]},
                "mixed": {"sourceIds": ["ok1", "missing"]},
                "all_fail": {"sourceIds": ["missing", "off1"]},
                "all_sources": {"allSources": True},
            }.items():
                ids[name] = (await jobs.enqueue(EnqueueRequest("ccip.batch", payload))).id
            # A child no registry entry knows, and one whose payload fails its schema, both
            # created with their batch (one transaction), as a buggy producer would.
            for name, child_type, child_payload in (
                ("unknown_child", "ccip.bogus", {}),
                ("invalid_child", "ccip.item", {"sourceId": 7}),
            ):
                async with pool.connection() as conn, conn.transaction():
                    batch = await jobs.enqueue(
                        EnqueueRequest("ccip.batch", {"sourceIds": ["ok2"]}), conn=conn
                    )
                    await conn.execute(
                        "INSERT INTO jobs (id, type, payload, parent_id) VALUES (%s, %s, %s, %s)",
                        (uuid.uuid4(), child_type, Jsonb(child_payload), batch.id),
                    )
                ids[name] = batch.id
            # A dispatch that fails for good (its payload is invalid: permanent failure).
            async with pool.connection() as conn, conn.transaction():
                parent = uuid.uuid4()
                await conn.execute(
                    "INSERT INTO jobs (id, type, payload, available_at, role) "
                    "VALUES (%s, 'ccip.batch', %s, '9999-12-31 00:00:00+00', 'parent')",
                    (parent, Jsonb({"sourceIds": ["ok1"]})),
                )
                await conn.execute(
                    "INSERT INTO jobs (id, type, payload, parent_id, role) "
                    "VALUES (%s, 'ccip.dispatch', %s, %s, 'dispatch')",
                    (uuid.uuid4(), Jsonb({"sourceIds": []}), parent),
                )
            ids["dispatch_fails"] = parent
        finally:
            await pool.close()
        return ids

    return asyncio.run(run())


def _all_parents_ended(dsn: str, ids: dict[str, uuid.UUID]) -> dict[uuid.UUID, Any] | None:
    # Skip retry backoffs (not the policy): make delayed retries available now.
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE jobs SET available_at = clock_timestamp() "
            "WHERE status = 'pending' AND available_at > clock_timestamp() "
            "AND available_at < '9999-12-31 00:00:00+00'"
        )
    rows = {r["id"]: r for r in query(dsn, "SELECT * FROM all_jobs WHERE type = 'ccip.batch'")}
    if all(rows[i]["status"] in ("completed", "failed") for i in ids.values()):
        return rows
    return None


EXPECTED = {
    # path: (status, total, completed, failed)
    "all_ok": ("completed", 2, 2, 0),
    "mixed": ("failed", 2, 1, 1),
    "all_fail": ("failed", 2, 0, 2),
    "all_sources": ("completed", 2, 2, 0),
    "unknown_child": ("failed", 2, 1, 1),
    "invalid_child": ("failed", 2, 1, 1),
    "dispatch_fails": ("failed", 0, 0, 0),
}


@pytest.mark.parametrize("failpoints", ["", WORKER_FAILPOINTS], ids=["plain", "injected-failures"])
def test_every_parent_path_ends_terminal(db_dsn: str, failpoints: str) -> None:
    _sources(db_dsn, active=["ok1", "ok2"], inactive=["off1"])
    ids = _batches(db_dsn)
    with worker_processes(
        db_dsn,
        2,
        "--slots",
        "default=4",
        JOBRELAY_JOBS_FAILPOINTS=failpoints,
        JOBRELAY_JOBS_LEASE_S="2",
        JOBRELAY_JOBS_RECONCILE_INTERVAL_S="0.5",
        # The child of a type no worker has: never claimed, failed once no worker has had
        # its handler for this long (issue 24; an hour by default).
        JOBRELAY_JOBS_UNSERVED_FAIL_AFTER_S="2",
    ):
        rows = wait_until(
            lambda: _all_parents_ended(db_dsn, ids), timeout_s=90, what="every batch to end"
        )
    for path, (status, total, completed, failed) in EXPECTED.items():
        parent = rows[ids[path]]
        assert parent["status"] == status, (path, parent["status"], parent["last_error"])
        assert parent["result"] == {
            "total": total,
            "completed": completed,
            "failed": failed,
            "cancelled": 0,
        }, path
        assert parent["claim_token"] is None and parent["attempt_count"] == 0, path
    assert "dispatch failed" in rows[ids["dispatch_fails"]]["last_error"]
    assert "1 of 2 children did not complete" in rows[ids["mixed"]]["last_error"]
    # No parent waits with no live work, and every child ended.
    assert query(db_dsn, "SELECT id FROM all_jobs WHERE status IN ('pending', 'in_progress')") == []
    unknown = query(
        db_dsn, "SELECT failure_kind, last_error FROM all_jobs WHERE type = 'ccip.bogus'"
    )
    assert unknown[0]["failure_kind"] == "permanent"
    assert "unknown job type" in unknown[0]["last_error"]


@pytest.mark.parametrize("failpoints", ["", "dispatch.before_children=1,dispatch.after_children=1"])
async def test_an_all_sources_batch_with_zero_sources_ends_at_once(
    pool: AsyncConnectionPool[Connection], failpoints: str
) -> None:
    jobs = service(pool)
    batch = await jobs.enqueue(EnqueueRequest("ccip.batch", {"allSources": True}))
    async with running_worker(pool, failpoints=Failpoints.parse(failpoints), jitter=lambda: 0.0):
        ended = await eventually(
            lambda: _terminal(pool, batch.id), what="the zero-source batch to end"
        )
    assert ended["status"] == "completed"
    assert ended["result"] == {"total": 0, "completed": 0, "failed": 0, "cancelled": 0}
    [dispatch] = [r for r in await _children(pool, batch.id) if r["type"] == "ccip.dispatch"]
    assert dispatch["status"] == "completed"
    assert dispatch["attempt_count"] == (3 if failpoints else 1)


async def _terminal(pool: AsyncConnectionPool[Connection], job_id: uuid.UUID) -> Any:
    found = await row(pool, job_id)
    return found if found["status"] in ("completed", "failed", "cancelled") else None


async def _children(pool: AsyncConnectionPool[Connection], parent: uuid.UUID) -> list[Any]:
    return await fetch(pool, "SELECT * FROM all_jobs WHERE parent_id = %s", parent)


@pytest.mark.parametrize("point", ["batch.after_parent", "batch.after_dispatch"])
async def test_a_failure_while_creating_a_batch_leaves_nothing_behind(
    pool: AsyncConnectionPool[Connection], point: str
) -> None:
    failpoints = Failpoints({point: 1})
    registry: Registry = build_registry(diag_enabled=True, failpoints=failpoints)
    enqueuer = Enqueuer(registry, payload_limit_bytes=262144, failpoints=failpoints)
    request = EnqueueRequest("ccip.batch", {"sourceIds": ["a", "b"]})
    async with pool.connection() as conn:
        with pytest.raises(InjectedFailure):
            await enqueuer.enqueue(conn, request)
    assert await fetch(pool, "SELECT id FROM all_jobs") == [], "no orphan parent, no dispatch"
    async with pool.connection() as conn:  # the failpoint fired once; now it goes through
        created = await enqueuer.enqueue(conn, request)
    rows = await fetch(pool, "SELECT type, status, parent_id, available_at FROM all_jobs")
    assert sorted(r["type"] for r in rows) == ["ccip.batch", "ccip.dispatch"]
    [dispatch] = [r for r in rows if r["type"] == "ccip.dispatch"]
    assert dispatch["parent_id"] == created.id
    [parent] = [r for r in rows if r["type"] == "ccip.batch"]
    assert parent["status"] == "pending" and parent["available_at"].year == 9999


def test_batch_payloads_are_validated() -> None:
    registry = build_registry(diag_enabled=False)
    for bad in ({}, {"sourceIds": []}, {"sourceIds": ["a"], "allSources": True}):
        with pytest.raises(InvalidInput) as info:
            registry.parse("ccip.batch", bad)
        assert "sourceIds" in str(info.value.errors)
    assert json.loads(registry.parse("ccip.batch", {"allSources": True}).model_dump_json())
