"""`index.sync_delta {index, mediaIds[]}`: apply changed media ids to a search index.

Dedupe key the index, policy merge: a new request's ids are unioned into the active job in
one statement and its revision bumped; a worker that ran an older revision puts the job
back to pending instead of completing it. Fenced output: one `index_delta_applied` row per
(index, media id, job, revision), written in the completing transaction.
"""

from __future__ import annotations

from pydantic import Field

from jobrelay.db.pool import Connection
from jobrelay.db.sql import Queries
from jobrelay.domain.jobs import Complete, ConflictPolicy, Outcome
from jobrelay.domain.retry import RetryPolicy
from jobrelay.jobs.declare import JobTypes
from jobrelay.jobs.registry import JobContext, JobPayload

_QUERIES = Queries("jobrelay.content")


class IndexSyncDelta(JobPayload):
    index: str = Field(min_length=1, max_length=255)
    media_ids: list[str] = Field(default_factory=list, max_length=100_000)


job_types = JobTypes()


@job_types.job_type(
    "index.sync_delta",
    policy=ConflictPolicy.MERGE,
    dedupe_key=lambda p: p.index,
    merge_field="mediaIds",
    retry=RetryPolicy(max_attempts=8, base_s=1.0, cap_s=120.0),
)
async def apply_delta(ctx: JobContext[IndexSyncDelta]) -> Outcome:
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
