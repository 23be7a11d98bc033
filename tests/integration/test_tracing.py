"""Traces in one process (issue 25): the API's request span, the enqueue under it, the
trace context recorded in the job's row, and one claim and one run span per attempt under
the enqueue, exported by the SDK's in-memory exporter. The processes of the whole stack
are in tests/acceptance/test_traces_stack.py."""

from __future__ import annotations

import io
import json
import logging
import uuid
from pathlib import Path

import structlog

from jobrelay import tracing
from jobrelay.jobs.enqueue import EnqueueRequest
from jobrelay.logs import configure_logging
from jobrelay.settings import Settings
from tests.harness import api_harness
from tests.jobs_support import eventually, row, running_worker
from tests.tracing_support import traced_here


async def test_an_api_job_runs_one_span_per_attempt_under_its_request(
    db_dsn: str, tmp_path: Path
) -> None:
    with traced_here() as spans:
        async with api_harness(db_dsn, tmp_path) as api:
            created = await api.client.post(
                "/v1/jobs",
                json={"type": "diag.fail", "payload": {"kind": "retryable", "times": 1}},
                headers=api.headers("root", admin=True),
            )
            assert created.status_code == 201, created.text
            job_id = uuid.UUID(created.json()["id"])
            pool = api.services.pool
            async with running_worker(pool, jitter=lambda: 0.0):

                async def completed() -> bool:
                    return (await row(pool, job_id))["status"] == "completed"

                await eventually(completed, timeout_s=60, what="the job to complete")
            stored = await row(pool, job_id)

    request = spans.one("POST /v1/jobs")
    assert request.kind == "server" and request.parent_id is None
    assert request.attributes["http.route"] == "/v1/jobs"
    assert request.attributes["http.response.status_code"] == 201
    enqueue = spans.one("jobrelay.jobs.enqueue", **{"jobrelay.job.id": str(job_id)})
    assert enqueue.kind == "producer" and spans.parent_of(enqueue) == request
    # The row carries the enqueue's context: every later span of the job continues it.
    assert enqueue.made(stored["traceparent"])

    runs = sorted(
        spans.named("jobrelay.jobs.run diag.fail", **{"jobrelay.job.id": str(job_id)}),
        key=lambda s: s.attributes["jobrelay.job.attempt"],
    )
    assert [r.attributes["jobrelay.job.attempt"] for r in runs] == [1, 2]
    assert all(r.kind == "consumer" and r.trace_id == request.trace_id for r in runs)
    assert all(spans.parent_of(r) == enqueue for r in runs)
    assert [r.error for r in runs] == [True, False]  # the first attempt asked for a retry
    assert [r.attributes["jobrelay.job.outcome"] for r in runs] == ["retry", "complete"]
    hashes = [r.attributes["jobrelay.job.claim_token_hash"] for r in runs]
    assert len(set(hashes)) == 2 and all(len(h) == 16 for h in hashes)

    claims = spans.named("jobrelay.jobs.claim", **{"jobrelay.job.id": str(job_id)})
    assert sorted(c.attributes["jobrelay.job.claim_token_hash"] for c in claims) == sorted(hashes)
    assert all(spans.parent_of(c) == enqueue for c in claims)


async def test_a_bulk_enqueue_records_its_span_in_every_row(db_dsn: str, tmp_path: Path) -> None:
    """The COPY path (16 jobs and more) writes the context too."""
    with traced_here() as spans:
        async with api_harness(db_dsn, tmp_path) as api:
            with tracing.span("caller"):
                results = await api.services.jobs.enqueue_many(
                    [EnqueueRequest(type="diag.noop", payload={}) for _ in range(20)]
                )
            async with api.services.pool.connection() as conn:
                cursor = await conn.execute(
                    "SELECT DISTINCT traceparent FROM jobs WHERE id = ANY(%s)",
                    ([r.id for r in results],),
                )
                stored = [r["traceparent"] for r in await cursor.fetchall()]
    enqueue = spans.one("jobrelay.jobs.enqueue")
    assert enqueue.attributes["jobrelay.jobs.count"] == 20
    assert spans.parent_of(enqueue).name == "caller"
    assert len(stored) == 1 and enqueue.made(stored[0])


async def test_an_enqueue_outside_any_span_is_the_root_of_its_jobs_trace(
    db_dsn: str, tmp_path: Path
) -> None:
    """As a schedule's tick enqueues: no request around it."""
    with traced_here() as spans:
        async with api_harness(db_dsn, tmp_path) as api:
            result = await api.services.jobs.enqueue(EnqueueRequest(type="diag.noop", payload={}))
            stored = await row(api.services.pool, result.id)
    enqueue = spans.one("jobrelay.jobs.enqueue")
    assert enqueue.parent_id is None and enqueue.made(stored["traceparent"])
    assert enqueue.attributes["jobrelay.job.enqueue_outcome"] == "created"


async def test_without_tracing_rows_carry_no_context(db_dsn: str, tmp_path: Path) -> None:
    async with api_harness(db_dsn, tmp_path) as api:
        assert not tracing.enabled()
        created = await api.client.post(
            "/v1/jobs", json={"type": "diag.noop"}, headers=api.headers("root", admin=True)
        )
        assert created.status_code == 201
        stored = await row(api.services.pool, uuid.UUID(created.json()["id"]))
    assert stored["traceparent"] is None


def test_log_lines_inside_a_span_carry_its_trace_id() -> None:
    stream = io.StringIO()
    configure_logging(Settings(log={"format": "json"}), stream=stream)
    log = structlog.get_logger("tests.tracing")
    try:
        log.info("before")
        with traced_here() as spans, tracing.span("work"):
            log.info("inside")
            logging.getLogger("tests.tracing.stdlib").warning("stdlib inside")
        log.info("after")
    finally:
        logging.getLogger().handlers.clear()
    lines = {line["event"]: line for line in map(json.loads, stream.getvalue().splitlines())}
    work = spans.one("work")
    assert lines["inside"]["trace_id"] == work.trace_id
    assert lines["inside"]["span_id"] == work.span_id
    assert lines["stdlib inside"]["trace_id"] == work.trace_id
    assert "trace_id" not in lines["before"] and "trace_id" not in lines["after"]
