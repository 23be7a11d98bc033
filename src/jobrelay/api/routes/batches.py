"""Batches: create in a project, read with derived status, list items, cancel, soft delete."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import Field

from jobrelay.api.deps import BatchIdDep, CallerDep, ProjectScopeDep, ServicesDep
from jobrelay.api.idempotency import IdempotencyKey, answer, created_once
from jobrelay.api.schemas import ApiModel, BatchStatusCode, ItemStateName
from jobrelay.batches.service import BatchView, ItemPage
from jobrelay.idempotency import Answer, Writer

router = APIRouter(prefix="/v1", tags=["batches"])

NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"description": "No such batch, or not visible to the caller"}
}


class CreateBatch(ApiModel):
    """`type` is `page_import` (items `{url}` or `{html}`) or `code2des` (items `{html, css?}`).
    Every item is validated; one bad item rejects the whole batch (422 listing positions as
    `items.<position>.<field>`) and nothing is stored."""

    type: str = Field(description="`page_import` or `code2des`")
    items: list[Any] = Field(
        description="At most JOBRELAY_BATCH_MAX_ITEMS items (default 10,000), each within the "
        "queue's message limit (JOBRELAY_SQS_MESSAGE_LIMIT_BYTES, UTF-8 bytes); the whole "
        "request within JOBRELAY_API_MAX_BODY_BYTES (default 16 MiB)."
    )


class Counts(ApiModel):
    total: int
    queued: int
    running: int
    completed: int
    failed: int
    cancelled: int


class Batch(ApiModel):
    id: str
    organization_id: int
    project_id: int
    type: str
    status: BatchStatusCode
    counts: Counts
    cancelled_at: datetime | None
    cancelling: bool = Field(
        description="Cancelled, and the relay is still marking its items cancelled (the "
        "cancel of a batch of more than JOBRELAY_BATCH_CANCEL_INLINE_MAX processing items "
        "finishes in the background; nothing more of it is sent meanwhile)"
    )
    created_at: datetime
    updated_at: datetime
    created_by: str
    updated_by: str

    @classmethod
    def of(cls, view: BatchView) -> Batch:
        return cls(
            id=view.id,
            organization_id=view.organization_id,
            project_id=view.project_id,
            type=view.type,
            status=view.status,
            counts=Counts.model_validate(view.counts),
            cancelled_at=view.cancelled_at,
            cancelling=view.cancelling,
            created_at=view.created_at,
            updated_at=view.updated_at,
            created_by=view.created_by,
            updated_by=view.updated_by,
        )


class Item(ApiModel):
    id: str
    position: int
    job_id: str
    state: ItemStateName
    dispatch_attempts: int
    dispatched_at: datetime | None
    cancelled_at: datetime | None
    error_message: str | None
    result_url: str | None


class Items(ApiModel):
    items: list[Item]
    next_after: int | None

    @classmethod
    def of(cls, page: ItemPage) -> Items:
        return cls(
            items=[
                Item(
                    id=i.id,
                    position=i.position,
                    job_id=i.job_id,
                    state=i.state,
                    dispatch_attempts=i.dispatch_attempts,
                    dispatched_at=i.dispatched_at,
                    cancelled_at=i.cancelled_at,
                    error_message=i.error_message,
                    result_url=i.result_url,
                )
                for i in page.items
            ],
            next_after=page.next_after,
        )


@router.post(
    "/projects/{projectId}/batches",
    status_code=201,
    response_model=Batch,
    response_model_by_alias=True,
    summary="Create a batch of Page Import or Code2Des requests",
    responses={
        404: {"description": "No such project, or not visible to the caller"},
        422: {"description": "Invalid batch; `errors` lists every failing position and field"},
    },
)
async def create_batch(
    body: CreateBatch,
    scope: ProjectScopeDep,
    caller: CallerDep,
    services: ServicesDep,
    request: Request,
    idempotency_key: IdempotencyKey = None,
) -> JSONResponse:
    async def create(conn: Writer) -> Answer:
        view = await services.batches.create(
            organization_id=scope.organization_id,
            project_id=scope.project_id,
            batch_type=body.type,
            items=body.items,
            actor=caller.sub,
            conn=conn,
        )
        return answer(Batch.of(view), 201)

    return await created_once(request, services, caller, idempotency_key, body, create)


@router.get(
    "/batches/{batchId}",
    response_model=Batch,
    response_model_by_alias=True,
    summary="A batch with its derived status code and item counts",
    responses=NOT_FOUND,
)
async def get_batch(batch_id: BatchIdDep, services: ServicesDep) -> Batch:
    return Batch.of(await services.batches.get(batch_id))


@router.get(
    "/batches/{batchId}/items",
    response_model=Items,
    response_model_by_alias=True,
    summary="A page of a batch's items in input order (pass nextAfter as after)",
    responses=NOT_FOUND,
)
async def list_items(
    batch_id: BatchIdDep,
    services: ServicesDep,
    after: Annotated[int, Query(ge=-1, description="Last position of the previous page")] = -1,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Items:
    return Items.of(await services.batches.items(batch_id, after=after, limit=limit))


@router.post(
    "/batches/{batchId}/cancel",
    response_model=Batch,
    response_model_by_alias=True,
    summary="Cancel a processing batch (idempotent); undispatched items are never sent",
    responses={
        **NOT_FOUND,
        202: {
            "description": "Cancelled; the relay is still marking its many items cancelled "
            "(`cancelling`: the counts reach their end within seconds)",
            "model": Batch,
        },
        409: {"description": "The batch already completed or failed"},
    },
)
async def cancel_batch(
    batch_id: BatchIdDep, caller: CallerDep, services: ServicesDep, response: Response
) -> Batch:
    view = await services.batches.cancel(batch_id, actor=caller.sub)
    if view.cancelling:
        response.status_code = 202
    return Batch.of(view)


@router.delete(
    "/batches/{batchId}",
    status_code=204,
    summary="Soft delete a batch: it disappears and nothing more of it is dispatched",
    responses=NOT_FOUND,
)
async def delete_batch(batch_id: BatchIdDep, caller: CallerDep, services: ServicesDep) -> Response:
    await services.batches.delete(batch_id, actor=caller.sub)
    return Response(status_code=204)
