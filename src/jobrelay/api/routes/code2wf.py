"""Code2WF generations: create in a project, read, discover per Figma file, read the
result, record placement, soft delete."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import Field

from jobrelay.api.deps import CallerDep, Code2WfIdDep, ProjectScopeDep, ServicesDep
from jobrelay.api.idempotency import IdempotencyKey, answer, created_once
from jobrelay.api.schemas import (
    GENERATION_STATUS,
    ApiModel,
    GenerationStatus,
    GenerationStatusCode,
)
from jobrelay.children.views import Code2WfView
from jobrelay.domain.batch_status import ChildStatus
from jobrelay.domain.errors import Conflict, NotFound
from jobrelay.generations.code2wf import PAGE_SIZE_MAX, NewGeneration
from jobrelay.idempotency import Answer, Writer

router = APIRouter(prefix="/v1", tags=["code2wf"])

NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"description": "No such generation, or not visible to the caller"}
}
Key255 = Annotated[str, Field(min_length=1, max_length=255)]


class CreateCode2Wf(ApiModel):
    page_import_id: Key255
    figma_file_key: Key255
    screen_id: Key255
    placement_target: Annotated[str | None, Field(default=None, min_length=1, max_length=255)]


class Code2Wf(ApiModel):
    id: str = Field(description="The generation's id (a resource's own id is `id`)")
    code2wf_id: str = Field(
        alias="code2wfId",
        description="The same id under seed 004's name, kept for the clients written for it",
    )
    organization_id: int
    project_id: int
    page_import_id: str
    figma_file_key: str
    screen_id: str
    placement_target: str | None
    status: GenerationStatusCode
    attempt: int
    flag_count: int | None
    result_url: str | None
    error_message: str | None
    materialized_at: datetime | None
    created_at: datetime
    updated_at: datetime
    created_by: str
    updated_by: str

    @classmethod
    def of(cls, generation: Code2WfView) -> Code2Wf:
        fields = {
            name: getattr(generation, name) for name in cls.model_fields if name != "code2wf_id"
        }
        return cls.model_validate({**fields, "code2wf_id": generation.id})


class Code2WfPage(ApiModel):
    items: list[Code2Wf]
    next_after: str | None = Field(description="Pass as `after` for the next page")


@router.post(
    "/projects/{projectId}/code2wf",
    status_code=201,
    response_model=Code2Wf,
    response_model_by_alias=True,
    summary="Request a Code2WF generation from a completed Page Import",
    responses={
        404: {"description": "No such project"},
        409: {"description": "The Page Import is processing or failed"},
    },
)
async def create_code2wf(
    body: CreateCode2Wf,
    scope: ProjectScopeDep,
    caller: CallerDep,
    services: ServicesDep,
    request: Request,
    idempotency_key: IdempotencyKey = None,
) -> JSONResponse:
    new = NewGeneration(
        page_import_id=body.page_import_id,
        figma_file_key=body.figma_file_key,
        screen_id=body.screen_id,
        placement_target=body.placement_target,
    )

    async def create(conn: Writer) -> Answer:
        generation = await services.code2wf.create(scope, new, actor=caller.sub, conn=conn)
        return answer(Code2Wf.of(generation), 201)

    return await created_once(request, services, caller, idempotency_key, body, create)


@router.get(
    "/projects/{projectId}/code2wf",
    response_model=Code2WfPage,
    response_model_by_alias=True,
    summary="Discover the generations of one Figma file (the plugin's view)",
    responses={404: {"description": "No such project"}},
)
async def discover_code2wf(
    scope: ProjectScopeDep,
    services: ServicesDep,
    figma_file_key: Annotated[str, Query(alias="figmaFileKey", min_length=1, max_length=255)],
    status: Annotated[GenerationStatus | None, Query(description=GENERATION_STATUS)] = None,
    limit: Annotated[int, Query(ge=1, le=PAGE_SIZE_MAX)] = 50,
    after: Annotated[str | None, Query(min_length=1, max_length=255)] = None,
) -> Code2WfPage:
    generations, next_after = await services.code2wf.discover(
        scope, figma_file_key=figma_file_key, status=status, limit=limit, after=after
    )
    return Code2WfPage(items=[Code2Wf.of(g) for g in generations], next_after=next_after)


@router.get(
    "/code2wf/{code2wfId}",
    response_model=Code2Wf,
    response_model_by_alias=True,
    summary="One generation",
    responses=NOT_FOUND,
)
async def get_code2wf(code2wf_id: Code2WfIdDep, services: ServicesDep) -> Code2Wf:
    return Code2Wf.of(await services.code2wf.get(code2wf_id))


@router.get(
    "/code2wf/{code2wfId}/result",
    summary="The immutable result (or failure artifact), read from S3",
    responses={
        **NOT_FOUND,
        200: {"content": {"application/json": {"schema": {"type": "object"}}}},
        409: {"description": "The generation has no result yet"},
    },
    response_class=JSONResponse,
)
async def get_code2wf_result(code2wf_id: Code2WfIdDep, services: ServicesDep) -> Response:
    generation = await services.code2wf.get(code2wf_id)
    if not generation.result_url:
        if generation.status is ChildStatus.PROCESSING:
            raise Conflict("the generation is still processing")
        raise NotFound("the generation has no stored result")
    body = await services.read_result(generation.result_url)
    return Response(content=body, media_type="application/json")


@router.post(
    "/code2wf/{code2wfId}/materialize",
    response_model=Code2Wf,
    response_model_by_alias=True,
    summary="The plugin placed the result in Figma (recorded once)",
    responses={**NOT_FOUND, 409: {"description": "The generation has not completed"}},
)
async def materialize_code2wf(
    code2wf_id: Code2WfIdDep, caller: CallerDep, services: ServicesDep
) -> Code2Wf:
    return Code2Wf.of(await services.code2wf.materialize(code2wf_id, actor=caller.sub))


@router.delete(
    "/code2wf/{code2wfId}",
    status_code=204,
    summary="Soft delete",
    responses=NOT_FOUND,
)
async def delete_code2wf(
    code2wf_id: Code2WfIdDep, caller: CallerDep, services: ServicesDep
) -> Response:
    await services.code2wf.delete(code2wf_id, actor=caller.sub)
    return Response(status_code=204)
