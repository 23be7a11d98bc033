"""The console's JSON endpoints and the API's /metrics on real PostgreSQL: each test builds
the state it reports (jobs in several states through the engine's own statements, a paused
control row, a worker heartbeat, batches through the API and webhooks) and checks the
numbers the endpoint gives back."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families

from jobrelay.domain.jobs import FailureKind
from jobrelay.domain.jobs_config import QueueLimits
from jobrelay.jobs import claims, presence
from jobrelay.jobs.claims import Done
from jobrelay.jobs.enqueue import EnqueueRequest
from jobrelay.jobs.models import ClaimedJob
from jobrelay.ops.control import set_pause
from tests.batch_support import create_batch, outcome, page_items, post_webhook
from tests.harness import ApiHarness, api_harness

METRICS_TOKEN = "scrape-me-" + "x" * 20


@pytest.fixture
async def console(db_dsn: str, issuer_dir: Path) -> AsyncIterator[ApiHarness]:
    """The API with a global cap for class `ai`, a metrics token and a short scrape."""
    async with api_harness(
        db_dsn,
        issuer_dir,
        jobs={"global_caps": "ai=2"},
        api={"metrics_token": METRICS_TOKEN, "metrics_timeout_s": 0.5},
    ) as harness:
        yield harness


async def _sql(api: ApiHarness, statement: str, *args: Any) -> list[dict[str, Any]]:
    async with api.services.pool.connection() as conn:
        cursor = await conn.execute(statement, args or None)  # type: ignore[arg-type]
        return [dict(r) for r in await cursor.fetchall()] if cursor.description else []


async def _enqueue(api: ApiHarness, type_: str = "diag.noop", **kw: Any) -> uuid.UUID:
    payload = kw.pop("payload", {"n": uuid.uuid4().hex})
    return (await api.services.jobs.enqueue(EnqueueRequest(type_, payload, **kw))).id


async def _claim(api: ApiHarness, cls: str, *, lease_s: float = 60.0) -> ClaimedJob:
    async with api.services.pool.connection() as conn:
        [job] = await claims.claim(
            conn, QueueLimits(lease_s=lease_s, total=1, slots={cls: 1}), worker_id="w-test"
        )
    return job


async def _heartbeat(api: ApiHarness, worker_id: str, **slots: int) -> None:
    async with api.services.pool.connection() as conn:
        await presence.announce(
            conn, worker_id=worker_id, class_slots=slots, global_caps={}, interval_s=10.0
        )


async def _age_available(api: ApiHarness, job_id: uuid.UUID, seconds: int) -> None:
    await _sql(
        api,
        "UPDATE jobs SET available_at = clock_timestamp() - make_interval(secs => %s) "
        "WHERE id = %s",
        seconds,
        job_id,
    )


async def _expire_lease(api: ApiHarness, job_id: uuid.UUID) -> None:
    await _sql(
        api,
        "UPDATE jobs SET lease_expires_at = clock_timestamp() - interval '1 second' WHERE id = %s",
        job_id,
    )


def _admin(api: ApiHarness) -> dict[str, str]:
    return api.headers("root", admin=True)


async def test_overview_counts_jobs_classes_pause_and_batches_in_progress(
    console: ApiHarness,
) -> None:
    api = console
    # Jobs: 3 pending default (one available for 90 s, one delayed an hour), 1 running ai,
    # 1 completed, 1 failed.
    ai_running = await _enqueue(api, "diag.sleep", payload={"seconds": 1, "concurrencyClass": "ai"})
    assert (await _claim(api, "ai")).id == ai_running
    done = await _enqueue(api)
    completed_job = await _claim(api, "default")
    failed = await _enqueue(api)
    failed_job = await _claim(api, "default")
    assert (completed_job.id, failed_job.id) == (done, failed)
    async with api.services.pool.connection() as conn:
        await claims.settle_many(conn, [Done(completed_job, None)])
        await claims.fail(conn, failed_job, kind=FailureKind.PERMANENT, error="bad")
    oldest = await _enqueue(api)
    await _age_available(api, oldest, 90)
    await _enqueue(api)
    await _enqueue(api, delay_s=3600)
    await _heartbeat(api, "w-ai", ai=2, default=4)
    await _heartbeat(api, "w-default", default=8)
    await set_pause(api.services.pool, claims=True, enqueue=False, reason="deploy", actor="ops")

    # Batches: one half done (1 completed, 1 failed, 1 running, 1 queued), one completed,
    # one cancelled; only the first is in progress.
    scope = await api.tenant("alice")
    half = await create_batch(api, scope, page_items(4))
    finished = await create_batch(api, scope, page_items(1, start=10))
    cancelled = await create_batch(api, scope, page_items(2, start=20))
    items = await _sql(
        api,
        "SELECT position, job_id FROM batch_item WHERE batch_id = %s ORDER BY position",
        half["id"],
    )
    await _sql(
        api,
        "UPDATE batch_item SET dispatched_at = clock_timestamp(), dispatch_attempts = 1 "
        "WHERE batch_id = %s AND position < 3",
        half["id"],
    )
    ok = await post_webhook(api.client, outcome(items[0]["job_id"]))
    bad = await post_webhook(api.client, outcome(items[1]["job_id"], "failed"))
    assert ok.status_code == 200 and bad.status_code == 200, (ok.text, bad.text)
    [only] = await _sql(api, "SELECT job_id FROM batch_item WHERE batch_id = %s", finished["id"])
    assert (await post_webhook(api.client, outcome(only["job_id"]))).status_code == 200
    cancel = await api.client.post(
        f"/v1/batches/{cancelled['id']}/cancel", headers=api.headers("alice")
    )
    assert cancel.status_code == 200, cancel.text

    response = await api.client.get("/v1/console/overview", headers=_admin(api))
    assert response.status_code == 200, response.text
    body = response.json()

    jobs = {(j["type"], j["status"]): j for j in body["jobs"]}
    assert jobs[("diag.noop", "pending")]["count"] == 3
    assert jobs[("diag.sleep", "in_progress")]["count"] == 1
    assert jobs[("diag.noop", "completed")]["count"] == 1
    assert jobs[("diag.noop", "completed")]["last5m"] == 1
    assert jobs[("diag.noop", "failed")]["count"] == 1
    assert jobs[("diag.noop", "pending")]["last5m"] is None
    assert body["finished"] == {
        "completed5m": 1,
        "failed5m": 1,
        "completed60m": 1,
        "failed60m": 1,
    }

    classes = {c["concurrencyClass"]: c for c in body["classes"]}
    ai, default = classes["ai"], classes["default"]
    assert (ai["running"], ai["globalCap"], ai["available"]) == (1, 2, 0)
    assert (ai["workersLive"], ai["liveSlots"]) == (1, 2)
    assert ai["oldestAvailableAgeSeconds"] is None
    assert (default["running"], default["globalCap"], default["available"]) == (0, None, 2)
    assert (default["workersLive"], default["liveSlots"]) == (2, 12)
    assert 90 <= default["oldestAvailableAgeSeconds"] < 150
    assert body["oldestAvailableAgeSeconds"] == default["oldestAvailableAgeSeconds"]

    assert body["control"]["claimsPaused"] is True
    assert body["control"]["enqueuePaused"] is False
    assert body["control"]["reason"] == "deploy"

    assert [b["id"] for b in body["batches"]] == [half["id"]]
    assert body["batches"][0]["counts"] == {
        "total": 4,
        "queued": 1,
        "running": 1,
        "completed": 1,
        "failed": 1,
        "cancelled": 0,
    }
    assert body["moreBatches"] is False


async def test_overview_lists_at_most_the_bound_of_batches(console: ApiHarness) -> None:
    api = console
    scope = await api.tenant("alice")
    created = [(await create_batch(api, scope, page_items(1, start=i)))["id"] for i in range(3)]
    overview = await api.services.console.overview(max_batches=2)
    assert [b.id for b in overview.batches] == created[:2]  # oldest first
    assert overview.more_batches is True


async def test_console_endpoints_need_the_admin_role(console: ApiHarness) -> None:
    for path in ("/v1/console/overview", "/v1/console/health"):
        assert (await console.client.get(path)).status_code == 401
        member = await console.client.get(path, headers=console.headers("alice"))
        assert member.status_code == 403


async def test_health_tables_oldest_transaction_lease_losses_and_relay_lag(
    console: ApiHarness, db_dsn: str
) -> None:
    api = console
    # Dead tuples in jobs, vacuumed and analyzed worker_heartbeat; stats flushed now.
    ids = [await _enqueue(api) for _ in range(12)]
    async with await psycopg.AsyncConnection.connect(db_dsn, autocommit=True) as conn:
        await conn.execute("DELETE FROM jobs WHERE id = ANY(%s)", (ids,))
        await conn.execute("VACUUM ANALYZE worker_heartbeat")
        await conn.execute("SELECT pg_stat_force_next_flush()")

    # Lease losses: one rescued back to pending, one failed for good, one expired not rescued.
    rescued = await _enqueue(api)
    final = await _enqueue(api, max_attempts=1)
    stuck = await _enqueue(api)
    for job_id in (rescued, final, stuck):
        assert (await _claim(api, "default")).id == job_id
    await _expire_lease(api, rescued)
    await _expire_lease(api, final)
    async with api.services.pool.connection() as conn:
        outcome_of = await claims.rescue_expired(conn)
    assert outcome_of == {rescued: "pending", final: "failed"}
    await _expire_lease(api, stuck)

    # Relay lag: a batch waiting two minutes; a cancelled one does not count.
    scope = await api.tenant("alice")
    waiting = await create_batch(api, scope, page_items(3))
    cancelled = await create_batch(api, scope, page_items(2, start=5))
    cancel = await api.client.post(
        f"/v1/batches/{cancelled['id']}/cancel", headers=api.headers("alice")
    )
    assert cancel.status_code == 200
    await _sql(
        api,
        "UPDATE batch_item SET created_at = clock_timestamp() - interval '120 seconds' "
        "WHERE batch_id = %s",
        waiting["id"],
    )

    # A session holding a snapshot while others write.
    holder = await psycopg.AsyncConnection.connect(db_dsn, application_name="console-holder")
    try:
        await holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        await holder.execute("SELECT count(*) FROM all_jobs")
        holder_pid = holder.info.backend_pid
        await _enqueue(api)  # a transaction after the holder's snapshot

        response = await api.client.get("/v1/console/health", headers=_admin(api))
        assert response.status_code == 200, response.text
        body = response.json()
    finally:
        await holder.close()

    tables = {t["table"]: t for t in body["tables"]}
    assert set(tables) == {
        "jobs",
        "batch",
        "batch_item",
        "page_import",
        "code2des",
        "code2wf",
        "worker_heartbeat",
    }
    assert tables["jobs"]["deadTuples"] >= 12
    assert tables["jobs"]["totalBytes"] > 0
    assert tables["worker_heartbeat"]["lastVacuum"] is not None
    assert tables["worker_heartbeat"]["lastAnalyze"] is not None

    oldest = body["oldestTransaction"]
    assert oldest["pid"] == holder_pid
    assert oldest["applicationName"] == "console-holder"
    assert oldest["state"] == "idle in transaction"
    assert oldest["xminAge"] >= 1
    assert "count(*) FROM all_jobs" in oldest["query"]

    assert body["leaseLosses"] == {
        "failedLastHour": 1,
        "rescuedPendingLastHour": 1,
        "expiredNotYetRescued": 1,
    }

    lag = body["relayLag"]
    assert lag["undispatched"] == 3
    assert lag["oldestBatchId"] == waiting["id"]
    assert 120 <= lag["lagSeconds"] < 180


async def test_health_without_backlog_reports_no_lag(console: ApiHarness) -> None:
    health = await console.services.console.health()
    assert health.relay_lag.undispatched == 0 and health.relay_lag.lag_s == 0.0
    assert health.relay_lag.oldest_item_id is None
    assert health.lease_losses.failed_last_hour == 0


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


async def test_metrics_are_read_from_the_database_at_scrape_time(console: ApiHarness) -> None:
    api = console
    for _ in range(3):
        await _enqueue(api)
    aged = await _enqueue(api)
    await _age_available(api, aged, 300)
    await _enqueue(api, "diag.sleep", payload={"seconds": 1, "concurrencyClass": "ai"})
    await _claim(api, "ai")
    await _heartbeat(api, "w-ai", ai=2)
    scope = await api.tenant("alice")
    batch = await create_batch(api, scope, page_items(2))
    await _sql(
        api,
        "UPDATE batch_item SET created_at = clock_timestamp() - interval '60 seconds' "
        "WHERE batch_id = %s",
        batch["id"],
    )

    response = await api.client.get(
        "/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    samples = _samples(response.text)

    def value(name: str, **labels: str) -> float:
        return samples[(name, tuple(sorted(labels.items())))]

    assert value("jobrelay_db_jobs", type="diag.noop", status="pending") == 4
    assert value("jobrelay_db_jobs", type="diag.sleep", status="in_progress") == 1
    assert value("jobrelay_db_class_running", **{"class": "ai"}) == 1
    assert value("jobrelay_db_class_global_cap", **{"class": "ai"}) == 2
    assert value("jobrelay_db_workers_live", **{"class": "ai"}) == 1
    assert value("jobrelay_db_class_available", **{"class": "default"}) == 4
    assert 300 <= value("jobrelay_db_oldest_available_age_seconds", **{"class": "default"}) < 360
    assert 60 <= value("jobrelay_db_relay_lag_seconds") < 120
    assert value("jobrelay_db_batch_items_undispatched") == 2
    assert value("jobrelay_db_dead_tuples", table="jobs") >= 0
    assert value("jobrelay_db_scrape_complete") == 1

    # The values follow the database, not the process: the next scrape sees the change.
    await _sql(api, "UPDATE batch_item SET dispatched_at = clock_timestamp()")
    again = _samples((await api.client.get("/metrics", headers=_admin(api))).text)
    assert again[("jobrelay_db_batch_items_undispatched", ())] == 0
    assert again[("jobrelay_db_relay_lag_seconds", ())] == 0
    # A worker that lists none serves every type; with only workers that list theirs, the
    # pending jobs of a type none of them has are counted (issue 24).
    assert not any(name == "jobrelay_db_jobs_unserved" for name, _ in again)
    async with api.services.pool.connection() as conn:
        await presence.forget(conn, worker_id="w-ai")
        await presence.announce(
            conn,
            worker_id="w-new",
            class_slots={"default": 1},
            global_caps={},
            interval_s=10.0,
            job_types=["diag.sleep"],
        )
    rolled = _samples((await api.client.get("/metrics", headers=_admin(api))).text)
    assert rolled[("jobrelay_db_jobs_unserved", (("type", "diag.noop"),))] == 4
    assert ("jobrelay_db_jobs_unserved", (("type", "diag.sleep"),)) not in rolled


async def test_metrics_need_the_token_or_an_admin(console: ApiHarness) -> None:
    assert (await console.client.get("/metrics")).status_code == 401
    wrong = await console.client.get("/metrics", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    member = await console.client.get("/metrics", headers=console.headers("alice"))
    assert member.status_code == 403
    admin = await console.client.get("/metrics", headers=_admin(console))
    assert admin.status_code == 200


async def test_a_slow_database_gives_what_was_read_or_503(console: ApiHarness, db_dsn: str) -> None:
    api = console
    await _enqueue(api)
    headers = {"Authorization": f"Bearer {METRICS_TOKEN}"}
    async with await psycopg.AsyncConnection.connect(db_dsn) as locker:
        # The relay group waits on batch_item: the jobs and classes groups are served.
        await locker.execute("LOCK TABLE batch_item IN ACCESS EXCLUSIVE MODE")
        partial = await api.client.get("/metrics", headers=headers)
        assert partial.status_code == 200, partial.text
        samples = _samples(partial.text)
        assert samples[("jobrelay_db_scrape_complete", ())] == 0
        assert samples[("jobrelay_db_jobs", (("status", "pending"), ("type", "diag.noop")))] == 1
        assert ("jobrelay_db_relay_lag_seconds", ()) not in samples
        await locker.rollback()

        # The first group waits on jobs: nothing read, 503 with Retry-After.
        await locker.execute("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE")
        nothing = await api.client.get("/metrics", headers=headers)
        assert nothing.status_code == 503
        assert nothing.headers["retry-after"] == "5"
        await locker.rollback()

    healthy = await api.client.get("/metrics", headers=headers)
    assert _samples(healthy.text)[("jobrelay_db_scrape_complete", ())] == 1
