"""Two children of one parent commit their terminal states at the same moment: under READ
COMMITTED neither sees the other's uncommitted write, so the finishing child locks the
parent row first and counts with a snapshot taken after the lock. The parent ends exactly
once. Also: the periodic reconciler repairs parents left behind, and cancel cascades."""

from __future__ import annotations

import asyncio
import uuid

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from jobrelay.db.pool import Connection
from jobrelay.domain.jobs import FailureKind, RowLocked
from jobrelay.domain.jobs_config import QueueLimits
from jobrelay.jobs import claims
from jobrelay.jobs.claims import Completion, Done
from jobrelay.jobs.maintenance import ParentReconciler
from tests.jobs_support import eventually, fetch, row, service

Pool = AsyncConnectionPool[Connection]


async def _parent_with_items(pool: Pool, items: int) -> tuple[uuid.UUID, list[uuid.UUID]]:
    """A waiting ccip.batch whose dispatch already completed, with `items` pending items."""
    parent = uuid.uuid4()
    children = [uuid.uuid4() for _ in range(items)]
    async with pool.connection() as conn, conn.transaction():
        await conn.execute(
            "INSERT INTO jobs (id, type, payload, available_at, role) "
            "VALUES (%s, 'ccip.batch', %s, '9999-12-31 00:00:00+00', 'parent')",
            (parent, Jsonb({"allSources": True})),
        )
        await conn.execute(
            "INSERT INTO jobs (id, type, payload, parent_id, status, finished_at, role) "
            "VALUES (%s, 'ccip.dispatch', %s, %s, 'completed', now(), 'dispatch')",
            (uuid.uuid4(), Jsonb({"allSources": True}), parent),
        )
        for n, child in enumerate(children):
            await conn.execute(
                "INSERT INTO jobs (id, type, payload, parent_id, source_key) "
                "VALUES (%s, 'ccip.item', %s, %s, %s)",
                (child, Jsonb({"batchId": str(parent), "sourceId": f"s{n}"}), parent, f"s{n}"),
            )
    return parent, children


async def _waiting_on_lock(pool: Pool, pid: int) -> bool:
    rows = await fetch(pool, "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", pid)
    return bool(rows) and rows[0]["wait_event_type"] == "Lock"


async def test_two_children_finishing_together_end_the_parent_exactly_once(
    pool: Pool, db_dsn: str
) -> None:
    parent, _ = await _parent_with_items(pool, 2)
    async with pool.connection() as conn:
        first, second = await claims.claim(conn, QueueLimits(lease_s=60, total=2), worker_id="w")
    conn_a = await psycopg.AsyncConnection.connect(db_dsn, row_factory=dict_row)
    conn_b = await psycopg.AsyncConnection.connect(db_dsn, row_factory=dict_row)
    try:
        async with conn_a.transaction():  # A holds the parent row until it commits
            settled_a = await claims.settle_many(conn_a, [Done(first)])
            # B does not wait for the parent A locked: its completion is deferred, nothing
            # of it written, so it cannot miss A's.
            deferred = await claims.settle_many(conn_b, [Done(second)])
            assert deferred.statuses == {second.id: Completion.DEFERRED}
            assert (await row(pool, second.id))["status"] == "in_progress"
            assert (await row(pool, parent))["status"] == "pending"
        settled_b = await claims.settle_many(conn_b, [Done(second)])  # the next flush
    finally:
        await conn_a.close()
        await conn_b.close()
    assert settled_a.parents_ended == {}, "A saw B still running"
    assert settled_b.parents_ended == {parent: "completed"}, "B saw A's committed completion"
    ended = await row(pool, parent)
    assert ended["status"] == "completed"
    assert ended["result"] == {"total": 2, "completed": 2, "failed": 0, "cancelled": 0}


async def test_a_failing_and_a_completing_child_at_once_fail_the_parent(pool: Pool) -> None:
    parent, _ = await _parent_with_items(pool, 2)
    async with pool.connection() as conn:
        first, second = await claims.claim(conn, QueueLimits(lease_s=60, total=2), worker_id="w")

    async def complete() -> dict[uuid.UUID, str]:
        # As the completer does: a completion deferred by the sibling's lock goes again.
        while True:
            async with pool.connection() as conn:
                settled = await claims.settle_many(conn, [Done(first)])
            if settled.statuses[first.id] is not Completion.DEFERRED:
                return settled.parents_ended
            await asyncio.sleep(0.01)

    async def fail() -> dict[uuid.UUID, str]:
        # As the executor does: a failure whose parent is locked is tried again.
        while True:
            try:
                async with pool.connection() as conn:
                    return await claims.fail(conn, second, kind=FailureKind.PERMANENT, error="boom")
            except RowLocked:
                await asyncio.sleep(0.01)

    completed, failed = await asyncio.gather(complete(), fail())
    assert {**completed, **failed} == {parent: "failed"}
    assert len(completed) + len(failed) == 1
    ended = await row(pool, parent)
    assert ended["result"] == {"total": 2, "completed": 1, "failed": 1, "cancelled": 0}


async def test_the_reconciler_repairs_parents_left_behind(pool: Pool) -> None:
    done_parent, children = await _parent_with_items(pool, 2)
    bare_parent = uuid.uuid4()
    async with pool.connection() as conn:
        # Children ended by a path that did not reconcile (e.g. written by an older
        # release), and a parent whose dispatch was lost: both would wait forever.
        await conn.execute(
            "UPDATE jobs SET status = 'completed', finished_at = now() WHERE id = ANY(%s)",
            (children,),
        )
        await conn.execute(
            "INSERT INTO jobs (id, type, payload, available_at, role) "
            "VALUES (%s, 'ccip.batch', %s, '9999-12-31 00:00:00+00', 'parent')",
            (bare_parent, Jsonb({"allSources": True})),
        )
    live_parent, _ = await _parent_with_items(pool, 1)
    reconciler = ParentReconciler(pool=pool, interval_s=0.05)
    await reconciler.start()
    try:
        await eventually(lambda: _true(reconciler.signals.acted >= 2), what="two repairs")
    finally:
        await reconciler.stop()
    assert (await row(pool, done_parent))["status"] == "completed"
    bare = await row(pool, bare_parent)
    assert bare["status"] == "failed" and "no dispatch job" in bare["last_error"]
    assert (await row(pool, live_parent))["status"] == "pending", "live work keeps it waiting"


async def test_cancelling_a_child_reconciles_and_cancelling_a_parent_cascades(
    pool: Pool,
) -> None:
    jobs = service(pool)
    parent, children = await _parent_with_items(pool, 2)
    await jobs.cancel(children[0])
    assert (await row(pool, parent))["status"] == "pending"
    await jobs.cancel(children[1])
    ended = await row(pool, parent)
    assert ended["status"] == "failed"
    assert ended["result"] == {"total": 2, "completed": 0, "failed": 0, "cancelled": 2}
    other, others = await _parent_with_items(pool, 2)
    cancelled = await jobs.cancel(other)
    assert cancelled.status == "cancelled"
    for child in others:
        assert (await row(pool, child))["status"] == "cancelled"


async def _true(value: bool) -> bool:
    return value
