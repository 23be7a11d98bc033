"""The operator console: server-rendered pages under /ui (Jinja2 templates, plain HTML
forms, no JavaScript build step; the overview and a batch's progress refresh by a few lines
of inline script fetching an HTML fragment every 5 seconds).

`create_ui(services)` is a FastAPI app of its own, mounted at /ui by `create_app`, so its
errors are HTML pages (404 page, 403 page, 422 page with the message) while the JSON API
keeps problem+json. See docs/how-to/use-the-console.md.
"""

from __future__ import annotations

from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from jobrelay.api.problems import DATABASE_DOWN, DATABASE_RETRY_AFTER_S
from jobrelay.api.ui import login, pages
from jobrelay.api.ui.hosted_ui import HostedUi
from jobrelay.api.ui.login import LoginRequired
from jobrelay.api.ui.render import render
from jobrelay.api.ui.session import SessionCodec
from jobrelay.bootstrap import Services
from jobrelay.domain.errors import (
    Conflict,
    Forbidden,
    InvalidInput,
    JobrelayError,
    NotFound,
    Paused,
    Unauthenticated,
)

__all__ = ["create_ui"]

_STATUS: list[tuple[type[JobrelayError], int, str]] = [
    (InvalidInput, 422, "Invalid input"),
    (Unauthenticated, 401, "Not logged in"),
    (Forbidden, 403, "Forbidden"),
    (NotFound, 404, "Not found"),
    (Conflict, 409, "Conflict"),
    (Paused, 503, "Paused"),
]


def _error_page(
    request: Request, status: int, title: str, detail: str, errors: list[str] | None = None
) -> HTMLResponse:
    context = {"status": status, "title": title, "detail": detail, "errors": errors or []}
    return render(request, "error.html", context, status_code=status)


def create_ui(services: Services) -> FastAPI:
    """The console app over `services` (mount it at /ui)."""
    ui = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
    ui.state.services = services
    settings = services.settings
    ui.state.ui_codec = SessionCodec(
        settings.ui.session_secret.get_secret_value(),
        ttl_s=settings.ui.session_ttl_s,
        secure=settings.env != "development",
    )
    ui.state.hosted_ui = HostedUi.from_settings(settings)
    ui.include_router(login.router)
    ui.include_router(pages.router)

    @ui.exception_handler(LoginRequired)
    async def _login(_: Request, exc: LoginRequired) -> Response:
        return RedirectResponse(f"/ui/login?next={quote(exc.next_path)}", status_code=303)

    @ui.exception_handler(JobrelayError)
    async def _domain(request: Request, exc: JobrelayError) -> Response:
        for kind, status, title in _STATUS:
            if isinstance(exc, kind):
                if isinstance(exc, InvalidInput):
                    lines = [f"{e.path}: {e.message}" for e in exc.errors]
                    return _error_page(request, status, title, exc.detail, lines)
                return _error_page(request, status, title, str(exc))
        return _error_page(request, 500, "Internal error", "an unexpected error occurred")

    @ui.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> Response:
        lines = [
            f"{'.'.join(str(p) for p in e.get('loc', ()) if p not in ('query', 'path'))}: "
            f"{e.get('msg', 'invalid')}"
            for e in exc.errors()
        ]
        return _error_page(request, 422, "Invalid input", "the address is not valid", lines)

    @ui.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        return _error_page(request, exc.status_code, str(exc.detail), str(exc.detail))

    async def _database_down(request: Request, _: Exception) -> Response:
        response = _error_page(
            request, 503, "Service unavailable", "the database is unavailable; retry shortly"
        )
        response.headers["Retry-After"] = str(DATABASE_RETRY_AFTER_S)
        return response

    for error in DATABASE_DOWN:
        ui.add_exception_handler(error, _database_down)

    @ui.exception_handler(Exception)
    async def _unexpected(request: Request, _: Exception) -> Response:
        return _error_page(request, 500, "Internal error", "an unexpected error occurred")

    return ui
