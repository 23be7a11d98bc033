"""jobrelay: durable jobs and a batch outbox on PostgreSQL.

What users import lives here (declare job types, enqueue, handle outcomes and errors); see
`docs/how-to/write-a-job-type.md`. Names load on first use, so importing a part of jobrelay
(e.g. the SQS workers, which never touch the database) does not import the jobs engine.

    from jobrelay import Complete, JobContext, JobPayload, JobTypes

    job_types = JobTypes()

    class Greet(JobPayload):
        name: str

    @job_types.job_type("example.greet")
    async def greet(ctx: JobContext[Greet]) -> Complete:
        return Complete(result={"greeting": f"hello {ctx.payload.name}"})
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jobrelay.domain.errors import (
        Conflict,
        FieldError,
        InvalidInput,
        JobrelayError,
        NotFound,
        Paused,
    )
    from jobrelay.domain.jobs import (
        Complete,
        ConflictPolicy,
        EnqueueOutcome,
        Fail,
        JobRole,
        JobStatus,
        Outcome,
        Retry,
    )
    from jobrelay.domain.retry import PermanentError, RetryableError, RetryPolicy, TargetGone
    from jobrelay.jobs.declare import JobTypes
    from jobrelay.jobs.enqueue import Enqueuer, enqueue
    from jobrelay.jobs.models import ClaimedJob, Enqueued, EnqueueRequest, Job
    from jobrelay.jobs.registry import JobContext, JobPayload, JobType, Registry, RegistryError
    from jobrelay.jobs.workflows.graph import DependencyFailure, Step, Workflow
    from jobrelay.jobs.workflows.store import create_workflow, get_workflow

try:
    __version__ = version("jobrelay")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

# Public name -> the module that defines it.
_EXPORTS: dict[str, str] = {
    "JobTypes": "jobrelay.jobs.declare",
    "JobType": "jobrelay.jobs.registry",
    "JobPayload": "jobrelay.jobs.registry",
    "JobContext": "jobrelay.jobs.registry",
    "Registry": "jobrelay.jobs.registry",
    "RegistryError": "jobrelay.jobs.registry",
    "enqueue": "jobrelay.jobs.enqueue",
    "Enqueuer": "jobrelay.jobs.enqueue",
    "Workflow": "jobrelay.jobs.workflows.graph",
    "Step": "jobrelay.jobs.workflows.graph",
    "DependencyFailure": "jobrelay.jobs.workflows.graph",
    "create_workflow": "jobrelay.jobs.workflows.store",
    "get_workflow": "jobrelay.jobs.workflows.store",
    "EnqueueRequest": "jobrelay.jobs.models",
    "Enqueued": "jobrelay.jobs.models",
    "ClaimedJob": "jobrelay.jobs.models",
    "Job": "jobrelay.jobs.models",
    "Complete": "jobrelay.domain.jobs",
    "Retry": "jobrelay.domain.jobs",
    "Fail": "jobrelay.domain.jobs",
    "Outcome": "jobrelay.domain.jobs",
    "ConflictPolicy": "jobrelay.domain.jobs",
    "EnqueueOutcome": "jobrelay.domain.jobs",
    "JobRole": "jobrelay.domain.jobs",
    "JobStatus": "jobrelay.domain.jobs",
    "RetryPolicy": "jobrelay.domain.retry",
    "RetryableError": "jobrelay.domain.retry",
    "PermanentError": "jobrelay.domain.retry",
    "TargetGone": "jobrelay.domain.retry",
    "JobrelayError": "jobrelay.domain.errors",
    "InvalidInput": "jobrelay.domain.errors",
    "FieldError": "jobrelay.domain.errors",
    "NotFound": "jobrelay.domain.errors",
    "Conflict": "jobrelay.domain.errors",
    "Paused": "jobrelay.domain.errors",
}

__all__ = [
    "ClaimedJob",
    "Complete",
    "Conflict",
    "ConflictPolicy",
    "DependencyFailure",
    "EnqueueOutcome",
    "EnqueueRequest",
    "Enqueued",
    "Enqueuer",
    "Fail",
    "FieldError",
    "InvalidInput",
    "Job",
    "JobContext",
    "JobPayload",
    "JobRole",
    "JobStatus",
    "JobType",
    "JobTypes",
    "JobrelayError",
    "NotFound",
    "Outcome",
    "Paused",
    "PermanentError",
    "Registry",
    "RegistryError",
    "Retry",
    "RetryPolicy",
    "RetryableError",
    "Step",
    "TargetGone",
    "Workflow",
    "__version__",
    "create_workflow",
    "enqueue",
    "get_workflow",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'jobrelay' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
