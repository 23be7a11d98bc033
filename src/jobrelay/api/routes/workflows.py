"""Workflows endpoints (admin role, like /v1/jobs): create, read, list, cancel, retry."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query, Request, status
from fastapi.responses import JSONResponse
from pydantic import Field

from jobrelay.api.deps import AdminDep, ServicesDep
from jobrelay.api.idempotency import IdempotencyKey, answer, created_once
from jobrelay.api.schemas import ApiModel
from jobrelay.idempotency import Answer, Writer
from jobrelay.jobs.workflows.graph import NAME_MAX_CHARS, Workflow
from jobrelay.jobs.workflows.store import (
    STEPS_PAGE_DEFAULT,
    STEPS_PAGE_MAX,
    StepState,
    StepView,
    WorkflowStatus,
    WorkflowSummary,
    WorkflowView,
)

WorkflowIdPath = Annotated[uuid.UUID, Path(alias="workflowId", description="The workflow's id")]

router = APIRouter(tags=["workflows"])


class StepIn(ApiModel):
    name: str = Field(description=f"Unique in the workflow, 1 to {NAME_MAX_CHARS} characters")
    type: str = Field(description="A registered job type (of the ordinary job role)")
    payload: dict[str, Any] = Field(default_factory=dict)
    after: list[str] = Field(
        default_factory=list, description="Names of the steps this one runs after"
    )
    on_dependency_failure: Literal["cancel", "skip", "run"] = Field(
        default="cancel",
        description="When a dependency fails or is cancelled: cancel this step (and down "
        "the graph), skip it (its dependents count it as ended well), or run it anyway",
    )
    priority: int | None = None
    max_attempts: int | None = None


class WorkflowIn(ApiModel):
    name: str = Field(description=f"1 to {NAME_MAX_CHARS} characters")
    steps: list[StepIn] = Field(
        description="At most JOBRELAY_WORKFLOWS_MAX_STEPS steps (default 10,000), a DAG"
    )
    fairness_key: str | None = Field(
        default=None, description="The fairness key every step takes turns as"
    )

    def workflow(self) -> Workflow:
        workflow = Workflow(self.name, fairness_key=self.fairness_key)
        for step in self.steps:
            workflow.step(
                step.name,
                step.type,
                step.payload,
                after=step.after,
                on_dependency_failure=step.on_dependency_failure,
                priority=step.priority,
                max_attempts=step.max_attempts,
            )
        return workflow


class StepOut(ApiModel):
    name: str
    job_id: uuid.UUID
    type: str
    state: StepState = Field(
        description="held: waiting for its dependencies; skipped: ended without running "
        "after a failed dependency (policy skip); else its job's status"
    )
    after: list[str]
    on_dependency_failure: str
    attempts: int
    releases: int = Field(description="How often the step was released (once per run)")
    result: dict[str, Any] | None
    error: str | None
    finished_at: dt.datetime | None

    @classmethod
    def of(cls, step: StepView) -> StepOut:
        return cls.model_validate(step, from_attributes=True)


class WorkflowSummaryOut(ApiModel):
    id: uuid.UUID
    name: str
    status: WorkflowStatus = Field(
        description="Derived from the steps: running while one is active (cancelling after "
        "a cancel), then cancelled (a cancel ended a step), failed (a step failed or was "
        "cancelled by a failed dependency) or completed (every step completed or skipped)"
    )
    fairness_key: str | None
    created_at: dt.datetime
    cancelled_at: dt.datetime | None
    cancelled_by: str | None
    retried_at: dt.datetime | None
    retried_by: str | None
    retries: int
    step_count: int

    @classmethod
    def of(cls, summary: WorkflowSummary) -> WorkflowSummaryOut:
        return cls.model_validate(summary, from_attributes=True)


class WorkflowOut(WorkflowSummaryOut):
    counts: dict[str, int] = Field(description="Steps by state (states with none left out)")
    finished_at: dt.datetime | None = Field(
        description="When the last step ended; null while running"
    )
    steps: list[StepOut] = Field(description="A page of the steps, by name")
    next_step_cursor: str | None = Field(
        description="Pass as stepsAfter for the next page of steps; null on the last"
    )

    @classmethod
    def of_view(cls, view: WorkflowView) -> WorkflowOut:
        summary = WorkflowSummaryOut.of(view.workflow).model_dump()
        return cls(
            **summary,
            counts=dict(view.counts),
            finished_at=view.finished_at,
            steps=[StepOut.of(step) for step in view.steps],
            next_step_cursor=view.next_step,
        )


class WorkflowPageOut(ApiModel):
    items: list[WorkflowSummaryOut]
    next_cursor: uuid.UUID | None


StepLimit = Annotated[
    int, Query(alias="stepLimit", ge=0, le=STEPS_PAGE_MAX, description="Steps per page")
]
StepsAfter = Annotated[
    str | None, Query(alias="stepsAfter", description="nextStepCursor of the last page")
]


@router.post(
    "/v1/workflows",
    response_model=WorkflowOut,
    status_code=status.HTTP_201_CREATED,
    summary="Create a workflow: its steps, each a job, in one transaction (201)",
    responses={422: {"description": "a cycle, an unknown step or type, a bad payload"}},
)
async def create_workflow(
    body: WorkflowIn,
    caller: AdminDep,
    services: ServicesDep,
    request: Request,
    idempotency_key: IdempotencyKey = None,
) -> JSONResponse:
    async def create(conn: Writer) -> Answer:
        created = await services.workflows.create(body.workflow(), conn=conn)
        view = await services.workflows.get(created.id, conn=conn)
        return answer(WorkflowOut.of_view(view), status.HTTP_201_CREATED)

    return await created_once(request, services, caller, idempotency_key, body, create)


@router.get(
    "/v1/workflows/{workflowId}",
    response_model=WorkflowOut,
    summary="One workflow: its status, steps counted by state, a page of its steps",
    responses={404: {"description": "no such workflow"}},
)
async def get_workflow(
    workflow_id: WorkflowIdPath,
    _: AdminDep,
    services: ServicesDep,
    step_limit: StepLimit = STEPS_PAGE_DEFAULT,
    steps_after: StepsAfter = None,
) -> WorkflowOut:
    view = await services.workflows.get(workflow_id, step_limit=step_limit, after_step=steps_after)
    return WorkflowOut.of_view(view)


@router.get(
    "/v1/workflows",
    response_model=WorkflowPageOut,
    summary="Workflows, newest first, by status and name; pass nextCursor as cursor for the "
    "next page (a status filter may return a short page with a cursor to go on from)",
    responses={422: {"description": "unknown status, malformed cursor"}},
)
async def list_workflows(
    _: AdminDep,
    services: ServicesDep,
    workflow_status: Annotated[
        WorkflowStatus | None, Query(alias="status", description="only this status")
    ] = None,
    name: Annotated[str | None, Query(description="only workflows of this name")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[uuid.UUID | None, Query(description="nextCursor of the last page")] = None,
) -> WorkflowPageOut:
    page = await services.workflows.list(
        status=workflow_status, name=name, limit=limit, before=cursor
    )
    return WorkflowPageOut(
        items=[WorkflowSummaryOut.of(w) for w in page.workflows], next_cursor=page.next_before
    )


@router.post(
    "/v1/workflows/{workflowId}/cancel",
    response_model=WorkflowOut,
    summary="Cancel a running workflow: its held and pending steps, and its running ones "
    "(their handlers are stopped); a cancelled one is returned unchanged",
    responses={404: {"description": "no such workflow"}, 409: {"description": "it ended"}},
)
async def cancel_workflow(
    workflow_id: WorkflowIdPath, caller: AdminDep, services: ServicesDep
) -> WorkflowOut:
    return WorkflowOut.of_view(await services.workflows.cancel(workflow_id, actor=caller.sub))


@router.post(
    "/v1/workflows/{workflowId}/retry",
    response_model=WorkflowOut,
    summary="Re-run a failed or cancelled workflow's failed, cancelled and skipped steps and "
    "everything downstream of them; completed steps keep their results",
    responses={
        404: {"description": "no such workflow"},
        409: {"description": "it is completed, or running and never retried"},
    },
)
async def retry_workflow(
    workflow_id: WorkflowIdPath, caller: AdminDep, services: ServicesDep
) -> WorkflowOut:
    return WorkflowOut.of_view(await services.workflows.retry(workflow_id, actor=caller.sub))
