"""FastAPI dependencies: services, the authenticated caller, roles and project scope.

Route modules declare what they need with the `Annotated` aliases below:

    async def get_batch(batch_id: str, caller: CallerDep, services: ServicesDep): ...
    async def create(scope: ProjectScopeDep, ...): ...   # path has {projectId}
    async def enqueue(admin: AdminDep, ...): ...          # jobs endpoints

Every failure is a domain error that `api.problems` renders as problem+json: no token or a
bad one is 401, a missing role is 403, a project the caller cannot see is 404.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Path, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from jobrelay.auth.tenancy import ProjectScope
from jobrelay.auth.tokens import Caller
from jobrelay.bootstrap import Services
from jobrelay.domain.errors import Forbidden, Unauthenticated

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
