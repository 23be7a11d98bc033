"""FastAPI dependencies: services, the authenticated caller, roles and project scope.

Route modules declare what they need with the `Annotated` aliases below:

    async def get_batch(batch_id: str, caller: CallerDep, services: ServicesDep): ...
    async def create(scope: ProjectScopeDep, ...): ...   # path has {projectId}
    async def cancel(batch_id: BatchIdDep, ...): ...      # path has {batchId}
    async def enqueue(admin: AdminDep, ...): ...          # jobs endpoints

Every failure is a domain error that `api.problems` renders as problem+json: no token or a
bad one is 401, a missing role is 403, a project or a resource the caller cannot see is 404.

A resource reached by its own id (batch, Page Import, Code2Des, Code2WF) is authorized in one
place, `owned_by_caller`: its organization is loaded, the caller must be a member of it, and
otherwise the answer is the same `NotFound` as for an id that does not exist. Routes take the
id through the `...IdDep` aliases, so no route can reach such a resource unchecked.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Annotated

from fastapi import Depends, Path, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from jobrelay.auth.tenancy import ProjectScope
from jobrelay.auth.tokens import Caller
from jobrelay.bootstrap import Services
from jobrelay.domain.errors import Forbidden, NotFound, Unauthenticated
from jobrelay.protocol import ChildKind

_bearer = HTTPBearer(auto_error=False, description="A Cognito (or local issuer) JWT")


def get_services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]


async def current_caller(
    services: ServicesDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    request: Request,
) -> Caller:
    """The verified caller, or `Unauthenticated` (401)."""
    if credentials is None:
        header = request.headers.get("authorization")
        if header is None:
            raise Unauthenticated("an Authorization: Bearer token is required")
        raise Unauthenticated("the Authorization header must be 'Bearer <token>'")
    return await services.tokens.verify(credentials.credentials)


CallerDep = Annotated[Caller, Depends(current_caller)]


async def require_admin(caller: CallerDep) -> Caller:
    """The caller, when it holds the admin role (jobs endpoints); else `Forbidden` (403)."""
    if not caller.is_admin:
        raise Forbidden("this endpoint needs the admin role")
    return caller


AdminDep = Annotated[Caller, Depends(require_admin)]


async def project_scope(
    caller: CallerDep,
    services: ServicesDep,
    project_id: Annotated[int, Path(alias="projectId", ge=1, le=2**63 - 1)],
) -> ProjectScope:
    """The `{projectId}` of the path, when the caller belongs to its organization (else 404)."""
    return await services.tenancy.project_scope(caller.sub, project_id)


ProjectScopeDep = Annotated[ProjectScope, Depends(project_scope)]


async def owned_by_caller(
    caller: Caller,
    services: Services,
    noun: str,
    organization_of: Callable[[str], Awaitable[int]],
    resource_id: str,
) -> None:
    """Pass when the caller is a member of the organization owning a resource; else
    `NotFound("<noun> not found")`, the same answer as for a missing or deleted resource so
    that responses never reveal what exists in other organizations.

    `organization_of(resource_id)` is the resource's owner lookup; it raises `NotFound` itself
    when the row does not exist (or is soft deleted).
    """
    try:
        organization_id = await organization_of(resource_id)
    except NotFound:
        raise NotFound(f"{noun} not found") from None
    if not await services.tenancy.is_member(caller.sub, organization_id):
        raise NotFound(f"{noun} not found")


async def visible_batch_id(
    caller: CallerDep,
    services: ServicesDep,
    batch_id: Annotated[str, Path(alias="batchId", min_length=1, max_length=255)],
) -> str:
    """The `{batchId}` of the path, when the caller may see that batch (else 404)."""
    await owned_by_caller(caller, services, "batch", services.batches.owner, batch_id)
    return batch_id


ChildId = Annotated[str, Path(min_length=1, max_length=255)]


async def _visible_child(caller: Caller, services: Services, kind: ChildKind, child_id: str) -> str:
    owner = partial(services.children.owner, kind)
    await owned_by_caller(caller, services, kind, owner, child_id)
    return child_id


async def visible_page_import_id(
    caller: CallerDep,
    services: ServicesDep,
    page_import_id: Annotated[ChildId, Path(alias="pageImportId")],
) -> str:
    """The `{pageImportId}` of the path, when the caller may see that child (else 404)."""
    return await _visible_child(caller, services, "page_import", page_import_id)


async def visible_code2des_id(
    caller: CallerDep,
    services: ServicesDep,
    code2des_id: Annotated[ChildId, Path(alias="code2desId")],
) -> str:
    """The `{code2desId}` of the path, when the caller may see that child (else 404)."""
    return await _visible_child(caller, services, "code2des", code2des_id)


async def visible_code2wf_id(
    caller: CallerDep,
    services: ServicesDep,
    code2wf_id: Annotated[str, Path(alias="code2wfId", min_length=1, max_length=255)],
) -> str:
    """The `{code2wfId}` of the path, when the caller may see that generation (else 404)."""
    await owned_by_caller(caller, services, "code2wf", services.code2wf.owner, code2wf_id)
    return code2wf_id


BatchIdDep = Annotated[str, Depends(visible_batch_id)]
PageImportIdDep = Annotated[str, Depends(visible_page_import_id)]
Code2DesIdDep = Annotated[str, Depends(visible_code2des_id)]
Code2WfIdDep = Annotated[str, Depends(visible_code2wf_id)]
