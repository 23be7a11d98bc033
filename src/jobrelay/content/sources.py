"""`source.sync {sourceId, syncKind, revision}`: bring one source up to a revision.

Dedupe key source + sync kind, policy supersede (a higher revision replaces the payload of
the active job, a lower one is ignored); serialized by source. Fenced output:
`source_sync_state`, written in the completing transaction, only forward in revision.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from jobrelay.db.pool import Connection
from jobrelay.db.sql import Queries
from jobrelay.domain.jobs import Complete, ConflictPolicy, Outcome
from jobrelay.domain.retry import RetryPolicy
from jobrelay.jobs.declare import JobTypes
from jobrelay.jobs.registry import JobContext, JobPayload

_QUERIES = Queries("jobrelay.content")


class SourceSync(JobPayload):
    source_id: str = Field(min_length=1, max_length=255)
    sync_kind: Literal["full", "incremental", "metadata"]
    revision: int = Field(ge=1)


job_types = JobTypes()


@job_types.job_type(
    "source.sync",
    policy=ConflictPolicy.SUPERSEDE,
    dedupe_key=lambda p: f"{p.source_id}/{p.sync_kind}",
    revision=lambda p: p.revision,
    source_key=lambda p: f"source:{p.source_id}",
    retry=RetryPolicy(max_attempts=5, base_s=2.0, cap_s=300.0),
)
async def sync_source(ctx: JobContext[SourceSync]) -> Outcome:
    p = ctx.payload

    async def outputs(conn: Connection) -> None:
        await conn.execute(
            _QUERIES.write_source_sync_state,
            {
                "source_id": p.source_id,
                "sync_kind": p.sync_kind,
                "revision": p.revision,
                "job_id": ctx.job.id,
            },
        )

    return Complete(result={"revision": p.revision}, outputs=outputs)
