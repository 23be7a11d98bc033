"""The product's content part: media tagging, source syncs, search-index deltas and CCIP
batches, all as job types declared on the engine's public API (`JobTypes`), exactly as a
user's package declares its own. `job_types(...)` is the group the deployment loads."""

from __future__ import annotations

from jobrelay.content import ccip, index, media, sources
from jobrelay.content.media import HashTagger, Tagger
from jobrelay.jobs.declare import JobTypes
from jobrelay.jobs.failpoints import NO_FAILPOINTS, Failpoints

__all__ = ["HashTagger", "Tagger", "job_types"]

# Slots per worker of the product's classes: AI calls are expensive and rate-limited.
CLASSES = {"ai": 2, "default": 8}


def job_types(*, tagger: Tagger | None = None, failpoints: Failpoints = NO_FAILPOINTS) -> JobTypes:
    """`media.process`, `source.sync`, `index.sync_delta` and `ccip.*`, with the classes
    they use (`ai`, `default`)."""
    group = JobTypes(classes=CLASSES)
    media.declare(group, tagger or HashTagger())
    group.include(sources.job_types)
    group.include(index.job_types)
    ccip.declare(group, failpoints)
    return group
