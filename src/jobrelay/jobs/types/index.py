"""`index.sync_delta {index, mediaIds[]}`: apply changed media ids to a search index.

Dedupe key the index, policy merge: a new request's ids are unioned into the active job in
one statement and its revision bumped; a worker that ran an older revision puts the job
back to pending instead of completing it. Fenced output: one `index_delta_applied` row per
(index, media id, job, revision), written in the completing transaction.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from jobrelay.db.pool import Connection
from jobrelay.db.sql import Queries
from jobrelay.domain.jobs import Complete, ConflictPolicy, Outcome
from jobrelay.domain.retry import RetryPolicy
from jobrelay.jobs.registry import JobContext, JobPayload, JobType

_QUERIES = Queries("jobrelay.jobs")


class IndexSyncDelta(JobPayload):
    type: Literal["index.sync_delta"] = "index.sync_delta"
    index: str = Field(min_length=1, max_length=255)
    media_ids: list[str] = Field(default_factory=list, max_length=100_000)


async def handle(ctx: JobContext[IndexSyncDelta]) -> Outcome:
    p = ctx.payload
    ids = sorted(set(p.media_ids))

    async def outputs(conn: Connection) -> None:
        await conn.execute(
            _QUERIES.write_index_delta_applied,
            {
                "index_name": p.index,
                "media_ids": ids,
                "job_id": ctx.job.id,
                "revision": ctx.job.revision,
            },
        )

    return Complete(result={"applied": len(ids), "revision": ctx.job.revision}, outputs=outputs)


def job_type() -> JobType[IndexSyncDelta]:
    return JobType(
        name="index.sync_delta",
        payload_model=IndexSyncDelta,
        handler=handle,
        policy=ConflictPolicy.MERGE,
        dedupe_key=lambda p: p.index,
        merge_field="mediaIds",
        retry=RetryPolicy(max_attempts=8, base_s=1.0, cap_s=120.0),
    )
