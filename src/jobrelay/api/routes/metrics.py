"""`GET /metrics`: database-side gauges in Prometheus text format, read at scrape time
(`jobrelay.console.metrics`). Authorized by `JOBRELAY_API_METRICS_TOKEN` as a bearer token,
or else by an admin's JWT; a scrape reads the database for at most
`JOBRELAY_API_METRICS_TIMEOUT_S` and answers 503 when nothing could be read by then."""

from __future__ import annotations

import hmac
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST

from jobrelay.api.deps import ServicesDep
from jobrelay.api.problems import problem
from jobrelay.console import metrics
from jobrelay.domain.errors import Forbidden, Unauthenticated

router = APIRouter(tags=["metrics"])
_bearer = HTTPBearer(auto_error=False, description="The metrics token or an admin's JWT")


async def metrics_scraper(
    services: ServicesDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    """Pass with the configured metrics token or an admin's JWT; else 401 or 403."""
    if credentials is None:
        raise Unauthenticated("an Authorization: Bearer token is required")
    token = services.settings.api.metrics_token
    presented = credentials.credentials
    if token is not None and hmac.compare_digest(
        presented.encode(), token.get_secret_value().encode()
    ):
        return
    caller = await services.tokens.verify(presented)
    if not caller.is_admin:
        raise Forbidden("/metrics needs the metrics token or the admin role")


@router.get(
    "/metrics",
    summary="Prometheus metrics computed from the database at scrape time",
    response_class=Response,
    responses={
        200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "Prometheus text format"},
        503: {"description": "the database answered nothing within the scrape timeout"},
    },
    dependencies=[Depends(metrics_scraper)],
)
async def get_metrics(request: Request, services: ServicesDep) -> Any:
    result = await metrics.scrape(
        services.pool,
        services.jobs.global_caps,
        timeout_s=services.settings.api.metrics_timeout_s,
    )
    if result.groups_done == 0:
        response = problem(
            503,
            "metrics-unavailable",
            "Metrics unavailable",
            "the database answered nothing within the scrape timeout",
        )
        response.headers["Retry-After"] = "5"
        return response
    return Response(metrics.exposition(result), media_type=CONTENT_TYPE_LATEST)
