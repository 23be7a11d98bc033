"""`POST /v1/webhooks/worker`: signed terminal outcomes from the external workers.

Authenticated by its Standard Webhooks signature, not by a bearer token. The contract (401,
400, 404, 409, 503 row-locked, idempotent `webhook-id`, never 410) is in
`jobrelay.generations.webhooks`.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from jobrelay.api.deps import ServicesDep
from jobrelay.api.problems import PROBLEM_JSON, problem
from jobrelay.domain.errors import InvalidInput
from jobrelay.protocol import WorkerOutcome
from jobrelay.webhooks import Malformed, Unauthorized, WebhookRejected

router = APIRouter(prefix="/v1/webhooks", tags=["webhooks"])

_OUTCOME_SCHEMA: dict[str, Any] = WorkerOutcome.model_json_schema(by_alias=True)


async def _read_body(request: Request, limit: int) -> bytes | None:
    """The raw body, or None when it exceeds `limit` bytes."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


@router.post(
    "/worker",
    summary="A worker's signed terminal outcome (Standard Webhooks)",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": _OUTCOME_SCHEMA}},
        },
        "parameters": [
            {"name": name, "in": "header", "required": True, "schema": {"type": "string"}}
            for name in ("webhook-id", "webhook-timestamp", "webhook-signature")
        ],
    },
    responses={
        200: {"description": "Applied, already applied, or the child was cancelled"},
        400: {"description": "Malformed headers or body"},
        401: {"description": "Missing headers, bad signature or stale timestamp"},
        404: {"description": "No such child"},
        409: {"description": "The child already ended otherwise, or webhook-id reused"},
        503: {
            "description": "A row it needs is locked by another transaction (row-locked) or "
            "the database is unavailable; nothing stored, retry after Retry-After"
        },
    },
)
async def worker_outcome(request: Request, services: ServicesDep) -> JSONResponse:
    body = await _read_body(request, services.settings.api.max_body_bytes)
    if body is None:
        return problem(413, "too-large", "Payload too large", "the body is too large")
    try:
        answer = await services.worker_webhooks.receive(request.headers, body)
    except Unauthorized as exc:
        return problem(401, "webhook-unauthorized", "Unauthorized", str(exc))
    except (Malformed, WebhookRejected) as exc:
        return problem(400, "webhook-malformed", "Malformed webhook", str(exc))
    except InvalidInput as exc:
        errors = [{"path": e.path, "message": e.message} for e in exc.errors]
        return problem(400, "webhook-malformed", "Malformed webhook", exc.detail, errors=errors)
    media_type = PROBLEM_JSON if answer.status_code >= 400 else "application/json"
    return JSONResponse(answer.body, status_code=answer.status_code, media_type=media_type)
