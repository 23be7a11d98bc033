"""The attempt history (`job_attempts`, migration 0009) on real PostgreSQL: every attempt that
ends without success is recorded by the statement that records the failure (retry, terminal
failure, lease-expired rescue, cancel while running), shown by `GET /v1/jobs/{id}/attempts`
and on the job's console page; a stale worker records nothing; pruning removes them."""

from __future__ import annotations

import uuid

import pytest

from jobrelay.domain.jobs import FailureKind, LeaseLost
from jobrelay.domain.jobs_config import QueueLimits
from jobrelay.jobs import claims, retention
from jobrelay.jobs.models import ClaimedJob
from tests.harness import ApiHarness
from tests.integration import test_console_ui
from tests.integration.test_console import _enqueue, _expire_lease, _sql
from tests.integration.test_console_ui import Login, _page
from tests.jobs_support import eventually, running_worker

login = test_console_ui.login  # the fixture: a client logged in through the login form


async def _claim(api: ApiHarness, worker: str = "w-attempts") -> ClaimedJob:
    async with api.services.pool.connection() as conn:
        [job] = await claims.claim(
            conn, QueueLimits(lease_s=60.0, total=1, slots={"default": 1}), worker_id=worker
        )
    return job


async def _attempts(api: ApiHarness, job_id: uuid.UUID) -> list[dict[str, object]]:
    response = await api.client.get(
        f"/v1/jobs/{job_id}/attempts", headers=api.headers("ops", admin=True)
    )
    assert response.status_code == 200, response.text
    items: list[dict[str, object]] = response.json()["items"]
    return items


async def test_a_job_failing_twice_then_succeeding_shows_both_errors_in_order(
    api: ApiHarness, login: Login
) -> None:
    job_id = await _enqueue(api, "diag.fail", payload={"kind": "retryable", "times": 2})
    async with running_worker(api.services.pool, jitter=lambda: 0.0) as worker:

        async def completed() -> bool:
            return (await api.services.jobs.get(job_id)).status == "completed"

        await eventually(completed, what="diag.fail to succeed at its third attempt")

    attempts = await _attempts(api, job_id)
    assert [(a["attempt"], a["outcome"], a["error"]) for a in attempts] == [
        (1, "retryable", "diag.fail attempt 1 (retryable)"),
        (2, "retryable", "diag.fail attempt 2 (retryable)"),
    ]
    assert {a["workerId"] for a in attempts} == {worker.worker_id}
    assert len({a["claimToken"] for a in attempts}) == 2
    assert all(str(a["startedAt"]) <= str(a["endedAt"]) for a in attempts)
    job = await api.services.jobs.get(job_id)
    assert job.attempt_count == 3 and job.last_error == "diag.fail attempt 2 (retryable)"

    client = await login("ops", admin=True)
    page = _page(await client.get(f"/ui/jobs/{job_id}"))
    rows = page.css("table#attempts tr")[1:]
    assert [" ".join(r.css_first("pre").text().split()) for r in rows] == [
        "diag.fail attempt 1 (retryable)",
        "diag.fail attempt 2 (retryable)",
    ]
    assert [r.css_first("td").text() for r in rows] == ["1", "2"]


async def test_a_lease_expired_rescue_records_the_attempt_with_its_token_and_worker(
    api: ApiHarness,
) -> None:
    job_id = await _enqueue(api)
    claimed = await _claim(api, worker="w-killed")
    await _expire_lease(api, job_id)
    async with api.services.pool.connection() as conn:
        assert await claims.rescue_expired(conn) == {job_id: "pending"}

    [attempt] = await _attempts(api, job_id)
    assert attempt["attempt"] == 1 and attempt["outcome"] == "lease_expired"
    assert attempt["claimToken"] == str(claimed.claim_token)
    assert attempt["workerId"] == "w-killed"
    assert attempt["error"] == "lease expired (claimed by w-killed)"

    # The stale worker's late failure is rejected and records nothing.
    async with api.services.pool.connection() as conn:
        with pytest.raises(LeaseLost):
            await claims.fail(conn, claimed, kind=FailureKind.PERMANENT, error="too late")
        with pytest.raises(LeaseLost):
            await claims.retry_later(conn, claimed, delay_s=0, error="too late")
    assert len(await _attempts(api, job_id)) == 1

    # The next claim fails for good: a second attempt, the permanent one.
    second = await _claim(api, worker="w-next")
    async with api.services.pool.connection() as conn:
        await claims.fail(conn, second, kind=FailureKind.PERMANENT, error="the page was gone")
    attempts = await _attempts(api, job_id)
    assert [(a["attempt"], a["outcome"], a["workerId"]) for a in attempts] == [
        (1, "lease_expired", "w-killed"),
        (2, "permanent", "w-next"),
    ]


async def test_cancel_records_a_running_attempt_not_a_pending_job(api: ApiHarness) -> None:
    running = await _enqueue(api)
    claimed = await _claim(api)
    pending = await _enqueue(api, delay_s=3600.0)  # never claimed here
    child = await _enqueue(api, parent_id=pending)
    assert (await _claim(api, worker="w-child")).id == child

    await api.services.jobs.cancel(running)
    await api.services.jobs.cancel(pending)  # its running child is cancelled with it

    [attempt] = await _attempts(api, running)
    assert attempt["outcome"] == "cancelled" and attempt["claimToken"] == str(claimed.claim_token)
    assert await _attempts(api, pending) == []
    [child_attempt] = await _attempts(api, child)
    assert child_attempt["outcome"] == "cancelled" and child_attempt["workerId"] == "w-child"


async def test_pruning_a_finished_job_removes_its_attempts_and_its_childrens(
    api: ApiHarness,
) -> None:
    job_id = await _enqueue(api)
    claimed = await _claim(api)
    async with api.services.pool.connection() as conn:
        await claims.fail(conn, claimed, kind=FailureKind.PERMANENT, error="gone")
    parent = await _enqueue(api, delay_s=3600.0)
    child = await _enqueue(api, parent_id=parent)
    claimed_child = await _claim(api)
    assert claimed_child.id == child
    async with api.services.pool.connection() as conn:
        await claims.fail(conn, claimed_child, kind=FailureKind.PERMANENT, error="child gone")
    await api.services.jobs.cancel(parent)
    kept = await _enqueue(api)  # a recent failure stays, with its attempt
    claimed_kept = await _claim(api)
    async with api.services.pool.connection() as conn:
        await claims.fail(conn, claimed_kept, kind=FailureKind.PERMANENT, error="recent")

    count = "SELECT job_id FROM job_attempts ORDER BY job_id"
    assert {r["job_id"] for r in await _sql(api, count)} == {job_id, child, kept}
    # Past their purge day: the rows move to the default partition (no partition for
    # yesterday exists), whose overdue jobs the pass deletes with their attempts.
    await _sql(
        api,
        "UPDATE finished_jobs SET purge_on = current_date - 1 WHERE id = ANY(%s)",
        [job_id, parent, child],
    )
    async with api.services.pool.connection() as conn:
        done = await retention.apply(conn, retention.Retention(default_s=86400.0))
    assert done.purged == 3
    assert (
        await _sql(api, "SELECT id FROM all_jobs WHERE id = ANY(%s)", [job_id, parent, child]) == []
    )
    assert [r["job_id"] for r in await _sql(api, count)] == [kept]


async def test_attempts_of_an_unknown_or_malformed_job(api: ApiHarness) -> None:
    admin = api.headers("ops", admin=True)
    missing = await api.client.get(f"/v1/jobs/{uuid.uuid4()}/attempts", headers=admin)
    assert missing.status_code == 404
    malformed = await api.client.get("/v1/jobs/nope/attempts", headers=admin)
    assert malformed.status_code == 422
    member = await api.client.get(f"/v1/jobs/{uuid.uuid4()}/attempts", headers=api.headers())
    assert member.status_code == 403
