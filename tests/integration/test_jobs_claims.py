"""Claims and CAS writes on real PostgreSQL: one statement, database time, tokens, leases,
revision fencing, rescue, and the FOR NO KEY UPDATE / MATERIALIZED traps."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from jobrelay.db.pool import Connection
from jobrelay.db.sql import load_query
from jobrelay.domain.jobs import FailureKind, LeaseLost
from jobrelay.domain.jobs_config import QueueLimits
from jobrelay.jobs import claims, presence
from jobrelay.jobs.claims import Completion, Done
from jobrelay.jobs.enqueue import EnqueueRequest
from tests.jobs_support import eventually, fetch, row, service

Pool = AsyncConnectionPool[Connection]


async def _claim(pool: Pool, limit: int = 1, lease_s: float = 30.0, worker: str = "w1"):  # type: ignore[no-untyped-def]
    async with pool.connection() as conn:
        return await claims.claim(conn, QueueLimits(lease_s=lease_s, total=limit), worker_id=worker)


async def test_claim_sets_token_attempt_and_lease_in_database_time(pool: Pool) -> None:
    await service(pool).enqueue(EnqueueRequest("diag.noop", {}))
    async with pool.connection() as conn, conn.transaction():
        # Trap: now() is the transaction start; the lease must use clock_timestamp().
        await conn.execute("SELECT pg_sleep(0.3)")
        [job] = await claims.claim(conn, QueueLimits(lease_s=30, total=1), worker_id="w1")
        cur = await conn.execute(
            "SELECT lease_expires_at - now() AS ahead, attempt_count, claim_token, claimed_by "
            "FROM all_jobs WHERE id = %s",
            (job.id,),
        )
        stored = await cur.fetchone()
    assert stored is not None
    assert stored["ahead"].total_seconds() >= 30.25
    assert stored["attempt_count"] == 1 and stored["claimed_by"] == "w1"
    assert stored["claim_token"] == job.claim_token


async def test_claim_takes_exactly_the_limit_in_priority_order(pool: Pool) -> None:
    jobs = service(pool)
    await jobs.enqueue_many(
        [EnqueueRequest("diag.noop", {"n": i}, priority=i % 3) for i in range(9)]
    )
    await jobs.enqueue(EnqueueRequest("diag.noop", {"later": True}, delay_s=3600))
    claimed = await _claim(pool, limit=4)
    assert len(claimed) == 4
    assert [j.payload["n"] % 3 for j in claimed].count(0) == 3
    running = await fetch(pool, "SELECT count(*) AS n FROM all_jobs WHERE status = 'in_progress'")
    assert running[0]["n"] == 4
    assert len(await _claim(pool, limit=100)) == 5  # the delayed job is not available


async def test_claims_from_two_connections_never_share_a_job(pool: Pool, db_dsn: str) -> None:
    await service(pool).enqueue_many([EnqueueRequest("diag.noop", {"n": i}) for i in range(200)])
    async with (
        await psycopg.AsyncConnection.connect(db_dsn, autocommit=True) as a,
        await psycopg.AsyncConnection.connect(db_dsn, autocommit=True) as b,
    ):
        from psycopg.rows import dict_row

        a.row_factory = dict_row  # type: ignore[assignment]
        b.row_factory = dict_row  # type: ignore[assignment]
        seen: list[uuid.UUID] = []
        import asyncio

        async def drain(conn) -> None:  # type: ignore[no-untyped-def]
            while batch := await claims.claim(
                conn, QueueLimits(lease_s=30, total=7), worker_id="x"
            ):
                seen.extend(j.id for j in batch)

        await asyncio.gather(drain(a), drain(b))
    assert len(seen) == 200 and len(set(seen)) == 200


async def test_child_insert_does_not_hide_its_parent_from_claims(pool: Pool) -> None:
    """An uncommitted child insert must not hide its parent from claims. (It once
    share-locked the parent through the parent_id foreign key, which migration 0017
    dropped; the claim's FOR NO KEY UPDATE SKIP LOCKED never skipped a KEY SHARE lock.)"""
    parent = await service(pool).enqueue(EnqueueRequest("diag.noop", {}))
    async with pool.connection() as child_conn, child_conn.transaction():
        await child_conn.execute(
            "INSERT INTO jobs (id, type, parent_id, available_at) "
            "VALUES (gen_random_uuid(), 'diag.noop', %s, now() + interval '1 hour')",
            (parent.id,),
        )
        [claimed] = await _claim(pool)
        assert claimed.id == parent.id


async def test_stale_claim_writes_are_all_rejected(pool: Pool) -> None:
    await service(pool).enqueue(EnqueueRequest("diag.noop", {}))
    [first] = await _claim(pool, lease_s=0.2, worker="old")
    async with pool.connection() as conn:
        rescued = await eventually(lambda: claims.rescue_expired(conn), what="lease expiry")
    assert rescued == {first.id: "pending"}
    [second] = await _claim(pool, worker="new")
    assert second.id == first.id and second.claim_token != first.claim_token
    assert second.attempt_count == 2
    before = await row(pool, first.id)
    async with pool.connection() as conn:
        with pytest.raises(LeaseLost):
            await claims.heartbeat(conn, first, lease_s=30)
        assert (await claims.complete_many(conn, [Done(first)])) == {first.id: Completion.LOST}
        with pytest.raises(LeaseLost):
            await claims.fail(conn, first, kind=FailureKind.PERMANENT, error="stale")
        with pytest.raises(LeaseLost):
            await claims.retry_later(conn, first, delay_s=1, error="stale")
        with pytest.raises(LeaseLost):
            await claims.release(conn, first)
    assert await row(pool, first.id) == before
    async with pool.connection() as conn:
        await claims.heartbeat(conn, second, lease_s=30)


async def test_changed_revision_goes_back_to_pending(pool: Pool) -> None:
    jobs = service(pool)
    e = await jobs.enqueue(EnqueueRequest("index.sync_delta", {"index": "i", "mediaIds": ["a"]}))
    [job] = await _claim(pool)
    await jobs.enqueue(EnqueueRequest("index.sync_delta", {"index": "i", "mediaIds": ["b"]}))
    async with pool.connection() as conn:
        assert await claims.complete_many(conn, [Done(job)]) == {e.id: Completion.REQUEUED}
    stored = await row(pool, e.id)
    assert stored["status"] == "pending" and stored["revision"] == 2
    assert stored["claim_token"] is None and stored["attempt_count"] == 0


async def test_expired_lease_without_attempts_left_fails(pool: Pool) -> None:
    await service(pool).enqueue(EnqueueRequest("diag.noop", {}, max_attempts=1))
    [job] = await _claim(pool, lease_s=0.1)
    async with pool.connection() as conn:
        rescued = await eventually(lambda: claims.rescue_expired(conn), what="lease expiry")
    assert rescued == {job.id: "failed"}
    stored = await row(pool, job.id)
    assert stored["failure_kind"] == "lease_expired" and stored["finished_at"] is not None


async def test_a_rescued_or_released_job_keeps_its_place_in_the_queue(pool: Pool) -> None:
    """Its worker died (rescue) or stopped (release): the job did not fail, so it is claimed
    again before the jobs enqueued while it ran, not behind them."""
    jobs = service(pool)
    first = await jobs.enqueue(EnqueueRequest("diag.noop", {"n": 0}))
    [job] = await _claim(pool, lease_s=0.1)
    await jobs.enqueue_many([EnqueueRequest("diag.noop", {"n": n}) for n in range(1, 4)])
    async with pool.connection() as conn:
        assert await eventually(lambda: claims.rescue_expired(conn), what="lease expiry") == {
            job.id: "pending"
        }
    [again] = await _claim(pool)
    assert again.id == first.id
    async with pool.connection() as conn:
        await claims.release(conn, again)
    [third] = await _claim(pool)
    assert third.id == first.id


async def test_one_running_job_per_source(pool: Pool) -> None:
    jobs = service(pool)
    await jobs.enqueue_many(
        [
            EnqueueRequest("media.process", {"mediaId": f"m{i}", "revision": 1, "sourceId": "s"})
            for i in range(3)
        ]
        + [EnqueueRequest("media.process", {"mediaId": "x", "revision": 1, "sourceId": "t"})]
    )
    first = await _claim(pool, limit=10)
    assert sorted(j.source_key or "" for j in first) == ["source:s", "source:t"]
    assert await _claim(pool, limit=10) == []
    async with pool.connection() as conn:
        await claims.complete_many(conn, [Done(j) for j in first])
    assert len(await _claim(pool, limit=10)) == 1
    # The database itself refuses a second running job of a source.
    async with pool.connection() as conn:
        with pytest.raises(psycopg.errors.UniqueViolation):
            await conn.execute(
                "UPDATE jobs SET status = 'in_progress', claim_token = gen_random_uuid(), "
                "lease_expires_at = now() WHERE status = 'pending' AND source_key = 'source:s'"
            )


@pytest.mark.parametrize("fair", [True, False])
async def test_a_claimer_takes_only_the_types_it_serves(pool: Pool, fair: bool) -> None:
    jobs = service(pool)
    await jobs.enqueue_many(
        [EnqueueRequest("diag.sleep", {"seconds": 0, "fairnessKey": f"k{i % 2}"}) for i in range(4)]
        + [EnqueueRequest("diag.noop", {"n": i}) for i in range(3)]
        + [EnqueueRequest("media.process", {"mediaId": "m", "revision": 1, "sourceId": "s"})]
    )
    noop_only = QueueLimits(lease_s=30, total=100, types=frozenset({"diag.noop"}), fair=fair)
    async with pool.connection() as conn:
        taken = await claims.claim(conn, noop_only, worker_id="old-release")
    assert sorted(j.type for j in taken) == ["diag.noop"] * 3
    # A source whose head it has no handler for is left to a claimer that has one.
    every = QueueLimits(lease_s=30, total=100, fair=fair)
    async with pool.connection() as conn:
        rest = await claims.claim(conn, every, worker_id="new-release")
    assert sorted(j.type for j in rest) == ["diag.sleep"] * 4 + ["media.process"]


async def test_a_type_no_worker_has_served_for_the_grace_fails_with_its_parent(
    pool: Pool,
) -> None:
    async with pool.connection() as conn:
        await conn.execute(
            "INSERT INTO jobs (id, type, payload, role, available_at) VALUES "
            "('00000000-0000-0000-0000-0000000000a0', 'diag.noop', '{}', 'parent', "
            "'9999-12-31 00:00:00+00')"
        )
        await conn.execute(
            "INSERT INTO jobs (id, type, payload, created_at, parent_id) VALUES "
            "(gen_random_uuid(), 'gone.type', '{}', now() - interval '1 hour', "
            "'00000000-0000-0000-0000-0000000000a0'), "
            "(gen_random_uuid(), 'gone.type', '{}', now(), NULL), "
            "(gen_random_uuid(), 'diag.noop', '{}', now() - interval '1 hour', NULL)"
        )
        await presence.announce(
            conn,
            worker_id="old-release",
            class_slots={"default": 1},
            global_caps={},
            interval_s=1,
            job_types=None,  # a worker before migration 0016: serves every type
        )
        assert await claims.fail_unserved(conn, after_s=60) == {}
        await presence.forget(conn, worker_id="old-release")
        await presence.announce(
            conn,
            worker_id="new-release",
            class_slots={"default": 1},
            global_caps={},
            interval_s=1,
            job_types=["diag.noop"],
        )
        failed = await claims.fail_unserved(conn, after_s=60)
    assert list(failed.values()) == ["gone.type"], failed  # not the one of a minute ago
    [job] = await fetch(pool, "SELECT * FROM all_jobs WHERE id = %s", next(iter(failed)))
    assert (job["status"], job["failure_kind"]) == ("failed", "permanent")
    assert job["last_error"] == (
        "unknown job type 'gone.type': no worker has had its handler for 60 s"
    )
    parent = await row(pool, uuid.UUID("00000000-0000-0000-0000-0000000000a0"))
    assert parent["status"] == "failed", parent  # a parent always ends


async def test_paused_claims_take_nothing(pool: Pool) -> None:
    await service(pool).enqueue(EnqueueRequest("diag.noop", {}))
    async with pool.connection() as conn:
        await conn.execute("UPDATE jobs_control SET claims_paused = true")
    assert await _claim(pool) == []


@pytest.mark.parametrize("fair", [True, False])
async def test_claiming_a_class_with_nothing_pending_reads_only_that_class(
    pool: Pool, fair: bool
) -> None:
    # With the claim session's generic plan, an index in (priority, available_at, id)
    # without the class let the claim of `ai` walk every pending `default` job.
    jobs = service(pool)
    for start in range(0, 8000, 1000):
        await jobs.enqueue_many(
            [EnqueueRequest("diag.noop", {"n": i}) for i in range(start, start + 1000)]
        )
    async with pool.connection() as conn:
        await conn.execute("ANALYZE jobs")
        await claims.configure_claim_session(conn)
        async with conn.transaction(force_rollback=True):
            cursor = await conn.execute(
                "EXPLAIN (ANALYZE, FORMAT JSON) " + load_query("jobrelay.jobs", "claim_jobs"),
                {
                    "worker_id": "w1",
                    "total": 10,
                    "lease_s": 30,
                    "classes": ["ai", "default"],
                    "limits": [5, 10],
                    "caps": [None, None],
                    "fair": fair,
                    "types": ["diag.noop", "diag.sleep"],  # a worker's handlers
                    "floors": [None, None],
                },
            )
            found = await cursor.fetchone()
        await conn.execute("RESET ALL")
    assert found is not None
    plan = next(iter(found.values()))[0]
    nodes = list(_plan_nodes(plan["Plan"]))
    claimed = [n for n in nodes if n["Node Type"] == "ModifyTable"]
    assert claimed and claimed[0]["Actual Rows"] == 10
    walked = max(n.get("Rows Removed by Filter", 0) for n in nodes)
    assert walked < 100, f"a claim read {walked} rows it did not want"


def _plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from _plan_nodes(child)
