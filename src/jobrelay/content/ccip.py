"""CCIP batches: a parent, its dispatch job, one item per source (a parent always ends:
docs/explanation/state_machine.md, parents and children).

* `ccip.batch {sourceIds[] | allSources}`: the parent. Enqueueing it stores it waiting
  (pending, never claimed) and its `ccip.dispatch` job, in one transaction.
* `ccip.dispatch`: creates one `ccip.item` child of the batch per source (every active
  `ccip_source` for `allSources`) in the transaction that completes it; zero sources
  completes it with no item, which ends the batch at once. A dispatch that fails for good
  fails the batch.
* `ccip.item {batchId, sourceId}`: the work for one source, serialized by source (it shares
  `source:<id>` with `media.process` and `source.sync`). The reference handler checks,
  in its completing transaction, that the source exists and is active: a missing or
  inactive source is a permanent failure (`TargetGone`).

Every child's terminal write reconciles the batch in the same transaction (the engine's
parent/child mechanics, `JobRole`):
completed when every item completed, failed when any failed, counts in its result.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field, model_validator

from jobrelay.db.pool import Connection
from jobrelay.db.sql import Queries
from jobrelay.domain.jobs import Complete, ConflictPolicy, Fail, JobRole, Outcome
from jobrelay.domain.retry import RetryPolicy, TargetGone
from jobrelay.jobs.declare import JobTypes
from jobrelay.jobs.failpoints import Failpoints
from jobrelay.jobs.models import EnqueueRequest
from jobrelay.jobs.registry import ChildSpec, JobContext, JobPayload

_QUERIES = Queries("jobrelay.content")
MAX_SOURCES = 10_000
SourceId = Field(min_length=1, max_length=255)


class _Sources(JobPayload):
    source_ids: list[str] | None = Field(default=None, max_length=MAX_SOURCES)
    all_sources: bool = False

    @model_validator(mode="after")
    def _one_of(self) -> _Sources:
        if self.all_sources == (self.source_ids is not None):
            raise ValueError("give either sourceIds (a non-empty list) or allSources: true")
        if self.source_ids is not None:
            if not self.source_ids:
                raise ValueError("sourceIds must not be empty (use allSources: true)")
            if any(not s or len(s) > 255 for s in self.source_ids):
                raise ValueError("every source id must be 1 to 255 characters")
        return self


class CcipBatch(_Sources):
    pass


class CcipDispatch(_Sources):
    pass


class CcipItem(JobPayload):
    batch_id: str = Field(min_length=1, max_length=64)
    source_id: str = SourceId


def _dispatch_of(batch: CcipBatch) -> Sequence[ChildSpec]:
    if batch.all_sources:
        return [("ccip.dispatch", {"allSources": True})]
    return [("ccip.dispatch", {"sourceIds": list(dict.fromkeys(batch.source_ids or []))})]


def declare(job_types: JobTypes, failpoints: Failpoints) -> None:
    """Declare `ccip.batch`, `ccip.dispatch` and `ccip.item` on `job_types`."""

    @job_types.job_type(
        "ccip.batch",
        role=JobRole.PARENT,
        on_create=_dispatch_of,
        retry=RetryPolicy(max_attempts=1),
    )
    async def never_run(ctx: JobContext[CcipBatch]) -> Outcome:
        # A batch waits (available_at = 9999-12-31); only an operator retry could run it.
        return Fail("a ccip.batch parent is never run; it ends when its children end")

    @job_types.job_type(
        "ccip.dispatch",
        role=JobRole.DISPATCH,
        retry=RetryPolicy(max_attempts=5, base_s=1.0, cap_s=60.0),
    )
    async def dispatch(ctx: JobContext[CcipDispatch]) -> Outcome:
        batch_id = ctx.job.parent_id
        if batch_id is None:
            return Fail("ccip.dispatch has no parent batch")
        p = ctx.payload

        async def create_items(conn: Connection) -> None:
            failpoints.hit("dispatch.before_children")
            if p.all_sources:
                cursor = await conn.execute(_QUERIES.active_ccip_sources)
                sources = [str(row["id"]) for row in await cursor.fetchall()]
            else:
                sources = list(dict.fromkeys(p.source_ids or []))
            await ctx.enqueue(
                conn,
                [
                    EnqueueRequest(
                        "ccip.item",
                        {"batchId": str(batch_id), "sourceId": source},
                        parent_id=batch_id,
                    )
                    for source in sources
                ],
            )
            failpoints.hit("dispatch.after_children")

        return Complete(result={"allSources": p.all_sources}, outputs=create_items)

    @job_types.job_type(
        "ccip.item",
        policy=ConflictPolicy.IGNORE,
        dedupe_key=lambda p: f"{p.batch_id}/{p.source_id}",
        source_key=lambda p: f"source:{p.source_id}",
        retry=RetryPolicy(max_attempts=5, base_s=2.0, cap_s=300.0),
    )
    async def item(ctx: JobContext[CcipItem]) -> Outcome:
        source_id = ctx.payload.source_id

        async def check_source(conn: Connection) -> None:
            cursor = await conn.execute(_QUERIES.ccip_source_state, {"source_id": source_id})
            row = await cursor.fetchone()
            if row is None or not row["active"]:
                state = "unknown" if row is None else "inactive"
                raise TargetGone(f"ccip source {source_id!r} is {state}")

        return Complete(result={"sourceId": source_id}, outputs=check_source)
