"""What the API answers, as typed models (camelCase on the wire, snake_case here).

Fields the server adds in a later release are ignored, so an older client keeps working.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

JobStatus = Literal["pending", "in_progress", "completed", "failed", "cancelled"]
EnqueueOutcome = Literal["created", "merged", "superseded", "deduplicated"]
BatchType = Literal["page_import", "code2des"]
BatchStatus = Literal["0", "1", "2", "3"]
"""'0' processing, '1' completed, '2' failed, '3' cancelled."""
ChildStatus = Literal["0", "1", "2", "3"]
GenerationStatus = Literal["0", "1", "2"]
ItemState = Literal["queued", "running", "completed", "failed", "cancelled"]
WorkflowStatus = Literal["running", "cancelling", "completed", "failed", "cancelled"]
StepState = Literal["held", "pending", "in_progress", "completed", "failed", "cancelled", "skipped"]


class Model(BaseModel):
    """Base of the client's models: camelCase aliases, unknown fields ignored."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True
    )


class Job(Model):
    id: uuid.UUID
    type: str
    status: JobStatus
    payload: dict[str, Any]
    dedupe_key: str | None = None
    revision: int
    parent_id: uuid.UUID | None = None
    source_key: str | None = None
    concurrency_class: str
    priority: int
    attempt_count: int
    max_attempts: int
    available_at: dt.datetime
    claimed_by: str | None = None
    failure_kind: str | None = None
    last_error: str | None = None
    result: dict[str, Any] | None = None
    created_at: dt.datetime
    updated_at: dt.datetime
    finished_at: dt.datetime | None = None

    @property
    def finished(self) -> bool:
        """Completed, failed or cancelled: nothing more will happen to it."""
        return self.status in ("completed", "failed", "cancelled")


class Enqueued(Model):
    id: uuid.UUID
    outcome: EnqueueOutcome
    revision: int
    job: Job


class JobPage(Model):
    items: list[Job]
    next_cursor: uuid.UUID | None = None


class Attempt(Model):
    attempt: int
    worker_id: str | None = None
    started_at: dt.datetime | None = None
    ended_at: dt.datetime
    outcome: str
    error: str | None = None


class BatchCounts(Model):
    total: int
    queued: int
    running: int
    completed: int
    failed: int
    cancelled: int


class Batch(Model):
    id: str
    organization_id: int
    project_id: int
    type: BatchType
    status: BatchStatus
    counts: BatchCounts
    cancelled_at: dt.datetime | None = None
    cancelling: bool = False
    created_at: dt.datetime
    updated_at: dt.datetime
    created_by: str
    updated_by: str

    @property
    def finished(self) -> bool:
        """No item is queued or running any more (status other than '0')."""
        return self.status != "0"


class BatchItem(Model):
    id: str
    position: int
    job_id: str = Field(description="The child (Page Import or Code2Des) id")
    state: ItemState
    dispatch_attempts: int
    dispatched_at: dt.datetime | None = None
    cancelled_at: dt.datetime | None = None
    error_message: str | None = None
    result_url: str | None = None


class BatchItemPage(Model):
    items: list[BatchItem]
    next_after: int | None = None


class Child(Model):
    """A Page Import or a Code2Des: one item of a batch, completed by its worker."""

    id: str
    organization_id: int
    project_id: int
    batch_id: str | None = None
    request: dict[str, Any]
    status: ChildStatus
    result_url: str | None = None
    error_message: str | None = None
    manifest_hash: str | None = None
    created_at: dt.datetime
    updated_at: dt.datetime


class Code2Wf(Model):
    id: str
    organization_id: int
    project_id: int
    page_import_id: str
    figma_file_key: str
    screen_id: str
    placement_target: str | None = None
    status: GenerationStatus
    attempt: int
    flag_count: int | None = None
    result_url: str | None = None
    error_message: str | None = None
    materialized_at: dt.datetime | None = None
    created_at: dt.datetime
    updated_at: dt.datetime


class Code2WfPage(Model):
    items: list[Code2Wf]
    next_after: str | None = None


class ProjectRef(Model):
    id: int
    name: str


class Membership(Model):
    id: int
    name: str
    role: str
    projects: list[ProjectRef]


class Me(Model):
    sub: str
    is_admin: bool
    organizations: list[Membership]


class WorkflowStep(Model):
    """One step of a workflow: its job, state, dependencies by name and result."""

    name: str
    job_id: uuid.UUID
    type: str
    state: StepState
    after: list[str]
    on_dependency_failure: str
    attempts: int
    releases: int
    result: dict[str, Any] | None = None
    error: str | None = None
    finished_at: dt.datetime | None = None


class WorkflowSummary(Model):
    """A workflow as a list shows it."""

    id: uuid.UUID
    name: str
    status: WorkflowStatus
    fairness_key: str | None = None
    created_at: dt.datetime
    cancelled_at: dt.datetime | None = None
    cancelled_by: str | None = None
    retried_at: dt.datetime | None = None
    retried_by: str | None = None
    retries: int = 0
    step_count: int

    @property
    def finished(self) -> bool:
        """Completed, failed or cancelled: no step of it is left to run."""
        return self.status in ("completed", "failed", "cancelled")


class Workflow(WorkflowSummary):
    """A workflow with its steps counted by state and a page of its steps."""

    counts: dict[str, int]
    finished_at: dt.datetime | None = None
    steps: list[WorkflowStep]
    next_step_cursor: str | None = None


class WorkflowPage(Model):
    items: list[WorkflowSummary]
    next_cursor: uuid.UUID | None = None
