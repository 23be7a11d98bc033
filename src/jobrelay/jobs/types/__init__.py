"""Built-in job types and `build_registry`, the one place that lists them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jobrelay.db.pool import Connection
from jobrelay.generations.code2wf_dispatch import job_type as code2wf_dispatch_type
from jobrelay.jobs.enqueue import Enqueuer, EnqueueRequest
from jobrelay.jobs.failpoints import NO_FAILPOINTS, Failpoints
from jobrelay.jobs.registry import DIAG_PREFIX, KNOWN_TYPES, JobType, Registry
from jobrelay.jobs.types import ccip, diag, index, media, source
from jobrelay.jobs.types.media import HashTagger, Tagger

__all__ = ["HashTagger", "Tagger", "build_registry"]


def build_registry(
    *,
    diag_enabled: bool,
    tagger: Tagger | None = None,
    failpoints: Failpoints = NO_FAILPOINTS,
    payload_limit_bytes: int = 256 * 1024,
    code2wf_dispatch: JobType[Any] | None = None,
) -> Registry:
    """Every built-in type (the `diag.*` ones only when enabled); fails when one is missing.

    `code2wf_dispatch` is the wired Code2WF dispatch type (pool and SQS sender); without it
    the schema is known but the handler only retries (this process cannot reach SQS).
    """
    enqueuers: list[Enqueuer] = []

    async def write_children(conn: Connection, requests: Sequence[EnqueueRequest]) -> None:
        await enqueuers[0].enqueue_many(conn, requests)

    entries: list[JobType[Any]] = [
        media.job_type(tagger or HashTagger()),
        source.job_type(),
        index.job_type(),
        code2wf_dispatch or code2wf_dispatch_type(),
        *ccip.job_types(write_children, failpoints),
    ]
    required = KNOWN_TYPES
    if diag_enabled:
        entries.extend(diag.job_types())
    else:
        required = frozenset(name for name in KNOWN_TYPES if not name.startswith(DIAG_PREFIX))
    registry = Registry(entries, required=required)
    enqueuers.append(
        Enqueuer(registry, payload_limit_bytes=payload_limit_bytes, failpoints=failpoints)
    )
    return registry
