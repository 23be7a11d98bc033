"""`media.process {mediaId, revision, sourceId}`: tag one media revision.

Class `ai`; dedupe key media id + revision, policy ignore; serialized by source. The tags come
from a pluggable `Tagger` (an external AI in production; the default derives them from the
payload). The result row `media_processing_state` is written in the transaction that
completes the job, and only ever moves forward in revision.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Protocol

from pydantic import Field

from jobrelay.db.pool import Connection
from jobrelay.db.sql import Queries
from jobrelay.domain.jobs import Complete, ConflictPolicy, Outcome
from jobrelay.domain.retry import RetryPolicy
from jobrelay.jobs.declare import JobTypes
from jobrelay.jobs.registry import JobContext, JobPayload

_QUERIES = Queries("jobrelay.content")
_VOCABULARY = ("person", "landscape", "text", "logo", "chart", "product", "screenshot", "icon")


class MediaProcess(JobPayload):
    media_id: str = Field(min_length=1, max_length=255)
    revision: int = Field(ge=1)
    source_id: str = Field(min_length=1, max_length=255)


class Tagger(Protocol):
    """Derives tags of one media revision. Must be idempotent per (media, revision): a
    retried or reclaimed job calls it again, and only the fenced completion keeps a result."""

    async def tags(self, *, media_id: str, revision: int, source_id: str) -> list[str]: ...


class HashTagger:
    """The default tagger: deterministic tags from a hash of the payload (no external call)."""

    async def tags(self, *, media_id: str, revision: int, source_id: str) -> list[str]:
        digest = hashlib.sha256(f"{source_id}/{media_id}@{revision}".encode()).digest()
        return sorted({_VOCABULARY[b % len(_VOCABULARY)] for b in digest[:3]})


def declare(job_types: JobTypes, tagger: Tagger) -> None:
    """Declare `media.process` on `job_types`, tagging with `tagger`."""

    @job_types.job_type(
        "media.process",
        policy=ConflictPolicy.IGNORE,
        dedupe_key=lambda p: f"{p.media_id}@{p.revision}",
        revision=lambda p: p.revision,
        source_key=lambda p: f"source:{p.source_id}",
        concurrency_class="ai",
        retry=RetryPolicy(max_attempts=5, base_s=2.0, cap_s=300.0),
    )
    async def handle(ctx: JobContext[MediaProcess]) -> Outcome:
        p = ctx.payload
        tags = await tagger.tags(media_id=p.media_id, revision=p.revision, source_id=p.source_id)

        async def outputs(conn: Connection) -> None:
            await conn.execute(
                _QUERIES.write_media_state,
                {
                    "media_id": p.media_id,
                    "revision": p.revision,
                    "tags": json.dumps(tags),
                    "job_id": ctx.job.id,
                },
            )

        result: dict[str, Any] = {"tags": tags, "revision": p.revision}
        return Complete(result=result, outputs=outputs)
