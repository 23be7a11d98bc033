"""Hypothesis drives enqueue / claim / heartbeat / complete / fail / expire against the
real database and a model of the state machine (domain.jobs.TRANSITIONS). Claims made by
stale workers stay around and keep trying to write."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from typing import Any

import psycopg
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule
from psycopg.rows import dict_row

from jobrelay.db.pool import open_pool
from jobrelay.domain.jobs import FailureKind, JobStatus, LeaseLost, Transition, next_status
from jobrelay.domain.jobs_config import QueueLimits
from jobrelay.jobs import claims
from jobrelay.jobs.claims import ClaimedJob, Completion, Done
from jobrelay.jobs.enqueue import EnqueueRequest
from tests.jobs_support import service

MAX_ATTEMPTS = 2


@dataclass
class ModelJob:
    status: JobStatus = JobStatus.PENDING
    attempts: int = 0
    revision: int = 1
    token: uuid.UUID | None = None
    ids: set[str] = field(default_factory=set)
    key: str | None = None


def test_jobs_state_machine(db_dsn: str) -> None:
    class JobsMachine(RuleBasedStateMachine):
        claims_made = Bundle("claims")

        def __init__(self) -> None:
            super().__init__()
            self.loop = asyncio.new_event_loop()
            self.pool = self.run(open_pool(db_dsn, min_size=1, max_size=2))
            self.run(self._sql("TRUNCATE jobs, finished_jobs, job_attempts, index_delta_applied"))
            self.jobs = service(self.pool)
            self.model: dict[uuid.UUID, ModelJob] = {}

        def run(self, coro: Any) -> Any:
            return self.loop.run_until_complete(coro)

        async def _sql(self, sql: str, *args: Any) -> list[dict[str, Any]]:
            async with await psycopg.AsyncConnection.connect(
                db_dsn, autocommit=True, row_factory=dict_row
            ) as conn:
                cur = await conn.execute(sql, args or None)  # type: ignore[arg-type]
                return list(await cur.fetchall()) if cur.description else []

        def teardown(self) -> None:
            self.run(self.pool.close())
            self.loop.close()

        def _active(self, key: str) -> uuid.UUID | None:
            for job_id, job in self.model.items():
                if job.key == key and job.status.active:
                    return job_id
            return None

        @rule(key=st.sampled_from(["a", "b", None]), ids=st.sets(st.sampled_from("uvwxyz")))
        def enqueue(self, key: str | None, ids: set[str]) -> None:
            if key is None:
                request = EnqueueRequest("diag.noop", {}, max_attempts=MAX_ATTEMPTS)
                result = self.run(self.jobs.enqueue(request))
                self.model[result.id] = ModelJob(key=None, attempts=0)
                return
            payload = {"index": key, "mediaIds": sorted(ids)}
            request = EnqueueRequest("index.sync_delta", payload, max_attempts=MAX_ATTEMPTS)
            result = self.run(self.jobs.enqueue(request))
            active = self._active(key)
            if active is None:
                assert result.outcome.value == "created"
                self.model[result.id] = ModelJob(key=key, ids=set(ids))
            else:
                assert result.id == active
                job = self.model[active]
                if ids - job.ids:
                    job.ids |= ids
                    job.revision += 1
                    assert result.outcome.value == "merged"
                else:
                    assert result.outcome.value == "deduplicated"

        @rule(target=claims_made, limit=st.integers(1, 3))
        def claim(self, limit: int) -> list[ClaimedJob]:
            async def go() -> list[ClaimedJob]:
                async with self.pool.connection() as conn:
                    return await claims.claim(
                        conn, QueueLimits(lease_s=60, total=limit), worker_id="h"
                    )

            got = self.run(go())
            pending = [i for i, j in self.model.items() if j.status is JobStatus.PENDING]
            assert len(got) == min(limit, len(pending))
            for c in got:
                job = self.model[c.id]
                assert next_status(job.status, Transition.CLAIM) is JobStatus.IN_PROGRESS
                job.status, job.token = JobStatus.IN_PROGRESS, c.claim_token
                job.attempts += 1
                assert c.attempt_count == job.attempts and c.revision == job.revision
            return got

        def _current(self, c: ClaimedJob) -> bool:
            job = self.model[c.id]
            return job.status is JobStatus.IN_PROGRESS and job.token == c.claim_token

        async def _with(self, action: Any) -> Any:
            async with self.pool.connection() as conn:
                return await action(conn)

        @rule(batch=claims_made)
        def heartbeat(self, batch: list[ClaimedJob]) -> None:
            for c in batch:
                try:
                    self.run(self._with(lambda conn, c=c: claims.heartbeat(conn, c, lease_s=60)))
                    assert self._current(c)
                except LeaseLost:
                    assert not self._current(c)

        @rule(batch=claims_made)
        def complete(self, batch: list[ClaimedJob]) -> None:
            statuses = self.run(
                self._with(lambda conn: claims.complete_many(conn, [Done(c) for c in batch]))
            )
            for c in batch:
                job = self.model[c.id]
                if not self._current(c):
                    assert statuses[c.id] is Completion.LOST
                elif job.revision == c.revision:
                    assert statuses[c.id] is Completion.COMPLETED
                    job.status, job.token = JobStatus.COMPLETED, None
                else:
                    assert statuses[c.id] is Completion.REQUEUED
                    job.status, job.token, job.attempts = JobStatus.PENDING, None, 0

        @rule(batch=claims_made)
        def fail(self, batch: list[ClaimedJob]) -> None:
            for c in batch:
                current = self._current(c)
                try:
                    self.run(
                        self._with(
                            lambda conn, c=c: claims.fail(
                                conn, c, kind=FailureKind.PERMANENT, error="x"
                            )
                        )
                    )
                    assert current
                    self.model[c.id].status, self.model[c.id].token = JobStatus.FAILED, None
                except LeaseLost:
                    assert not current

        @rule(batch=claims_made)
        def expire(self, batch: list[ClaimedJob]) -> None:
            for c in batch:
                self.run(
                    self._sql(
                        "UPDATE jobs SET lease_expires_at = clock_timestamp() - interval '1s' "
                        "WHERE id = %s AND status = 'in_progress'",
                        c.id,
                    )
                )
            rescued = self.run(self._with(lambda conn: claims.rescue_expired(conn)))
            for job_id, new_status in rescued.items():
                job = self.model[job_id]
                assert job.status is JobStatus.IN_PROGRESS
                job.token = None
                job.status = JobStatus.PENDING if job.attempts < MAX_ATTEMPTS else JobStatus.FAILED
                assert new_status == job.status.value

        @invariant()
        def database_matches_model(self) -> None:
            rows = self.run(
                self._sql(
                    "SELECT id, status, attempt_count, revision, claim_token, payload FROM all_jobs"
                )
            )
            assert len(rows) == len(self.model)
            for r in rows:
                job = self.model[r["id"]]
                assert (r["status"], r["attempt_count"], r["revision"], r["claim_token"]) == (
                    job.status.value,
                    job.attempts,
                    job.revision,
                    job.token,
                )
                if job.key is not None:
                    assert set(r["payload"]["mediaIds"]) == job.ids
            for key in ("a", "b"):
                actives = [i for i, j in self.model.items() if j.key == key and j.status.active]
                assert len(actives) <= 1

    JobsMachine.TestCase.settings = settings(stateful_step_count=25)
    JobsMachine.TestCase().runTest()
