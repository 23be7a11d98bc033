"""Child jobs reached by their own id: Page Import and Code2Des."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fastapi import APIRouter

from jobrelay.api.deps import Code2DesIdDep, PageImportIdDep, ServicesDep
from jobrelay.api.schemas import ApiModel, ChildStatusCode

router = APIRouter(prefix="/v1", tags=["children"])


class Child(ApiModel):
    id: str
    organization_id: int
    project_id: int
    batch_id: str | None
    request: dict[str, Any]
    status: ChildStatusCode
    result_url: str | None
    error_message: str | None
    created_at: datetime
    updated_at: datetime
    created_by: str
    updated_by: str


class PageImport(Child):
    manifest_hash: str | None


class Code2Des(Child):
    pass


@router.get(
    "/page-imports/{pageImportId}",
    response_model=PageImport,
    response_model_by_alias=True,
    summary="A Page Import: status '0' processing, '1' completed, '2' failed, '3' cancelled",
    responses={404: {"description": "No such Page Import, or not visible to the caller"}},
)
async def get_page_import(child_id: PageImportIdDep, services: ServicesDep) -> Any:
    return PageImport.model_validate(await services.children.get("page_import", child_id))


@router.get(
    "/code2des/{code2desId}",
    response_model=Code2Des,
    response_model_by_alias=True,
    summary="A Code2Des: status '0' processing, '1' completed, '2' failed, '3' cancelled",
    responses={404: {"description": "No such Code2Des, or not visible to the caller"}},
)
async def get_code2des(child_id: Code2DesIdDep, services: ServicesDep) -> Any:
    return Code2Des.model_validate(await services.children.get("code2des", child_id))
