"""Built-in job types and `build_registry`, the one place that lists them."""

from __future__ import annotations

from typing import Any

from jobrelay.generations.code2wf_dispatch import job_type as code2wf_dispatch_type
from jobrelay.jobs.registry import DIAG_PREFIX, KNOWN_TYPES, JobType, Registry
from jobrelay.jobs.types import diag, index, media, source
from jobrelay.jobs.types.media import HashTagger, Tagger

__all__ = ["HashTagger", "Tagger", "build_registry"]


def build_registry(
    *,
    diag_enabled: bool,
    tagger: Tagger | None = None,
    code2wf_dispatch: JobType[Any] | None = None,
) -> Registry:
    """Every built-in type (the `diag.*` ones only when enabled); fails when one is missing.

    `code2wf_dispatch` is the wired Code2WF dispatch type (pool and SQS sender); without it
    the schema is known but the handler only retries (this process cannot reach SQS).
    """
    entries: list[JobType[Any]] = [
        media.job_type(tagger or HashTagger()),
        source.job_type(),
        index.job_type(),
        code2wf_dispatch or code2wf_dispatch_type(),
    ]
    required = KNOWN_TYPES
    if diag_enabled:
        entries.extend(diag.job_types())
    else:
        required = frozenset(name for name in KNOWN_TYPES if not name.startswith(DIAG_PREFIX))
    return Registry(entries, required=required)
