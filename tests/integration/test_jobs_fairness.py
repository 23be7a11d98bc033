"""Fair claiming (issue 17) at the claim statement, on real PostgreSQL: within a class, claims
rotate across fairness keys (the least loaded key first), priority still wins across
priorities, the NULL key is one group, and concurrent claimers still skip each other's rows.
The fairness key is declared by the job type (`diag.sleep` names its `fairnessKey` field)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool

from jobrelay.db.pool import Connection
from jobrelay.domain.jobs_config import QueueLimits
from jobrelay.jobs import claims
from jobrelay.jobs.declare import JobTypes
from jobrelay.jobs.enqueue import Enqueuer, EnqueueRequest
from jobrelay.jobs.models import ClaimedJob
from jobrelay.jobs.registry import JobContext, JobPayload, RegistryError
from tests.jobs_support import build_registry, fetch, service

Pool = AsyncConnectionPool[Connection]


def _job(key: str | None, *, priority: int | None = None, **payload: Any) -> EnqueueRequest:
    body: dict[str, Any] = {"seconds": 0, **payload}
    if key is not None:
        body["fairnessKey"] = key
    return EnqueueRequest("diag.sleep", body, priority=priority)


async def _claim(pool: Pool, limit: int, *, fair: bool = True) -> list[ClaimedJob]:
    async with pool.connection() as conn:
        limits = QueueLimits(lease_s=30, total=limit, slots={"default": limit}, fair=fair)
        return await claims.claim(conn, limits, worker_id="w")


def _keys(jobs: list[ClaimedJob]) -> Counter[str | None]:
    return Counter(j.payload.get("fairnessKey") for j in jobs)


async def test_the_fairness_key_is_stored_at_enqueue(pool: Pool) -> None:
    await service(pool).enqueue_many([_job("org-a"), _job(None)])
    rows = await fetch(pool, "SELECT fairness_key FROM all_jobs ORDER BY fairness_key")
    assert [r["fairness_key"] for r in rows] == ["org-a", None]


async def test_a_claim_rotates_across_keys_instead_of_taking_the_oldest(pool: Pool) -> None:
    jobs = service(pool)
    await jobs.enqueue_many([_job("a") for _ in range(100)])  # a's backlog is older
    await jobs.enqueue_many([_job("b") for _ in range(3)] + [_job("c") for _ in range(3)])
    assert _keys(await _claim(pool, 6)) == {"a": 2, "b": 2, "c": 2}


async def test_without_fairness_the_oldest_backlog_takes_every_slot(pool: Pool) -> None:
    jobs = service(pool)
    await jobs.enqueue_many([_job("a") for _ in range(100)])
    await jobs.enqueue_many([_job("b") for _ in range(3)])
    assert _keys(await _claim(pool, 6, fair=False)) == {"a": 6}


async def test_the_least_loaded_key_goes_first(pool: Pool) -> None:
    jobs = service(pool)
    await jobs.enqueue_many([_job("a") for _ in range(100)])
    assert _keys(await _claim(pool, 3)) == {"a": 3}  # a now runs 3 jobs
    await jobs.enqueue_many([_job("b") for _ in range(3)])
    # b's three jobs have levels 1..3, a's next job level 4.
    assert _keys(await _claim(pool, 3)) == {"b": 3}
    assert _keys(await _claim(pool, 2)) == {"a": 2}


async def test_jobs_without_a_key_are_one_group(pool: Pool) -> None:
    jobs = service(pool)
    await jobs.enqueue_many([_job(None) for _ in range(50)])
    await jobs.enqueue_many([_job("x") for _ in range(5)])
    assert _keys(await _claim(pool, 4)) == {None: 2, "x": 2}


async def test_priority_wins_across_priorities(pool: Pool) -> None:
    jobs = service(pool)
    await jobs.enqueue_many([_job("a", priority=0) for _ in range(10)])
    await jobs.enqueue_many([_job("b", priority=5) for _ in range(10)])
    await jobs.enqueue_many([_job("b", priority=0) for _ in range(1)])
    first = await _claim(pool, 8)
    assert {j.payload["fairnessKey"] for j in first} == {"a", "b"}
    assert _keys(first) == {"a": 7, "b": 1}, "every priority-0 job before any priority-5 job"
    priorities = await fetch(
        pool, "SELECT DISTINCT priority FROM all_jobs WHERE status = 'in_progress'"
    )
    assert [r["priority"] for r in priorities] == [0]


async def test_every_key_gets_a_turn_when_keys_outnumber_the_slots(pool: Pool) -> None:
    jobs = service(pool)
    await jobs.enqueue_many([_job(f"org-{k:02d}") for k in range(20) for _ in range(5)])
    seen: set[str | None] = set()
    for _ in range(10):
        got = await _claim(pool, 2)
        assert len(got) == 2 and len(_keys(got)) == 2, "two slots: two different keys"
        seen.update(_keys(got))
    # The least loaded keys go first: 20 claims of one job each reach 20 distinct keys.
    assert len(seen) == 20


async def test_concurrent_claimers_of_one_key_skip_each_others_rows(pool: Pool) -> None:
    await service(pool).enqueue_many([_job("solo") for _ in range(20)])
    async with pool.connection() as first, first.transaction():
        held = await claims.claim(first, QueueLimits(lease_s=30, total=5), worker_id="w1")
        # The first claim is not committed; a second claimer still gets 5 other jobs.
        async with pool.connection() as second:
            other = await claims.claim(second, QueueLimits(lease_s=30, total=5), worker_id="w2")
    assert len(held) == 5 and len(other) == 5
    assert not {j.id for j in held} & {j.id for j in other}


async def test_source_keyed_jobs_and_fair_jobs_share_a_claim(pool: Pool) -> None:
    jobs = service(pool)
    await jobs.enqueue_many([_job("a") for _ in range(10)])
    await jobs.enqueue_many([_job(None, sourceKey="s1") for _ in range(3)])
    got = await _claim(pool, 4)
    assert len(got) == 4
    assert sum(1 for j in got if j.source_key == "s1") == 1, "one head of the source"


def test_a_fairness_field_that_is_not_in_the_payload_is_refused() -> None:
    group = JobTypes()

    class P(JobPayload):
        organization_id: str

    @group.job_type("t.bad", payload=P, fairness_key="orgId")
    async def bad(ctx: JobContext[P]) -> None:  # pragma: no cover - never run
        return None

    with pytest.raises(RegistryError, match="fairness_key 'orgId' is not a field"):
        group.registry()


async def test_a_fairness_function_keys_the_job(pool: Pool) -> None:
    group = JobTypes()

    class P(JobPayload):
        organization_id: int

    @group.job_type("t.org", payload=P, fairness_key=lambda p: p.organization_id)
    async def org(ctx: JobContext[P]) -> None:  # pragma: no cover - never run
        return None

    registry = build_registry(extra=group)
    async with pool.connection() as conn:
        await Enqueuer(registry, payload_limit_bytes=10_000).enqueue(
            conn, EnqueueRequest("t.org", {"organizationId": 42})
        )
    rows = await fetch(pool, "SELECT fairness_key FROM all_jobs")
    assert [r["fairness_key"] for r in rows] == ["42"]


async def test_without_keys_the_claim_order_is_the_fifo_order(pool: Pool) -> None:
    # Older free jobs first, then the heads of three sources: strict arrival order takes the
    # five free jobs, and so must the fair claim when no job has a key.
    jobs = service(pool)
    await jobs.enqueue_many([_job(None, seconds=i) for i in range(5)])
    await jobs.enqueue_many([_job(None, sourceKey=f"s{i}") for i in range(3)])
    got = await _claim(pool, 5)
    assert sorted(j.payload["seconds"] for j in got) == [0, 1, 2, 3, 4]
    assert {j.source_key for j in await _claim(pool, 5)} == {"s0", "s1", "s2"}
