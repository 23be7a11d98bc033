"""RFC 9457 problem details: every error response of the API has this shape."""

from __future__ import annotations

from typing import Any

import psycopg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from psycopg import errors as pg_errors
from psycopg_pool import PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException

from jobrelay.bootstrap import DatabaseUnavailable
from jobrelay.domain.errors import (
    Conflict,
    Forbidden,
    InvalidInput,
    NotFound,
    Paused,
    Unauthenticated,
)
from jobrelay.domain.jobs import RowLocked

PROBLEM_JSON = "application/problem+json"
# Seconds a client should wait before trying again while the database is unreachable.
DATABASE_RETRY_AFTER_S = 1
# The errors of a database that is down, restarting or out of connections: psycopg's
# connection failures (server gone, connection closed under a request), the pool's wait
# running out, and jobrelay's own "cannot connect" at the edge.
DATABASE_DOWN = (psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout, DatabaseUnavailable)
PROBLEM_BASE = "https://jobrelay.dev/problems/"
# Seconds a client should wait before trying a write again whose row another transaction
# held past the lock timeout (most such locks are another short transaction's).
ROW_LOCKED_RETRY_AFTER_S = 1


def problem(status: int, slug: str, title: str, detail: str, **extra: Any) -> JSONResponse:
    """A problem+json response with a stable `type` URI built from `slug`."""
    body: dict[str, Any] = {
        "type": PROBLEM_BASE + slug,
        "title": title,
        "status": status,
        "detail": detail,
        **extra,
    }
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON)


def _field_path(loc: tuple[Any, ...] | list[Any]) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] in {"body", "query", "path", "header"}:
        parts = parts[1:] or parts
    return ".".join(parts)


def _validation_problem(error: Any, body: Any) -> dict[str, str]:
    """One field problem of FastAPI's validation; a body that is not JSON points at `body`
    with the line and column where parsing stopped (FastAPI's own path is a character
    offset)."""
    if error.get("type") == "json_invalid" and isinstance(body, str):
        offset = next((p for p in error.get("loc", ())[1:] if isinstance(p, int)), 0)
        line = body.count("\n", 0, offset) + 1
        column = offset - (body.rfind("\n", 0, offset) + 1) + 1
        reason = (error.get("ctx") or {}).get("error") or "JSON decode error"
        return {
            "path": "body",
            "message": f"invalid JSON at line {line}, column {column}: {reason}",
        }
    return {"path": _field_path(error.get("loc", ())), "message": error.get("msg", "invalid")}


def install_problem_handlers(app: FastAPI) -> None:
    """Route every error the app can raise to a problem+json response."""

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [_validation_problem(e, exc.body) for e in exc.errors()]
        return problem(
            422, "validation", "Invalid request", "the request is invalid", errors=errors
        )

    @app.exception_handler(InvalidInput)
    async def _invalid(_: Request, exc: InvalidInput) -> JSONResponse:
        errors = [{"path": e.path, "message": e.message} for e in exc.errors]
        return problem(422, "validation", "Invalid request", exc.detail, errors=errors)

    @app.exception_handler(Unauthenticated)
    async def _unauthenticated(_: Request, exc: Unauthenticated) -> JSONResponse:
        response = problem(401, "unauthenticated", "Unauthenticated", str(exc))
        response.headers["WWW-Authenticate"] = 'Bearer error="invalid_token"'
        return response

    @app.exception_handler(Forbidden)
    async def _forbidden(_: Request, exc: Forbidden) -> JSONResponse:
        return problem(403, "forbidden", "Forbidden", str(exc))

    @app.exception_handler(NotFound)
    async def _not_found(_: Request, exc: NotFound) -> JSONResponse:
        return problem(404, "not-found", "Not found", str(exc) or "not found")

    @app.exception_handler(Conflict)
    async def _conflict(_: Request, exc: Conflict) -> JSONResponse:
        return problem(409, "conflict", "Conflict", str(exc))

    @app.exception_handler(Paused)
    async def _paused(_: Request, exc: Paused) -> JSONResponse:
        return problem(503, "paused", "Paused", str(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return problem(exc.status_code, f"http-{exc.status_code}", str(exc.detail), str(exc.detail))

    @app.exception_handler(psycopg.DataError)
    async def _unstorable(_: Request, exc: psycopg.DataError) -> JSONResponse:
        # Input that passed validation but cannot be stored (a NUL character in text or
        # jsonb, an out-of-range number): the caller's fault, and nothing was written.
        return problem(
            422,
            "unstorable-value",
            "Invalid request",
            "the request contains a value PostgreSQL cannot store (e.g. a NUL character)",
        )

    async def _database_down(_: Request, exc: Exception) -> JSONResponse:
        response = problem(
            503,
            "database-unavailable",
            "Service unavailable",
            "the database is unavailable; retry shortly",
        )
        response.headers["Retry-After"] = str(DATABASE_RETRY_AFTER_S)
        return response

    for error in DATABASE_DOWN:
        app.add_exception_handler(error, _database_down)

    # A LockNotAvailable is an OperationalError, but the database is up: its own answer (the
    # most specific handler wins). Raised only by transactions that bound their lock waits.
    async def _row_locked(_: Request, exc: Exception) -> JSONResponse:
        response = problem(
            503,
            "row-locked",
            "Service unavailable",
            "a row this request needs is locked by another transaction; nothing was stored, retry",
        )
        response.headers["Retry-After"] = str(ROW_LOCKED_RETRY_AFTER_S)
        return response

    # RowLocked: a write that skipped a locked row rather than wait (a cancel whose parent
    # another transaction holds); the same answer as a lock wait that timed out.
    app.add_exception_handler(pg_errors.LockNotAvailable, _row_locked)
    app.add_exception_handler(RowLocked, _row_locked)

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        return problem(500, "internal", "Internal error", "an unexpected error occurred")
