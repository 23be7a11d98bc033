"""Groups with one problem each; `jobrelay worker --app tests.apps.broken:NAME` must exit 2
with one line naming it."""

from __future__ import annotations

from jobrelay import Complete, JobContext, JobPayload, JobTypes


class Empty(JobPayload):
    pass


# A type whose concurrency class no one declares and no setting gives slots.
unserved = JobTypes()


@unserved.job_type("broken.gpu", concurrency_class="gpu")
async def needs_a_gpu(ctx: JobContext[Empty]) -> Complete:
    return Complete()


# A type named like one of the product's.
clash = JobTypes()


@clash.job_type("diag.noop")
async def second_noop(ctx: JobContext[Empty]) -> Complete:
    return Complete()


not_job_types = 42


# A class whose rate is zero, and one whose rate cannot be read.
zero_rate = JobTypes(classes={"mail": 1}, rates={"mail": "0/min"})
malformed_rate = JobTypes()
malformed_rate.concurrency_class("mail", slots=1, rate="sixty a minute")
