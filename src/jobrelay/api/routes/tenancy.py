"""The caller and its projects."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter

from jobrelay.api.deps import CallerDep, ProjectScopeDep, ServicesDep
from jobrelay.api.schemas import ApiModel

router = APIRouter(prefix="/v1", tags=["tenancy"])


class ProjectRef(ApiModel):
    id: int
    name: str


class Membership(ApiModel):
    id: int
    name: str
    role: str
    projects: list[ProjectRef]


class Me(ApiModel):
    sub: str
    is_admin: bool
    organizations: list[Membership]


class Project(ApiModel):
    id: int
    organization_id: int
    name: str
    created_at: datetime
    updated_at: datetime
    created_by: str
    updated_by: str


@router.get("/me", response_model=Me, response_model_by_alias=True, summary="The caller")
async def me(caller: CallerDep, services: ServicesDep) -> Me:
    organizations = await services.tenancy.organizations_of(caller.sub)
    return Me(
        sub=caller.sub,
        is_admin=caller.is_admin,
        organizations=[Membership.model_validate(o) for o in organizations],
    )


@router.get(
    "/projects/{projectId}",
    response_model=Project,
    response_model_by_alias=True,
    summary="A project of one of the caller's organizations",
    responses={404: {"description": "No such project, or not visible to the caller"}},
)
async def get_project(scope: ProjectScopeDep, services: ServicesDep) -> Project:
    return Project.model_validate(await services.tenancy.get_project(scope))
