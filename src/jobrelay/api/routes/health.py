"""Liveness and readiness probes."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from jobrelay.api.problems import problem
from jobrelay.bootstrap import Services

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="Liveness: the process answers")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get(
    "/readyz",
    summary="Readiness: PostgreSQL answers",
    responses={503: {"description": "PostgreSQL is unreachable"}},
    response_model=None,
)
async def readyz(request: Request) -> Any:
    services: Services = request.app.state.services
    if await services.database_ready():
        return {"status": "ready", "database": "ok"}
    return problem(503, "not-ready", "Not ready", "PostgreSQL is unreachable")
