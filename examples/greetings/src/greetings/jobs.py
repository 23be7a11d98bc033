"""Job types of the example package: `greetings.greet` and `greetings.digest`.

* `greetings.greet {name, language}`: builds a greeting. Deduplicated per (language,
  name): enqueueing the same greeting while one is pending returns the existing job.
  Names starting with "retry-" fail once with a retryable error, to show retries.
* `greetings.digest {recipients[]}`: one digest at a time; enqueueing while one is
  pending merges the new recipients into it (policy merge). It runs in the `mail`
  concurrency class, declared here with 1 slot per worker.

Run them with `jobrelay worker --app greetings.jobs:job_types` (or install this package:
its entry point announces them).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from jobrelay import (
    Complete,
    ConflictPolicy,
    JobContext,
    JobPayload,
    JobTypes,
    Outcome,
    Retry,
    RetryPolicy,
)

job_types = JobTypes(classes={"mail": 1})

_HELLO = {"en": "Hello", "fr": "Bonjour", "ja": "こんにちは"}


class Greet(JobPayload):
    name: str = Field(min_length=1, max_length=100)
    language: Literal["en", "fr", "ja"] = "en"


@job_types.job_type(
    "greetings.greet",
    dedupe_key=lambda p: f"{p.language}:{p.name}",
    retry=RetryPolicy(max_attempts=3, base_s=0.1, cap_s=1.0),
    timeout_s=10.0,
)
async def greet(ctx: JobContext[Greet]) -> Outcome:
    """Greet `name`; a name starting with "retry-" fails its first attempt."""
    if ctx.payload.name.startswith("retry-") and ctx.job.attempt_count == 1:
        return Retry("first attempts of retry-* names fail, to show a retry", delay_s=0.0)
    text = f"{_HELLO[ctx.payload.language]}, {ctx.payload.name}!"
    return Complete(result={"greeting": text, "attempt": ctx.job.attempt_count})


class Digest(JobPayload):
    recipients: list[str] = Field(min_length=1, max_length=1000)


@job_types.job_type(
    "greetings.digest",
    policy=ConflictPolicy.MERGE,
    dedupe_key=lambda p: "digest",
    merge_field="recipients",
    concurrency_class="mail",
)
async def digest(ctx: JobContext[Digest]) -> Outcome:
    """Send one digest to every recipient merged into this job."""
    return Complete(result={"sent": sorted(set(ctx.payload.recipients))})
